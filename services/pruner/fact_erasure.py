"""The steps that erase one fact. The fact is found in text by its value and its sentence (the
needles, see `logic`): every raw session stating it is replaced by a redacted copy the summariser
rebuilds its episode from, and every event, dead letter, point and entity still naming it goes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from contracts import ErasureRequested, SessionCompleted
from services.common.domain.ids import deterministic_uuid
from services.common.stores.erasure import delete_message, stream_messages
from services.common.stores.vector.port import SearchFilter
from services.pruner.erasure_steps import (
    ErasureIncomplete,
    ErasureProgress,
    ErasureScope,
    MessageMatch,
    Step,
    graph_counts,
    json_or_text,
    point_mentions,
    user_entities_mentioning,
    with_inner_payload,
)
from services.pruner.logic import (
    Needle,
    add_counts,
    fact_needles,
    make_needle,
    redact_session,
    session_mentions,
    value_mentions,
)

log = logging.getLogger(__name__)


async def fact_needles_of(scope: ErasureScope, fact_id: str, progress: ErasureProgress) -> list[Needle]:
    """What to search for, recorded in the progress with the fact's sessions: the fact point is
    deleted along the way, and a resumed erasure must still know what it was looking for."""
    stored = await scope.facts.get(scope.owner, [fact_id])
    if stored:
        fact = stored[0].fact
        found = fact_needles(fact.value, fact.text)
        progress.needles = sorted({*(progress.needles or []), *(needle.text for needle in found)})
        fact_sessions = [p.session_id for p in fact.provenance if p.session_id]
        progress.session_ids = sorted({*progress.session_ids, *fact_sessions})
    elif progress.needles is None:
        # No user id (nor memory text) at WARNING: the fact id joins the request's records.
        log.warning("fact %s of tenant %s not found: nothing to erase", fact_id, scope.owner.tenant_id)
        progress.needles = []
    return [needle for needle in (make_needle(text) for text in progress.needles) if needle is not None]


def _parse_session(data: bytes | None) -> SessionCompleted | None:
    try:
        return SessionCompleted.model_validate_json(data or b"")
    except ValueError as exc:
        log.warning("unreadable raw session message skipped by fact erasure: %s", exc)
        return None


@dataclass(frozen=True)
class FactErasure:
    """One fact goes, with every statement of it the pipeline derived or stored."""

    scope: ErasureScope
    event: ErasureRequested
    fact_id: str
    needles: Sequence[Needle]
    provenance_sessions: frozenset[str]

    def steps(self) -> list[Step]:
        return [
            ("sessions", self.sessions),
            ("derived_events", self.derived_events),
            ("dead_letters", self.dead_letters),
            ("vectors", self.vectors),
            ("graph", self.graph_entities),
            ("verify", self.verify),
        ]

    def _derived_mention(self, subject: str, data: object) -> bool:
        return not self.scope.is_erasure_record(subject) and value_mentions(data, self.needles)

    def _dead_letter_mention(self, _subject: str, data: object) -> bool:
        return value_mentions(with_inner_payload(data), self.needles)

    # ---- raw sessions -------------------------------------------------------------------------

    async def sessions(self) -> dict[str, int]:
        """Replace every raw session that states the fact by a redacted copy (new event id, same
        session id), after removing the episode built from the original, so the episodic-summarizer
        rebuilds the episode from the remaining raw text — never from the old summary."""
        scope = self.scope
        removed: dict[str, int] = {}
        matched_sessions: set[str] = set()
        if not self.needles:
            return removed
        async for message in stream_messages(scope.js(), scope.subjects.session_stream, scope.session_subject):
            session = _parse_session(message.data)
            if session is None or message.seq is None or not session_mentions(session, self.needles):
                continue
            matched_sessions.add(session.session_id)
            add_counts(removed, await self._replace_session(session, message.seq))
        unmatched = self.provenance_sessions - matched_sessions
        if unmatched:
            # Already redacted by an earlier delivery, or the statement is not literally in the text.
            log.info(
                "fact erasure %s: provenance sessions without a literal mention: %s", self.event.event_id, unmatched
            )
        return removed

    async def _replace_session(self, session: SessionCompleted, seq: int) -> dict[str, int]:
        """The redacted copy (or nothing, when no turn is left) in place of the raw session at `seq`."""
        scope = self.scope
        removed: dict[str, int] = {}
        redacted_id = deterministic_uuid("redacted-session", str(session.event_id), str(self.event.event_id))
        redacted = redact_session(session, self.needles, redacted_id)
        # The episode built from the original goes first (vectors and its graph contribution);
        # one already rebuilt from the redacted copy (a resumed run) stays.
        built = await scope.episodes.scroll(scope.owner, SearchFilter(match={"session_id": session.session_id}), 100)
        stale = [episode.episode_id for episode in built if episode.source_event_id != str(redacted_id)]
        add_counts(removed, await self._delete_episodes_with_graph(stale))
        if redacted is not None:
            await scope.publisher.publish(
                redacted, scope.session_subject, msg_id=str(redacted_id), stream=scope.subjects.session_stream
            )
            add_counts(removed, {"sessions_rebuilt": 1})
        else:
            add_counts(removed, {"sessions_emptied": 1})
        if await delete_message(scope.js(), scope.subjects.session_stream, seq):
            add_counts(removed, {"session_messages": 1})
        return removed

    async def _delete_episodes_with_graph(self, episode_ids: list[str]) -> dict[str, int]:
        scope = self.scope
        removed: dict[str, int] = {}
        for episode_id in episode_ids:
            add_counts(removed, graph_counts(await scope.graph.delete_episode(scope.owner, episode_id)))
        passages = (await scope.episodes.delete(scope.owner, episode_ids)).passages
        return add_counts(removed, {"passages": passages, "episodes": len(episode_ids)})

    # ---- derived data -------------------------------------------------------------------------

    async def derived_events(self) -> dict[str, int]:
        scope = self.scope
        removed = await scope.delete_messages(
            scope.subjects.derived_stream, scope.derived_filter, self._derived_mention
        )
        return {"derived_events": removed}

    async def dead_letters(self) -> dict[str, int]:
        scope = self.scope
        removed = await scope.delete_messages(
            scope.subjects.dead_letter_stream, scope.dead_letter_filter, self._dead_letter_mention
        )
        return {"dead_letters": removed}

    async def vectors(self) -> dict[str, int]:
        scope = self.scope
        owner = scope.owner
        texts = await scope.texts()
        stale = [point.point_id for point in texts["episodes"] if point_mentions(point, self.needles)]
        stale_passages = [point.point_id for point in texts["passages"] if point_mentions(point, self.needles)]
        removed = await self._delete_episodes_with_graph(stale)
        if stale_passages:
            add_counts(removed, {"passages": await scope.episodes.delete_passages(owner, stale_passages)})
        # Other facts stated in the removed sentences lost their source too; the erased fact goes last.
        doomed = [p.point_id for p in texts["facts"] if p.point_id != self.fact_id and point_mentions(p, self.needles)]
        if doomed:
            add_counts(removed, {"facts": await scope.facts.delete(owner, doomed)})
        add_counts(removed, {"facts": await scope.facts.delete(owner, [self.fact_id])})
        return removed

    async def graph_entities(self) -> dict[str, int]:
        # Normally nothing is left here (the episodes behind the statement were removed with their
        # sessions); this catches an extraction that ran concurrently with the steps above.
        scope = self.scope
        removed: dict[str, int] = {}
        for entity in await user_entities_mentioning(scope.graph, scope.owner, self.needles):
            log.warning(  # the entity's name is the erased text itself: never logged
                "fact erasure %s: an entity still names the erased text; removing episodes %s from the graph",
                self.event.event_id,
                list(entity.episode_ids),
            )
            for episode_id in entity.episode_ids:
                add_counts(removed, graph_counts(await scope.graph.delete_episode(scope.owner, episode_id)))
        return removed

    # ---- verification -------------------------------------------------------------------------

    async def verify(self) -> dict[str, int]:
        problems = await self._stored_traces()
        if self.needles:
            problems += await self._stream_traces()
            for entity in await user_entities_mentioning(self.scope.graph, self.scope.owner, self.needles):
                problems.append(f"graph entity {entity.name!r} ({entity.key})")
        if problems:
            raise ErasureIncomplete(f"erased fact {self.fact_id} is still present: {'; '.join(problems)}")
        return {}

    async def _stored_traces(self) -> list[str]:
        scope = self.scope
        problems: list[str] = []
        if await scope.facts.count(scope.owner, SearchFilter(ids=[self.fact_id])):
            problems.append(f"fact point {self.fact_id}")
        for collection, points in (await scope.texts()).items():
            left = [point.point_id for point in points if point_mentions(point, self.needles)]
            if left:
                problems.append(f"{collection} {left[:5]}")
        return problems

    async def _stream_traces(self) -> list[str]:
        scope = self.scope
        checks: list[tuple[str, str, MessageMatch]] = [
            (
                scope.subjects.session_stream,
                scope.session_subject,
                lambda _subject, data: value_mentions(data, self.needles),
            ),
            (scope.subjects.derived_stream, scope.derived_filter, self._derived_mention),
            (scope.subjects.dead_letter_stream, scope.dead_letter_filter, self._dead_letter_mention),
        ]
        problems: list[str] = []
        for stream, subject_filter, matches in checks:
            left_seqs = [
                message.seq
                async for message in stream_messages(scope.js(), stream, subject_filter)
                if matches(message.subject or "", json_or_text(message.data))
            ]
            if left_seqs:
                problems.append(f"{stream} messages {left_seqs[:5]}")
        return problems


async def fact_erasure(scope: ErasureScope, event: ErasureRequested, progress: ErasureProgress) -> FactErasure:
    fact_id = str(event.target.item_id)
    needles = await fact_needles_of(scope, fact_id, progress)
    return FactErasure(scope, event, fact_id, needles, frozenset(progress.session_ids))
