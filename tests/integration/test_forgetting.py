"""Forgetting by importance, then access, then age (issue 19), on the path users run: sessions go
through the real episodic-summarizer (offline: the importance heuristic), recalls are counted by the
recall service's own updater, the pruner's pass runs on a controlled clock, and erasure goes through the
running pruner. Real nats-server, FalkorDB and Qdrant Edge.

- an important, often-recalled memory survives past the never-recalled age;
- unimportant old episodes are compressed into one that still answers a question about them (L1
  search finds it) and lists every source session, while their raw sessions stay;
- the pass is idempotent; the compressed summary is deleted later, when it is forgotten in turn;
- erasing the user removes the compressed summary too."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from contracts import ErasureCompleted, ErasureRequested, ErasureTarget, Subjects
from services.cli.stack import RunningServices, start_services
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings, TierMemSettings, VectorSettings
from services.common.stores.episodes import Episode, EpisodeStore
from services.common.stores.vector.port import EPISODES, PASSAGES, SearchFilter
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC_DEFINITION
from services.pruner.compression import compress_episodes
from services.pruner.handlers import DEFINITION as PRUNER_DEFINITION
from services.pruner.logic import PrunePolicy, retention
from services.pruner.prune import run_prune_pass
from services.pruner.settings import PrunerSettings
from services.recall_api.schemas import SearchRequest
from services.recall_api.service import RecallService
from services.recall_api.settings import RecallApiSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.support.events import session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration

ALICE = Owner("acme", "alice")
BOB = Owner("acme", "bob")
START = datetime.now(UTC).replace(microsecond=0)

IMPORTANT = [
    "We decided to move the launch of Project Falcon to June 1, and I'll send the revised plan by Friday.",
    "Got it: Project Falcon launches on June 1 and the revised plan comes by Friday.",
]
CHIT_CHAT = {
    "octopus": ["haha I watched a documentary about octopuses and their camouflage", "lol octopuses are so cool"],
    "catan": ["we played the board game Catan with my cousins, so much laughing", "haha sounds like a fun evening"],
    "bread": ["I baked banana bread, the kitchen smelled amazing", "yum, banana bread is the best"],
}


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, days: float) -> datetime:
        self.now += timedelta(days=days)
        return self.now


@dataclass
class Forgetting:
    settings: TierMemSettings
    pruner: PrunerSettings
    subjects: Subjects
    nats: NatsClient
    running: RunningServices
    recall: RecallService

    @property
    def resources(self) -> Resources:
        return self.running.resources

    async def episodes(self) -> EpisodeStore:
        return await self.resources.episodes()

    async def ingest(self, owner: Owner, session_id: str, texts: list[str]) -> None:
        event = session_event(
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            session_id=session_id,
            texts=texts,
            ended_at=START - timedelta(minutes=5),
        )
        publisher = next(iter(self.running.contexts.values())).publisher
        subject = self.subjects.session_completed(owner.tenant_id, owner.user_id)
        await publisher.publish(event, subject, message_id(event), self.subjects.session_stream)

    async def wait_episodes(self, owner: Owner, count: int) -> list[Episode]:
        store = await self.episodes()

        async def probe() -> list[Episode] | None:
            found = await store.scroll(owner)
            return found if len(found) >= count else None

        found: list[Episode] = await wait_for(probe, timeout_s=120, what=f"{count} episodes of {owner.user_id}")
        return found

    async def by_session(self, owner: Owner) -> dict[str, Episode]:
        return {e.session_id: e for e in await (await self.episodes()).scroll(owner)}


@pytest.fixture
async def forgetting(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    nats_client: NatsClient,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Forgetting]:
    # The pruner's own schedule must not run a pass on the wall clock in the middle of the test.
    monkeypatch.setenv("TIERMEM_PRUNE_INITIAL_DELAY_S", str(10 * 86400))
    settings = TierMemSettings(
        data_dir=tmp_path,
        nats=nats_settings,
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=falkordb_graph.settings(),
    )
    running = await start_services(settings, [EPISODIC_DEFINITION, PRUNER_DEFINITION], resources=Resources(settings))
    recall = RecallService(RecallApiSettings(**settings.model_dump()), running.resources)
    await recall.start(warm_up=False)
    try:
        yield Forgetting(
            settings,
            PrunerSettings(**settings.model_dump()),
            Subjects(nats_settings.subject_root),
            nats_client,
            running,
            recall,
        )
    finally:
        await recall.stop()
        await running.stop()


async def _search(forgetting: Forgetting, owner: Owner, query: str, limit: int) -> list[str]:
    response = await forgetting.recall.search(
        owner.tenant_id, SearchRequest(user_id=owner.user_id, query=query, limit=limit)
    )
    await forgetting.recall.recall_counts.drain()
    return [item.id for item in response.items]


async def test_important_recalled_memories_stay_unimportant_ones_are_compressed_then_deleted(
    forgetting: Forgetting,
) -> None:
    await forgetting.ingest(ALICE, "falcon", IMPORTANT)
    for topic, texts in CHIT_CHAT.items():
        await forgetting.ingest(ALICE, topic, texts)
    await forgetting.ingest(BOB, "bob-bread", CHIT_CHAT["bread"])
    await forgetting.ingest(BOB, "bob-catan", CHIT_CHAT["catan"])
    await forgetting.wait_episodes(ALICE, 4)
    await forgetting.wait_episodes(BOB, 2)
    alice = before_prune = await forgetting.by_session(ALICE)
    falcon = alice["falcon"]
    assert falcon.importance >= 0.6
    assert all(alice[topic].importance <= 0.3 for topic in CHIT_CHAT), {t: alice[t].importance for t in CHIT_CHAT}

    # Recalled three times through L1 (the recall service counts it, as in production).
    for _ in range(3):
        assert await _search(forgetting, ALICE, "When does Project Falcon launch?", limit=1) == [falcon.episode_id]
    falcon = (await forgetting.by_session(ALICE))["falcon"]
    assert falcon.recall_count == 3

    clock = Clock(START)
    report = await run_prune_pass(forgetting.resources, forgetting.pruner, clock.advance(95))
    # Age alone (90 days, never recalled since) would have forgotten the important memory: it stays.
    store = await forgetting.episodes()
    (falcon_times,) = await store.scroll_times(ALICE, SearchFilter(ids=[falcon.episode_id]), 10)
    assert retention(falcon_times, clock(), PrunePolicy.from_days(90, 30)) == "unrecalled"
    assert report.kept_by_importance == 1
    assert report.episodes_compressed == 5  # alice's three, bob's two
    assert report.summaries_written == 2
    assert report.removed["episodes_unrecalled"] == 5
    assert report.removed["episodes_expired"] == 0

    alice = await forgetting.by_session(ALICE)
    assert set(alice) == {"falcon", next(s for s in alice if s.startswith("compressed-"))}
    compressed = next(e for e in alice.values() if e.is_compressed)
    assert sorted(compressed.source_session_ids) == ["bread", "catan", "octopus"]
    sources = {topic: episode.episode_id for topic, episode in before_prune.items() if topic in CHIT_CHAT}
    assert dict(zip(compressed.source_session_ids, compressed.source_episode_ids, strict=True)) == sources
    assert compressed.importance <= 0.3
    # The sources' passages went; the summary has one passage per source session.
    passages = await store.passages(ALICE, compressed.episode_id)
    assert sorted(p.session_id for p in passages) == ["bread", "catan", "octopus"]
    index = await forgetting.resources.vector_index()
    assert {r.payload["episode_id"] for r in await index.scroll(PASSAGES, ALICE, SearchFilter(), 100)} == {
        falcon.episode_id,
        compressed.episode_id,
    }
    # Raw sessions are untouched (they stay until their own TTL).
    raw = await stream_messages(
        forgetting.nats.jetstream(),
        forgetting.subjects.session_stream,
        forgetting.subjects.session_completed("acme", "alice"),
    )
    assert len(raw) == 4

    # memory_expand shows where it came from: every source session.
    expanded = await forgetting.recall.expand("acme", "alice", compressed.episode_id, count_recall=False)
    assert expanded is not None
    assert sorted(expanded.provenance["source_session_ids"]) == ["bread", "catan", "octopus"]

    # It still answers a question about what it compressed.
    assert (await _search(forgetting, ALICE, "What was the documentary about octopuses?", limit=3))[0] == (
        compressed.episode_id
    )
    assert (await _search(forgetting, ALICE, "Who did I play Catan with?", limit=3))[0] == compressed.episode_id

    # Idempotent: the same pass again changes nothing.
    before = await _snapshot(forgetting)
    again = await run_prune_pass(forgetting.resources, forgetting.pruner, clock())
    assert (again.episodes_compressed, again.summaries_written) == (0, 0)
    assert again.removed == {"episodes_expired": 0, "episodes_unrecalled": 0, "passages": 0, "facts_superseded": 0}
    assert await _snapshot(forgetting) == before

    # Erasing a user reaches the compressed summary too.
    bob_compressed = [e for e in await store.scroll(BOB) if e.is_compressed]
    assert len(bob_compressed) == 1 and sorted(bob_compressed[0].source_session_ids) == ["bob-bread", "bob-catan"]
    completed = await _erase_user(forgetting, BOB)
    assert completed.removed.get("episodes", 0) >= 1
    assert await store.count(BOB) == 0
    assert await store.count_passages(BOB) == 0
    assert len(await store.scroll(ALICE)) == 2  # alice untouched

    # Later, the compressed summary is forgotten in turn (deleted); the important memory still stays.
    report = await run_prune_pass(forgetting.resources, forgetting.pruner, clock.advance(150))
    assert report.removed["episodes_unrecalled"] == 1
    assert report.episodes_compressed == 0
    assert [e.session_id for e in await store.scroll(ALICE)] == ["falcon"]


async def _snapshot(forgetting: Forgetting) -> dict[str, dict[str, object]]:
    """Every episode and passage point of every owner, with its payload."""
    index = await forgetting.resources.vector_index()
    points: dict[str, dict[str, object]] = {}
    for owner in (ALICE, BOB):
        for collection in (EPISODES, PASSAGES):
            points.update({r.id: dict(r.payload) for r in await index.scroll(collection, owner, SearchFilter(), 1000)})
    return points


async def test_erasing_one_compressed_source_episode_removes_the_summary_and_that_raw_session(
    forgetting: Forgetting,
) -> None:
    for topic in ("octopus", "catan"):
        await forgetting.ingest(ALICE, topic, CHIT_CHAT[topic])
    sources = {e.session_id: e.episode_id for e in await forgetting.wait_episodes(ALICE, 2)}
    report = await run_prune_pass(forgetting.resources, forgetting.pruner, START + timedelta(days=95))
    assert report.summaries_written == 1
    store = await forgetting.episodes()
    (compressed,) = await store.scroll(ALICE)
    assert compressed.is_compressed

    completed = await _erase(forgetting, ALICE, ErasureTarget(kind="episode", item_id=sources["octopus"]))
    assert completed.removed["compressed_episodes"] == 1
    assert await store.count(ALICE) == 0 and await store.count_passages(ALICE) == 0
    raw = await stream_messages(
        forgetting.nats.jetstream(),
        forgetting.subjects.session_stream,
        forgetting.subjects.session_completed("acme", "alice"),
    )
    assert [message.data.count(b'"catan"') for message in raw] == [1]  # the other source's raw session stays


async def test_a_crash_after_the_summary_and_an_erasure_in_flight_are_handled(forgetting: Forgetting) -> None:
    for topic in ("octopus", "catan"):
        await forgetting.ingest(ALICE, topic, CHIT_CHAT[topic])
    sources = await forgetting.wait_episodes(ALICE, 2)
    store = await forgetting.episodes()
    later = START + timedelta(days=95)

    # An erasure of the user is running: nothing is written for them (it would bring erased data back).
    tombstones = await forgetting.resources.tombstones()
    await tombstones.mark(ALICE, "erasure-in-flight", None, datetime.now(UTC))
    report = await run_prune_pass(forgetting.resources, forgetting.pruner, later)
    assert (report.summaries_written, report.removed["episodes_unrecalled"]) == (0, 0)
    assert {e.episode_id for e in await store.scroll(ALICE)} == {e.episode_id for e in sources}
    tombstone = await tombstones.get(ALICE)
    assert tombstone is not None
    await tombstones.settle(ALICE, tombstone)

    # A pass that crashed after writing the summary and before deleting its sources: the next pass
    # deletes the sources and writes no second summary.
    compressed = compress_episodes(ALICE, sources, now=later, max_chars=forgetting.pruner.compressed_summary_max_chars)
    await store.write(ALICE, compressed.episode, compressed.passages)
    report = await run_prune_pass(forgetting.resources, forgetting.pruner, later)
    assert (report.summaries_written, report.episodes_compressed) == (0, 0)
    assert report.removed["episodes_unrecalled"] == 2
    assert [e.episode_id for e in await store.scroll(ALICE)] == [compressed.episode.episode_id]


async def _erase_user(forgetting: Forgetting, owner: Owner) -> ErasureCompleted:
    return await _erase(forgetting, owner, ErasureTarget(kind="user"))


async def _erase(forgetting: Forgetting, owner: Owner, target: ErasureTarget) -> ErasureCompleted:
    request = ErasureRequested(
        event_id=uuid.uuid4(),
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        target=target,
        requested_at=datetime.now(UTC),
        reason="test",
    )
    publisher = next(iter(forgetting.running.contexts.values())).publisher
    subjects = forgetting.subjects
    await publisher.publish(
        request,
        subjects.erasure_requested(owner.tenant_id, owner.user_id),
        message_id(request),
        subjects.derived_stream,
    )
    found = await wait_for(
        lambda: stream_messages(
            forgetting.nats.jetstream(),
            subjects.derived_stream,
            subjects.erasure_completed(owner.tenant_id, owner.user_id),
        ),
        timeout_s=60,
        what="ErasureCompleted",
    )
    return ErasureCompleted.model_validate_json(found[-1].data)
