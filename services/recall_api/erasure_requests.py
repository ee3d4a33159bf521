"""Erasure requests: the recall API only publishes `ErasureRequested`; the pruner carries it out
(a whole user, or one fact or episode: the fact erasure also redacts and rebuilds the summaries the
fact appeared in)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from nats.aio.client import Client as NatsClient

from contracts import ErasureRequested, ErasureTarget, Subjects
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.recall_api.errors import StoreUnavailable
from services.recall_api.schemas import ErasureAccepted

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
) -> ErasureAccepted:
    """Publish ErasureRequested for the whole user (or the given target). With an idempotency key a
    retried request is the same event (dropped by the stream's duplicate window)."""
    Owner(tenant_id, user_id)  # validates the ids before anything is published
    target = target or ErasureTarget(kind="user")
    key_parts = (tenant_id, user_id) if target.kind == "user" else (tenant_id, user_id, target.kind, target.item_id)
    event_id = (
        deterministic_uuid("erasure-request", *[str(part) for part in key_parts], idempotency_key)
        if idempotency_key
        else uuid.uuid4()
    )
    event = ErasureRequested(
        event_id=event_id,
        tenant_id=tenant_id,
        user_id=user_id,
        target=target,
        requested_at=datetime.now(UTC),
        reason=reason,
    )
    client = await nats()
    try:
        ack = await client.jetstream().publish(
            subjects.erasure_requested(tenant_id, user_id),
            event.model_dump_json().encode("utf-8"),
            stream=subjects.derived_stream,
            headers={"Nats-Msg-Id": str(event_id), "content-type": "application/json"},
            timeout=10.0,
        )
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
    return ErasureAccepted(event_id=str(event_id), duplicate=bool(ack.duplicate), status_url=f"/v1/events/{event_id}")
