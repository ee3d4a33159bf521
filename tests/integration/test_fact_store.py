"""FactStore contract, against every VectorIndex adapter (Qdrant Edge and qdrant-client local
mode), with real multilingual-e5 embeddings and the real KeywordEncoder."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from services.common.domain.facts import FactCandidate, FactProvenance
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.facts import FactLifetime, FactStore
from services.common.stores.payload_fields import metadata_match
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import FACTS, HybridWeights, SearchFilter, VectorIndex, VectorRecord
from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

ALICE = Owner("acme", "alice")
SAME_TENANT_OTHER_USER = Owner("acme", "bob")
OTHER_TENANT_SAME_USER = Owner("globex", "alice")
T0 = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
WEIGHTS = HybridWeights(keyword=0.5, dense=0.5)

ADAPTERS: dict[str, Callable[[Path], VectorIndex]] = {
    "edge": lambda directory: EdgeVectorIndex(directory),
    "qdrant_local": lambda directory: QdrantServerVectorIndex(AsyncQdrantClient(path=str(directory))),
}


@pytest.fixture(scope="module")
def embedder() -> LocalE5Embedder:
    return LocalE5Embedder(batch_size=16)


@pytest.fixture(scope="module")
def keywords() -> KeywordEncoder:
    encoder = KeywordEncoder()
    encoder.warm_up()
    return encoder


@pytest.fixture(params=list(ADAPTERS))
async def index(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalE5Embedder
) -> AsyncIterator[VectorIndex]:
    opened = ADAPTERS[request.param](tmp_path / "data")
    await opened.ensure_collection(FACTS, embedder.dim)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def store(index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder) -> FactStore:
    return FactStore(index, embedder, keywords)


def candidate(
    value: str = "Go",
    *,
    subject: str = "DGIA project",
    attribute: str = "uses_tool",
    episode: str = "e1",
    days: int = 0,
    owner: Owner = ALICE,
) -> FactCandidate:
    return FactCandidate(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        scope="personal",
        subject=subject,
        attribute=attribute,
        value=value,
        text=f"The {subject} uses {value}.",
        language="en",
        provenance=FactProvenance(
            episode_id=episode, session_id=f"s-{episode}", occurred_at=T0 + timedelta(days=days), source="extraction"
        ),
    )


async def test_round_trip_and_channels(store: FactStore, index: VectorIndex) -> None:
    written = await store.write(ALICE, candidate(), channel="private", now=T0)
    assert written.plan.outcome == "created"
    (fact,) = written.written

    (stored,) = await store.get(ALICE, [fact.fact_id])
    assert stored.fact == fact and stored.channels == ("private",) and stored.recall_count == 0
    assert await store.existing(ALICE, "dgia PROJECT") == [stored]
    assert await store.scroll(ALICE, SearchFilter(match={"attribute": "uses_tool"})) == [stored]
    (raw,) = await index.get(FACTS, ALICE, [fact.fact_id])
    assert raw.payload["subject_key"] == "dgia project" and raw.payload["channel"] == ["private"]
    assert "recall_count" not in raw.payload

    # Stated again in a group: one more observation, visible to groups from now on.
    again = await store.write(ALICE, candidate(episode="e2", days=1), channel="group", now=T0)
    assert again.plan.outcome == "reinforced"
    (stored,) = await store.get(ALICE, [fact.fact_id])
    assert stored.fact.status == "confirmed" and stored.channels == ("group", "private")
    assert stored.visible_channel == "group"
    assert await store.count(ALICE) == 1


async def test_replay_is_a_noop_and_rewrites_keep_recall_counts(store: FactStore, index: VectorIndex) -> None:
    (fact,) = (await store.write(ALICE, candidate(), channel="private", now=T0)).written
    replay = await store.write(ALICE, candidate(), channel="private", now=T0 + timedelta(hours=1))
    assert replay.plan.outcome == "duplicate" and replay.written == []

    recalled_at = T0.timestamp() + 60.5
    await index.set_payload(FACTS, ALICE, [fact.fact_id], {"recall_count": 4, "last_recalled_at_ts": recalled_at})
    await store.write(ALICE, candidate(episode="e2", days=1), channel="private", now=T0)
    (stored,) = await store.get(ALICE, [fact.fact_id])
    assert stored.fact.evidence_count == 2
    assert (stored.recall_count, stored.last_recalled_at_ts) == (4, recalled_at)


async def test_other_owners_see_nothing(store: FactStore, embedder: LocalE5Embedder, keywords: KeywordEncoder) -> None:
    (fact,) = (await store.write(ALICE, candidate(), channel="private", now=T0)).written
    dense = await embedder.embed_query("which tool does DGIA use")
    sparse = keywords.encode_query("which tool does DGIA use")
    (hit,) = await store.search(ALICE, dense=dense, sparse=sparse, weights=WEIGHTS, limit=5)
    assert hit.stored.fact == fact
    for other in (SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER):
        assert await store.get(other, [fact.fact_id]) == []
        assert await store.existing(other, "DGIA project") == []
        assert await store.scroll(other) == []
        assert await store.search(other, dense=dense, sparse=sparse, weights=WEIGHTS, limit=5) == []
        assert await store.delete(other, [fact.fact_id]) == 0
        # Their own identical statement is their own fact, planned against their facts only.
        theirs = await store.write(other, candidate(owner=other), channel="private", now=T0)
        assert theirs.plan.outcome == "created" and theirs.plan.fact_id != fact.fact_id
    with pytest.raises(ValueError, match="written as"):
        await store.write(SAME_TENANT_OTHER_USER, candidate(), channel="private", now=T0)
    assert await store.delete(ALICE, [fact.fact_id]) == 1
    assert await store.get(ALICE, [fact.fact_id]) == []


async def test_old_points_read_with_defaults_and_bad_points_are_skipped(
    store: FactStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    (fact,) = (await store.write(ALICE, candidate(), channel="private", now=T0)).written
    (raw,) = await index.get(FACTS, ALICE, [fact.fact_id])
    # An early point: no channel list (nor recall counts).
    old_payload = {key: value for key, value in raw.payload.items() if key != "channel"}
    broken_id = "0b5c7f5e-2f0a-4a53-9d0e-3d2b1d6a9c11"
    broken_payload = {"kind": "fact", "subject_key": "dgia project", "text": "no structure"}
    (vector,) = await embedder.embed_passages([fact.text])
    sparse = keywords.encode_document(fact.text)
    await index.upsert(
        FACTS,
        ALICE,
        [
            VectorRecord(id=fact.fact_id, dense=vector, sparse=sparse, payload=old_payload),
            VectorRecord(id=broken_id, dense=vector, sparse=sparse, payload=broken_payload),
        ],
    )
    (stored,) = await store.existing(ALICE, "DGIA project")
    assert stored.fact == fact and stored.channels == () and stored.visible_channel == "private"
    assert await store.get(ALICE, [fact.fact_id, broken_id]) == [stored]
    # Writing on the subject still works with the bad point next to it.
    written = await store.write(ALICE, candidate("Rust", episode="e2"), channel="private", now=T0)
    assert written.plan.outcome == "created"


async def test_rekey_moves_facts_through_the_write_policy(store: FactStore) -> None:
    await store.write(ALICE, candidate("Go", subject="D.G.I.A.", episode="e1"), channel="group", now=T0)
    await store.write(ALICE, candidate("Go", subject="DGIA", episode="e2", days=1), channel="private", now=T0)
    await store.write(
        ALICE, candidate("Seoul", subject="dgia", attribute="lives_in", episode="e3"), channel="private", now=T0
    )

    moved = await store.rekey_subject(ALICE, from_subjects=["D.G.I.A.", "dgia"], to_subject="DGIA", now=T0)

    assert moved == 1  # "dgia" is the surviving name's own spelling: its facts stay
    assert await store.existing(ALICE, "D.G.I.A.") == []
    by_value = {s.fact.value: s for s in await store.existing(ALICE, "DGIA")}
    assert set(by_value) == {"Go", "Seoul"}
    go = by_value["Go"]
    assert go.fact.evidence_count == 2 and go.fact.status == "confirmed"
    assert go.channels == ("group", "private")
    # Running it again (a redelivered merge) moves nothing.
    assert await store.rekey_subject(ALICE, from_subjects=["D.G.I.A."], to_subject="DGIA", now=T0) == 0


async def test_a_fact_dedup_merges_onto_another_name_keeps_its_sessions_metadata(store: FactStore) -> None:
    # services/dedup merges two names of one entity and re-keys the facts about the merged-away one.
    for name, episode, project in (("D.G.I.A.", "e1", "atlas"), ("DGIA", "e2", "bori")):
        said = candidate("Go", subject=name, episode=episode)
        observed = said.provenance.model_copy(update={"metadata": {"project": project}})
        await store.write(ALICE, said.model_copy(update={"provenance": observed}), channel="private", now=T0)

    assert await store.rekey_subject(ALICE, from_subjects=["D.G.I.A."], to_subject="DGIA", now=T0) == 1

    (merged,) = await store.existing(ALICE, "DGIA")
    assert merged.fact.metadata_values == {"project": ["atlas", "bori"]}
    assert {p.episode_id: p.metadata for p in merged.fact.provenance} == {
        "e1": {"project": "atlas"},
        "e2": {"project": "bori"},
    }
    # The filter of search and the memory list finds the merged fact under either session's value.
    for project in ("atlas", "bori"):
        found = await store.scroll(ALICE, SearchFilter(match=metadata_match({"project": project})))
        assert [s.fact_id for s in found] == [merged.fact_id]


async def test_maintenance_reaches_every_point_readable_or_not(
    store: FactStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    (kept,) = (await store.write(ALICE, candidate("Go", episode="e1"), channel="private", now=T0)).written
    (gone,) = (await store.write(ALICE, candidate("Rust", episode="e2"), channel="private", now=T0)).written
    # A point that does not read as a fact: it still cites an episode, and is superseded since an ISO time.
    broken_id = "0b5c7f5e-2f0a-4a53-9d0e-3d2b1d6a9c11"
    broken_payload = {"kind": "fact", "text": "Minsu earns 5M", "episode_ids": ["e2"], "status": "superseded"}
    broken_payload["valid_to"] = T0.isoformat()
    (vector,) = await embedder.embed_passages(["Minsu earns 5M"])
    record = VectorRecord(id=broken_id, dense=vector, sparse=keywords.encode_document("x"), payload=broken_payload)
    await index.upsert(FACTS, ALICE, [record])
    assert {s.fact_id for s in await store.scroll(ALICE)} == {kept.fact_id, gone.fact_id}

    lifetimes = {lifetime.fact_id: lifetime for lifetime in await store.scroll_lifetimes(ALICE, None, 100)}
    assert lifetimes[broken_id] == FactLifetime(broken_id, superseded=True, ended_at_ts=T0.timestamp())
    assert not lifetimes[kept.fact_id].superseded  # current, whatever its last update
    texts = {p.point_id: p.texts for p in await store.fact_texts(ALICE, 100)}
    assert texts[broken_id] == ("Minsu earns 5M",)
    assert texts[kept.fact_id] == (kept.text, kept.value, kept.subject)
    assert await store.owners() == {ALICE}

    assert (
        await store.record_recalls(ALICE, {kept.fact_id: (2, 100.0), "5d2f3c1e-0000-4000-8000-000000000001": (1, 1.0)})
        == 1
    )
    assert await store.record_recalls(ALICE, {kept.fact_id: (1, 50.0)}) == 1
    (recalled,) = await store.get(ALICE, [kept.fact_id])
    assert recalled.recall_count == 3 and recalled.last_recalled_at_ts == 100.0

    # Deleting what cites an episode takes the unreadable point with the readable one.
    assert await store.delete_citing(ALICE, "e2") == 2
    assert [s.fact_id for s in await store.scroll(ALICE)] == [kept.fact_id]
    assert await store.count(ALICE) == 1
    assert await store.delete_owner(SAME_TENANT_OTHER_USER) == 0
    assert await store.delete_owner(ALICE) == 1
    assert await store.count(ALICE) == 0


async def test_pages_follow_point_ids_without_repeats_or_gaps(store: FactStore) -> None:
    written: set[str | None] = set()
    for number in range(7):
        result = await store.write(ALICE, candidate(f"Tool{number}", episode=f"e{number}"), channel="private", now=T0)
        written.add(result.plan.fact_id)
    seen: list[str] = []
    start: str | None = None
    while True:
        page = await store.page(ALICE, limit=3, start_id=start)
        seen += [s.fact_id for s in page.facts]
        if page.next_id is None:
            break
        start = page.next_id
    assert seen == sorted(seen) and set(seen) == written and len(seen) == 7
    assert (await store.page(SAME_TENANT_OTHER_USER, limit=10)).facts == []


async def test_history_lists_every_value_of_the_attribute_oldest_first(store: FactStore) -> None:
    seoul = await store.write(
        ALICE, candidate("Seoul", subject="user", attribute="lives_in"), channel="private", now=T0
    )
    busan = await store.write(
        ALICE, candidate("Busan", subject="user", attribute="lives_in", episode="e2", days=5), channel="private", now=T0
    )
    await store.write(ALICE, candidate("Go"), channel="private", now=T0)  # another subject: not in the history
    history = await store.history(ALICE, str(busan.plan.fact_id))
    assert [h.fact.value for h in history] == ["Seoul", "Busan"]
    assert history[0].fact.superseded_by == busan.plan.fact_id and history[0].fact.valid_to is not None
    assert await store.history(ALICE, str(seoul.plan.fact_id)) == history
    assert await store.history(SAME_TENANT_OTHER_USER, str(seoul.plan.fact_id)) == []


async def test_a_correction_supersedes_the_old_value_even_for_a_multi_valued_attribute(store: FactStore) -> None:
    (old,) = (await store.write(ALICE, candidate("Java"), channel="private", now=T0)).written
    later = T0 + timedelta(days=1)
    fixed = candidate("Kotlin", episode="correction-1", days=1).model_copy(
        update={"provenance": FactProvenance(episode_id="correction-1", occurred_at=later, source="api")}
    )
    result = await store.correct(ALICE, old.fact_id, fixed, channel="private", now=later)
    assert result is not None and result.plan.fact_id != old.fact_id
    (before,) = await store.get(ALICE, [old.fact_id])
    assert (before.fact.status, before.fact.valid_to, before.fact.superseded_by) == (
        "superseded",
        later,
        result.plan.fact_id,
    )
    (after,) = await store.get(ALICE, [str(result.plan.fact_id)])
    assert after.fact.is_current and after.fact.provenance[-1].source == "api"
    assert await store.correct(SAME_TENANT_OTHER_USER, old.fact_id, fixed, channel="private", now=later) is None
