"""Sessions in over HTTP and MCP: the same records `tiermem ingest` publishes (a whole SessionCompleted,
or only `user_id` and `messages`, completed with deterministic ids by `contracts.session_form`),
validated with the same limits (`contracts.session_input`), published under the same owner-scoped message id
(`session_message_id`: tenant, user and event id) so a retry is reported as a duplicate and changes
nothing, while another owner's session with the same event id is a session of its own. The tenant
is the API key's; a record naming another tenant is refused."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlencode

from nats.aio.client import Client as NatsClient
from nats.js.api import PubAck

from contracts import SessionCompleted, SizeLimits, Subjects
from contracts.session_input import SessionRejected, parse_session
from services.common.domain.ids import dedup_headers, session_message_id
from services.recall_api.errors import StoreUnavailable
from services.recall_api.write_schemas import (
    ErrorDetail,
    ErrorResponse,
    SessionAccepted,
    SessionBatchItem,
    SessionBatchResponse,
)

log = logging.getLogger(__name__)


class WrongTenant(PermissionError):
    """The record names a tenant other than the API key's."""


def status_url(event_id: str, user_id: str) -> str:
    """`GET /v1/events/{event_id}` names the owner (events are read per user), so the URL carries it."""
    return f"/v1/events/{event_id}?{urlencode({'user_id': user_id})}"


def check_tenant(tenant_id: str, event: SessionCompleted) -> None:
    if event.tenant_id != tenant_id:
        raise WrongTenant("tenant_id names another tenant than the API key's; omit it or use your own")


async def publish_completed(
    nats: Callable[[], Awaitable[NatsClient]], subjects: Subjects, event: SessionCompleted
) -> PubAck:
    """Publish a SessionCompleted on its owner's subject under the owner-scoped message id. Both ways
    a session gets in (a whole session here, an ended per-turn session in turns_in.py) publish
    through this, so the pipeline sees one kind of message and the stream de-duplicates a retry of
    either."""
    client = await nats()
    try:
        return await client.jetstream().publish(
            subjects.session_completed(event.tenant_id, event.user_id),
            event.model_dump_json().encode("utf-8"),
            stream=subjects.session_stream,
            headers=dedup_headers(session_message_id(event)),
            timeout=10.0,
        )
    except Exception as exc:
        log.error("could not publish the session: %s: %s", type(exc).__name__, exc)
        raise StoreUnavailable(
            "could not publish the session; retrying it is safe (the event id de-duplicates)"
        ) from exc


async def publish_session(
    nats: Callable[[], Awaitable[NatsClient]], subjects: Subjects, event: SessionCompleted
) -> SessionAccepted:
    ack = await publish_completed(nats, subjects, event)
    event_id = str(event.event_id)
    log.info(
        "session accepted tenant=%s user=%s session=%s event=%s duplicate=%s",
        event.tenant_id,
        event.user_id,
        event.session_id,
        event_id,
        bool(ack.duplicate),
    )
    url = status_url(event_id, event.user_id)
    return SessionAccepted(event_id=event_id, duplicate=bool(ack.duplicate), status_url=url)


def _rejected(index: int, detail: str, code: str, field: str | None, reason: str) -> SessionBatchItem:
    error = ErrorResponse(detail=detail, code=code, errors=[ErrorDetail(field=field, reason=reason)])
    return SessionBatchItem(index=index, status="rejected", error=error)


async def publish_batch(
    nats: Callable[[], Awaitable[NatsClient]],
    subjects: Subjects,
    tenant_id: str,
    records: Sequence[Any],
    limits: SizeLimits,
) -> SessionBatchResponse:
    """Each record validated and published on its own: one bad record rejects only itself. A broker
    failure stops the batch (StoreUnavailable): records published before it stay published, and a
    retry of the whole batch reports them as duplicates."""
    items: list[SessionBatchItem] = []
    for index, record in enumerate(records):
        try:
            event = parse_session(record, limits, tenant_id)
            check_tenant(tenant_id, event)
        except SessionRejected as exc:
            code = "too_large" if exc.too_large else "invalid_session"
            items.append(_rejected(index, str(exc.reason), code, exc.field or None, exc.reason))
            continue
        except WrongTenant as exc:
            items.append(_rejected(index, str(exc), "wrong_tenant", "tenant_id", str(exc)))
            continue
        accepted = await publish_session(nats, subjects, event)
        items.append(
            SessionBatchItem(
                index=index,
                status="accepted",
                event_id=accepted.event_id,
                duplicate=accepted.duplicate,
                status_url=accepted.status_url,
            )
        )
    return SessionBatchResponse(
        items=items,
        accepted=sum(1 for item in items if item.status == "accepted" and not item.duplicate),
        duplicates=sum(1 for item in items if item.duplicate),
        rejected=sum(1 for item in items if item.status == "rejected"),
    )
