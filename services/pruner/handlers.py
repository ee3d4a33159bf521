"""Handlers of the pruner: the scheduled prune pass, the erasure consumer, and the control requests
(`tiermem prune --now`, `tiermem audit`) a running pruner answers.

Erasure is a list of steps. Every step is idempotent and the whole list is re-run on a redelivery,
so a worker that crashes anywhere is finished by the next delivery; the message is acked only after
the last step. The steps run upstream first (raw sessions, then derived events, then the stores),
so nothing still queued can re-derive what was just removed, and they end with a verification that
raises (→ retry, finally a dead letter with the reason) when a trace remains. A progress record in a
JetStream key-value bucket keeps the counts across deliveries, and what a fact erasure searches for,
since the fact point itself is deleted along the way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts import ErasureCompleted, ErasureRequested, SessionCompleted, Subjects
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.runtime.broker import (
    ConsumerSpec,
    Delivery,
    PoisonMessage,
    connect_nats,
    describe_error,
    durable_subscriber,
)
from services.common.runtime.resources import ServiceContext
from services.common.runtime.service import ServiceDefinition
from services.common.stores.erasure import (
    CONTROL_QUEUE,
    ERASURE_RECORD_KINDS,
    AuditRequest,
    ControlReply,
    audit_user,
    control_subject,
    delete_message,
    purge_subject,
    stream_messages,
    subject_counts,
    subject_kind,
    user_derived_filter,
)
from services.common.stores.fact_store import fact_from_payload, fact_payload
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, SearchFilter, StoredRecord
from services.pruner.logic import (
    Clock,
    Needle,
    PrunePolicy,
    PruneReport,
    add_counts,
    fact_needles,
    make_needle,
    passage_expired,
    plan_episode_prune,
    redact_session,
    seconds_until_next_pass,
    session_mentions,
    superseded_fact_due,
    utc_now,
    value_mentions,
)
from services.pruner.settings import PrunerSettings

if TYPE_CHECKING:
    from services.common.stores.graph.repository import EntityRecord, GraphRepository
    from services.common.stores.vector.port import VectorIndex

log = logging.getLogger(__name__)

NAME = "pruner"
ERASURE_DURABLE = "pruner-erasure"

StepHook = Callable[[str], Awaitable[None]]
"""Called after each erasure step with the step's name (tests use it to crash mid-erasure)."""

_INCLUSIVE_MARGIN = timedelta(milliseconds=1)

# Payload keys of episodes, passages and facts that hold text a search can return.
_TEXT_KEYS = ("summary", "abstract", "entity_names", "text", "value", "subject")


def consumers(subjects: Subjects) -> Sequence[ConsumerSpec]:
    return [
        ConsumerSpec(
            durable=ERASURE_DURABLE,
            stream=subjects.derived_stream,
            filter_subjects=(subjects.all_of("erasure.requested"),),
            description="Erases a user, a fact or an episode from every store.",
        )
    ]


# --------------------------------------------------------------------------------------------------
# The prune pass


def prune_policy(settings: PrunerSettings) -> PrunePolicy:
    return PrunePolicy.from_days(settings.unrecalled_max_age_days, settings.superseded_grace_days)


async def _delete_episodes(index: VectorIndex, owner: Owner, episode_ids: Sequence[str]) -> int:
    """Passages first, the episode last: a crash in between leaves the episode to be found again."""
    if not episode_ids:
        return 0
    passages = await index.delete(PASSAGES, owner, SearchFilter(match={"episode_id": list(episode_ids)}))
    await index.delete(EPISODES, owner, SearchFilter(ids=list(episode_ids)))
    return passages


async def _prune_owner(
    index: VectorIndex, owner: Owner, now: datetime, policy: PrunePolicy, settings: PrunerSettings
) -> tuple[dict[str, int], bool]:
    """Apply every rule to one owner; returns the counts and whether a scan hit the scan limit."""
    removed: dict[str, int] = {}
    page_size = settings.prune_page_size
    truncated = False

    # Store time windows are half-open ([after, before)); expiry is inclusive, hence the margin. The
    # rules re-check every point, so the margin can only make a page return a point that stays.
    until = now + _INCLUSIVE_MARGIN

    # Expired episodes. Every page holds only expired points, so each round shrinks the set.
    while True:
        page = await index.scroll(EPISODES, owner, SearchFilter(before=until, time_field="expires_at_ts"), page_size)
        planned = plan_episode_prune(((record.id, record.payload) for record in page), now, policy)
        if not planned:
            break
        add_counts(removed, _tally(planned.values()))
        add_counts(removed, {"passages": await _delete_episodes(index, owner, list(planned))})
        if len(page) < page_size:
            break

    # Never recalled (or not for a long time): old enough by session time, then checked in full.
    if policy.unrecalled_max_age is not None:
        cutoff = now - policy.unrecalled_max_age
        candidates = await index.scroll(
            EPISODES,
            owner,
            SearchFilter(before=cutoff + _INCLUSIVE_MARGIN, time_field="occurred_at_ts"),
            settings.scan_limit,
        )
        truncated = truncated or len(candidates) >= settings.scan_limit
        planned = plan_episode_prune(((record.id, record.payload) for record in candidates), now, policy)
        ids = list(planned)
        for start in range(0, len(ids), page_size):
            chunk = ids[start : start + page_size]
            add_counts(removed, _tally(planned[episode_id] for episode_id in chunk))
            add_counts(removed, {"passages": await _delete_episodes(index, owner, chunk)})

    # Passages whose episode is gone (a crash between the two deletes), past their TTL.
    while True:
        page = await index.scroll(PASSAGES, owner, SearchFilter(before=until, time_field="expires_at_ts"), page_size)
        expired = [record.id for record in page if passage_expired(record.payload, now)]
        if not expired:
            break
        add_counts(removed, {"passages": await index.delete(PASSAGES, owner, SearchFilter(ids=expired))})
        if len(page) < page_size:
            break

    # Superseded fact versions past the grace period. Current facts are never candidates.
    cutoff = now - policy.superseded_grace
    while True:
        page = await index.scroll(
            FACTS, owner, SearchFilter(before=cutoff + _INCLUSIVE_MARGIN, time_field="valid_to_ts"), page_size
        )
        due = [record.id for record in page if superseded_fact_due(record.payload, now, policy)]
        if not due:
            break
        add_counts(removed, {"facts_superseded": await index.delete(FACTS, owner, SearchFilter(ids=due))})
        if len(page) < page_size:
            break
    return removed, truncated


def _tally(verdicts: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[f"episodes_{verdict}"] = counts.get(f"episodes_{verdict}", 0) + 1
    return counts


async def run_prune_pass(index: VectorIndex, settings: PrunerSettings, now: datetime) -> PruneReport:
    """One pass over every owner of the vector collections, evaluated at `now`. The graph is the
    semantic tier and is never pruned; neither are current facts."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    started = datetime.now(UTC)
    policy = prune_policy(settings)
    owners: set[Owner] = set()
    for collection in (EPISODES, PASSAGES, FACTS):
        owners.update(await index.list_owners(collection))
    removed = {"episodes_expired": 0, "episodes_unrecalled": 0, "passages": 0, "facts_superseded": 0}
    truncated: list[str] = []
    for owner in sorted(owners, key=lambda o: (o.tenant_id, o.user_id)):
        counts, owner_truncated = await _prune_owner(index, owner, now, policy, settings)
        add_counts(removed, counts)
        if owner_truncated:
            truncated.append(f"{owner.tenant_id}/{owner.user_id}")
    return PruneReport(
        event_id=deterministic_uuid("prune-completed", now.isoformat()),
        now=now,
        started_at=started,
        finished_at=datetime.now(UTC),
        owners_scanned=len(owners),
        removed=removed,
        truncated_owners=truncated,
    )


async def prune_once(ctx: ServiceContext[PrunerSettings], now: datetime) -> PruneReport:
    """Run one pass and report it: a log line, counters on the context, and a PruneReport event on
    `prune_completed()` in the derived stream."""
    index = await ctx.resources.vector_index()
    report = await run_prune_pass(index, ctx.settings, now)
    for name, count in report.removed.items():
        ctx.count(f"pruned_{name}", count)
    ctx.count("prune_passes")
    await ctx.publisher.publish(
        report, ctx.subjects.prune_completed(), msg_id=str(report.event_id), stream=ctx.subjects.derived_stream
    )
    log.info(
        "prune pass at %s: %s over %d owners in %.1fs%s",
        now.isoformat(),
        ", ".join(f"{name}={count}" for name, count in report.removed.items()),
        report.owners_scanned,
        (report.finished_at - report.started_at).total_seconds(),
        f"; scan limit hit for {', '.join(report.truncated_owners)}" if report.truncated_owners else "",
    )
    if report.truncated_owners:
        log.warning("prune scan limit (%d) reached for %s", ctx.settings.scan_limit, report.truncated_owners)
    return report


# --------------------------------------------------------------------------------------------------
# Erasure


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


class ProgressStore:
    """Erasure progress records in a JetStream key-value bucket, one key per request."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, settings: PrunerSettings) -> None:
        self._js = js
        dlq = subjects.dead_letter_stream
        self.bucket = (dlq.removesuffix("_DLQ") if dlq.endswith("_DLQ") else dlq) + "_ERASURE"
        self._ttl_s = settings.erasure_progress_ttl_hours * 3600
        self._replicas = settings.nats.replicas
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self.bucket)
            except BucketNotFoundError:
                self._kv = await self._js.create_key_value(
                    js_api.KeyValueConfig(
                        bucket=self.bucket,
                        description="Progress of erasures, so a crashed one resumes with its counts.",
                        ttl=self._ttl_s,
                        replicas=self._replicas,
                        storage=js_api.StorageType.FILE,
                    )
                )
        return self._kv

    async def load(self, key: str) -> ErasureProgress:
        kv = await self._bucket()
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return ErasureProgress()
        if not entry.value:
            return ErasureProgress()
        return ErasureProgress.model_validate_json(entry.value)

    async def save(self, key: str, progress: ErasureProgress) -> None:
        kv = await self._bucket()
        await kv.put(key, progress.model_dump_json().encode("utf-8"))


Step = tuple[str, Callable[[], Awaitable[dict[str, int]]]]


class ErasureRunner:
    """Carries out ErasureRequested events for one service context."""

    def __init__(
        self,
        ctx: ServiceContext[PrunerSettings],
        js: Callable[[], JetStreamContext],
        *,
        clock: Clock = utc_now,
        after_step: StepHook | None = None,
    ) -> None:
        self._ctx = ctx
        self._js_factory = js
        self._clock = clock
        self._after_step = after_step
        self._progress: ProgressStore | None = None

    @property
    def subjects(self) -> Subjects:
        return self._ctx.subjects

    @property
    def settings(self) -> PrunerSettings:
        return self._ctx.settings

    def _js(self) -> JetStreamContext:
        return self._js_factory()

    def _progress_store(self) -> ProgressStore:
        if self._progress is None:
            self._progress = ProgressStore(self._js(), self.subjects, self.settings)
        return self._progress

    async def handle(self, event: ErasureRequested, delivery: Delivery) -> None:
        tokens = self.subjects.tokens_from(delivery.subject)
        if tokens != (event.tenant_id, event.user_id):
            raise PoisonMessage(
                f"erasure request for {event.tenant_id}/{event.user_id} arrived on subject {delivery.subject}"
            )
        item_id = event.target.item_id
        if item_id is not None and not _is_uuid(item_id):
            raise PoisonMessage(f"{event.target.kind} id {item_id!r} is not a UUID: no such {event.target.kind} exists")
        owner = Owner(event.tenant_id, event.user_id)
        key = str(event.event_id)
        store = self._progress_store()
        progress = await store.load(key)
        if progress.completed is not None:
            # Done before, but the ack was lost: publish the same record again (de-duplicated).
            await self._publish_completed(ErasureCompleted.model_validate_json(progress.completed))
            return
        progress.deliveries += 1
        index = await self._ctx.resources.vector_index()
        graph = await self._ctx.resources.graph()
        if event.target.kind == "user":
            steps = self._user_steps(owner, index, graph)
        elif event.target.kind == "fact":
            assert event.target.item_id is not None  # the contract requires it
            steps = await self._fact_steps(event, owner, index, graph, progress)
        else:
            assert event.target.item_id is not None
            steps = await self._episode_steps(owner, event.target.item_id, index, graph, progress)
        await store.save(key, progress)
        for name, step in steps:
            counts = await step()
            add_counts(progress.removed, counts)
            progress.steps_done.append(name)
            await store.save(key, progress)
            await delivery.in_progress()
            if self._after_step is not None:
                await self._after_step(name)
        completed = ErasureCompleted(
            event_id=deterministic_uuid("erasure-completed", key),
            request_event_id=event.event_id,
            tenant_id=event.tenant_id,
            user_id=event.user_id,
            target=event.target,
            completed_at=self._clock(),
            removed=dict(sorted(progress.removed.items())),
        )
        progress.completed = completed.model_dump_json()
        await store.save(key, progress)
        await self._publish_completed(completed)
        self._ctx.count(f"erasures_{event.target.kind}")
        log.info(
            "erased %s %s of %s/%s after %d deliveries: %s",
            event.target.kind,
            event.target.item_id or "",
            event.tenant_id,
            event.user_id,
            progress.deliveries,
            completed.removed,
        )

    async def _publish_completed(self, completed: ErasureCompleted) -> None:
        await self._ctx.publisher.publish(
            completed,
            self.subjects.erasure_completed(completed.tenant_id, completed.user_id),
            msg_id=str(completed.event_id),
            stream=self.subjects.derived_stream,
        )

    # ---- whole user ---------------------------------------------------------------------------

    def _user_steps(self, owner: Owner, index: VectorIndex, graph: GraphRepository) -> list[Step]:
        subjects = self.subjects

        async def session_stream() -> dict[str, int]:
            subject = subjects.session_completed(owner.tenant_id, owner.user_id)
            return {"session_messages": await purge_subject(self._js(), subjects.session_stream, subject)}

        async def derived_events() -> dict[str, int]:
            # Per subject, never by wildcard: the erasure request being handled must survive until acked.
            js = self._js()
            purged = 0
            counts = await subject_counts(
                js, subjects.derived_stream, user_derived_filter(subjects, owner.tenant_id, owner.user_id)
            )
            for subject in counts:
                if subject_kind(subjects, subject) not in ERASURE_RECORD_KINDS:
                    purged += await purge_subject(js, subjects.derived_stream, subject)
            return {"derived_events": purged}

        async def dead_letters() -> dict[str, int]:
            subject = subjects.user_dead_letters(owner.tenant_id, owner.user_id)
            return {"dead_letters": await purge_subject(self._js(), subjects.dead_letter_stream, subject)}

        async def vectors() -> dict[str, int]:
            return {
                "passages": await index.delete(PASSAGES, owner),
                "episodes": await index.delete(EPISODES, owner),
                "facts": await index.delete(FACTS, owner),
            }

        async def graph_data() -> dict[str, int]:
            counts = await graph.delete_user_data(owner)
            return {f"graph_{name}": count for name, count in counts.items()}

        async def verify() -> dict[str, int]:
            report = await audit_user(index=index, graph=graph, js=self._js(), subjects=subjects, owner=owner)
            if not report.clean:
                left = {name: count for name, count in report.traces().items() if count}
                raise ErasureIncomplete(f"traces of {owner.tenant_id}/{owner.user_id} remain after erasure: {left}")
            return {}

        return [
            ("session_stream", session_stream),
            ("derived_events", derived_events),
            ("dead_letters", dead_letters),
            ("vectors", vectors),
            ("graph", graph_data),
            ("verify", verify),
        ]

    # ---- one fact -----------------------------------------------------------------------------

    async def _fact_steps(
        self,
        event: ErasureRequested,
        owner: Owner,
        index: VectorIndex,
        graph: GraphRepository,
        progress: ErasureProgress,
    ) -> list[Step]:
        subjects = self.subjects
        fact_id = str(event.target.item_id)
        stored = await index.get(FACTS, owner, [fact_id])
        if stored:
            payload = stored[0].payload
            found = fact_needles(str(payload.get("value") or ""), str(payload.get("text") or ""))
            progress.needles = sorted({*(progress.needles or []), *(needle.text for needle in found)})
            fact_sessions = [str(s) for s in payload.get("session_ids") or [] if s]
            progress.session_ids = sorted({*progress.session_ids, *fact_sessions})
        elif progress.needles is None:
            log.warning("fact %s of %s/%s not found: nothing to erase", fact_id, owner.tenant_id, owner.user_id)
            progress.needles = []
        needles = [needle for needle in (make_needle(text) for text in progress.needles) if needle is not None]
        provenance_sessions = set(progress.session_ids)

        async def sessions() -> dict[str, int]:
            return await self._redact_sessions(event, owner, index, graph, needles, provenance_sessions)

        async def derived_events() -> dict[str, int]:
            removed = await self._delete_user_messages(
                subjects.derived_stream,
                user_derived_filter(subjects, owner.tenant_id, owner.user_id),
                lambda subject, data: (
                    subject_kind(subjects, subject) not in ERASURE_RECORD_KINDS and value_mentions(data, needles)
                ),
            )
            return {"derived_events": removed}

        async def dead_letters() -> dict[str, int]:
            removed = await self._delete_user_messages(
                subjects.dead_letter_stream,
                subjects.user_dead_letters(owner.tenant_id, owner.user_id),
                lambda _subject, data: value_mentions(_with_inner_payload(data), needles),
            )
            return {"dead_letters": removed}

        async def vectors() -> dict[str, int]:
            removed: dict[str, int] = {}
            episodes = await self._scan(index, EPISODES, owner, SearchFilter())
            stale = [record.id for record in episodes if _record_mentions(record, needles)]
            passages = await self._scan(index, PASSAGES, owner, SearchFilter())
            stale_passages = [record.id for record in passages if _record_mentions(record, needles)]
            for episode_id in stale:
                add_counts(removed, _graph_counts(await graph.delete_episode(owner, episode_id)))
            add_counts(removed, {"passages": await _delete_episodes(index, owner, stale), "episodes": len(stale)})
            if stale_passages:
                add_counts(removed, {"passages": await index.delete(PASSAGES, owner, SearchFilter(ids=stale_passages))})
            facts = await self._scan(index, FACTS, owner, SearchFilter())
            # Other facts stated in the removed sentences lost their source too; the erased fact goes last.
            doomed = [record.id for record in facts if record.id != fact_id and _record_mentions(record, needles)]
            if doomed:
                add_counts(removed, {"facts": await index.delete(FACTS, owner, SearchFilter(ids=doomed))})
            add_counts(removed, {"facts": await index.delete(FACTS, owner, SearchFilter(ids=[fact_id]))})
            return removed

        async def graph_entities() -> dict[str, int]:
            # Normally nothing is left here (the episodes behind the statement were removed with their
            # sessions); this catches an extraction that ran concurrently with the steps above.
            removed: dict[str, int] = {}
            for entity in await _user_entities_mentioning(graph, owner, needles):
                log.warning(
                    "fact erasure %s: entity %r still names the erased text; removing episodes %s from the graph",
                    event.event_id,
                    entity.name,
                    list(entity.episode_ids),
                )
                for episode_id in entity.episode_ids:
                    add_counts(removed, _graph_counts(await graph.delete_episode(owner, episode_id)))
            return removed

        async def verify() -> dict[str, int]:
            await self._verify_fact(owner, index, graph, fact_id, needles)
            return {}

        return [
            ("sessions", sessions),
            ("derived_events", derived_events),
            ("dead_letters", dead_letters),
            ("vectors", vectors),
            ("graph", graph_entities),
            ("verify", verify),
        ]

    async def _redact_sessions(
        self,
        event: ErasureRequested,
        owner: Owner,
        index: VectorIndex,
        graph: GraphRepository,
        needles: Sequence[Needle],
        provenance_sessions: set[str],
    ) -> dict[str, int]:
        """Replace every raw session that states the fact by a redacted copy (new event id, same
        session id), after removing the episode built from the original, so the episodic-summarizer
        rebuilds the episode from the remaining raw text — never from the old summary."""
        subjects = self.subjects
        js = self._js()
        removed: dict[str, int] = {}
        matched_sessions: set[str] = set()
        if not needles:
            return removed
        subject = subjects.session_completed(owner.tenant_id, owner.user_id)
        async for message in stream_messages(js, subjects.session_stream, subject):
            session = _parse_session(message.data)
            if session is None or message.seq is None:
                continue
            if not session_mentions(session, needles):
                continue
            matched_sessions.add(session.session_id)
            redacted_id = deterministic_uuid("redacted-session", str(session.event_id), str(event.event_id))
            redacted = redact_session(session, needles, redacted_id)
            # The episode built from the original goes first (vectors and its graph contribution);
            # one already rebuilt from the redacted copy (a resumed run) stays.
            built = await index.scroll(EPISODES, owner, SearchFilter(match={"session_id": session.session_id}), 100)
            stale = [record.id for record in built if record.payload.get("source_event_id") != str(redacted_id)]
            for episode_id in stale:
                add_counts(removed, _graph_counts(await graph.delete_episode(owner, episode_id)))
            add_counts(removed, {"passages": await _delete_episodes(index, owner, stale), "episodes": len(stale)})
            if redacted is not None:
                await self._ctx.publisher.publish(
                    redacted, subject, msg_id=str(redacted_id), stream=subjects.session_stream
                )
                add_counts(removed, {"sessions_rebuilt": 1})
            else:
                add_counts(removed, {"sessions_emptied": 1})
            if await delete_message(js, subjects.session_stream, message.seq):
                add_counts(removed, {"session_messages": 1})
        unmatched = provenance_sessions - matched_sessions
        if unmatched:
            # Already redacted by an earlier delivery, or the statement is not literally in the text.
            log.info("fact erasure %s: provenance sessions without a literal mention: %s", event.event_id, unmatched)
        return removed

    async def _verify_fact(
        self, owner: Owner, index: VectorIndex, graph: GraphRepository, fact_id: str, needles: Sequence[Needle]
    ) -> None:
        subjects = self.subjects
        js = self._js()
        problems: list[str] = []
        if await index.get(FACTS, owner, [fact_id]):
            problems.append(f"fact point {fact_id}")
        for collection in (EPISODES, PASSAGES, FACTS):
            left = [
                r.id for r in await self._scan(index, collection, owner, SearchFilter()) if _record_mentions(r, needles)
            ]
            if left:
                problems.append(f"{collection} {left[:5]}")
        if needles:
            checks: list[tuple[str, str, Callable[[str, Any], bool]]] = [
                (
                    subjects.session_stream,
                    subjects.session_completed(owner.tenant_id, owner.user_id),
                    lambda _s, data: value_mentions(data, needles),
                ),
                (
                    subjects.derived_stream,
                    user_derived_filter(subjects, owner.tenant_id, owner.user_id),
                    lambda s, data: (
                        subject_kind(subjects, s) not in ERASURE_RECORD_KINDS and value_mentions(data, needles)
                    ),
                ),
                (
                    subjects.dead_letter_stream,
                    subjects.user_dead_letters(owner.tenant_id, owner.user_id),
                    lambda _s, data: value_mentions(_with_inner_payload(data), needles),
                ),
            ]
            for stream, subject_filter, matches in checks:
                left_seqs = [
                    message.seq
                    async for message in stream_messages(js, stream, subject_filter)
                    if matches(message.subject or "", _json_or_text(message.data))
                ]
                if left_seqs:
                    problems.append(f"{stream} messages {left_seqs[:5]}")
            for entity in await _user_entities_mentioning(graph, owner, needles):
                problems.append(f"graph entity {entity.name!r} ({entity.key})")
        if problems:
            raise ErasureIncomplete(f"erased fact {fact_id} is still present: {'; '.join(problems)}")

    # ---- one episode --------------------------------------------------------------------------

    async def _episode_steps(
        self,
        owner: Owner,
        episode_id: str,
        index: VectorIndex,
        graph: GraphRepository,
        progress: ErasureProgress,
    ) -> list[Step]:
        subjects = self.subjects
        found = await index.get(EPISODES, owner, [episode_id])
        if not found:
            found = await index.scroll(PASSAGES, owner, SearchFilter(match={"episode_id": episode_id}), 1)
        for record in found:
            session_id = record.payload.get("session_id")
            if isinstance(session_id, str) and session_id not in progress.session_ids:
                progress.session_ids.append(session_id)
        session_ids = set(progress.session_ids)
        if not session_ids:
            log.warning(
                "episode %s of %s/%s not found in the vector index: erasing its graph and fact traces only",
                episode_id,
                owner.tenant_id,
                owner.user_id,
            )

        def refers(data: Any) -> bool:
            if not isinstance(data, dict):
                return False
            return (
                data.get("episode_id") == episode_id
                or data.get("source_episode_id") == episode_id
                or (data.get("session_id") in session_ids and data.get("event_type") != "erasure.requested")
            )

        async def session_stream() -> dict[str, int]:
            removed = await self._delete_user_messages(
                subjects.session_stream,
                subjects.session_completed(owner.tenant_id, owner.user_id),
                lambda _s, data: isinstance(data, dict) and data.get("session_id") in session_ids,
            )
            return {"session_messages": removed}

        async def derived_events() -> dict[str, int]:
            removed = await self._delete_user_messages(
                subjects.derived_stream,
                user_derived_filter(subjects, owner.tenant_id, owner.user_id),
                lambda s, data: subject_kind(subjects, s) not in ERASURE_RECORD_KINDS and refers(data),
            )
            return {"derived_events": removed}

        async def dead_letters() -> dict[str, int]:
            removed = await self._delete_user_messages(
                subjects.dead_letter_stream,
                subjects.user_dead_letters(owner.tenant_id, owner.user_id),
                lambda _s, data: refers(_inner_payload(data)),
            )
            return {"dead_letters": removed}

        async def facts() -> dict[str, int]:
            return await self._drop_fact_provenance(index, owner, episode_id)

        async def graph_data() -> dict[str, int]:
            return _graph_counts(await graph.delete_episode(owner, episode_id))

        async def vectors() -> dict[str, int]:
            passages = await _delete_episodes(index, owner, [episode_id])
            return {"passages": passages}

        async def verify() -> dict[str, int]:
            problems: list[str] = []
            if await index.get(EPISODES, owner, [episode_id]):
                problems.append("episode point")
            if await index.count(PASSAGES, owner, SearchFilter(match={"episode_id": episode_id})):
                problems.append("passages")
            if await index.count(FACTS, owner, SearchFilter(match={"episode_ids": episode_id})):
                problems.append("fact provenance")
            if session_ids:
                left = await self._count_user_messages(
                    subjects.session_stream,
                    subjects.session_completed(owner.tenant_id, owner.user_id),
                    lambda _s, data: isinstance(data, dict) and data.get("session_id") in session_ids,
                )
                if left:
                    problems.append(f"{left} raw session messages")
            if problems:
                raise ErasureIncomplete(f"erased episode {episode_id} is still present: {', '.join(problems)}")
            return {}

        return [
            ("session_stream", session_stream),
            ("derived_events", derived_events),
            ("dead_letters", dead_letters),
            ("facts", facts),
            ("graph", graph_data),
            ("vectors", vectors),
            ("verify", verify),
        ]

    async def _drop_fact_provenance(self, index: VectorIndex, owner: Owner, episode_id: str) -> dict[str, int]:
        """Facts observed only in the episode go; facts observed elsewhere too lose this observation."""
        removed: dict[str, int] = {}
        records = await self._scan(index, FACTS, owner, SearchFilter(match={"episode_ids": episode_id}))
        doomed: list[str] = []
        for record in records:
            try:
                fact = fact_from_payload(record.payload)
            except (ValidationError, KeyError) as exc:
                log.warning("fact %s has an unreadable payload (%s): deleting it with its episode", record.id, exc)
                doomed.append(record.id)
                continue
            remaining = [p for p in fact.provenance if p.episode_id != episode_id]
            if not remaining:
                doomed.append(record.id)
                continue
            updated = fact.model_copy(update={"provenance": remaining, "evidence_count": len(remaining)})
            channels = [str(c) for c in record.payload.get("channel") or []] or ["private"]
            await index.set_payload(FACTS, owner, [record.id], fact_payload(updated, channels))
            add_counts(removed, {"facts_updated": 1})
        if doomed:
            add_counts(removed, {"facts": await index.delete(FACTS, owner, SearchFilter(ids=doomed))})
        return removed

    # ---- helpers ------------------------------------------------------------------------------

    async def _scan(
        self, index: VectorIndex, collection: str, owner: Owner, search_filter: SearchFilter
    ) -> list[StoredRecord]:
        records = await index.scroll(collection, owner, search_filter, self.settings.scan_limit)
        if len(records) >= self.settings.scan_limit:
            raise ErasureIncomplete(
                f"{collection} of {owner.tenant_id}/{owner.user_id} holds more than scan_limit="
                f"{self.settings.scan_limit} points; raise TIERMEM_SCAN_LIMIT to erase by text"
            )
        return records

    async def _delete_user_messages(self, stream: str, subject_filter: str, matches: Callable[[str, Any], bool]) -> int:
        js = self._js()
        removed = 0
        async for message in stream_messages(js, stream, subject_filter):
            if message.seq is not None and matches(message.subject or "", _json_or_text(message.data)):
                removed += int(await delete_message(js, stream, message.seq))
        return removed

    async def _count_user_messages(self, stream: str, subject_filter: str, matches: Callable[[str, Any], bool]) -> int:
        return sum(
            [
                1
                async for message in stream_messages(self._js(), stream, subject_filter)
                if matches(message.subject or "", _json_or_text(message.data))
            ]
        )


async def _user_entities_mentioning(
    graph: GraphRepository, owner: Owner, needles: Sequence[Needle]
) -> list[EntityRecord]:
    """Entities the user contributed to whose name or an alias mentions a needle."""
    found: dict[str, EntityRecord] = {}
    for needle in needles:
        for entity in await graph.search_entities(owner, needle.text, limit=200):
            if owner.user_id in entity.user_ids and value_mentions([entity.name, *entity.aliases], needles):
                found[entity.key] = entity
    return list(found.values())


def _graph_counts(counts: dict[str, int]) -> dict[str, int]:
    return {f"graph_{name}": count for name, count in counts.items()}


def _record_mentions(record: StoredRecord, needles: Sequence[Needle]) -> bool:
    return bool(needles) and value_mentions([record.payload.get(key) for key in _TEXT_KEYS], needles)


def _json_or_text(data: bytes | None) -> Any:
    text = (data or b"").decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _inner_payload(data: Any) -> Any:
    """The failed message inside a dead-letter record, parsed when it is JSON."""
    if isinstance(data, dict) and isinstance(data.get("payload"), str):
        return _json_or_text(data["payload"].encode("utf-8"))
    return data


def _with_inner_payload(data: Any) -> Any:
    return [data, _inner_payload(data)]


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _parse_session(data: bytes | None) -> SessionCompleted | None:
    try:
        return SessionCompleted.model_validate_json(data or b"")
    except ValueError as exc:
        log.warning("unreadable raw session message skipped by fact erasure: %s", exc)
        return None


# --------------------------------------------------------------------------------------------------
# Schedule and control requests


async def _serve_control(ctx: ServiceContext[PrunerSettings], clock: Clock) -> NatsClient:
    """Answer `tiermem prune --now` and `tiermem audit` (core NATS request/reply, one replica per
    request through a queue group)."""
    nc = await connect_nats(ctx.settings.nats, f"tiermem-{NAME}-control")

    async def _reply(msg: Msg, work: Callable[[], Awaitable[BaseModel]]) -> None:
        try:
            result = await work()
            answer = ControlReply(result=result.model_dump(mode="json"))
        except Exception as exc:
            log.exception("control request on %s failed", msg.subject)
            answer = ControlReply(error=describe_error(exc))
        await msg.respond(answer.model_dump_json().encode("utf-8"))

    async def _on_prune(msg: Msg) -> None:
        await _reply(msg, lambda: prune_once(ctx, clock()))

    async def _on_audit(msg: Msg) -> None:
        async def _audit() -> BaseModel:
            request = AuditRequest.model_validate_json(msg.data)
            return await audit_user(
                index=await ctx.resources.vector_index(),
                graph=await ctx.resources.graph(),
                js=nc.jetstream(),
                subjects=ctx.subjects,
                owner=Owner(request.tenant_id, request.user_id),
            )

        await _reply(msg, _audit)

    await nc.subscribe(control_subject(ctx.subjects, "prune"), queue=CONTROL_QUEUE, cb=_on_prune)
    await nc.subscribe(control_subject(ctx.subjects, "audit"), queue=CONTROL_QUEUE, cb=_on_audit)
    await nc.flush()
    return nc


def make_schedule(clock: Clock = utc_now) -> Callable[[ServiceContext[PrunerSettings]], Coroutine[Any, Any, None]]:
    """The pruner's background task: control requests, and a prune pass at every interval boundary
    (see `seconds_until_next_pass`). A failed pass is logged and the schedule goes on."""

    async def run(ctx: ServiceContext[PrunerSettings]) -> None:
        control: NatsClient | None = None
        if ctx.settings.control_enabled:
            try:
                control = await _serve_control(ctx, clock)
            except Exception:
                # The schedule matters more than the CLI shortcut: go on without answering requests.
                log.exception("cannot serve control requests; `tiermem prune --now` / `audit` will open the stores")
        interval_s = ctx.settings.prune_interval_hours * 3600
        earliest = time.time() + ctx.settings.prune_initial_delay_s
        try:
            while True:
                await asyncio.sleep(seconds_until_next_pass(time.time(), interval_s, earliest))
                try:
                    await prune_once(ctx, clock())
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("scheduled prune pass failed; next in %.1f h", ctx.settings.prune_interval_hours)
                    ctx.count("prune_failures")
                earliest = time.time()
        finally:
            if control is not None:
                with contextlib.suppress(Exception):
                    await control.drain()

    return run


run_schedule = make_schedule()
"""The scheduled pruning (and control requests) of a running pruner, on the system clock."""


def build_definition(
    *, clock: Clock = utc_now, after_step: StepHook | None = None
) -> ServiceDefinition[PrunerSettings]:
    """The pruner service; tests pass a fake clock or a hook that crashes mid-erasure."""

    def register(broker: NatsBroker, ctx: ServiceContext[PrunerSettings]) -> None:
        (spec,) = consumers(ctx.subjects)
        runner = ErasureRunner(ctx, lambda: broker.connection.jetstream(), clock=clock, after_step=after_step)
        durable_subscriber(broker, ctx.settings.nats, spec, ErasureRequested, runner.handle, ctx.dead_letters)

    return ServiceDefinition(
        name=NAME,
        settings_type=PrunerSettings,
        consumers=consumers,
        register=register,
        background=make_schedule(clock),
    )


DEFINITION = build_definition()
