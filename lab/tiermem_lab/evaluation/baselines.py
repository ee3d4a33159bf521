"""The baselines, ranked over the raw turns of the same sample: BM25, dense retrieval with the same
embedding model, their reciprocal-rank fusion, a passage-level hybrid (4-turn windows scored like
the stores score: 0.3 keyword / 0.7 dense on the same [0, 1] parts, no consolidation at all), the same
windows ranked by meaning alone (the baseline people compare memory systems with), the same hybrid
with its keyword IDF taken over the passages of every conversation in the run (as a store holding many
users' memories in one collection takes it: a conversation's own names and topics look rare), and
"the last N sessions".

Every system ranks SESSIONS (a turn ranking becomes a session ranking by each session's best turn), so
recall@k asks the same question of all of them: is an evidence session among the first k.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiermem_lab.evaluation.locomo import LocomoSample

if TYPE_CHECKING:
    from services.common.gateways.embedder import Embedder
    from services.common.gateways.keywords import KeywordEncoder

OURS = "tiermem L1"
BM25 = "BM25 turns"
DENSE = "dense turns"
HYBRID = "hybrid turns (RRF)"
PASSAGES = "hybrid passages (4 turns)"
DENSE_PASSAGES = "dense passages (4 turns)"
PASSAGES_POOLED_IDF = "hybrid passages, IDF over all conversations"
LAST_N = "last N sessions"
BASELINES = (BM25, DENSE, HYBRID, PASSAGES, DENSE_PASSAGES, PASSAGES_POOLED_IDF, LAST_N)
SYSTEMS = (OURS, *BASELINES)
RRF_K = 60
PASSAGE_TURNS = 4
PASSAGE_KEYWORD_WEIGHT = 0.3
PASSAGE_DENSE_WEIGHT = 0.7


class Bm25:
    """Okapi BM25 over pre-tokenised documents (Lucene's non-negative IDF). `idf_from`: take the IDF
    from another index (a larger corpus these documents are part of) instead of these documents."""

    def __init__(
        self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75, idf_from: Bm25 | None = None
    ) -> None:
        self._k1 = k1
        self._b = b
        self._tfs = [Counter(document) for document in documents]
        self._lengths = [len(document) for document in documents]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        self._df: Counter[str] = Counter()
        for tf in self._tfs:
            self._df.update(tf.keys())
        self._idf_source = idf_from if idf_from is not None else self

    @property
    def size(self) -> int:
        """How many documents the IDF is taken over."""
        return len(self._idf_source._tfs)

    def idf(self, term: str) -> float:
        n, df = self.size, self._idf_source._df.get(term, 0)
        return math.log((n - df + 0.5) / (df + 0.5) + 1.0)

    def scores(self, query_terms: Iterable[str]) -> list[float]:
        terms = [term for term in dict.fromkeys(query_terms) if term in self._df]
        out: list[float] = []
        for tf, length in zip(self._tfs, self._lengths, strict=True):
            norm = self._k1 * (1.0 - self._b + self._b * length / self._average) if self._average else self._k1
            out.append(sum(self.idf(t) * tf[t] * (self._k1 + 1.0) / (tf[t] + norm) for t in terms if t in tf))
        return out


def ranked_indexes(scores: Sequence[float], *, positive_only: bool = False) -> list[int]:
    """Indexes by score, best first; ties by index. `positive_only`: leave out scores <= 0 (no match)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [i for i in order if scores[i] > 0] if positive_only else order


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], size: int, *, k: int = RRF_K) -> list[float]:
    """RRF score of items 0..size-1: Σ over rankings of 1 / (k + rank), rank from 1; absent items add 0."""
    fused = [0.0] * size
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] += 1.0 / (k + rank)
    return fused


def sessions_by_best_turn(
    turn_scores: Sequence[float], turn_sessions: Sequence[int], all_sessions: Sequence[int]
) -> list[int]:
    """Every session of `all_sessions`, ranked by its best turn's score (best first; a session without
    a turn ranks last; ties by session number)."""
    best: dict[int, float] = {}
    for score, session in zip(turn_scores, turn_sessions, strict=True):
        if session not in best or score > best[session]:
            best[session] = score
    return sorted(all_sessions, key=lambda s: (-best.get(s, -math.inf), s))


def latest_sessions(sessions: Sequence[tuple[int, datetime]]) -> list[int]:
    """The naive baseline: session numbers newest first (paste the last N sessions)."""
    return [number for number, _ in sorted(sessions, key=lambda pair: (pair[1], pair[0]), reverse=True)]


def unique_in_order(values: Iterable[int | None]) -> list[int]:
    seen: set[int] = set()
    out: list[int] = []
    for value in values:
        if value is not None and value not in seen:
            seen.add(value)
            out.append(value)
    return out


@dataclass
class TurnCorpus:
    """The raw turns of one sample for the baselines: text, session, BM25 index, unit dense vectors;
    and the same for its 4-turn passages (the passage-level baseline)."""

    texts: list[str]
    sessions: list[int]
    bm25: Bm25
    vectors: Any  # numpy array (turns × dim), rows of unit length
    passage_sessions: list[int] = field(default_factory=list)
    passage_tokens: list[list[str]] = field(default_factory=list)
    passage_bm25: Bm25 | None = None
    passage_vectors: Any = None  # numpy array (passages × dim), rows of unit length
    # The passages with their IDF over every conversation of the run (`pool_passage_idf`).
    pooled_passage_bm25: Bm25 | None = None


def corpus_texts(sample: LocomoSample) -> tuple[list[str], list[int]]:
    """Each turn as "Speaker: text" (how the pipeline's passages write it)."""
    texts = [f"{turn.speaker}: {turn.text}" for session in sample.sessions for turn in session.turns]
    sessions = [session.number for session in sample.sessions for _ in session.turns]
    return texts, sessions


def passage_texts(sample: LocomoSample, turns_per_passage: int = PASSAGE_TURNS) -> tuple[list[str], list[int]]:
    """Consecutive windows of `turns_per_passage` turns within each session ("Speaker: text" lines),
    without overlap: the plainest passage retrieval, with no summary, no facts, no consolidation."""
    texts: list[str] = []
    sessions: list[int] = []
    for session in sample.sessions:
        lines = [f"{turn.speaker}: {turn.text}" for turn in session.turns]
        for start in range(0, len(lines), turns_per_passage):
            texts.append("\n".join(lines[start : start + turns_per_passage]))
            sessions.append(session.number)
    return texts, sessions


async def _unit_vectors(texts: Sequence[str], embedder: Embedder, cache: Path | None) -> Any:
    import numpy as np

    if cache is not None and await asyncio.to_thread(cache.exists):
        return await asyncio.to_thread(np.load, cache)
    matrix = np.asarray(await embedder.embed_passages(list(texts)), dtype=np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    if cache is not None:
        await asyncio.to_thread(np.save, cache, matrix)
    return matrix


def _cache_path(
    cache_dir: Path | None, kind: str, sample: LocomoSample, model: str, texts: Sequence[str]
) -> Path | None:
    if cache_dir is None:
        return None
    digest = hashlib.sha256("\x1e".join([model, *texts]).encode("utf-8")).hexdigest()[:16]
    return cache_dir / f"{kind}-{sample.user_id}-{digest}.npy"


async def build_corpus(
    sample: LocomoSample, embedder: Embedder, keywords: KeywordEncoder, cache_dir: Path | None
) -> TurnCorpus:
    texts, sessions = corpus_texts(sample)
    windows, window_sessions = passage_texts(sample)
    tokens = await asyncio.to_thread(lambda: [keywords.tokens(text) for text in texts])
    window_tokens = await asyncio.to_thread(lambda: [keywords.tokens(text) for text in windows])
    model = embedder.model_name
    matrix = await _unit_vectors(texts, embedder, _cache_path(cache_dir, "turns", sample, model, texts))
    window_matrix = await _unit_vectors(windows, embedder, _cache_path(cache_dir, "passages", sample, model, windows))
    return TurnCorpus(
        texts=texts,
        sessions=sessions,
        bm25=Bm25(tokens),
        vectors=matrix,
        passage_sessions=window_sessions,
        passage_tokens=window_tokens,
        passage_bm25=Bm25(window_tokens),
        passage_vectors=window_matrix,
    )


def pool_passage_idf(corpora: Iterable[TurnCorpus]) -> None:
    """Give each corpus its passages scored with the IDF of all the corpora's passages together."""
    corpora = list(corpora)
    pooled = Bm25([tokens for corpus in corpora for tokens in corpus.passage_tokens])
    for corpus in corpora:
        corpus.pooled_passage_bm25 = Bm25(corpus.passage_tokens, idf_from=pooled)


def passage_hybrid_scores(
    bm25_scores: Sequence[float], cosines: Sequence[float], idf_size: int | None = None
) -> list[float]:
    """0.3 keyword / 0.7 dense over the same [0, 1] parts the vector stores fuse (keyword saturated in
    units of one unique-term match among the `idf_size` documents the IDF counts, dense above the
    model's floor): the store's scoring, minus tiermem."""
    from services.common.stores.vector.fusion import dense_part, keyword_part

    size = idf_size if idf_size is not None else len(bm25_scores)
    total = PASSAGE_KEYWORD_WEIGHT + PASSAGE_DENSE_WEIGHT
    return [
        (PASSAGE_KEYWORD_WEIGHT * keyword_part(raw, size) + PASSAGE_DENSE_WEIGHT * dense_part(cosine)) / total
        for raw, cosine in zip(bm25_scores, cosines, strict=True)
    ]


def baseline_rankings(
    corpus: TurnCorpus, query_terms: Sequence[str], query_vector: Sequence[float], sample: LocomoSample
) -> dict[str, list[int]]:
    import numpy as np

    all_sessions = [s.number for s in sample.sessions]
    bm25_scores = corpus.bm25.scores(query_terms)
    query = np.asarray(query_vector, dtype=np.float32)
    query /= max(float(np.linalg.norm(query)), 1e-12)
    dense_scores = [float(v) for v in corpus.vectors @ query]
    fused = reciprocal_rank_fusion(
        [ranked_indexes(bm25_scores, positive_only=True), ranked_indexes(dense_scores)], len(corpus.texts)
    )
    rankings = {
        BM25: sessions_by_best_turn(bm25_scores, corpus.sessions, all_sessions),
        DENSE: sessions_by_best_turn(dense_scores, corpus.sessions, all_sessions),
        HYBRID: sessions_by_best_turn(fused, corpus.sessions, all_sessions),
        LAST_N: latest_sessions([(s.number, s.occurred_at) for s in sample.sessions]),
    }
    if corpus.passage_bm25 is not None and corpus.passage_vectors is not None:
        cosines = [float(v) for v in corpus.passage_vectors @ query]
        hybrid = passage_hybrid_scores(corpus.passage_bm25.scores(query_terms), cosines)
        rankings[PASSAGES] = sessions_by_best_turn(hybrid, corpus.passage_sessions, all_sessions)
        rankings[DENSE_PASSAGES] = sessions_by_best_turn(cosines, corpus.passage_sessions, all_sessions)
        pooled = corpus.pooled_passage_bm25
        if pooled is not None:
            pooled_hybrid = passage_hybrid_scores(pooled.scores(query_terms), cosines, pooled.size)
            rankings[PASSAGES_POOLED_IDF] = sessions_by_best_turn(pooled_hybrid, corpus.passage_sessions, all_sessions)
    return rankings
