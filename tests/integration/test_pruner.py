"""Scheduled pruning against real Qdrant Edge, FalkorDB and nats-server, driven by a controllable
clock: TTL expiry, never-recalled episodes, superseded facts after the grace period; current facts
and the graph (the semantic tier) are kept; every pass is reported."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient

from contracts import PruneReport, Subjects
from services.cli.prune import run_prune_now
from services.common.domain.owner import Owner
from services.common.runtime.broker import build_broker
from services.common.runtime.provisioning import provision
from services.common.runtime.resources import Resources, ServiceContext
from services.common.runtime.service import build_context
from services.common.runtime.settings import NatsSettings, VectorSettings
from services.common.stores.erasure import ControlError, request_control
from services.common.stores.graph.repository import EntityInput, EpisodeRef, GraphRepository
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, SearchFilter, SparseVector, VectorRecord
from services.pruner.prune import prune_once, run_prune_pass
from services.pruner.schedule import make_schedule
from services.pruner.settings import PrunerSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.support.events import decoded, stream_messages, wait_for

pytestmark = pytest.mark.integration

DIM = 8
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = Owner("acme", "alice")
BOB = Owner("acme", "bob")


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def _vector(seed: int) -> list[float]:
    return [float((seed + i) % 5 + 1) for i in range(DIM)]


def _record(point_id: str, payload: dict[str, Any], seed: int = 0) -> VectorRecord:
    return VectorRecord(id=point_id, dense=_vector(seed), sparse=SparseVector([seed % 97 + 1], [1.0]), payload=payload)


def _episode_payload(
    episode_id: str, *, occurred: datetime, ttl_days: float, recalled: datetime | None = None
) -> dict[str, Any]:
    return {
        "kind": "episode",
        "episode_id": episode_id,
        "session_id": f"s-{episode_id[:8]}",
        "summary": f"episode {episode_id}",
        "occurred_at_ts": occurred.timestamp(),
        "expires_at_ts": (occurred + timedelta(days=ttl_days)).timestamp(),
        "recall_count": 0 if recalled is None else 1,
        "last_recalled_at_ts": None if recalled is None else recalled.timestamp(),
    }


async def _add_episode(
    index: EdgeVectorIndex, owner: Owner, *, occurred: datetime, ttl_days: float = 180, recalled: datetime | None = None
) -> str:
    episode_id = str(uuid.uuid4())
    payload = _episode_payload(episode_id, occurred=occurred, ttl_days=ttl_days, recalled=recalled)
    await index.upsert(EPISODES, owner, [_record(episode_id, payload)])
    passages = [
        _record(
            str(uuid.uuid4()),
            {
                "kind": "passage",
                "episode_id": episode_id,
                "text": f"passage {n}",
                "occurred_at_ts": payload["occurred_at_ts"],
                "expires_at_ts": payload["expires_at_ts"],
            },
            seed=n,
        )
        for n in range(2)
    ]
    await index.upsert(PASSAGES, owner, passages)
    return episode_id


async def _add_fact(index: EdgeVectorIndex, owner: Owner, *, superseded_at: datetime | None) -> str:
    fact_id = str(uuid.uuid4())
    payload: dict[str, Any] = {
        "kind": "fact",
        "fact_id": fact_id,
        "text": "The user lives in Seoul.",
        "value": "Seoul",
        "status": "confirmed" if superseded_at is None else "superseded",
        "valid_to": None if superseded_at is None else superseded_at.isoformat(),
        "valid_to_ts": None if superseded_at is None else superseded_at.timestamp(),
        "superseded_by": None if superseded_at is None else str(uuid.uuid4()),
        "occurred_at_ts": (T0 - timedelta(days=400)).timestamp(),
    }
    await index.upsert(FACTS, owner, [_record(fact_id, payload)])
    return fact_id


@dataclass
class Pruning:
    settings: PrunerSettings
    index: EdgeVectorIndex
    graph: GraphRepository
    context: ServiceContext[PrunerSettings]
    broker: NatsBroker
    subjects: Subjects
    client: NatsClient

    async def ids(self, collection: str, owner: Owner) -> set[str]:
        return {record.id for record in await self.index.scroll(collection, owner, SearchFilter(), 1000)}

    async def reports(self) -> list[dict[str, Any]]:
        js = self.client.jetstream()
        return decoded(await stream_messages(js, self.subjects.derived_stream, self.subjects.prune_completed()))


@pytest.fixture
async def pruning(
    tmp_path: Path, nats_settings: NatsSettings, falkordb_graph: FalkorDBGraph, nats_client: NatsClient
) -> AsyncIterator[Pruning]:
    settings = PrunerSettings(
        data_dir=tmp_path,
        nats=nats_settings,
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=falkordb_graph.settings(),
        unrecalled_max_age_days=90,
        superseded_grace_days=30,
        prune_page_size=2,  # small pages: the paging loops run several rounds
        # The plain age rules: forgotten episodes deleted at once, recalls not stretching the age
        # (importance-weighted retention and compression: tests/integration/test_forgetting.py).
        forget_compress=False,
        recall_stretch=0.0,
    )
    index = EdgeVectorIndex(tmp_path / "edge")
    for collection in (EPISODES, PASSAGES, FACTS):
        await index.ensure_collection(collection, DIM)
    resources = Resources(settings, _vector_index=index)
    graph = await resources.graph()
    await provision(nats_client.jetstream(), settings.nats)
    broker = build_broker(settings, "test-pruner")
    await broker.connect()
    context = build_context(settings, broker, resources)
    try:
        yield Pruning(settings, index, graph, context, broker, Subjects(nats_settings.subject_root), nats_client)
    finally:
        await broker.stop()
        await resources.close()


async def test_ttl_and_never_recalled_pruning_follow_the_clock(pruning: Pruning) -> None:
    clock = FakeClock(T0)
    index = pruning.index
    fresh = await _add_episode(index, ALICE, occurred=T0)
    recalled = await _add_episode(index, ALICE, occurred=T0 - timedelta(days=60), ttl_days=365, recalled=T0)
    short_ttl = await _add_episode(index, ALICE, occurred=T0, ttl_days=10)
    bobs = [await _add_episode(index, BOB, occurred=T0 - timedelta(days=n)) for n in range(5)]

    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed == {"episodes_expired": 0, "episodes_unrecalled": 0, "passages": 0, "facts_superseded": 0}
    assert report.owners_scanned == 2

    clock.advance(days=10)  # short_ttl's TTL ends exactly now: expiry is inclusive
    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["episodes_expired"] == 1
    assert report.removed["passages"] == 2
    assert await pruning.ids(EPISODES, ALICE) == {fresh, recalled}
    assert short_ttl not in {r.payload["episode_id"] for r in await index.scroll(PASSAGES, ALICE, SearchFilter(), 100)}

    # Recall (as the recall API records it) keeps a memory alive.
    await index.set_payload(
        EPISODES, ALICE, [recalled], {"recall_count": 2, "last_recalled_at_ts": clock().timestamp()}
    )

    clock.advance(days=85)  # T0+95: never-recalled episodes older than 90 days go; the recalled one stays
    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["episodes_unrecalled"] == 6  # alice's fresh one and all five of bob's
    assert report.removed["episodes_expired"] == 0
    assert report.removed["passages"] == 12
    assert await pruning.ids(EPISODES, ALICE) == {recalled}
    assert await pruning.ids(EPISODES, BOB) == set()
    assert bobs[0] not in await pruning.ids(PASSAGES, BOB)
    assert {r.payload["episode_id"] for r in await index.scroll(PASSAGES, ALICE, SearchFilter(), 100)} == {recalled}

    clock.advance(days=30)  # T0+125: 115 days since the last recall → pruned as not recalled for too long
    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["episodes_unrecalled"] == 1
    assert await index.count(EPISODES, ALICE) == 0
    assert await index.count(PASSAGES, ALICE) == 0


async def test_expired_episodes_go_even_when_recalled_and_orphan_passages_are_swept(pruning: Pruning) -> None:
    clock = FakeClock(T0)
    index = pruning.index
    busy = await _add_episode(index, ALICE, occurred=T0 - timedelta(days=181), recalled=T0 - timedelta(days=1))
    orphan = await _add_episode(index, ALICE, occurred=T0 - timedelta(days=200))
    await index.delete(EPISODES, ALICE, SearchFilter(ids=[orphan]))  # a crash between the two deletes
    assert await index.count(PASSAGES, ALICE) == 4

    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["episodes_expired"] == 1
    assert report.removed["passages"] == 4
    assert busy not in await pruning.ids(EPISODES, ALICE)


async def test_superseded_facts_go_after_the_grace_period_and_the_semantic_tier_stays(pruning: Pruning) -> None:
    clock = FakeClock(T0)
    index = pruning.index
    current = await _add_fact(index, ALICE, superseded_at=None)
    old_version = await _add_fact(index, ALICE, superseded_at=T0 - timedelta(days=31))
    recent_version = await _add_fact(index, ALICE, superseded_at=T0 - timedelta(days=5))
    episode = await _add_episode(index, ALICE, occurred=T0 - timedelta(days=200))
    await pruning.graph.upsert_entities(
        ALICE,
        "personal",
        [EntityInput("DGIA", "project")],
        episode=EpisodeRef(episode_id=episode, session_id="s-1", occurred_at_ts=(T0 - timedelta(days=200)).timestamp()),
    )
    graph_before = await pruning.graph.count(ALICE)

    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["facts_superseded"] == 1
    assert report.removed["episodes_expired"] == 1
    assert await pruning.ids(FACTS, ALICE) == {current, recent_version}
    assert old_version not in await pruning.ids(FACTS, ALICE)
    # Facts and entities the semantic tier holds outlive the episode they came from.
    assert await pruning.graph.count(ALICE) == graph_before
    assert [e.name for e in await pruning.graph.search_entities(ALICE, "DGIA")] == ["DGIA"]

    clock.advance(days=3650)
    report = await run_prune_pass(pruning.context.resources, pruning.settings, clock())
    assert report.removed["facts_superseded"] == 1
    assert await pruning.ids(FACTS, ALICE) == {current}


async def test_prune_once_reports_by_log_counter_and_event(pruning: Pruning, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(T0)
    await _add_episode(pruning.index, ALICE, occurred=T0 - timedelta(days=200))
    caplog.set_level("INFO", logger="services.pruner.prune")

    report = await prune_once(pruning.context, clock())
    assert report.removed["episodes_expired"] == 1
    assert pruning.context.counters["pruned_episodes_expired"] == 1
    assert pruning.context.counters["prune_passes"] == 1
    assert any("episodes_expired=1" in record.getMessage() for record in caplog.records)
    published = await wait_for(pruning.reports, what="a prune report")
    assert PruneReport.model_validate(published[0]) == report

    # The same clock reading again: same event id, de-duplicated by the stream.
    await prune_once(pruning.context, clock())
    assert len(await pruning.reports()) == 1


async def test_schedule_runs_passes_and_answers_prune_now(pruning: Pruning) -> None:
    settings = pruning.settings.model_copy(update={"prune_initial_delay_s": 0.0, "prune_interval_hours": 0.5 / 3600})
    pruning.context.settings = settings
    clock = FakeClock(T0)
    await _add_episode(pruning.index, ALICE, occurred=T0 - timedelta(days=200))
    task = asyncio.create_task(make_schedule(clock)(pruning.context))
    try:

        async def two_passes() -> bool:
            clock.advance(seconds=1)  # each pass gets its own clock reading (and event id)
            return pruning.context.counters.get("prune_passes", 0) >= 2

        await wait_for(two_passes, timeout_s=20, what="two scheduled passes")
        assert pruning.context.counters["pruned_episodes_expired"] == 1  # idempotent: gone once

        # `tiermem prune --now` is answered by the running pruner (it owns the Edge shards).
        await _add_episode(pruning.index, BOB, occurred=T0 - timedelta(days=300))
        report, where = await run_prune_now(settings, timeout_s=20)
        assert where == "running pruner"
        assert report.removed["episodes_expired"] == 1
        assert await pruning.index.count(EPISODES, BOB) == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # The control subscription went away with the schedule: nobody answers now.
    assert await request_control(pruning.client, pruning.subjects, "prune", None, timeout_s=2) is None


async def test_a_failing_control_request_reports_the_error(pruning: Pruning) -> None:
    settings = pruning.settings.model_copy(update={"prune_initial_delay_s": 3600.0})
    pruning.context.settings = settings

    def broken_clock() -> datetime:
        return datetime(2026, 1, 1)  # naive: rejected by the pass

    task = asyncio.create_task(make_schedule(broken_clock)(pruning.context))
    try:

        async def answered() -> bool:
            try:
                return await request_control(pruning.client, pruning.subjects, "prune", None, timeout_s=5) is not None
            except ControlError as exc:
                return "timezone-aware" in str(exc)

        await wait_for(answered, timeout_s=10, what="an error reply")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_prune_now_without_a_running_pruner_runs_here(pruning: Pruning, tmp_path: Path) -> None:
    # Its own Edge directory: the fixture's shards are open in this process, and a shard has one owner.
    settings = pruning.settings.model_copy(update={"vector": VectorSettings(backend="edge", path=tmp_path / "cli")})
    report, where = await run_prune_now(settings, timeout_s=5)
    assert where == "this process"
    assert report.owners_scanned == 0
    published = await wait_for(pruning.reports, what="the prune report of the CLI pass")
    assert published[0]["event_id"] == str(report.event_id)
