"""Erasure tombstones and in-flight writer records: what keeps a user's erasure from racing the
pipeline (issue 11, item 1).

Why: an erasure deletes a user's data from every store, but a session already being consolidated
(an LLM call in flight) would write its episode, facts and graph nodes a moment later. Two records in
JetStream key-value buckets close that window:

- a **tombstone** per (tenant, user): the erasure's cut in the session stream (`session_cut`, the last
  sequence when the erasure started) and its state (`erasing`, then `erased`). Work derived from a
  raw session at or below the cut is erased data: writers drop it. Work from later sessions (the user
  came back) waits while the erasure runs, then proceeds — it is never erased.
- a **writer record** per (tenant, user, writer process): how many units of work for that user the
  process has in flight. A writer records itself *before* it reads the tombstone; the erasure writes
  the tombstone *before* it reads the writer records and waits until they are zero. So either the
  writer sees the tombstone, or the erasure sees (and waits for) the writer: no write of erased data
  can land after the erasure deleted and verified.

A fact or episode erasure has no tombstone: it deletes each raw session it erases from the session
stream (a redacted copy, if any, is a new message), then waits for the user's writers. A writer that
consolidates a raw session asks, right before it commits, whether that session is still in the stream
(`guard(..., from_session=True)`): so a session accepted before the erasure but consolidated while or
after it ran is dropped too, by the same either-or as above.

`TombstoneStore.guard` is the one way writers use this; the recall API marks an erasure when it
accepts it (`mark_accepted`, with the cut read then), and the pruner's erasure uses `mark_accepted`
(or `mark` for requests that carry no cut), `settle` and `wait_for_writers`. Every call takes the
`Owner` first. Records hold ids and sequences, never memory text."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Literal

from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from contracts import Subjects
from services.common.domain.owner import Owner

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
"""How often a process re-stamps its writer records while it has work in flight."""
WRITER_STALE_S = 6 * HEARTBEAT_S
"""A writer record not re-stamped for this long belongs to a crashed process: it is not waited for
(its message is redelivered to a live writer, which then sees the tombstone; whatever the crashed one
wrote is deleted by the erasure, which runs after this)."""

_POLL_S = 0.05
_WRITER_BUCKET_TTL_S = 24 * 3600.0


class UserBeingErased(RuntimeError):
    """The user's erasure is running and this work could not wait for it to finish; retry later.
    (Raised by `guard`, after `wait_s`, or at once with `wait=False`.)"""


class Tombstone(BaseModel):
    """A user's latest erasure: where it cut the session stream and whether it is done."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    erasure_id: str = Field(description="event_id of the ErasureRequested that set it.")
    session_cut: int | None = Field(
        default=None,
        ge=0,
        description="Last session-stream sequence when the erasure started; None for the moment before it is "
        "read (every writer of the user waits meanwhile).",
    )
    state: Literal["erasing", "erased"]
    started_at: datetime


class Verdict(Enum):
    PROCEED = "proceed"
    SKIP = "skip"
    WAIT = "wait"


def judge(tombstone: Tombstone | None, session_seq: int | None) -> Verdict:
    """What a writer does with work derived from raw session `session_seq` (None: unknown lineage,
    e.g. dedup or an explicit save): drop erased data, wait while an erasure runs, else go on."""
    if tombstone is None:
        return Verdict.PROCEED
    cut = tombstone.session_cut
    if session_seq is not None and cut is not None and session_seq <= cut:
        return Verdict.SKIP
    if tombstone.state == "erasing":
        return Verdict.WAIT
    return Verdict.PROCEED


class _WriterRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    writer: str
    in_flight: int = Field(ge=0)
    updated_at_ts: float


@dataclass
class WriteGuard:
    """Handed to a writer inside `TombstoneStore.guard`. `erased`: the work is erased data, write
    nothing. `still_allowed()` re-reads the tombstone right before a commit (cheap, saves the erasure
    from waiting on work that is about to be thrown away)."""

    store: TombstoneStore
    owner: Owner
    session_seq: int | None
    erased: bool
    from_session: bool = False
    """The work is derived from the raw session at `session_seq`: it is erased data once an erasure
    removed that session from the stream."""

    async def still_allowed(self) -> bool:
        if self.erased:
            return False
        verdict = judge(await self.store.get(self.owner), self.session_seq)
        if (
            verdict is not Verdict.SKIP
            and self.from_session
            and self.session_seq is not None
            and await self.store.session_removed(self.session_seq)
        ):
            verdict = Verdict.SKIP
        self.erased = verdict is Verdict.SKIP
        return verdict is Verdict.PROCEED or verdict is Verdict.WAIT  # WAIT: recorded before the erasure


@dataclass
class TombstoneStore:
    """Tombstones and writer records of one subject root, in two JetStream key-value buckets."""

    js: JetStreamContext
    subjects: Subjects
    replicas: int = 1
    writer_stale_s: float = WRITER_STALE_S
    heartbeat_s: float = HEARTBEAT_S
    process_token: str = field(default_factory=lambda: uuid.uuid4().hex)
    _buckets: dict[str, KeyValue] = field(default_factory=dict)
    _in_flight: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(default_factory=dict)
    _heartbeat: asyncio.Task[None] | None = None

    @property
    def tombstone_bucket(self) -> str:
        return self.subjects.session_stream.removesuffix("_SESSIONS") + "_TOMBSTONES"

    @property
    def writer_bucket(self) -> str:
        return self.subjects.session_stream.removesuffix("_SESSIONS") + "_WRITERS"

    async def _bucket(self, name: str) -> KeyValue:
        if name not in self._buckets:
            try:
                self._buckets[name] = await self.js.key_value(name)
            except BucketNotFoundError:
                writers = name == self.writer_bucket
                self._buckets[name] = await self.js.create_key_value(
                    js_api.KeyValueConfig(
                        bucket=name,
                        description="Writers with work in flight, per user." if writers else "Erasure tombstones.",
                        ttl=_WRITER_BUCKET_TTL_S if writers else None,
                        replicas=self.replicas,
                        storage=js_api.StorageType.FILE,
                        # Reads go to the stream leader, never a possibly lagging replica: the writer
                        # and the erasure must each see what the other wrote before it (see above).
                        direct=False,
                    )
                )
        return self._buckets[name]

    async def open(self) -> None:
        """Open (create if needed) both buckets now, so a writer's first message does not pay for it."""
        await self._bucket(self.tombstone_bucket)
        await self._bucket(self.writer_bucket)

    # ---- tombstones ---------------------------------------------------------------------------

    async def get(self, owner: Owner) -> Tombstone | None:
        kv = await self._bucket(self.tombstone_bucket)
        try:
            entry = await kv.get(_user_key(owner))
        except KeyNotFoundError:
            return None
        return Tombstone.model_validate_json(entry.value) if entry.value else None

    async def mark(self, owner: Owner, erasure_id: str, session_cut: int | None, started_at: datetime) -> Tombstone:
        """The erasure starts: later work of the user waits, work at or below the cut is dropped. The
        erasure marks twice: without a cut (everything of the user waits), then with the stream's
        last sequence read after that — so no session below the cut started unseen in between."""
        tombstone = Tombstone(erasure_id=erasure_id, session_cut=session_cut, state="erasing", started_at=started_at)
        await (await self._bucket(self.tombstone_bucket)).put(_user_key(owner), tombstone.model_dump_json().encode())
        return tombstone

    async def mark_accepted(self, owner: Owner, erasure_id: str, session_cut: int, started_at: datetime) -> Tombstone:
        """Record an erasure whose cut was fixed when it was accepted (the recall API right after
        publishing the request, the pruner again when it starts on it): work of the user's sessions
        above the cut waits from that moment until the erasure is done, so nothing accepted after it
        is consolidated early and then deleted with the rest. Never undoes a later state: a tombstone
        of another erasure still running with a higher cut stays (writers keep waiting for it), and
        this erasure's own settled tombstone is not reopened."""
        wanted = Tombstone(erasure_id=erasure_id, session_cut=session_cut, state="erasing", started_at=started_at)

        def keep(current: Tombstone) -> bool:
            if current.erasure_id == erasure_id:
                return current.state == "erased"
            # Strictly later: of two erasures with one cut, the one marked last takes over, so
            # whichever of them runs last settles.
            later_cut = current.session_cut is not None and current.session_cut > session_cut
            return current.state == "erasing" and later_cut

        return await self._swap(owner, lambda current: current if current is not None and keep(current) else wanted)

    async def settle(self, owner: Owner, tombstone: Tombstone) -> None:
        """The erasure is done: the user's later work proceeds; erased lineage is still dropped. When
        another erasure of the user has taken the tombstone meanwhile, it is left to that one to settle
        (the user's later work keeps waiting for it)."""
        done = tombstone.model_copy(update={"state": "erased"})
        await self._swap(
            owner, lambda current: done if current is None or current.erasure_id == tombstone.erasure_id else current
        )

    async def _swap(self, owner: Owner, decide: Callable[[Tombstone | None], Tombstone]) -> Tombstone:
        """Compare-and-set of the owner's tombstone: `decide` maps what is stored to what should be,
        retried when another writer changed it in between."""
        kv = await self._bucket(self.tombstone_bucket)
        key = _user_key(owner)
        while True:
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                entry = None
            current = Tombstone.model_validate_json(entry.value) if entry is not None and entry.value else None
            wanted = decide(current)
            if wanted == current:
                return wanted
            try:
                if entry is None:
                    await kv.create(key, wanted.model_dump_json().encode())
                else:
                    await kv.update(key, wanted.model_dump_json().encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return wanted

    async def session_removed(self, session_seq: int) -> bool:
        """Whether the raw session at `session_seq` was deleted from the session stream (by an erasure;
        a fact erasure replaces it by a redacted copy under a new sequence). One that aged out of the
        stream (below its first sequence) was not erased: its work goes on from what it read."""
        stream = self.subjects.session_stream
        try:
            await self.js.get_msg(stream, seq=session_seq)
        except NotFoundError:
            return session_seq >= int((await self.js.stream_info(stream)).state.first_seq)
        return False

    # ---- writers ------------------------------------------------------------------------------

    async def busy_writers(self, owner: Owner) -> list[str]:
        """Writers (of any process) with work for the owner in flight, not counting stale records."""
        kv = await self._bucket(self.writer_bucket)
        prefix = f"$KV.{self.writer_bucket}."
        try:
            info = await self.js.stream_info(
                f"KV_{self.writer_bucket}", subjects_filter=prefix + _user_key(owner) + ".>"
            )
        except NotFoundError:
            return []
        busy: list[str] = []
        now = time.time()
        for subject in info.state.subjects or {}:
            try:
                entry = await kv.get(str(subject).removeprefix(prefix))
            except KeyNotFoundError:
                continue
            record = _WriterRecord.model_validate_json(entry.value) if entry.value else None
            if record is not None and record.in_flight > 0 and now - record.updated_at_ts < self.writer_stale_s:
                busy.append(record.writer)
        return busy

    async def wait_for_writers(
        self, owner: Owner, timeout_s: float, on_wait: Callable[[], Awaitable[None]] | None = None
    ) -> list[str]:
        """Wait until no writer has work for the owner in flight; returns the writers still busy at
        the deadline (empty when drained)."""
        deadline = time.monotonic() + timeout_s
        last_progress = time.monotonic()
        while busy := await self.busy_writers(owner):
            if time.monotonic() >= deadline:
                return busy
            if on_wait is not None and time.monotonic() - last_progress > 5:
                await on_wait()
                last_progress = time.monotonic()
            await asyncio.sleep(_POLL_S)
        return []

    async def _count(self, owner: Owner, writer: str, delta: int) -> None:
        slot = (owner.tenant_id, owner.user_id, writer)
        lock = self._locks.setdefault(slot, asyncio.Lock())
        async with lock:
            count = max(self._in_flight.get(slot, 0) + delta, 0)
            self._in_flight[slot] = count
            await self._stamp(slot, count)
            if count == 0:
                del self._in_flight[slot]  # the lock stays: a waiter may hold it already
        beating = self._heartbeat is not None and not self._heartbeat.done()
        if self._in_flight and not beating:
            self._heartbeat = asyncio.create_task(self._beat(), name="tiermem-writer-heartbeat")
        elif not self._in_flight and beating and self._heartbeat is not asyncio.current_task():
            assert self._heartbeat is not None
            self._heartbeat.cancel()  # nothing in flight: no task left sleeping

    async def _stamp(self, slot: tuple[str, str, str], count: int) -> None:
        tenant_id, user_id, writer = slot
        record = _WriterRecord(writer=writer, in_flight=count, updated_at_ts=time.time())
        key = f"{tenant_id}.{user_id}.{writer}-{self.process_token}"
        await (await self._bucket(self.writer_bucket)).put(key, record.model_dump_json().encode())

    async def _beat(self) -> None:
        """Re-stamp this process's records while it has work in flight, so a long LLM call is not
        taken for a crashed writer; ends when nothing is in flight."""
        while self._in_flight:
            await asyncio.sleep(self.heartbeat_s)
            for slot in list(self._in_flight):
                async with self._locks[slot]:
                    if self._in_flight.get(slot):
                        try:
                            await self._stamp(slot, self._in_flight[slot])
                        except Exception as exc:  # the next beat tries again; a missed one is not fatal
                            log.warning("could not re-stamp writer record %s: %s", slot, exc)

    async def close(self) -> None:
        """Stop the heartbeat (at shutdown)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    @asynccontextmanager
    async def guard(
        self,
        owner: Owner,
        writer: str,
        session_seq: int | None,
        *,
        wait: bool = True,
        wait_s: float = 120.0,
        on_wait: Callable[[], Awaitable[None]] | None = None,
        from_session: bool = False,
    ) -> AsyncIterator[WriteGuard]:
        """Record the writer as in flight for the owner, then judge the work against the tombstone:
        `guard.erased` when it is erased data; while the user's erasure runs, wait (outside the
        record, so the erasure is not kept waiting) up to `wait_s`, or raise UserBeingErased at
        once with `wait=False`. The record is released when the block ends. `from_session`: the work
        is derived from the raw session at `session_seq`, and `still_allowed` drops it once an erasure
        has removed that session (see the module docstring)."""
        deadline = time.monotonic() + wait_s
        last_progress = time.monotonic()
        writer = _key_token(writer)
        while True:
            await self._count(owner, writer, +1)
            try:
                verdict = judge(await self.get(owner), session_seq)
            except BaseException:
                await self._count(owner, writer, -1)
                raise
            if verdict is not Verdict.WAIT:
                break
            await self._count(owner, writer, -1)
            if not wait or time.monotonic() >= deadline:
                raise UserBeingErased(
                    f"the erasure of {owner.tenant_id}/{owner.user_id} is still running; retry when it completes"
                )
            if on_wait is not None and time.monotonic() - last_progress > 5:
                await on_wait()
                last_progress = time.monotonic()
            await asyncio.sleep(_POLL_S * 4)
        try:
            yield WriteGuard(self, owner, session_seq, erased=verdict is Verdict.SKIP, from_session=from_session)
        finally:
            await self._count(owner, writer, -1)


def _user_key(owner: Owner) -> str:
    # Tenant and user ids match [A-Za-z0-9_-] (contracts), all valid key-value key characters.
    return f"{owner.tenant_id}.{owner.user_id}"


def _key_token(name: str) -> str:
    return "".join(char if char.isalnum() or char in "-_" else "-" for char in name)
