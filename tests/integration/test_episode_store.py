"""EpisodeStore contract, against every VectorIndex adapter (Qdrant Edge and qdrant-client local
mode), with real multilingual-e5 embeddings and the real KeywordEncoder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.embedding_wrappers import DelegatingEmbedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.episodes import (
    DeletedEpisodes,
    Episode,
    EpisodeStore,
    ModelUsage,
    Passage,
    PointTimes,
    episode_id_for,
    passage_id_for,
)
from services.common.stores.passage_points import WITHOUT_TURN_POINTS, PassageHit
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import (
    EPISODES,
    PASSAGES,
    HybridWeights,
    SearchFilter,
    VectorIndex,
    VectorRecord,
)
from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

ALICE = Owner("acme", "alice")
SAME_TENANT_OTHER_USER = Owner("acme", "bob")
OTHER_TENANT_SAME_USER = Owner("globex", "alice")
WHEN = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
WEIGHTS = HybridWeights(keyword=0.5, dense=0.5)

ADAPTERS: dict[str, Callable[[Path], VectorIndex]] = {
    "edge": lambda directory: EdgeVectorIndex(directory),
    "qdrant_local": lambda directory: QdrantServerVectorIndex(AsyncQdrantClient(path=str(directory))),
}

# Exactly the keys the episodic summarizer has always written (plus the owner stamped by the adapter).
EPISODE_KEYS = {
    "tenant_id",
    "user_id",
    "agent_id",
    "session_id",
    "scope",
    "channel",
    "occurred_at",
    "occurred_at_ts",
    "expires_at",
    "expires_at_ts",
    "episode_id",
    "language",
    "metadata",
    "kind",
    "summary",
    "abstract",
    "entity_names",
    "source_event_id",
    "raw_stream",
    "raw_stream_sequence",
    "passage_count",
    "recall_count",
    "last_recalled_at_ts",
    "stored_at_ts",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "importance",  # issue 19: scored when the episode is written
}
PASSAGE_KEYS = {
    "tenant_id",
    "user_id",
    "agent_id",
    "session_id",
    "scope",
    "channel",
    "occurred_at",
    "occurred_at_ts",
    "expires_at",
    "expires_at_ts",
    "episode_id",
    "language",
    "metadata",
    "kind",
    "index",
    "text",
    "first_turn",
    "last_turn",
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
    for collection in (EPISODES, PASSAGES):
        await opened.ensure_collection(collection, embedder.dim)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def store(index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder) -> EpisodeStore:
    return EpisodeStore(index, embedder, keywords)


def billing_episode(owner: Owner = ALICE, session_id: str = "s-billing") -> Episode:
    return Episode(
        episode_id=episode_id_for(owner, session_id),
        session_id=session_id,
        agent_id="assistant",
        occurred_at=WHEN,
        expires_at=WHEN + timedelta(days=180),
        scope="personal",
        channel="private",
        language="en",
        summary="Alice decided to build the DGIA billing service in Go by June 30.",
        abstract="DGIA billing service in Go by June 30.",
        entity_names=("DGIA",),
        source_event_id="7f4c6f0e-1111-4c9a-9a53-0c1e5c3b7d11",
        raw_stream="sessions",
        raw_stream_sequence=42,
        usage=ModelUsage(model="stub", prompt_tokens=120, completion_tokens=30, cost_usd=0.00018),
    )


TURNS = [
    "We decided to build the DGIA billing service in Go.",
    "The deadline for DGIA is June 30 and Minsu reviews the code.",
    "온비서 프로젝트의 출시일이 다음 달 15일로 정해졌다.",
]


def with_passages(episode: Episode, turns: list[str]) -> list[Passage]:
    return [episode.passage(i, text, first_turn=2 * i, last_turn=2 * i + 1) for i, text in enumerate(turns)]


def test_ids_are_the_ones_existing_points_have() -> None:
    # Pinned values: points written by earlier versions keep their ids.
    episode_id = episode_id_for(ALICE, "s-1")
    assert episode_id == "57392634-803e-5781-be96-280dc3606807"
    assert passage_id_for(episode_id, 0) == "34c9ebd9-a22d-5abf-98a4-dbbd1554300a"


async def test_round_trip(
    store: EpisodeStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    episode = billing_episode()
    passages = with_passages(episode, TURNS)
    before = datetime.now(UTC).timestamp()
    stored = await store.write(ALICE, episode, passages)
    assert stored.stored_at_ts is not None and before <= stored.stored_at_ts <= datetime.now(UTC).timestamp()
    assert stored == replace(episode, passage_count=3, stored_at_ts=stored.stored_at_ts)

    assert await store.get(ALICE, [episode.episode_id]) == [stored]
    assert await store.scroll(ALICE) == [stored]
    assert await store.passages(ALICE, episode.episode_id) == passages
    assert await store.count(ALICE) == 1

    (raw,) = await index.get(EPISODES, ALICE, [episode.episode_id])
    assert set(raw.payload) == EPISODE_KEYS
    assert raw.payload["occurred_at"] == WHEN.isoformat() and raw.payload["occurred_at_ts"] == WHEN.timestamp()
    raw_passages = await index.scroll(PASSAGES, ALICE)
    assert {r.id for r in raw_passages} == {passage_id_for(episode.episode_id, i) for i in range(3)}
    assert all(set(r.payload) == PASSAGE_KEYS for r in raw_passages)

    query = "when is the 온비서 launch"
    dense = await embedder.embed_query(query)
    sparse = keywords.encode_query(query)
    (hit,) = await store.search(ALICE, dense=dense, sparse=sparse, weights=WEIGHTS, limit=5)
    assert hit.episode == stored and 0 <= hit.score <= 1
    passage_hits = await store.search_passages(ALICE, dense=dense, sparse=sparse, weights=WEIGHTS, limit=1)
    assert [h.passage for h in passage_hits] == [passages[2]]


# A passage of eight turns, one of them about the puppy: as a whole it is about work.
LONG_TURNS = [
    "Maria: hey how was your week",
    "Jonathan: busy, the team offsite ran long and we planned the Q3 roadmap",
    "Maria: ugh the roadmap again, did finance sign off on the budget",
    "Jonathan: not yet, they want the vendor quotes first",
    "Maria: ok I'll chase the vendors on Monday",
    "Jonathan: thanks! oh and Sam named the new puppy Biscuit",
    "Maria: cute, is the printer on floor 3 still broken",
    "Jonathan: yes IT says next week",
]
LONG_PASSAGE = "\n".join(LONG_TURNS)


async def test_turn_points_count_for_their_passage_in_l1_only(
    store: EpisodeStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    episode = billing_episode()
    passage = episode.passage(0, LONG_PASSAGE, first_turn=0, last_turn=7)
    points = [episode.passage(n, text, first_turn=n, last_turn=n, within=0) for n, text in enumerate(LONG_TURNS)]
    stored = await store.write(ALICE, episode, [passage, *points])
    assert stored.passage_count == 1
    assert await store.passages(ALICE, episode.episode_id) == [passage]  # turn points are not passages
    assert await index.count(PASSAGES, ALICE) == 9
    raw_point = (await index.get(PASSAGES, ALICE, [points[5].passage_id]))[0].payload
    assert (raw_point["kind"], raw_point["within"], raw_point["text"]) == ("turn", 0, LONG_TURNS[5])

    query = "what did Sam call the puppy?"
    sparse = keywords.encode_query(query)

    async def search(dense: list[float] | None, *, turns: bool) -> list[PassageHit]:
        search_filter = None if turns else SearchFilter(exclude=WITHOUT_TURN_POINTS)
        return await store.search_passages(
            ALICE, dense=dense, sparse=sparse, weights=WEIGHTS, limit=10, search_filter=search_filter
        )

    dense = await embedder.embed_query(query)
    alone, folded = await search(dense, turns=False), await search(dense, turns=True)
    # One hit either way, naming the passage; its closest turn makes it closer in meaning, its words are its own.
    assert [h.passage for h in alone] == [h.passage for h in folded] == [passage]
    assert folded[0].dense_score is not None and alone[0].dense_score is not None
    assert folded[0].dense_score > alone[0].dense_score
    assert folded[0].keyword_score == pytest.approx(alone[0].keyword_score)
    assert folded[0].score > alone[0].score
    # Keywords alone: turn points carry none, so nothing changes.
    no_dense_alone, no_dense = await search(None, turns=False), await search(None, turns=True)
    assert [h.passage for h in no_dense] == [h.passage for h in no_dense_alone] == [passage]
    assert no_dense[0].score == pytest.approx(no_dense_alone[0].score)

    # A forgotten episode takes its turn points with it.
    assert await store.delete(ALICE, [episode.episode_id]) == DeletedEpisodes(episodes=1, passages=9)
    assert await index.count(PASSAGES, ALICE) == 0


async def test_replay_keeps_recall_counts_and_changes_nothing_else(store: EpisodeStore, index: VectorIndex) -> None:
    episode = billing_episode()
    await store.write(ALICE, episode, with_passages(episode, TURNS))
    recalled_at = WHEN.timestamp() + 3600.123456
    await index.set_payload(
        EPISODES, ALICE, [episode.episode_id], {"recall_count": 3, "last_recalled_at_ts": recalled_at}
    )
    before = (await index.get(EPISODES, ALICE, [episode.episode_id]))[0].payload

    replayed = await store.write(ALICE, episode, with_passages(episode, TURNS))

    assert (replayed.recall_count, replayed.last_recalled_at_ts) == (3, recalled_at)
    assert replayed.last_recalled_at == datetime.fromtimestamp(recalled_at, UTC)
    assert (await index.get(EPISODES, ALICE, [episode.episode_id]))[0].payload == before
    assert len(await store.passages(ALICE, episode.episode_id)) == 3


async def test_recall_counts_let_the_turn_being_answered_run_between_points(store: EpisodeStore) -> None:
    """The recall-count writer shares the event loop with L0: a batch of points is written one point
    at a time, yielding in between, so a request is held up by one point's write, not the batch's."""
    episodes = [billing_episode(session_id=f"s-recalled-{n}") for n in range(6)]
    for episode in episodes:
        await store.write(ALICE, episode, [])
    recalls = {episode.episode_id: (1, 100.0) for episode in episodes}
    writing = asyncio.ensure_future(store.record_recalls(ALICE, recalls))
    turns_meanwhile = 0
    while not writing.done():
        turns_meanwhile += 1
        await asyncio.sleep(0)
    assert await writing == 6
    assert turns_meanwhile >= 6  # once per point written (and before the first)


async def test_a_shorter_session_leaves_no_stale_passages(store: EpisodeStore, index: VectorIndex) -> None:
    episode = billing_episode()
    await store.write(ALICE, episode, with_passages(episode, TURNS))
    shorter = await store.write(ALICE, episode, with_passages(episode, TURNS[:1]))
    assert shorter.passage_count == 1
    assert [p.index for p in await store.passages(ALICE, episode.episode_id)] == [0]
    assert await index.count(PASSAGES, ALICE) == 1
    with pytest.raises(ValueError, match="another episode"):
        await store.write(ALICE, episode, with_passages(billing_episode(session_id="s-other"), TURNS))


async def test_other_owners_see_nothing(
    store: EpisodeStore, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    episode = billing_episode()
    await store.write(ALICE, episode, with_passages(episode, TURNS))
    dense = await embedder.embed_query("DGIA billing service")
    sparse = keywords.encode_query("DGIA billing service")
    for other in (SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER):
        assert await store.get(other, [episode.episode_id]) == []
        assert await store.scroll(other) == []
        assert await store.passages(other, episode.episode_id) == []
        assert await store.search(other, dense=dense, sparse=sparse, weights=WEIGHTS, limit=5) == []
        assert await store.search_passages(other, dense=dense, sparse=sparse, weights=WEIGHTS, limit=5) == []
        deleted = await store.delete(other, [episode.episode_id])
        assert (deleted.episodes, deleted.passages) == (0, 0)
    assert await store.get(ALICE, [episode.episode_id]) != []

    deleted = await store.delete(ALICE, [episode.episode_id])
    assert (deleted.episodes, deleted.passages) == (1, 3)
    assert await store.scroll(ALICE) == [] and await store.scroll_passages(ALICE) == []


async def test_old_points_read_with_defaults_and_bad_points_are_skipped(
    store: EpisodeStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    # An episode as the first summarizer wrote it: no language, abstract, entities, usage or expiry.
    old_id = episode_id_for(ALICE, "s-old")
    old_payload = {
        "kind": "episode",
        "episode_id": old_id,
        "agent_id": "assistant",
        "session_id": "s-old",
        "scope": "team",
        "channel": "group",
        "occurred_at": WHEN.isoformat(),
        "occurred_at_ts": WHEN.timestamp(),
        "summary": "The team moved the planning meeting to Thursday.",
    }
    broken_id = episode_id_for(ALICE, "s-broken")
    broken_payload = {"kind": "episode", "session_id": "s-broken", "summary": "no time at all"}
    (vector,) = await embedder.embed_passages([str(old_payload["summary"])])
    sparse = keywords.encode_document(str(old_payload["summary"]))
    await index.upsert(
        EPISODES,
        ALICE,
        [
            VectorRecord(id=old_id, dense=vector, sparse=sparse, payload=old_payload),
            VectorRecord(id=broken_id, dense=vector, sparse=sparse, payload=broken_payload),
        ],
    )

    (old,) = await store.scroll(ALICE)
    assert old == Episode(
        episode_id=old_id,
        session_id="s-old",
        agent_id="assistant",
        occurred_at=WHEN,
        summary="The team moved the planning meeting to Thursday.",
        abstract="The team moved the planning meeting to Thursday.",
        scope="team",
        channel="group",
    )
    assert old.expires_at is None and old.recall_count == 0 and old.usage == ModelUsage()
    assert await store.get(ALICE, [old_id, broken_id]) == [old]


async def test_maintenance_reaches_every_point_readable_or_not(
    store: EpisodeStore, index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    episode = billing_episode()
    await store.write(ALICE, episode, with_passages(episode, TURNS[:2]))
    # A point that does not read as an episode (no session, no time) must still expire and be found by text.
    broken_id = episode_id_for(ALICE, "s-broken")
    broken_payload = {"kind": "episode", "summary": "Minsu's salary", "expires_at_ts": 5.0, "occurred_at_ts": True}
    (vector,) = await embedder.embed_passages(["Minsu's salary"])
    await index.upsert(
        EPISODES,
        ALICE,
        [VectorRecord(id=broken_id, dense=vector, sparse=keywords.encode_document("x"), payload=broken_payload)],
    )
    assert [e.episode_id for e in await store.scroll(ALICE)] == [episode.episode_id]

    times = {t.point_id: t for t in await store.scroll_times(ALICE, None, 100)}
    assert times[broken_id] == PointTimes(broken_id, occurred_at_ts=None, expires_at_ts=5.0)
    assert times[episode.episode_id].occurred_at_ts == WHEN.timestamp()
    assert times[episode.episode_id].expires_at_ts == (WHEN + timedelta(days=180)).timestamp()
    passage_times = await store.scroll_passage_times(ALICE, None, 100)
    assert {t.expires_at_ts for t in passage_times} == {(WHEN + timedelta(days=180)).timestamp()}

    texts = {p.point_id: p.texts for p in await store.episode_texts(ALICE, 100)}
    assert texts[broken_id] == ("Minsu's salary",)
    assert texts[episode.episode_id] == (episode.summary, episode.abstract, "DGIA")
    assert sorted(t for p in await store.passage_texts(ALICE, 100) for t in p.texts) == sorted(TURNS[:2])
    assert await store.count(ALICE) == 2 and await store.count_passages(ALICE) == 2
    assert await store.owners() == {ALICE}

    # Recall counts add up per id; ids of other owners (or none) are skipped.
    assert (
        await store.record_recalls(
            ALICE, {episode.episode_id: (2, 100.0), episode_id_for(ALICE, "s-missing"): (1, 1.0)}
        )
        == 1
    )
    assert await store.record_recalls(SAME_TENANT_OTHER_USER, {episode.episode_id: (5, 500.0)}) == 0
    assert await store.record_recalls(ALICE, {episode.episode_id: (1, 50.0)}) == 1
    (recalled,) = await store.get(ALICE, [episode.episode_id])
    assert recalled.recall_count == 3 and recalled.last_recalled_at_ts == 100.0

    assert await store.delete_owner(SAME_TENANT_OTHER_USER) == DeletedEpisodes(episodes=0, passages=0)
    assert await store.delete_owner(ALICE) == DeletedEpisodes(episodes=2, passages=2)
    assert await store.count(ALICE) == 0 and await store.count_passages(ALICE) == 0


async def test_a_rewrite_keeps_when_the_episode_was_first_stored(store: EpisodeStore, index: VectorIndex) -> None:
    episode = billing_episode()
    first = await store.write(ALICE, episode, with_passages(episode, TURNS))
    await index.set_payload(EPISODES, ALICE, [episode.episode_id], {"stored_at_ts": 1_000.0})
    rewritten = await store.write(ALICE, replace(episode, summary="A new summary."), with_passages(episode, TURNS))
    assert first.stored_at_ts != 1_000.0 and rewritten.stored_at_ts == 1_000.0
    (times,) = await store.scroll_times(ALICE, None, 10)
    assert times.stored_at_ts == 1_000.0


async def test_pages_follow_point_ids_without_repeats_or_gaps(store: EpisodeStore) -> None:
    written: set[str] = set()
    for number in range(11):
        episode = billing_episode(session_id=f"s-{number}")
        written.add((await store.write(ALICE, episode, [])).episode_id)
    other = billing_episode(SAME_TENANT_OTHER_USER, "s-other")
    await store.write(SAME_TENANT_OTHER_USER, other, [])
    seen: list[str] = []
    start: str | None = None
    pages = 0
    while True:
        page = await store.page(ALICE, limit=4, start_id=start)
        seen += [e.episode_id for e in page.episodes]
        pages += 1
        if page.next_id is None:
            break
        start = page.next_id
    assert pages == 3 and seen == sorted(seen) and set(seen) == written
    # The start id is inclusive, and the next id is the first point of the next page.
    assert (await store.page(ALICE, limit=100, start_id=seen[5])).episodes[0].episode_id == seen[5]
    assert (await store.page(ALICE, limit=5)).next_id == seen[5]


class RecordingPassages(DelegatingEmbedder):
    def __init__(self, inner: LocalE5Embedder) -> None:
        super().__init__(inner)
        self.texts: list[str] = []

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return await self._inner.embed_passages(texts)


async def test_passage_vectors_embedded_ahead_are_stored_and_only_the_summary_is_embedded(
    index: VectorIndex, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    """The summarizer embeds the passages while the LLM writes the summary and hands the vectors in."""
    recording = RecordingPassages(embedder)
    store = EpisodeStore(index, recording, keywords)
    episode = billing_episode()
    passages = with_passages(episode, TURNS)
    ahead = await embedder.embed_passages(TURNS)
    with pytest.raises(ValueError, match="2 passage vectors for 3 passages"):
        await store.write(ALICE, episode, passages, passage_vectors=ahead[:2])
    await store.write(ALICE, episode, passages, passage_vectors=ahead)
    assert recording.texts == [episode.summary]
    query = "when is the 온비서 launch"
    hits = await store.search_passages(
        ALICE, dense=await embedder.embed_query(query), sparse=keywords.encode_query(query), weights=WEIGHTS, limit=1
    )
    assert [h.passage for h in hits] == [passages[2]]
