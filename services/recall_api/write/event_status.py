"""Where an accepted event is: `GET /v1/events/{event_id}`.

Nothing new is recorded to answer it; the answer is read from what the pipeline already leaves
behind, for the requesting owner only (every lookup is filtered to the tenant's and user's subjects):
- a session is on the session stream; consolidated once the episode of (tenant, user, session)
  exists (its id is deterministic); dead-lettered when a dead letter of this user carries it;
- an erasure request is on the derived stream; complete once an `ErasureCompleted` with its
  request id is there (with the counts), dead-lettered like a session.
Every scan is bounded (`event_status_scan_limit` messages per subject filter)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from nats.js import JetStreamContext
from nats.js import api as js_api
from pydantic import ValidationError

from contracts import DeadLetterRecord, ErasureCompleted, SessionCompleted, Subjects
from services.common.domain.owner import Owner
from services.common.stores.episodes import EpisodeStore, episode_id_for
from services.common.stores.erasure import stream_messages
from services.recall_api.write_schemas import EventStatus


async def _bounded(
    js: JetStreamContext, stream: str, subject_filter: str, limit: int
) -> AsyncIterator[js_api.RawStreamMsg]:
    seen = 0
    async for message in stream_messages(js, stream, subject_filter):
        yield message
        seen += 1
        if seen >= limit:
            return


async def _find_messages(
    js: JetStreamContext, stream: str, subject_filter: str, needle: bytes, limit: int
) -> list[js_api.RawStreamMsg]:
    """Messages on the filter whose payload contains `needle` (the event id), oldest first."""
    return [m async for m in _bounded(js, stream, subject_filter, limit) if m.data and needle in m.data]


async def _find(js: JetStreamContext, stream: str, subject_filter: str, needle: bytes, limit: int) -> list[bytes]:
    return [m.data for m in await _find_messages(js, stream, subject_filter, needle, limit) if m.data]


async def _processed(js: JetStreamContext, stream: str, sequence: int) -> bool:
    """Whether every durable consumer of the stream has acknowledged the message (its ack floor is
    at or past it): the session was handled, whatever came of it. False when nobody consumes."""
    consumers = await js.consumers_info(stream)
    floors = [c.ack_floor.stream_seq for c in consumers if c.ack_floor is not None and c.config.durable_name]
    return bool(floors) and all(floor is not None and floor >= sequence for floor in floors)


async def _dead_letter_reason(
    js: JetStreamContext, subjects: Subjects, owner: Owner, needle: bytes, limit: int
) -> str | None:
    for data in await _find(
        js, subjects.dead_letter_stream, subjects.user_dead_letters(owner.tenant_id, owner.user_id), needle, limit
    ):
        try:
            return DeadLetterRecord.model_validate_json(data).reason
        except ValidationError:
            continue
    return None


async def _erasure_status(
    js: JetStreamContext, subjects: Subjects, owner: Owner, event_id: str, limit: int
) -> EventStatus | None:
    needle = event_id.encode("ascii")
    tenant, user = owner.tenant_id, owner.user_id
    for data in await _find(js, subjects.derived_stream, subjects.erasure_completed(tenant, user), needle, limit):
        try:
            completed = ErasureCompleted.model_validate_json(data)
        except ValidationError:
            continue
        if str(completed.request_event_id) == event_id:
            return EventStatus(
                event_id=event_id,
                kind="erasure",
                state="erasure_completed",
                removed=dict(completed.removed),
                completed_at=completed.completed_at.isoformat(),
            )
    requested = await _find(js, subjects.derived_stream, subjects.erasure_requested(tenant, user), needle, limit)
    if not requested:
        return None
    reason = await _dead_letter_reason(js, subjects, owner, needle, limit)
    if reason is not None:
        return EventStatus(event_id=event_id, kind="erasure", state="dead_lettered", reason=reason)
    return EventStatus(event_id=event_id, kind="erasure", state="erasure_pending")


async def _session_status(
    js: JetStreamContext, subjects: Subjects, episodes: EpisodeStore, owner: Owner, event_id: str, limit: int
) -> EventStatus | None:
    needle = event_id.encode("ascii")
    subject = subjects.session_completed(owner.tenant_id, owner.user_id)
    for message in await _find_messages(js, subjects.session_stream, subject, needle, limit):
        try:
            session = SessionCompleted.model_validate_json(message.data or b"")
        except ValidationError:
            continue
        if str(session.event_id) != event_id:
            continue
        episode_id = episode_id_for(owner, session.session_id)
        if await episodes.get(owner, [episode_id]):
            return EventStatus(event_id=event_id, kind="session", state="consolidated", episode_id=episode_id)
        reason = await _dead_letter_reason(js, subjects, owner, needle, limit)
        if reason is not None:
            return EventStatus(event_id=event_id, kind="session", state="dead_lettered", reason=reason)
        if message.seq is not None and await _processed(js, subjects.session_stream, message.seq):
            if await episodes.get(owner, [episode_id]):  # written and acked since the first look
                return EventStatus(event_id=event_id, kind="session", state="consolidated", episode_id=episode_id)
            return EventStatus(
                event_id=event_id,
                kind="session",
                state="processed",
                reason="consolidation finished without an episode: nothing in the session was worth remembering",
            )
        return EventStatus(event_id=event_id, kind="session", state="accepted")
    return None


async def event_status(
    js: JetStreamContext, subjects: Subjects, episodes: EpisodeStore, owner: Owner, event_id: str, *, limit: int
) -> EventStatus | None:
    """The event's status for this owner, or None when the owner has no such event (the same answer
    for an unknown id and for another user's)."""
    found = await _session_status(js, subjects, episodes, owner, event_id, limit)
    if found is None:
        found = await _erasure_status(js, subjects, owner, event_id, limit)
    return found
