"""Erasure requests: the recall API only publishes `ErasureRequested`; the pruner carries it out
(a whole user, or one fact or episode: the fact erasure also redacts and rebuilds the summaries the
fact appeared in).

The cut is fixed here, when the request is accepted: the request carries the session stream's last
sequence read now (`session_cut`), and for a whole user the tombstone is marked with it before the
202 is answered. From then on the user's sessions at or below the cut are erased data, and sessions
above it (even 1 ms later) wait for the erasure and are kept; they are never consolidated early and
then deleted with the rest by a pruner that starts on the request later."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from nats.aio.client import Client as NatsClient

from contracts import ErasureRequested, ErasureTarget, Subjects
from services.common.domain.ids import dedup_headers, owned_uuid, owner_message_id
from services.common.domain.owner import Owner
from services.common.stores.tombstones import TombstoneStore
from services.recall_api.errors import StoreUnavailable
from services.recall_api.schemas import ErasureAccepted
from services.recall_api.write.sessions_in import status_url

log = logging.getLogger(__name__)


async def request_erasure(
    nats: Callable[[], Awaitable[NatsClient]],
    subjects: Subjects,
    tenant_id: str,
    user_id: str,
    *,
    idempotency_key: str | None = None,
    reason: str | None = None,
    target: ErasureTarget | None = None,
    tombstones: Callable[[], Awaitable[TombstoneStore]],
) -> ErasureAccepted:
    """Publish ErasureRequested for the whole user (or the given target), with the cut read now.
    With an idempotency key a retried request is the same event (dropped by the stream's duplicate
    window, which keeps the first request and its cut)."""
    owner = Owner(tenant_id, user_id)  # validates the ids before anything is published
    target = target or ErasureTarget(kind="user")
    key_parts = () if target.kind == "user" else (target.kind, target.item_id)
    event_id = (
        owned_uuid(owner, "erasure-request", *[str(part) for part in key_parts], idempotency_key)
        if idempotency_key
        else uuid.uuid4()
    )
    client = await nats()
    try:
        js = client.jetstream()
        cut = int((await js.stream_info(subjects.session_stream)).state.last_seq)
        event = ErasureRequested(
            event_id=event_id,
            tenant_id=tenant_id,
            user_id=user_id,
            target=target,
            requested_at=datetime.now(UTC),
            reason=reason,
            session_cut=cut,
        )
        ack = await js.publish(
            subjects.erasure_requested(tenant_id, user_id),
            event.model_dump_json().encode("utf-8"),
            stream=subjects.derived_stream,
            headers=dedup_headers(owner_message_id(owner, "erasure-request", event_id)),
            timeout=10.0,
        )
        if target.kind == "user" and not ack.duplicate:
            # A duplicate's tombstone was marked by the request that published it, with its own cut.
            await (await tombstones()).mark_accepted(owner, str(event_id), cut, event.requested_at)
    except Exception as exc:
        log.error("could not publish the erasure request %s: %s: %s", event_id, type(exc).__name__, exc)
        raise StoreUnavailable(
            "could not publish the erasure request; retry it (with an Idempotency-Key it is de-duplicated)"
        ) from exc
    log.warning(  # no user id at WARNING (issue 15): the event id joins the request to its records
        "erasure requested tenant=%s target=%s %s event=%s",
        tenant_id,
        target.kind,
        target.item_id or "",
        event_id,
    )
    return ErasureAccepted(
        event_id=str(event_id), duplicate=bool(ack.duplicate), status_url=status_url(str(event_id), user_id)
    )
