"""Open sessions: the turns a streaming chat system has sent for a session that has not ended yet,
buffered durably in a JetStream key-value bucket until the session is completed into one
`SessionCompleted` (by `.../end` or the idle closer).

One key per session, `<tenant>.<user>.<session>` (ids are subject tokens, all valid key characters),
holding the whole record. Every change is a compare-and-set on the key's revision (`swap`), so two
appends, an append and a close, or two replicas closing the same session never lose an update: the
loser re-reads and decides again. The record is bounded by the ingest size limits (the session it
completes into must fit them), which keep it under JetStream's largest message.

A record lives in three states: `open` (turns may be appended), `closing` (its event id is fixed and
its turns are frozen; the SessionCompleted is being published) and `closed` (published: the turns
are dropped from the bucket, their text now lives in the session stream, where erasure and
forgetting reach it). Every call takes the `Owner` first; the key always holds tenant and user."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts import Subjects
from contracts.events import Channel, Message, Scope
from services.common.domain.owner import Owner
from services.common.stores.kv_keys import drop_entries, list_keys

SessionState = Literal["open", "closing", "closed"]


class OpenSessionRecord(BaseModel):
    """One buffered session. `turn_ids[i]` is the client's id of `turns[i]` (None when it sent none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description="Chosen when the session opened: a session id used again after its record was erased or "
        "expired is another session, with another event id.",
    )
    agent_id: str
    channel: Channel
    scope: Scope
    locale: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    turns: list[Message] = Field(default_factory=list)
    turn_ids: list[str | None] = Field(default_factory=list)
    turn_appended_at: list[datetime] = Field(
        default_factory=list,
        description="When each turn was appended (server time), kept once the turns are dropped: a fact "
        "erasure redacts only the turns appended before it was accepted.",
    )
    turn_count: int = Field(default=0, ge=0, description="Turns appended (kept once the turns are dropped).")
    state: SessionState = "open"
    opened_at: datetime
    last_turn_at: datetime = Field(description="When a turn was last appended (server time): the idle clock.")
    closed_at: datetime | None = None
    closed_by: Literal["end", "idle"] | None = None
    event_id: uuid.UUID | None = None

    @model_validator(mode="before")
    @classmethod
    def _time_every_turn(cls, data: Any) -> Any:
        """A record written before turns carried their append time: its untimed turns count as
        appended when the session opened, so an erasure accepted since then still redacts them."""
        if isinstance(data, dict) and data.get("opened_at") is not None:
            times = list(data.get("turn_appended_at") or [])
            missing = len(data.get("turns") or []) - len(times)
            if missing > 0:
                data = {**data, "turn_appended_at": [data["opened_at"]] * missing + times}
        return data


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A record and the key's revision it was read at (the compare-and-set's expectation)."""

    record: OpenSessionRecord
    revision: int


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Where a record is: its owner and session id."""

    owner: Owner
    session_id: str


class SessionChanged(RuntimeError):
    """The record changed (or vanished) since it was read at the given revision."""


@dataclass
class OpenSessionStore:
    """Open-session records of one subject root, in one JetStream key-value bucket."""

    js: JetStreamContext
    subjects: Subjects
    replicas: int = 1
    _kv: KeyValue | None = field(default=None, repr=False)

    @property
    def bucket(self) -> str:
        return self.subjects.session_stream.removesuffix("_SESSIONS") + "_OPEN_SESSIONS"

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
            except BucketNotFoundError:
                self._kv = await self.js.create_key_value(
                    js_api.KeyValueConfig(
                        bucket=self.bucket,
                        description="Turns of sessions still open, per tenant, user and session.",
                        replicas=self.replicas,
                        storage=js_api.StorageType.FILE,
                        # Reads go to the stream leader: an append must see the close (and the erasure)
                        # that came before it, never a lagging replica's older record.
                        direct=False,
                    )
                )
        return self._kv

    async def open(self) -> None:
        """Open (create if needed) the bucket now, so the first append does not pay for it."""
        await self._bucket()

    async def get(self, owner: Owner, session_id: str) -> StoredSession | None:
        kv = await self._bucket()
        try:
            entry = await kv.get(_key(owner, session_id))
        except KeyNotFoundError:  # deleted or purged keys too (KeyDeletedError is one)
            return None
        if not entry.value or entry.revision is None:
            return None
        return StoredSession(OpenSessionRecord.model_validate_json(entry.value), entry.revision)

    async def swap(
        self, owner: Owner, session_id: str, decide: Callable[[StoredSession | None], OpenSessionRecord | None]
    ) -> StoredSession | None:
        """Compare-and-set of one record: `decide` maps what is stored to what should be (None: leave it
        as it is, or absent), retried when another writer changed it in between. `decide` may raise to
        refuse; what it raises reaches the caller. Returns what is stored afterwards."""
        kv = await self._bucket()
        key = _key(owner, session_id)
        while True:
            current = await self.get(owner, session_id)
            wanted = decide(current)
            if wanted is None or (current is not None and wanted == current.record):
                return current
            try:
                data = wanted.model_dump_json().encode("utf-8")
                if current is None:
                    revision = await kv.create(key, data)
                else:
                    revision = await kv.update(key, data, last=current.revision)
            except KeyWrongLastSequenceError:
                continue
            return StoredSession(wanted, revision)

    async def replace(self, key: SessionKey, expected: StoredSession, record: OpenSessionRecord) -> StoredSession:
        """Write `record` only if the key is still at `expected.revision`; SessionChanged otherwise."""
        kv = await self._bucket()
        try:
            revision = await kv.update(
                _key(key.owner, key.session_id), record.model_dump_json().encode("utf-8"), last=expected.revision
            )
        except KeyWrongLastSequenceError as exc:
            raise SessionChanged(f"session {key.session_id} changed since revision {expected.revision}") from exc
        return StoredSession(record, revision)

    async def remove(self, key: SessionKey, expected: StoredSession) -> None:
        """Delete the record if it is still at `expected.revision` (a newer one is left alone), leaving
        no marker behind."""
        await self._bucket()
        await drop_entries(self.js, self.bucket, _key(key.owner, key.session_id), upto_revision=expected.revision)

    async def redact(
        self, key: SessionKey, rewrite: Callable[[OpenSessionRecord], OpenSessionRecord | None]
    ) -> OpenSessionRecord | None:
        """Compare-and-set of an open record without what an erasure removes (`rewrite` returns the
        redacted record, or None when nothing in it is to go), retried when a turn was appended in
        between, so no append is lost and none appended meanwhile escapes the rewrite. A record
        closing or closed is left alone: its turns are frozen for, or already in, the session stream.
        Returns the record written, or None when nothing was."""
        written: list[OpenSessionRecord] = []

        def decide(stored: StoredSession | None) -> OpenSessionRecord | None:
            written.clear()
            if stored is None or stored.record.state != "open":
                return None
            redacted = rewrite(stored.record)
            if redacted is not None:
                written.append(redacted)
            return redacted

        await self.swap(key.owner, key.session_id, decide)
        return written[0] if written else None

    async def erase_user(self, owner: Owner) -> int:
        """Remove every record of the owner, turns and all revisions (a user's erasure); returns how
        many were removed. A record created after this call is kept: it holds only later turns."""
        keys = await self.keys(owner)
        for key in keys:
            await drop_entries(self.js, self.bucket, _key(key.owner, key.session_id))
        return len(keys)

    async def keys(self, owner: Owner | None = None, *, drop_markers: bool = False) -> list[SessionKey]:
        """The sessions with a record (of one owner, or of everyone for the idle closer), removed ones
        left out, however many there are. With `drop_markers`, the markers that removed records left
        (records removed before `remove` and `erase_user` left none) are dropped on the way."""
        kv = await self._bucket()
        pattern = f"{owner.tenant_id}.{owner.user_id}.*" if owner is not None else "*.*.*"
        listing = await list_keys(self.js, kv, self.bucket, pattern)
        if drop_markers:
            for key, revision in listing.removed.items():
                await drop_entries(self.js, self.bucket, key, upto_revision=revision)
        return [SessionKey(*_parse(key)) for key in listing.live]


def _parse(key: str) -> tuple[Owner, str]:
    tenant_id, user_id, session_id = key.split(".", 2)
    return Owner(tenant_id, user_id), session_id


def _key(owner: Owner, session_id: str) -> str:
    return f"{owner.tenant_id}.{owner.user_id}.{session_id}"
