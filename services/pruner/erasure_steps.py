"""The steps of an erasure, and what they work with. Each kind of target (a whole user, one episode;
one fact in `fact_erasure`) is a list of named, idempotent steps that run upstream first (raw sessions,
then derived events, then the stores), so nothing still queued can re-derive what was just removed,
and end with a verification that raises ErasureIncomplete when a trace remains."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from pydantic import BaseModel, ConfigDict, Field

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.publishing import EventPublisher
from services.common.stores.episodes import Episode, Passage
from services.common.stores.erasure import (
    ERASURE_RECORD_KINDS,
    audit_user,
    delete_message,
    purge_subject,
    stream_messages,
    subject_counts,
    subject_kind,
    user_derived_filter,
)
from services.common.stores.facts import StoredFact
from services.common.stores.maintenance import PointText
from services.common.stores.tombstones import Tombstone, TombstoneStore
from services.common.stores.vector.port import SearchFilter
from services.pruner.logic import add_counts

if TYPE_CHECKING:
    from services.common.stores.episodes import EpisodeStore
    from services.common.stores.facts import FactStore
    from services.common.stores.graph.repository import GraphRepository
    from services.common.stores.vector.port import VectorIndex

log = logging.getLogger(__name__)

Step = tuple[str, Callable[[], Awaitable[dict[str, int]]]]
"""A step's name (recorded in the progress) and the work, which returns what it removed."""

MessageMatch = Callable[[str, Any], bool]
"""Whether a stream message (its subject, its JSON-or-text body) belongs to the erased data."""


class ErasureIncomplete(RuntimeError):
    """Something of the erased data is still there after every step ran (a pipeline stage wrote it
    concurrently); the request is retried, and dead-lettered with this reason when retries run out."""


class ErasureProgress(BaseModel):
    """What a (possibly crashed) erasure has done so far."""

    model_config = ConfigDict(extra="forbid")

    removed: dict[str, int] = Field(default_factory=dict)
    steps_done: list[str] = Field(default_factory=list)
    deliveries: int = 0
    needles: list[str] | None = Field(default=None, description="Fact erasure: the text searched for.")
    session_ids: list[str] = Field(default_factory=list, description="Fact / episode erasure: sessions involved.")
    completed: str | None = Field(default=None, description="The ErasureCompleted JSON once everything is done.")
    session_cut: int | None = Field(
        default=None, description="User erasure: the session-stream sequence at and below which sessions are erased."
    )


@dataclass(frozen=True)
class ErasureScope:
    """One erasure's owner, and the stores and streams its steps read and delete from."""

    owner: Owner
    subjects: Subjects
    index: VectorIndex  # only for the final audit, which reads every collection as it is stored
    episodes: EpisodeStore
    facts: FactStore
    graph: GraphRepository
    js: Callable[[], JetStreamContext]
    publisher: EventPublisher
    scan_limit: int
    tombstones: TombstoneStore
    drain_timeout_s: float = 60.0
    on_wait: Callable[[], Awaitable[None]] | None = None

    @property
    def session_subject(self) -> str:
        return self.subjects.session_completed(self.owner.tenant_id, self.owner.user_id)

    @property
    def derived_filter(self) -> str:
        return user_derived_filter(self.subjects, self.owner.tenant_id, self.owner.user_id)

    @property
    def dead_letter_filter(self) -> str:
        return self.subjects.user_dead_letters(self.owner.tenant_id, self.owner.user_id)

    def is_erasure_record(self, subject: str) -> bool:
        """Erasure requests and completions are the audit trail: no step ever deletes them."""
        return subject_kind(self.subjects, subject) in ERASURE_RECORD_KINDS

    async def texts(self) -> dict[str, list[PointText]]:
        """The searchable text of every episode, passage and fact point of the owner, readable or
        not; raises rather than erase from a partial scan."""
        found = {
            "episodes": await self.episodes.episode_texts(self.owner, self.scan_limit),
            "passages": await self.episodes.passage_texts(self.owner, self.scan_limit),
            "facts": await self.facts.fact_texts(self.owner, self.scan_limit),
        }
        for collection, points in found.items():
            self.check_scan(collection, len(points))
        return found

    async def drain_writers(self) -> dict[str, int]:
        """Wait until no writer has work of the user in flight (bounded; retried when it is not)."""
        busy = await self.tombstones.wait_for_writers(self.owner, self.drain_timeout_s, self.on_wait)
        if busy:
            raise ErasureIncomplete(
                f"writers still busy with {self.owner.tenant_id}/{self.owner.user_id} after "
                f"{self.drain_timeout_s:.0f}s: {sorted(set(busy))}"
            )
        return {}

    def check_scan(self, collection: str, found: int) -> None:
        if found >= self.scan_limit:
            raise ErasureIncomplete(
                f"{collection} of {self.owner.tenant_id}/{self.owner.user_id} holds more than scan_limit="
                f"{self.scan_limit} points; raise TIERMEM_SCAN_LIMIT to erase by text"
            )

    async def delete_messages(
        self, stream: str, subject_filter: str, matches: MessageMatch, *, upto_seq: int | None = None
    ) -> int:
        """Delete the matching messages (at or below `upto_seq`, when given)."""
        js = self.js()
        removed = 0
        async for message in stream_messages(js, stream, subject_filter):
            if message.seq is None or (upto_seq is not None and message.seq > upto_seq):
                continue
            if matches(message.subject or "", json_or_text(message.data)):
                removed += int(await delete_message(js, stream, message.seq))
        return removed

    async def count_messages(
        self, stream: str, subject_filter: str, matches: MessageMatch, *, upto_seq: int | None = None
    ) -> int:
        return sum(
            [
                1
                async for message in stream_messages(self.js(), stream, subject_filter)
                if message.seq is not None
                and (upto_seq is None or message.seq <= upto_seq)
                and matches(message.subject or "", json_or_text(message.data))
            ]
        )


# --------------------------------------------------------------------------------------------------
# Helpers shared by the steps


def json_or_text(data: bytes | None) -> Any:
    text = (data or b"").decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def inner_payload(data: Any) -> Any:
    """The failed message inside a dead-letter record, parsed when it is JSON."""
    if isinstance(data, dict) and isinstance(data.get("payload"), str):
        return json_or_text(data["payload"].encode("utf-8"))
    return data


def with_inner_payload(data: Any) -> Any:
    return [data, inner_payload(data)]


def graph_counts(counts: dict[str, int]) -> dict[str, int]:
    return {f"graph_{name}": count for name, count in counts.items()}


# --------------------------------------------------------------------------------------------------
# A whole user


@dataclass(frozen=True)
class UserErasure:
    """Everything of one user goes, by subject and by owner; other users' data is not read.

    Races with the pipeline are closed by the user's tombstone (`stores/tombstones`): the erasure
    marks it first, waits until no writer has work of the user in flight, deletes, verifies, and only
    then settles it. The cut is the one the request carries (`accepted_cut`: fixed, and marked, when
    the recall API accepted it); a request without one is cut when this erasure starts. Sessions
    published after the cut (the user came back) are kept, and their consolidation waits until the
    erasure is done."""

    scope: ErasureScope
    erasure_id: str
    progress: ErasureProgress
    started_at: datetime
    accepted_cut: int | None = None

    def steps(self) -> list[Step]:
        return [
            ("tombstone", self.tombstone),
            ("drain", self.drain),
            ("session_stream", self.session_stream),
            ("derived_events", self.derived_events),
            ("dead_letters", self.dead_letters),
            ("vectors", self.vectors),
            ("graph", self.graph_data),
            ("verify", self.verify),
            ("settle", self.settle),
        ]

    def _tombstone(self) -> Tombstone:
        return Tombstone(
            erasure_id=self.erasure_id,
            session_cut=self.progress.session_cut,
            state="erasing",
            started_at=self.started_at,
        )

    async def tombstone(self) -> dict[str, int]:
        """Mark with the cut fixed when the request was accepted. A request without one (made before
        requests carried it): mark without a cut (every writer of the user waits), then read the
        stream's last sequence and mark with it."""
        scope = self.scope
        if self.progress.session_cut is None and self.accepted_cut is not None:
            self.progress.session_cut = self.accepted_cut
        if self.progress.session_cut is None:
            await scope.tombstones.mark(scope.owner, self.erasure_id, None, self.started_at)
            info = await scope.js().stream_info(scope.subjects.session_stream)
            self.progress.session_cut = int(info.state.last_seq)
        await scope.tombstones.mark_accepted(scope.owner, self.erasure_id, self.progress.session_cut, self.started_at)
        return {}

    async def drain(self) -> dict[str, int]:
        return await self.scope.drain_writers()

    async def session_stream(self) -> dict[str, int]:
        scope = self.scope
        purged = await purge_subject(
            scope.js(), scope.subjects.session_stream, scope.session_subject, upto_seq=self.progress.session_cut
        )
        return {"session_messages": purged}

    async def derived_events(self) -> dict[str, int]:
        # Per subject, never by wildcard: the erasure request being handled must survive until acked.
        scope = self.scope
        js = scope.js()
        purged = 0
        for subject in await subject_counts(js, scope.subjects.derived_stream, scope.derived_filter):
            if not scope.is_erasure_record(subject):
                purged += await purge_subject(js, scope.subjects.derived_stream, subject)
        return {"derived_events": purged}

    async def dead_letters(self) -> dict[str, int]:
        scope = self.scope
        purged = await purge_subject(scope.js(), scope.subjects.dead_letter_stream, scope.dead_letter_filter)
        return {"dead_letters": purged}

    async def vectors(self) -> dict[str, int]:
        scope = self.scope
        deleted = await scope.episodes.delete_owner(scope.owner)
        return {
            "passages": deleted.passages,
            "episodes": deleted.episodes,
            "facts": await scope.facts.delete_owner(scope.owner),
        }

    async def graph_data(self) -> dict[str, int]:
        return graph_counts(await self.scope.graph.delete_user_data(self.scope.owner))

    async def verify(self) -> dict[str, int]:
        scope = self.scope
        report = await audit_user(
            index=scope.index,
            graph=scope.graph,
            js=scope.js(),
            subjects=scope.subjects,
            owner=scope.owner,
            session_cut=self.progress.session_cut,
        )
        if not report.clean:
            left = {name: count for name, count in report.traces().items() if count}
            raise ErasureIncomplete(
                f"traces of {scope.owner.tenant_id}/{scope.owner.user_id} remain after erasure: {left}"
            )
        return {}

    async def settle(self) -> dict[str, int]:
        """Verified: the user's later work may proceed."""
        await self.scope.tombstones.settle(self.scope.owner, self._tombstone())
        return {}


# --------------------------------------------------------------------------------------------------
# One episode


async def episode_sessions(scope: ErasureScope, episode_id: str, progress: ErasureProgress) -> frozenset[str]:
    """The sessions the episode was built from, recorded in the progress: once the episode point is
    deleted, a resumed erasure can no longer read them from it."""
    found: list[Episode | Passage] = [*await scope.episodes.get(scope.owner, [episode_id])]
    if not found:
        found.extend(
            await scope.episodes.scroll_passages(scope.owner, SearchFilter(match={"episode_id": episode_id}), 1)
        )
    for record in found:
        if record.session_id not in progress.session_ids:
            progress.session_ids.append(record.session_id)
    # A source episode the pruner compressed is gone as a point; the compressed summary still names its session.
    for compressed in await scope.episodes.scroll(scope.owner, _compressed_from(episode_id), scope.scan_limit):
        session_id = dict(zip(compressed.source_episode_ids, compressed.source_session_ids, strict=False)).get(
            episode_id
        )
        if session_id is not None and session_id not in progress.session_ids:
            progress.session_ids.append(session_id)
    if not progress.session_ids:
        log.warning(
            "episode %s of tenant %s not found in the vector index: erasing its graph and fact traces only",
            episode_id,
            scope.owner.tenant_id,
        )
    return frozenset(progress.session_ids)


def _compressed_from(episode_id: str) -> SearchFilter:
    """Compressed summary episodes that folded in `episode_id`."""
    return SearchFilter(match={"source_episode_ids": episode_id})


@dataclass(frozen=True)
class EpisodeErasure:
    """One episode goes, with its raw sessions, the events and dead letters that refer to it, its
    graph contribution, and the facts observed only in it.

    `cut` (the session stream's sequence when the request was accepted): raw sessions above it, and
    events and dead letters derived from them, are kept (the same conversation sent again after the
    202). A writer still consolidating a removed session drops its work (`guard(from_session=True)`),
    and the `drain` step waits for writers that were already committing, so their output is there
    for the steps after it to delete."""

    scope: ErasureScope
    episode_id: str
    session_ids: frozenset[str]
    cut: int | None = None

    def steps(self) -> list[Step]:
        return [
            ("session_stream", self.session_stream),
            ("drain", self.scope.drain_writers),
            ("derived_events", self.derived_events),
            ("dead_letters", self.dead_letters),
            ("facts", self.facts),
            ("graph", self.graph_data),
            ("vectors", self.vectors),
            ("last_drain", self.scope.drain_writers),  # a fact rewritten meanwhile is verified as written
            ("verify", self.verify),
        ]

    def _after_cut(self, sequence: Any) -> bool:
        return self.cut is not None and isinstance(sequence, int) and sequence > self.cut

    def _refers(self, data: Any) -> bool:
        if not isinstance(data, dict) or self._after_cut(data.get("raw_stream_sequence")):
            return False
        return (
            data.get("episode_id") == self.episode_id
            or data.get("source_episode_id") == self.episode_id
            or (data.get("session_id") in self.session_ids and data.get("event_type") != "erasure.requested")
        )

    def _raw_session_after_cut(self, letter: Any) -> bool:
        """A dead letter of a raw session accepted after the cut."""
        return (
            isinstance(letter, dict)
            and letter.get("original_stream") == self.scope.subjects.session_stream
            and self._after_cut(letter.get("stream_sequence"))
        )

    def _of_its_sessions(self, _subject: str, data: Any) -> bool:
        return isinstance(data, dict) and data.get("session_id") in self.session_ids

    async def session_stream(self) -> dict[str, int]:
        scope = self.scope
        removed = await scope.delete_messages(
            scope.subjects.session_stream, scope.session_subject, self._of_its_sessions, upto_seq=self.cut
        )
        return {"session_messages": removed}

    async def derived_events(self) -> dict[str, int]:
        scope = self.scope
        removed = await scope.delete_messages(
            scope.subjects.derived_stream,
            scope.derived_filter,
            lambda subject, data: not scope.is_erasure_record(subject) and self._refers(data),
        )
        return {"derived_events": removed}

    async def dead_letters(self) -> dict[str, int]:
        scope = self.scope
        removed = await scope.delete_messages(
            scope.subjects.dead_letter_stream,
            scope.dead_letter_filter,
            lambda _subject, data: not self._raw_session_after_cut(data) and self._refers(inner_payload(data)),
        )
        return {"dead_letters": removed}

    async def facts(self) -> dict[str, int]:
        """Facts observed only in the episode go; facts observed elsewhere too lose this observation.
        A point that cites the episode but does not read as a fact goes as well."""
        scope = self.scope
        removed: dict[str, int] = {}
        citing = SearchFilter(match={"episode_ids": self.episode_id})
        scope.check_scan("facts", await scope.facts.count(scope.owner, citing))
        for stored in await scope.facts.scroll(scope.owner, citing, scope.scan_limit):
            if await self._drop_observation(stored):
                add_counts(removed, {"facts_updated": 1})
        # What still cites the episode: facts with no other observation, and unreadable points.
        deleted = await scope.facts.delete_citing(scope.owner, self.episode_id)
        if deleted:
            add_counts(removed, {"facts": deleted})
        return removed

    async def _drop_observation(self, stored: StoredFact) -> bool:
        """Remove this episode from the fact's provenance; False when the fact must go instead (it
        has no other observation)."""
        fact = stored.fact
        remaining = [p for p in fact.provenance if p.episode_id != self.episode_id]
        if not remaining:
            return False
        updated = fact.model_copy(update={"provenance": remaining, "evidence_count": len(remaining)})
        await self.scope.facts.rewrite(
            self.scope.owner, replace(stored, fact=updated, channels=stored.channels or ("private",))
        )
        return True

    async def graph_data(self) -> dict[str, int]:
        return graph_counts(await self.scope.graph.delete_episode(self.scope.owner, self.episode_id))

    async def vectors(self) -> dict[str, int]:
        """The episode and its passages, and every compressed summary that folded it in (whole: the
        summary cannot be rebuilt without its sources, and its other sources were already forgotten)."""
        scope = self.scope
        compressed = [e.episode_id for e in await scope.episodes.scroll(scope.owner, _compressed_from(self.episode_id))]
        deleted = await scope.episodes.delete(scope.owner, [self.episode_id, *compressed])
        removed = {"passages": deleted.passages}
        if compressed:
            removed["compressed_episodes"] = len(compressed)
        return removed

    async def verify(self) -> dict[str, int]:
        scope = self.scope
        episodes, owner = scope.episodes, scope.owner
        problems: list[str] = []
        if await episodes.count(owner, SearchFilter(ids=[self.episode_id])):
            problems.append("episode point")
        if await episodes.count_passages(owner, SearchFilter(match={"episode_id": self.episode_id})):
            problems.append("passages")
        if await episodes.count(owner, _compressed_from(self.episode_id)):
            problems.append("compressed summary")
        if await scope.facts.count(owner, SearchFilter(match={"episode_ids": self.episode_id})):
            problems.append("fact provenance")
        if self.session_ids:
            left = await scope.count_messages(
                scope.subjects.session_stream, scope.session_subject, self._of_its_sessions, upto_seq=self.cut
            )
            if left:
                problems.append(f"{left} raw session messages")
        if problems:
            raise ErasureIncomplete(f"erased episode {self.episode_id} is still present: {', '.join(problems)}")
        return {}
