"""Erasure racing ingestion (issue 11, item 1), against real nats-server, FalkorDB and Qdrant Edge.

Three users' sessions are in flight through the whole offline pipeline (summarizer, extractor,
dedup) when one user is erased. One of her writes — an episode in the summarizer, or a fact in the
extractor after its graph writes — is held *after* it passed every check and right before it
commits: the window in which, before the fix, the erasure reported completed and the write landed
afterwards. The erasure must wait for that write, remove
it, and only then report completed; `tiermem audit` then finds nothing of her, the other users'
stored data equals a run without the erasure, and a session she sends afterwards is kept."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.client import Client as NatsClient
from pydantic import SecretStr

from contracts import ErasureCompleted, ErasureRequested, ErasureTarget, SessionCompleted, Subjects
from services.cli.audit import run_audit
from services.cli.consolidation import wait_until_idle
from services.cli.stack import RunningServices, start_services
from services.common.domain.facts import FactCandidate
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import GraphSettings, NatsSettings, TierMemSettings, VectorSettings
from services.common.stores.episodes import Episode, EpisodeStore, Passage
from services.common.stores.facts import FactStore
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.pruner.handlers import DEFINITION as PRUNER
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.falkordb import FalkorDBGraph
from tests.support.dump import user_dump
from tests.support.events import session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALICE, BOB, CAROL = Owner("acme", "alice"), Owner("acme", "bob"), Owner("acme", "carol")
USERS = (ALICE, BOB, CAROL)
SESSIONS_PER_USER = 6
PIPELINE: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]
_NAMESPACE = uuid.UUID("3f0d8a52-7c1e-4b7a-9a55-2e6f1d0c9b11")
_PROJECTS = ["DGIA billing", "Onbiseo search", "Hanbit ledger", "Saebom portal", "Nuri gateway", "Gaon metrics"]
_PEOPLE = ["Minsu", "Jiwoo", "Seoyeon", "Dohyun", "Haeun", "Junho"]
T = TypeVar("T")
_CITIES = ["Seoul", "Busan", "Daegu", "Incheon", "Gwangju", "Daejeon"]


def _sessions(seed: int) -> list[SessionCompleted]:
    """The same sessions in every run (seeded texts, deterministic ids), users interleaved."""
    rng = random.Random(seed)
    start = datetime(2026, 5, 2, 9, 0, tzinfo=UTC)
    sessions: list[SessionCompleted] = []
    for index in range(SESSIONS_PER_USER):
        for owner in USERS:
            project, person, city = rng.choice(_PROJECTS), rng.choice(_PEOPLE), rng.choice(_CITIES)
            # Bob and Carol share one team session topic; Alice stays personal (her team
            # contributions would change what the others see, which is not what this test compares).
            scope = "team" if owner != ALICE and index == SESSIONS_PER_USER - 1 else "personal"
            sessions.append(
                session_event(
                    tenant_id=owner.tenant_id,
                    user_id=owner.user_id,
                    session_id=f"{owner.user_id}-s{index}",
                    event_id=uuid.uuid5(_NAMESPACE, f"{owner.user_id}-{index}"),
                    scope=scope,
                    ended_at=start + timedelta(hours=index),
                    texts=[
                        f"We decided to build the {project} service in Go. I live in {city}.",
                        f"Understood: the {project} service will be written in Go.",
                        f"{person} reviews the code of {project} and the deadline is June {index + 10}.",
                        f"I will prepare the plan for {person}.",
                    ],
                )
            )
    return sessions


@dataclass
class WriteGate:
    """Holds the `nth` write of `owner` to one store (episodes: the summarizer; facts: the semantic
    extractor, after its graph writes) right before it commits, until released."""

    owner: Owner
    store: str
    nth: int = 3
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    committed_at: datetime | None = None
    seen: int = 0

    async def passing(self, owner: Owner, commit: Callable[[], Awaitable[T]]) -> T:
        if owner != self.owner:
            return await commit()
        self.seen += 1
        if self.seen != self.nth:
            return await commit()
        self.held.set()
        await self.release.wait()
        written = await commit()
        self.committed_at = datetime.now(UTC)
        return written


class _GatedEpisodeStore(EpisodeStore):
    gate: WriteGate

    async def write(self, owner: Owner, episode: Episode, passages: Sequence[Passage], **options: Any) -> Episode:
        # **options: whatever the summarizer passes along (e.g. passage vectors embedded ahead) reaches
        # the real store unchanged; the gate only decides when.
        return await self.gate.passing(
            owner, lambda: super(_GatedEpisodeStore, self).write(owner, episode, passages, **options)
        )


class _GatedFactStore(FactStore):
    gate: WriteGate

    async def write(self, owner: Owner, candidate: FactCandidate, **options: Any) -> Any:
        return await self.gate.passing(owner, lambda: super(_GatedFactStore, self).write(owner, candidate, **options))


@dataclass
class _GatedResources(Resources):
    gate: WriteGate | None = None

    async def episodes(self) -> EpisodeStore:
        if self.gate is None or self.gate.store != "episodes":
            return await super().episodes()
        store = _GatedEpisodeStore(await self.vector_index(), self.embedder(), self.keywords())
        store.gate = self.gate
        return store

    async def facts(self) -> FactStore:
        if self.gate is None or self.gate.store != "facts":
            return await super().facts()
        store = _GatedFactStore(await self.vector_index(), self.embedder(), self.keywords())
        store.gate = self.gate
        return store


def _settings(tmp_path: Path, nats: NatsSettings, graph: FalkorDBGraph, suffix: str) -> TierMemSettings:
    return TierMemSettings(
        data_dir=tmp_path / f"data{suffix}",
        nats=nats.model_copy(update={"subject_root": nats.subject_root + suffix, "ack_wait_s": 60}),
        vector=VectorSettings(backend="edge", path=tmp_path / f"edge{suffix}"),
        graph=GraphSettings(
            backend="falkordb",
            host=graph.host,
            port=graph.port,
            password=SecretStr(graph.password),
            graph_name=graph.graph_name + suffix,
        ),
    )


async def _publish(running: RunningServices, subjects: Subjects, events: Sequence[Any]) -> None:
    publisher = next(iter(running.contexts.values())).publisher
    for event in events:
        if isinstance(event, SessionCompleted):
            subject, stream = subjects.session_completed(event.tenant_id, event.user_id), subjects.session_stream
        else:
            subject, stream = subjects.erasure_requested(event.tenant_id, event.user_id), subjects.derived_stream
        await publisher.publish(event, subject, message_id(event), stream)


@pytest.fixture
async def baseline_graph(falkordb_graph: FalkorDBGraph) -> AsyncIterator[FalkorDBGraph]:
    """The fault-free run's graph, next to the test's own, dropped afterwards."""
    yield falkordb_graph
    cleaner = FalkorDBGraph(
        falkordb_graph.host, falkordb_graph.port, falkordb_graph.password, falkordb_graph.graph_name + "b"
    ).executor()
    try:
        await cleaner.delete_graph()
    finally:
        await cleaner.close()


async def _fault_free_dumps(settings: TierMemSettings, sessions: list[SessionCompleted]) -> dict[Owner, Any]:
    running = await start_services(settings, PIPELINE, resources=Resources(settings))
    try:
        await _publish(running, Subjects(settings.nats.subject_root), sessions)
        await wait_until_idle(settings, PIPELINE, timeout_s=240)
        return {owner: await user_dump(running.resources, owner) for owner in (BOB, CAROL)}
    finally:
        await running.stop()


@pytest.mark.parametrize(("store", "writer"), [("episodes", "episodic-summarizer"), ("facts", "semantic-extractor")])
async def test_erasure_waits_for_work_in_flight_and_leaves_nothing(
    tmp_path: Path,
    nats_settings: NatsSettings,
    baseline_graph: FalkorDBGraph,
    nats_client: NatsClient,
    store: str,
    writer: str,
) -> None:
    sessions = _sessions(seed=11)
    expected = await _fault_free_dumps(_settings(tmp_path, nats_settings, baseline_graph, "b"), sessions)
    assert all(dump["episodes"] and dump["entities"] for dump in expected.values()), "the baseline derived nothing"

    settings = _settings(tmp_path, nats_settings, baseline_graph, "")
    subjects = Subjects(settings.nats.subject_root)
    gate = WriteGate(ALICE, store)
    running = await start_services(settings, [*PIPELINE, PRUNER], resources=_GatedResources(settings, gate=gate))
    try:
        await _publish(running, subjects, sessions)
        await asyncio.wait_for(gate.held.wait(), timeout=60)
        request = ErasureRequested(
            event_id=uuid.uuid4(),
            tenant_id=ALICE.tenant_id,
            user_id=ALICE.user_id,
            target=ErasureTarget(kind="user"),
            requested_at=datetime.now(UTC),
        )
        await _publish(running, subjects, [request])
        tombstones = await running.resources.tombstones()

        async def _cut() -> bool:
            tombstone = await tombstones.get(ALICE)
            return tombstone is not None and tombstone.session_cut is not None

        await wait_for(_cut, what="the erasure to mark Alice's tombstone", timeout_s=30)
        # The held write is recorded as in flight, so the erasure cannot have finished.
        assert await tombstones.busy_writers(ALICE) == [writer]
        js = nats_client.jetstream()
        completed_subject = subjects.erasure_completed(ALICE.tenant_id, ALICE.user_id)
        assert not await stream_messages(js, subjects.derived_stream, completed_subject)

        gate.release.set()
        found = await wait_for(
            lambda: stream_messages(js, subjects.derived_stream, completed_subject), what="ErasureCompleted"
        )
        completed = ErasureCompleted.model_validate_json(found[-1].data)
        assert gate.committed_at is not None and completed.completed_at >= gate.committed_at
        assert completed.removed["episodes"] >= 2 and completed.removed["passages"] >= 2, completed.removed
        await wait_until_idle(settings, [*PIPELINE, PRUNER], timeout_s=240)

        report = await run_audit(settings, ALICE, timeout_s=30)  # what `tiermem audit` runs
        assert report.clean, report.traces()
        assert report.erasure_records == 2
        for owner in (BOB, CAROL):
            assert await user_dump(running.resources, owner) == expected[owner], owner

        # She comes back: a session sent after the erasure is consolidated and kept.
        back = session_event(tenant_id="acme", user_id="alice", session_id="alice-back", texts=_back_texts())
        await _publish(running, subjects, [back])
        await wait_until_idle(settings, [*PIPELINE, PRUNER], timeout_s=120)
        dump = await user_dump(running.resources, ALICE)
        assert [row[1] for row in dump["episodes"]] == ["alice-back"]
        assert (await run_audit(settings, ALICE, timeout_s=30)).session_messages == 1
    finally:
        gate.release.set()
        await running.stop()


def _back_texts() -> list[str]:
    return [
        "We decided to build the Hanbit ledger service in Rust. I live in Busan.",
        "Understood: the Hanbit ledger service will be written in Rust.",
    ]
