"""The erasure tombstone store against a real nats-server: how writers are judged against a user's
erasure, how they are recorded in flight (per process), and the recall API refusing an explicit save
while the user's erasure runs."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.common.stores.tombstones import Tombstone, TombstoneStore, UserBeingErased, Verdict, judge
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import RecallStack, build_stack, embedder, keywords
from tests.support.events import wait_for

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

ALICE, BOB = Owner("acme", "alice"), Owner("acme", "bob")
STARTED = datetime(2026, 5, 2, tzinfo=UTC)


def _tombstone(cut: int | None, state: str = "erasing") -> Tombstone:
    return Tombstone.model_validate({"erasure_id": "e1", "session_cut": cut, "state": state, "started_at": STARTED})


@pytest.mark.parametrize(
    ("tombstone", "session_seq", "verdict"),
    [
        (None, 7, Verdict.PROCEED),
        (None, None, Verdict.PROCEED),
        (_tombstone(10), 10, Verdict.SKIP),  # at the cut: published before the erasure
        (_tombstone(10, "erased"), 3, Verdict.SKIP),  # erased lineage stays erased
        (_tombstone(10), 11, Verdict.WAIT),  # the user came back while the erasure runs
        (_tombstone(10), None, Verdict.WAIT),  # unknown lineage (dedup, an explicit save)
        (_tombstone(None), 1, Verdict.WAIT),  # cut not read yet: everything of the user waits
        (_tombstone(10, "erased"), 11, Verdict.PROCEED),
        (_tombstone(10, "erased"), None, Verdict.PROCEED),
    ],
)
def test_judge(tombstone: Tombstone | None, session_seq: int | None, verdict: Verdict) -> None:
    assert judge(tombstone, session_seq) is verdict


@pytest.fixture
def stores(nats_settings: NatsSettings, nats_client: NatsClient) -> tuple[TombstoneStore, ...]:
    """Two stores on one subject root: two processes (a writer's and the pruner's)."""
    subjects = Subjects(nats_settings.subject_root)
    return TombstoneStore(nats_client.jetstream(), subjects), TombstoneStore(nats_client.jetstream(), subjects)


async def test_writers_are_recorded_in_flight_per_process(stores: tuple[TombstoneStore, ...]) -> None:
    writer, pruner = stores
    async with writer.guard(ALICE, "episodic-summarizer", 4) as guard:
        assert not guard.erased
        async with pruner.guard(ALICE, "dedup", None):
            assert sorted(await pruner.busy_writers(ALICE)) == ["dedup", "episodic-summarizer"]
        assert await pruner.busy_writers(BOB) == []
        assert await pruner.wait_for_writers(ALICE, timeout_s=0.2) == ["episodic-summarizer"]
    assert await pruner.busy_writers(ALICE) == []
    assert await pruner.wait_for_writers(ALICE, timeout_s=0.2) == []
    # A record nobody updated for longer than the stale age belongs to a crashed process.
    async with writer.guard(ALICE, "semantic-extractor", 4):
        stale = TombstoneStore(pruner.js, pruner.subjects, writer_stale_s=-1)
        assert await stale.busy_writers(ALICE) == []


async def test_a_live_writer_is_re_stamped_and_a_silent_one_goes_stale(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    js, subjects = nats_client.jetstream(), Subjects(nats_settings.subject_root)
    beating = TombstoneStore(js, subjects, heartbeat_s=0.05)
    silent = TombstoneStore(js, subjects, heartbeat_s=3600)  # stands for a crashed process
    strict = TombstoneStore(js, subjects, writer_stale_s=0.3)
    async with beating.guard(ALICE, "semantic-extractor", 1), silent.guard(BOB, "dedup", None):
        started = time.monotonic()

        async def long_call_still_seen_silent_one_not() -> bool:
            return (
                time.monotonic() - started > 1.0
                and await strict.busy_writers(ALICE) == ["semantic-extractor"]
                and await strict.busy_writers(BOB) == []
            )

        await wait_for(long_call_still_seen_silent_one_not, timeout_s=15, what="the heartbeat to keep Alice's record")
    assert await strict.busy_writers(ALICE) == []
    await beating.close()
    await silent.close()


async def test_erased_lineage_is_skipped_and_later_work_waits_for_the_erasure(
    stores: tuple[TombstoneStore, ...],
) -> None:
    writer, pruner = stores
    tombstone = await pruner.mark(ALICE, "e1", 10, STARTED)
    async with writer.guard(ALICE, "episodic-summarizer", 10) as guard:
        assert guard.erased
        assert not await guard.still_allowed()
    with pytest.raises(UserBeingErased, match="acme/alice"):
        async with writer.guard(ALICE, "recall-api", None, wait=False):
            pass
    async with writer.guard(BOB, "recall-api", None, wait=False) as other:
        assert not other.erased

    entered = asyncio.Event()

    async def later_session() -> bool:
        async with writer.guard(ALICE, "episodic-summarizer", 11) as later:
            entered.set()
            return later.erased

    task = asyncio.create_task(later_session())
    # While it waits it is not recorded in flight: the erasure is never kept waiting by it.
    assert await pruner.wait_for_writers(ALICE, timeout_s=5) == []
    assert not entered.is_set()
    await pruner.settle(ALICE, tombstone)
    assert await asyncio.wait_for(task, timeout=10) is False
    await pruner.mark(BOB, "e2", 3, STARTED)
    with pytest.raises(UserBeingErased):  # waited its bounded time, then gives up (the message is retried)
        async with writer.guard(BOB, "semantic-extractor", 4, wait_s=0.3):
            pass


async def test_recall_api_refuses_an_explicit_save_while_the_user_is_erased(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    stack: RecallStack
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords) as stack:
        tombstones = await stack.resources.tombstones()
        tombstone = await tombstones.mark(ALICE, "e1", 0, STARTED)
        body = {"user_id": "alice", "text": "The user lives in Busan.", "attribute": "lives_in", "value": "Busan"}
        refused = await stack.http.post("/v1/facts", json=body)
        assert refused.status_code == 503, refused.text
        assert "erasure" in refused.text
        assert (await stack.http.get("/v1/facts", params={"user_id": "alice"})).json()["items"] == []
        assert (await stack.http.post("/v1/facts", json={**body, "user_id": "bob"})).status_code == 200
        await tombstones.settle(ALICE, tombstone)
        saved = await stack.http.post("/v1/facts", json=body)
        assert saved.status_code == 200, saved.text
        assert await tombstones.busy_writers(ALICE) == []
