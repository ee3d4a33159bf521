"""The steps that erase one fact: one redaction per place a value can reach (`PLACES` in
`services/common/stores/value_places`), in that list's order, then a verification that searches every
place again with the same finders (after the raw sessions and before the verification, the erasure
waits for the user's writers in flight: see `FactErasure.steps`). A place without a redaction here
stops the erasure before it starts, so a store added to the list cannot be forgotten.

What is searched for is the fact's value, its sentence and the graph's names for the value (the
needles, see `value_needles`): every raw session stating it is replaced by a redacted copy the
summariser rebuilds its episode from (both roles: the assistant's echo goes too), and every event,
dead letter, point, keyword vector and entity still naming it goes.

What the user said after the request was accepted is left alone (`erasure_cut`): a request carries the
session stream's sequence at its 202, and sessions above it, with everything derived from them, are
kept, though they state the value again. A request without that cut redacts every session."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from contracts import ErasureRequested, SessionCompleted
from services.common.domain.ids import owned_uuid, owner_message_id
from services.common.domain.value_text import text_mentions
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.erasure import delete_message, stream_messages
from services.common.stores.facts import StoredFact
from services.common.stores.value_places import (
    PLACES,
    PlaceStores,
    entities_naming,
    json_or_text,
    open_session_store,
)
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, SearchFilter
from services.pruner.erasure_cut import AfterCut, after_cut, early_part
from services.pruner.erasure_steps import (
    ErasureIncomplete,
    ErasureProgress,
    ErasureScope,
    Step,
    graph_counts,
)
from services.pruner.logic import Needle, add_counts, redact_session
from services.pruner.open_session_redaction import redact_early_turns, redact_open_record
from services.pruner.value_needles import fact_needles_of

log = logging.getLogger(__name__)

Redactor = Callable[[], Awaitable[dict[str, int]]]


def _parse_session(data: bytes | None) -> SessionCompleted | None:
    try:
        return SessionCompleted.model_validate_json(data or b"")
    except ValueError as exc:
        log.warning("unreadable raw session message skipped by fact erasure: %s", exc)
        return None


@dataclass(frozen=True)
class FactErasure:
    """One fact goes, with its value wherever it reached."""

    scope: ErasureScope
    stores: PlaceStores
    event: ErasureRequested
    fact_id: str
    needles: Sequence[Needle]
    provenance_sessions: frozenset[str]

    def redactors(self) -> dict[str, Redactor]:
        return {
            "open_sessions": self.open_sessions,
            "sessions": self.sessions,
            "derived_events": self.derived_events,
            "dead_letters": self.dead_letters,
            "episodes": self.episodes,
            "passages": self.passages,
            "facts": self.facts,
            "keywords": self.keywords,
            "graph": self.graph_entities,
            # The erasure's own working copy: cleared by the runner when the erasure completes.
            "erasure_progress": self.nothing,
        }

    @property
    def cut(self) -> int | None:
        """The session stream's sequence when the request was accepted (None: a request without one)."""
        return self.event.session_cut

    async def lineage(self) -> AfterCut | None:
        """What is left alone, read again at every step: later sessions keep arriving meanwhile."""
        if self.cut is None:
            return None
        scope = self.scope
        return await after_cut(scope.js(), scope.subjects, scope.owner, self.cut, self.event.requested_at, self.needles)

    def steps(self) -> list[Step]:
        redactors = self.redactors()
        missing = [place.name for place in PLACES if place.name not in redactors]
        if missing:
            raise RuntimeError(f"no redaction for the places {missing}: a fact erasure would leave its value there")
        steps: list[Step] = [(place.name, redactors[place.name]) for place in PLACES]
        # Right after the raw sessions are replaced: a writer still consolidating one of them either
        # drops its work (it is no longer in the stream) or is waited for here, and what it wrote is
        # then found by the steps below.
        steps.insert(1 + [name for name, _ in steps].index("sessions"), ("drain", self.drain))
        # Before verifying: a writer of a later session that read the fact before the steps rewrote
        # it (the restated fact has the erased one's id) has written it back by now, and the
        # verification sees what it wrote.
        return [*steps, ("last_drain", self.drain), ("verify", self.verify)]

    async def _find(self, name: str) -> list[str]:
        place = next(place for place in PLACES if place.name == name)
        if not self.needles:
            return []
        return await place.find(replace(self.stores, spared=await self.lineage()), self.scope.owner, self.needles)

    async def nothing(self) -> dict[str, int]:
        return {}

    async def drain(self) -> dict[str, int]:
        return await self.scope.drain_writers()

    # ---- open sessions ------------------------------------------------------------------------

    async def open_sessions(self) -> dict[str, int]:
        """Redact the turns of the user's still-open per-turn sessions (both roles, names, and the
        metadata) that state the value and were appended before the request was accepted, by
        compare-and-set, so the session completes without them; turns appended after it are kept."""
        store = await open_session_store(self.stores.js, self.stores.subjects)
        if store is None or not self.needles:
            return {}
        removed: dict[str, int] = {}
        lineage = await self.lineage()
        for key in await store.keys(self.scope.owner):
            redacted = await store.redact(key, lambda record: redact_open_record(record, self.needles, lineage))
            if redacted is not None:
                add_counts(removed, {"open_sessions_redacted": 1})
        return removed

    # ---- raw sessions -------------------------------------------------------------------------

    async def sessions(self) -> dict[str, int]:
        """Replace every raw session that mentions the value (in any role's message, a name or the
        metadata) by a redacted copy (new event id, same session id), after removing the episode built
        from the original, so the episodic-summarizer rebuilds the episode from the remaining raw text —
        never from the old summary."""
        scope = self.scope
        removed: dict[str, int] = {}
        matched_sessions: set[str] = set()
        if not self.needles:
            return removed
        lineage = await self.lineage()
        async for message in stream_messages(scope.js(), scope.subjects.session_stream, scope.session_subject):
            if message.seq is None:
                continue
            data = json_or_text(message.data)
            # A per-turn session completed after the request with turns appended before it: only
            # those turns are redacted.
            early = lineage.early_flags(data) if lineage is not None else None
            if self.cut is not None and message.seq > self.cut and early is None:
                continue  # accepted after the request: the user said it again
            if not text_mentions(data if early is None else early_part(data, early), self.needles):
                continue
            session = _parse_session(message.data)
            if session is None:
                if await delete_message(scope.js(), scope.subjects.session_stream, message.seq):
                    add_counts(removed, {"session_messages": 1})
                continue
            matched_sessions.add(session.session_id)
            add_counts(removed, await self._replace_session(session, message.seq, early))
        unmatched = self.provenance_sessions - matched_sessions
        if unmatched:
            # Already redacted by an earlier delivery, or the statement is not literally in the text.
            log.info(
                "fact erasure %s: provenance sessions without a literal mention: %s", self.event.event_id, unmatched
            )
        return removed

    async def _replace_session(
        self, session: SessionCompleted, seq: int, early: Sequence[bool] | None = None
    ) -> dict[str, int]:
        """The redacted copy (or nothing, when no turn is left) in place of the raw session at `seq`
        (with `early`: only the turns flagged there are redacted)."""
        scope = self.scope
        removed: dict[str, int] = {}
        redacted_id = owned_uuid(scope.owner, "redacted-session", str(session.event_id), str(self.event.event_id))
        if early is None:
            redacted = redact_session(session, self.needles, redacted_id)
        else:
            redacted = redact_early_turns(session, self.needles, early, redacted_id)
        # The episode built from the original goes first (vectors and its graph contribution);
        # one already rebuilt from the redacted copy (a resumed run) stays.
        built = await scope.episodes.scroll(scope.owner, SearchFilter(match={"session_id": session.session_id}), 100)
        stale = [episode.episode_id for episode in built if episode.source_event_id != str(redacted_id)]
        add_counts(removed, await self._delete_episodes_with_graph(stale))
        if redacted is not None:
            await scope.publisher.publish(
                redacted,
                scope.session_subject,
                msg_id=owner_message_id(scope.owner, "session", redacted_id),
                stream=scope.subjects.session_stream,
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
        if not episode_ids:
            return removed
        for episode_id in episode_ids:
            add_counts(removed, graph_counts(await scope.graph.delete_episode(scope.owner, episode_id)))
        passages = (await scope.episodes.delete(scope.owner, episode_ids)).passages
        return add_counts(removed, {"passages": passages, "episodes": len(episode_ids)})

    # ---- derived data -------------------------------------------------------------------------

    async def derived_events(self) -> dict[str, int]:
        seqs = await self._find("derived_events")
        return {"derived_events": await self._delete_seqs(self.scope.subjects.derived_stream, seqs)}

    async def dead_letters(self) -> dict[str, int]:
        seqs = await self._find("dead_letters")
        return {"dead_letters": await self._delete_seqs(self.scope.subjects.dead_letter_stream, seqs)}

    async def _delete_seqs(self, stream: str, seqs: Sequence[str]) -> int:
        js = self.scope.js()
        return sum([int(await delete_message(js, stream, int(seq))) for seq in seqs])

    async def episodes(self) -> dict[str, int]:
        return await self._delete_episodes_with_graph(await self._find("episodes"))

    async def passages(self) -> dict[str, int]:
        stale = await self._find("passages")
        return {"passages": await self.scope.episodes.delete_passages(self.scope.owner, stale)} if stale else {}

    async def facts(self) -> dict[str, int]:
        """Other facts stating the value lost their source too; the erased fact goes last. A fact also
        observed after the cut (the user said it again; its id is the same, as the statement is) stays
        with those observations only."""
        scope = self.scope
        lineage = await self.lineage()
        doomed = [point_id for point_id in await self._find("facts") if point_id != self.fact_id]
        removed: dict[str, int] = {}
        for stored in await scope.facts.get(scope.owner, [*doomed, self.fact_id]):
            kept = lineage.kept_observations(stored.fact.provenance) if lineage is not None else []
            if kept and len(kept) < len(stored.fact.provenance):
                await self._keep_only(stored, kept)
                add_counts(removed, {"facts_updated": 1})
            elif not kept:
                add_counts(removed, {"facts": await scope.facts.delete(scope.owner, [stored.fact_id])})
        # An unreadable point naming the value goes too.
        readable = {stored.fact_id for stored in await scope.facts.get(scope.owner, doomed)}
        unreadable = [point_id for point_id in doomed if point_id not in readable]
        if unreadable:
            add_counts(removed, {"facts": await scope.facts.delete(scope.owner, unreadable)})
        return removed

    async def _keep_only(self, stored: StoredFact, observations: Sequence[object]) -> None:
        fact = stored.fact
        updated = fact.model_copy(update={"provenance": list(observations), "evidence_count": len(observations)})
        await self.scope.facts.rewrite(
            self.scope.owner, replace(stored, fact=updated, channels=stored.channels or ("private",))
        )

    async def keywords(self) -> dict[str, int]:
        """Points whose keyword vector still holds every term of a needle (their text was already
        searched: this is the index itself)."""
        by_collection: dict[str, list[str]] = {}
        for hit in await self._find("keywords"):
            collection, _, point_id = hit.partition(":")
            by_collection.setdefault(collection, []).append(point_id)
        scope = self.scope
        removed = await self._delete_episodes_with_graph(by_collection.get(EPISODES, []))
        if by_collection.get(PASSAGES):
            add_counts(
                removed, {"passages": await scope.episodes.delete_passages(scope.owner, by_collection[PASSAGES])}
            )
        if by_collection.get(FACTS):
            add_counts(removed, {"facts": await scope.facts.delete(scope.owner, by_collection[FACTS])})
        return removed

    async def graph_entities(self) -> dict[str, int]:
        """Entities named by the value (a merged alias included) lose every episode of the user that
        supports them, and with the last one the user's contribution: a personal node goes, a shared
        one keeps only what other users contributed. Normally the episodes went with their sessions
        above; this catches an entity whose episode did not state the value literally, and an
        extraction that ran concurrently with the steps above."""
        scope = self.scope
        lineage = await self.lineage()
        kept = lineage.episodes if lineage is not None else frozenset()
        removed: dict[str, int] = {}
        for entity in await entities_naming(scope.graph, scope.owner, self.needles, scope.scan_limit):
            earlier = [episode_id for episode_id in entity.episode_ids if episode_id not in kept]
            if not earlier:
                continue  # named only by what the user said after the request
            log.warning(  # the entity's name is the erased text itself: never logged
                "fact erasure %s: an entity still names the erased text; removing episodes %s from the graph",
                self.event.event_id,
                earlier,
            )
            for episode_id in earlier:
                add_counts(removed, graph_counts(await scope.graph.delete_episode(scope.owner, episode_id)))
        return removed

    # ---- verification -------------------------------------------------------------------------

    async def _target_gone_or_kept(self) -> bool:
        """The erased fact's point is gone, or holds only what the user stated after the cut."""
        scope = self.scope
        if not await scope.facts.count(scope.owner, SearchFilter(ids=[self.fact_id])):
            return True
        lineage = await self.lineage()
        readable = await scope.facts.get(scope.owner, [self.fact_id])
        return bool(readable) and lineage is not None and lineage.fact_is_kept(readable[0].fact.provenance)

    async def verify(self) -> dict[str, int]:
        """Every place searched again with the audit's own finders."""
        problems: list[str] = []
        if not await self._target_gone_or_kept():
            problems.append(f"fact point {self.fact_id}")
        for place in PLACES:
            if place.erasure_working_copy:
                continue
            left = await self._find(place.name)
            if left:
                problems.append(f"{place.name} {left[:5]}")
        if problems:
            raise ErasureIncomplete(f"erased fact {self.fact_id} is still present: {'; '.join(problems)}")
        return {}


async def fact_erasure(
    scope: ErasureScope, event: ErasureRequested, progress: ErasureProgress, keywords: KeywordEncoder
) -> FactErasure:
    fact_id = str(event.target.item_id)
    needles = await fact_needles_of(scope, fact_id, progress)
    stores = PlaceStores(
        subjects=scope.subjects,
        js=scope.js(),
        index=scope.index,
        graph=scope.graph,
        keywords=keywords,
        scan_limit=scope.scan_limit,
    )
    return FactErasure(scope, stores, event, fact_id, needles, frozenset(progress.session_ids))
