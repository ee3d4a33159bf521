"""Per-turn sessions (Zep's add_messages): a chat system that streams appends turns to an open session
as they happen; `.../end`, or the idle closer once no turn came for `open_session_idle_s`, completes it
into exactly one `SessionCompleted`, published like `POST /v1/sessions` (same subject, same
owner-scoped message id), so the rest of the pipeline sees an ordinary session.

- Durable: the turns wait in a JetStream key-value bucket (`stores/open_sessions.py`), not in a
  process, so a restart or another replica carries on where this one stopped.
- Idempotent: a turn with a `turn_id` the session already holds is a duplicate. The event id is
  derived from the owner, the session id and the record's generation (`owned_uuid`), so a retried
  `/end`, an `/end` racing the idle closer, or two replicas closing at once publish one event: the
  record moves open -> closing (event id and turns frozen) -> closed by compare-and-set, and the
  publish in between is de-duplicated by the stream on the message id.
- Erasure: a whole-user erasure removes the user's records before it reads its cut
  (`erase_user`, called by `RecallService.request_erasure`). An event published from a record that
  the erasure removed while it was closing is deleted from the session stream here (its turns were
  accepted before the erasure); turns appended after the erasure start a new record and are kept.

The idle closer runs inside the recall API (`run_closer`, started by the app): the recall API owns
the bucket and always runs, while the pruner may run on a schedule; its state lives in the bucket,
so it survives restarts, and every replica may sweep (the compare-and-set and the deterministic
event id make a second close a no-op)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from nats.aio.client import Client as NatsClient
from nats.js.api import PubAck

from contracts import SessionCompleted, SizeLimits, Subjects
from contracts.limits import SizeLimitExceeded, check_session_size
from contracts.session_form import DEFAULT_AGENT
from contracts.session_input import SessionRejected
from services.common.domain.ids import owned_uuid
from services.common.domain.owner import Owner
from services.common.stores.open_sessions import (
    OpenSessionRecord,
    OpenSessionStore,
    SessionChanged,
    SessionKey,
    StoredSession,
)
from services.recall_api.write.sessions_in import publish_completed, status_url
from services.recall_api.write.turn_schemas import OpenSessionView, SessionEnded, TurnOut, TurnsAccepted, TurnsRequest

log = logging.getLogger(__name__)


class TurnConflict(ValueError):
    """The append contradicts the session (closed, another value for a field the first append set,
    a known turn_id with other content): HTTP 409, naming the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def event_id_of(key: SessionKey, record: OpenSessionRecord) -> uuid.UUID:
    """Deterministic per owner, session and generation: every closer of one record names one event."""
    return owned_uuid(key.owner, "open-session", key.session_id, record.generation)


def completed_event(key: SessionKey, record: OpenSessionRecord) -> SessionCompleted:
    """The SessionCompleted the record completes into: times from the turns' `ts`, else from when the
    turns arrived."""
    stamps = [turn.ts for turn in record.turns if turn.ts is not None] or [record.opened_at, record.last_turn_at]
    return SessionCompleted(
        event_id=record.event_id or event_id_of(key, record),
        tenant_id=key.owner.tenant_id,
        user_id=key.owner.user_id,
        agent_id=record.agent_id,
        session_id=key.session_id,
        channel=record.channel,
        scope=record.scope,
        started_at=min(stamps),
        ended_at=max(stamps),
        locale=record.locale,
        messages=list(record.turns),
        metadata=dict(record.metadata),
    )


def _check_description(record: OpenSessionRecord, request: TurnsRequest) -> None:
    """Later appends may repeat what the first one said about the session, not change it."""
    given = {
        "agent_id": request.agent_id,
        "channel": request.channel,
        "scope": request.scope,
        "locale": request.locale,
        "metadata": request.metadata,
    }
    for name, value in given.items():
        current = getattr(record, name)
        if value is not None and value != current:
            raise TurnConflict(name, f"{name} was set by the session's first append to {current!r}; it cannot change")


@dataclass
class _Appended:
    """What one run of the append's compare-and-set decided (it may run again on a conflict)."""

    appended: int = 0
    duplicates: int = 0


@dataclass
class OpenSessions:
    """Appends, reads and closes per-turn sessions; `run_closer` closes the idle ones."""

    nats: Callable[[], Awaitable[NatsClient]]
    subjects: Subjects
    limits: SizeLimits
    idle_s: float
    sweep_s: float
    closed_keep_s: float
    replicas: int = 1
    _stores: dict[int, OpenSessionStore] = field(default_factory=dict)

    async def store(self) -> OpenSessionStore:
        """The store on the current broker connection (a new connection gets a new store)."""
        client = await self.nats()
        if id(client) not in self._stores:
            self._stores.clear()
            self._stores[id(client)] = OpenSessionStore(client.jetstream(), self.subjects, replicas=self.replicas)
        return self._stores[id(client)]

    # ------------------------------------------------------------------------------ append

    async def append(self, owner: Owner, session_id: str, request: TurnsRequest) -> TurnsAccepted:
        """Append the new turns (opening the session on the first append). TurnConflict when the
        session is closed or contradicted; SessionRejected (too large) past the ingest limits."""
        key = SessionKey(owner, session_id)
        counts = _Appended()

        def decide(stored: StoredSession | None) -> OpenSessionRecord | None:
            now = datetime.now(UTC)
            record = stored.record if stored is not None else _opened(request, now)
            if record.state != "open":
                raise TurnConflict(
                    "session_id", f"session {session_id} is {record.state}; append to a new session id instead"
                )
            _check_description(record, request)
            turns, turn_ids, appended_at = list(record.turns), list(record.turn_ids), list(record.turn_appended_at)
            known = {turn_id: index for index, turn_id in enumerate(turn_ids) if turn_id is not None}
            counts.appended = counts.duplicates = 0
            for turn in request.messages:
                message = turn.message()
                if turn.turn_id is not None and turn.turn_id in known:
                    if turns[known[turn.turn_id]] != message:
                        raise TurnConflict(
                            "turn_id", f"turn_id {turn.turn_id} is already in the session with other content"
                        )
                    counts.duplicates += 1
                    continue
                if turn.turn_id is not None:
                    known[turn.turn_id] = len(turns)
                turns.append(message)
                turn_ids.append(turn.turn_id)
                appended_at.append(now)
                counts.appended += 1
            if counts.appended == 0:
                return None
            grown = record.model_copy(
                update={
                    "turns": turns,
                    "turn_ids": turn_ids,
                    "turn_appended_at": appended_at,
                    "turn_count": len(turns),
                    "last_turn_at": now,
                }
            )
            self._check_size(key, grown)
            return grown

        stored = await (await self.store()).swap(owner, session_id, decide)
        assert stored is not None  # decide opened it, or it existed
        log.info(
            "turns appended tenant=%s user=%s session=%s appended=%d duplicates=%d",
            owner.tenant_id,
            owner.user_id,
            session_id,
            counts.appended,
            counts.duplicates,
        )
        return TurnsAccepted(
            user_id=owner.user_id,
            session_id=session_id,
            turns=stored.record.turn_count,
            appended=counts.appended,
            duplicates=counts.duplicates,
        )

    def _check_size(self, key: SessionKey, record: OpenSessionRecord) -> None:
        """The session must fit the ingest limits, and its record (the turns plus their ids) the same
        byte limit, which keeps it under the broker's largest message."""
        try:
            check_session_size(completed_event(key, record), self.limits)
            if (size := len(record.model_dump_json().encode("utf-8"))) > self.limits.max_event_bytes:
                raise SizeLimitExceeded(f"the open session is {size} bytes; the limit is {self.limits.max_event_bytes}")
        except SizeLimitExceeded as exc:
            raise SessionRejected(
                "messages", f"too large: {exc}; end this session and start another", too_large=True
            ) from exc

    # ------------------------------------------------------------------------------ read

    async def read(self, owner: Owner, session_id: str) -> OpenSessionView | None:
        stored = await (await self.store()).get(owner, session_id)
        if stored is None:
            return None
        record = stored.record
        event_id = str(record.event_id) if record.event_id is not None else None
        turns = [
            TurnOut(**turn.model_dump(), turn_id=turn_id)
            for turn, turn_id in zip(record.turns, record.turn_ids, strict=True)
        ]
        return OpenSessionView(
            user_id=owner.user_id,
            session_id=session_id,
            state=record.state,
            turn_count=record.turn_count,
            turns=turns,
            agent_id=record.agent_id,
            channel=record.channel,
            scope=record.scope,
            metadata=record.metadata,
            opened_at=record.opened_at,
            last_turn_at=record.last_turn_at,
            closed_at=record.closed_at,
            closed_by=record.closed_by,
            event_id=event_id,
            status_url=status_url(event_id, owner.user_id) if event_id else None,
        )

    # ------------------------------------------------------------------------------ close

    async def end(self, owner: Owner, session_id: str) -> SessionEnded | None:
        """Complete the session now; None when the owner has no such session."""
        return await self.close(SessionKey(owner, session_id), "end")

    async def close(
        self, key: SessionKey, by: Literal["end", "idle"], *, idle_before: datetime | None = None
    ) -> SessionEnded | None:
        """open -> closing -> closed, publishing the event in between (again, harmlessly, when a
        closer stopped half way). With `idle_before`, an open session that had a turn since then is
        left open. None when there is nothing to close (no record, or no longer idle)."""
        store = await self.store()

        def to_closing(stored: StoredSession | None) -> OpenSessionRecord | None:
            if stored is None or stored.record.state != "open":
                return None
            record = stored.record
            if idle_before is not None and record.last_turn_at > idle_before:
                return None
            update = {"state": "closing", "closed_at": datetime.now(UTC), "closed_by": by}
            return record.model_copy(update={**update, "event_id": event_id_of(key, record)})

        stored = await store.swap(key.owner, key.session_id, to_closing)
        if stored is None or stored.record.state == "open":
            return None
        record = stored.record
        if record.state == "closed":
            return self._ended(key, record, duplicate=True)
        event = completed_event(key, record)
        ack = await self._publish(event)
        try:
            await store.replace(key, stored, record.model_copy(update={"state": "closed", "turns": [], "turn_ids": []}))
        except SessionChanged:
            return await self._settle_race(key, record, ack)
        return self._ended(key, record, duplicate=bool(ack.duplicate))

    async def _settle_race(self, key: SessionKey, record: OpenSessionRecord, ack: PubAck) -> SessionEnded | None:
        """The record changed between closing and closed: another closer finished it (fine), or a
        whole-user erasure removed it (then the event just published holds turns accepted before the
        erasure, and above its cut: delete it from the session stream, as the erasure would have)."""
        current = await (await self.store()).get(key.owner, key.session_id)
        if current is not None and current.record.generation == record.generation:
            return self._ended(key, record, duplicate=True)
        client = await self.nats()
        await client.jetstream().delete_msg(self.subjects.session_stream, ack.seq)
        log.warning(
            "open session erased while it closed: its event deleted tenant=%s session=%s event=%s",
            key.owner.tenant_id,
            key.session_id,
            record.event_id,
        )
        return None

    async def _publish(self, event: SessionCompleted) -> PubAck:
        return await publish_completed(self.nats, self.subjects, event)

    def _ended(self, key: SessionKey, record: OpenSessionRecord, *, duplicate: bool) -> SessionEnded:
        event_id = str(record.event_id)
        return SessionEnded(
            event_id=event_id,
            duplicate=duplicate,
            status_url=status_url(event_id, key.owner.user_id),
            session_id=key.session_id,
            turns=record.turn_count,
        )

    # ------------------------------------------------------------------------------ erasure, idle closer

    async def erase_user(self, owner: Owner) -> int:
        """Remove every buffered session of the owner (before a whole-user erasure reads its cut)."""
        return await (await self.store()).erase_user(owner)

    async def sweep(self) -> int:
        """One pass of the idle closer: close sessions idle past `idle_s` (and finish any left
        closing), forget closed records older than `closed_keep_s`, and drop the markers removed
        records left (before removals left none). Returns how many it closed."""
        store = await self.store()
        now = datetime.now(UTC)
        idle_before = now - timedelta(seconds=self.idle_s)
        closed = 0
        for key in await store.keys(drop_markers=True):
            stored = await store.get(key.owner, key.session_id)
            if stored is None:
                continue
            record = stored.record
            if record.state == "closed":
                if record.closed_at is not None and record.closed_at < now - timedelta(seconds=self.closed_keep_s):
                    await store.remove(key, stored)
                continue
            due = record.state == "closing" or record.last_turn_at <= idle_before
            if due and await self.close(key, "idle", idle_before=idle_before) is not None:
                closed += 1
        return closed

    async def run_closer(self) -> None:
        """Sweep every `sweep_s` until cancelled; a failed sweep (the broker down) is logged and the
        next one tries again."""
        while True:
            try:
                closed = await self.sweep()
                if closed:
                    log.info("idle closer: %d open sessions completed", closed)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next sweep retries; nothing is lost in between
                log.warning("idle closer: sweep failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.sweep_s)


def _opened(request: TurnsRequest, now: datetime) -> OpenSessionRecord:
    return OpenSessionRecord(
        agent_id=request.agent_id or DEFAULT_AGENT,
        channel=request.channel or "private",
        scope=request.scope or "personal",
        locale=request.locale,
        metadata=dict(request.metadata or {}),
        opened_at=now,
        last_turn_at=now,
    )
