"""`tiermem eval`: retrieval on LoCoMo against same-run baselines, and the Korean cross-session scenarios.

LoCoMo (DESIGN §7): every sample is one user and every session of it one `SessionCompleted` (the session
date as its time; speaker_a's turns as role "user", speaker_b's as "assistant", each with the speaker's
name; a shared photo becomes "[shares a photo: <caption>]"). After the pipeline has consumed everything,
every question is put to

- L1 `memory_search` (episodes, `limit=k`): session recall@k — an evidence session among the sessions
  of the episodes returned;
- L0 `recall/auto` (the question as the message, no earlier turns): recall rate (an item from an
  evidence session injected), contamination rate (share of injected items from no evidence session),
  tokens injected; for category 5 (adversarial: not answerable) the abstention rate (nothing injected).

Baselines ranked the same way, over the raw turns of the same sample: BM25, dense retrieval with the
same embedding model, their reciprocal-rank fusion, and "the last N sessions". Every system ranks
SESSIONS (a turn ranking becomes a session ranking by each session's best turn) and recall@k asks
whether an evidence session is among its first k.

The pure parts (loader, event building, ranking and metric functions, the report) come first and are
unit-tested; the runner drives the real embedded stack and the recall API in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import secrets
import shutil
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from contracts import Message, SessionCompleted
from services.common.domain.ids import deterministic_uuid
from services.common.gateways.embedding import DelegatingEmbedder

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from services.cli.stack import EmbeddedServers, RunningServices
    from services.common.gateways.embedder import Embedder
    from services.common.gateways.keywords import KeywordEncoder
    from services.common.runtime.resources import Resources
    from services.recall_api.schemas import AutoRecallResponse, SearchResponse
    from services.recall_api.settings import RecallApiSettings

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = 5
OURS = "tiermem L1"
BM25 = "BM25 turns"
DENSE = "dense turns"
HYBRID = "hybrid turns (RRF)"
LAST_N = "last N sessions"
BASELINES = (BM25, DENSE, HYBRID, LAST_N)
SYSTEMS = (OURS, *BASELINES)
DEFAULT_KS = (5, 10, 20)
RRF_K = 60
# L0 is also asked with these higher minimum scores (one recall API instance each, same stores).
SWEEP_STEP = 0.05
SWEEP_MAX = 0.7
# LoCoMo's sessions are from 2023: in the eval nothing may expire before the questions are asked.
EVAL_EPISODE_TTL_DAYS = 36_500.0
TARGET_L1_RECALL_AT_5 = 0.90
TARGET_MARGIN_OVER_BASELINE = 0.03
TARGET_L0_ABSTENTION = 0.5
TARGET_L0_RECALL = 0.6


class LocomoFormatError(ValueError):
    """The file is not in the LoCoMo shape (see shared/eval/locomo/README.md)."""


# ================================================================================================
# Loading LoCoMo


@dataclass(frozen=True, slots=True)
class LocomoTurn:
    dia_id: str
    speaker: str
    text: str  # the turn's text with its photo caption, as ingested and as the baselines see it


@dataclass(frozen=True, slots=True)
class LocomoSession:
    number: int
    occurred_at: datetime
    turns: tuple[LocomoTurn, ...]


@dataclass(frozen=True, slots=True)
class LocomoQuestion:
    number: int  # position in the sample's qa list
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]
    evidence_sessions: frozenset[int]


@dataclass(frozen=True, slots=True)
class LocomoSample:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[LocomoSession, ...]
    questions: tuple[LocomoQuestion, ...]

    @property
    def user_id(self) -> str:
        return subject_token(self.sample_id)


_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_SESSION_TIME = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*$", re.IGNORECASE
)
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_NOT_SUBJECT_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")


def subject_token(value: str) -> str:
    """`value` as an id usable in a NATS subject (what SessionCompleted ids must be)."""
    token = _NOT_SUBJECT_TOKEN.sub("-", value).strip("-")[:128]
    if not token:
        raise LocomoFormatError(f"cannot make an id from {value!r}")
    return token


def parse_session_time(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" → 2023-05-08 13:56 UTC (LoCoMo gives no time zone)."""
    match = _SESSION_TIME.match(text)
    if match is None:
        raise LocomoFormatError(f"unrecognised session date {text!r} (expected like '1:56 pm on 8 May, 2023')")
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.casefold())
    if month is None:
        raise LocomoFormatError(f"unrecognised month {month_name!r} in session date {text!r}")
    hour_24 = int(hour) % 12 + (12 if half.casefold() == "p" else 0)
    if not 1 <= int(hour) <= 12 or int(minute) > 59:
        raise LocomoFormatError(f"impossible time in session date {text!r}")
    try:
        return datetime(int(year), month, int(day), hour_24, int(minute), tzinfo=UTC)
    except ValueError as exc:
        raise LocomoFormatError(f"impossible session date {text!r}: {exc}") from exc


def dia_session(dia_id: str) -> int:
    """ "D3:12" → 3 (session 3, turn 12)."""
    match = _DIA_ID.match(dia_id.strip())
    if match is None:
        raise LocomoFormatError(f"unrecognised dialogue id {dia_id!r} (expected like 'D3:12')")
    return int(match.group(1))


def split_evidence(raw: Iterable[Any]) -> tuple[str, ...]:
    """Evidence dialogue ids; a few LoCoMo entries pack several into one string ("D8:6; D9:17")."""
    ids: list[str] = []
    for entry in raw:
        ids.extend(part for part in re.split(r"[;,\s]+", str(entry)) if part)
    return tuple(ids)


def turn_text(turn: Mapping[str, Any]) -> str:
    """The turn's text, with the caption of a shared photo (the only trace of the image)."""
    text = " ".join(str(turn.get("text") or "").split())
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    if caption:
        photo = f"[shares a photo: {caption}]"
        return f"{text} {photo}" if text else photo
    return text


def _require(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise LocomoFormatError(f"{where}: missing {key!r}")
    return mapping[key]


def parse_locomo(data: Any) -> list[LocomoSample]:
    """Samples from parsed LoCoMo JSON (a list of samples)."""
    if not isinstance(data, list):
        raise LocomoFormatError("a LoCoMo file is a JSON list of samples")
    samples: list[LocomoSample] = []
    for position, raw in enumerate(data):
        where = f"sample {position}"
        if not isinstance(raw, dict):
            raise LocomoFormatError(f"{where}: not an object")
        sample_id = str(_require(raw, "sample_id", where))
        where = f"sample {sample_id}"
        conversation = _require(raw, "conversation", where)
        speaker_a = str(_require(conversation, "speaker_a", where))
        speaker_b = str(_require(conversation, "speaker_b", where))
        sessions: list[LocomoSession] = []
        for key, turns in conversation.items():
            match = _SESSION_KEY.match(key)
            if match is None or not turns:
                continue  # dates of sessions that were never held, observations, summaries
            number = int(match.group(1))
            occurred_at = parse_session_time(str(_require(conversation, f"{key}_date_time", where)))
            parsed_turns: list[LocomoTurn] = []
            for turn in turns:
                speaker = str(_require(turn, "speaker", f"{where} {key}"))
                if speaker not in (speaker_a, speaker_b):
                    raise LocomoFormatError(
                        f"{where} {key}: speaker {speaker!r} is neither {speaker_a!r} nor {speaker_b!r}"
                    )
                text = turn_text(turn)
                if text:
                    parsed_turns.append(LocomoTurn(str(turn.get("dia_id", "")), speaker, text))
            if parsed_turns:
                sessions.append(LocomoSession(number, occurred_at, tuple(parsed_turns)))
        sessions.sort(key=lambda s: s.number)
        questions: list[LocomoQuestion] = []
        for number, qa in enumerate(raw.get("qa") or []):
            evidence = split_evidence(qa.get("evidence") or [])
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(
                LocomoQuestion(
                    number=number,
                    question=str(_require(qa, "question", f"{where} qa {number}")),
                    answer=str(answer),
                    category=int(_require(qa, "category", f"{where} qa {number}")),
                    evidence=evidence,
                    evidence_sessions=frozenset(dia_session(e) for e in evidence),
                )
            )
        samples.append(LocomoSample(sample_id, speaker_a, speaker_b, tuple(sessions), tuple(questions)))
    return samples


def load_locomo(path: Path) -> list[LocomoSample]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    return parse_locomo(data)


def session_id_for(sample: LocomoSample, session_number: int) -> str:
    return f"{sample.user_id}-s{session_number}"


def session_events(sample: LocomoSample, *, tenant_id: str, agent_id: str = "locomo-agent") -> list[SessionCompleted]:
    """One SessionCompleted per session; deterministic event ids, so a re-run publishes duplicates only."""
    roles = {sample.speaker_a: "user", sample.speaker_b: "assistant"}
    events: list[SessionCompleted] = []
    for session in sample.sessions:
        events.append(
            SessionCompleted.model_validate(
                {
                    "event_id": deterministic_uuid("locomo", tenant_id, sample.sample_id, str(session.number)),
                    "tenant_id": tenant_id,
                    "user_id": sample.user_id,
                    "agent_id": agent_id,
                    "session_id": session_id_for(sample, session.number),
                    "channel": "private",
                    "started_at": session.occurred_at,
                    "ended_at": session.occurred_at,
                    "locale": "en",
                    "messages": [
                        Message(role=roles[turn.speaker], content=turn.text, name=turn.speaker)  # type: ignore[arg-type]
                        for turn in session.turns
                    ],
                    "metadata": {"source": "locomo", "sample_id": sample.sample_id},
                }
            )
        )
    return events


# ================================================================================================
# Ranking and metrics (pure)


class Bm25:
    """Okapi BM25 over pre-tokenised documents (Lucene's non-negative IDF)."""

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._tfs = [Counter(document) for document in documents]
        self._lengths = [len(document) for document in documents]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        self._df: Counter[str] = Counter()
        for tf in self._tfs:
            self._df.update(tf.keys())

    def idf(self, term: str) -> float:
        n, df = len(self._tfs), self._df.get(term, 0)
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


def ranking_for(rankings_by_limit: Mapping[int, Sequence[int]], k: int) -> Sequence[int]:
    """The ranking a system gave for the smallest request of at least k results (else its largest)."""
    if not rankings_by_limit:
        return ()
    fitting = [limit for limit in rankings_by_limit if limit >= k]
    return rankings_by_limit[min(fitting) if fitting else max(rankings_by_limit)]


def hit_at_k(rankings_by_limit: Mapping[int, Sequence[int]], evidence: frozenset[int], k: int) -> bool:
    """An evidence session among the first k sessions ranked."""
    return any(session in evidence for session in list(ranking_for(rankings_by_limit, k))[:k])


@dataclass(frozen=True, slots=True)
class InjectedItem:
    """One item L0 injected: the sessions it came from (a fact may have been said in several)."""

    kind: str
    sessions: frozenset[int]
    score: float


@dataclass
class QuestionResult:
    sample_id: str
    number: int
    question: str
    category: int
    evidence_sessions: frozenset[int]
    rankings: dict[str, dict[int, list[int]]]  # system → requested limit → sessions ranked
    l0_items: list[InjectedItem] = field(default_factory=list)
    l0_tokens: int = 0
    l0_top_score: float | None = None
    l0_latency_ms: float = 0.0
    l1_latency_ms: float = 0.0
    # What L0 injected with other minimum scores (the threshold trade-off), keyed by the minimum score.
    l0_by_threshold: dict[float, list[InjectedItem]] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return self.category != ADVERSARIAL

    @property
    def scored(self) -> bool:
        """Counted in recall: answerable and with evidence."""
        return self.answerable and bool(self.evidence_sessions)

    @property
    def l0_recalled(self) -> bool:
        return any(item.sessions & self.evidence_sessions for item in self.l0_items)

    @property
    def l0_contaminating(self) -> int:
        return sum(1 for item in self.l0_items if not item.sessions & self.evidence_sessions)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def recall_table(results: Sequence[QuestionResult], systems: Sequence[str], ks: Sequence[int]) -> dict[str, Any]:
    """Session recall@k per system, overall (answerable questions with evidence) and per category."""
    scored = [r for r in results if r.scored]
    categories = sorted({r.category for r in scored})
    table: dict[str, Any] = {}
    for system in systems:

        def rate(group: Sequence[QuestionResult], k: int, system: str = system) -> float | None:
            hits = [hit_at_k(r.rankings.get(system, {}), r.evidence_sessions, k) for r in group]
            return _mean([1.0 if hit else 0.0 for hit in hits])

        table[system] = {
            "overall": {str(k): rate(scored, k) for k in ks},
            "by_category": {
                str(c): {str(k): rate([r for r in scored if r.category == c], k) for k in ks} for c in categories
            },
        }
    return table


def l0_stats(group: Sequence[QuestionResult]) -> dict[str, Any]:
    """Recall rate, contamination rate (pooled over injected items), empty rate, items and tokens per question."""
    injected = sum(len(r.l0_items) for r in group)
    contaminating = sum(r.l0_contaminating for r in group)
    return {
        "questions": len(group),
        "recall_rate": _mean([1.0 if r.l0_recalled else 0.0 for r in group]),
        "contamination_rate": (contaminating / injected) if injected else None,
        "empty_rate": _mean([0.0 if r.l0_items else 1.0 for r in group]),
        "items_mean": _mean([float(len(r.l0_items)) for r in group]),
        "tokens_mean": _mean([float(r.l0_tokens) for r in group]),
    }


def abstention_stats(group: Sequence[QuestionResult]) -> dict[str, Any]:
    injected = [r for r in group if r.l0_items]
    return {
        "questions": len(group),
        "abstention_rate": _mean([0.0 if r.l0_items else 1.0 for r in group]),
        # The session an adversarial question distorts (what really happened, often to the other
        # speaker) was injected: not an answer to the question, but what would correct its premise.
        "evidence_injected_rate": _mean([1.0 if r.l0_recalled else 0.0 for r in group if r.evidence_sessions]),
        "items_mean": _mean([float(len(r.l0_items)) for r in group]),
        "tokens_mean": _mean([float(r.l0_tokens) for r in group]),
        "top_score_mean_when_injected": _mean([r.l0_top_score or 0.0 for r in injected]),
    }


def l0_table(results: Sequence[QuestionResult]) -> dict[str, Any]:
    scored = [r for r in results if r.scored]
    adversarial = [r for r in results if r.category == ADVERSARIAL]
    return {
        "overall": l0_stats(scored),
        "by_category": {
            str(c): l0_stats([r for r in scored if r.category == c]) for c in sorted({r.category for r in scored})
        },
        "adversarial": abstention_stats(adversarial),
    }


def l0_tradeoff(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    """L0 at each minimum score it was asked with: the recall rate and contamination (answerable
    questions with evidence), the abstention rate (category 5) and items per question."""
    scored = [r for r in results if r.scored]
    adversarial = [r for r in results if r.category == ADVERSARIAL]
    thresholds = sorted({t for r in results for t in r.l0_by_threshold})
    rows: list[dict[str, Any]] = []
    for threshold in thresholds:

        def kept(r: QuestionResult, threshold: float = threshold) -> list[InjectedItem]:
            return r.l0_by_threshold.get(threshold, [])

        injected = [(r, kept(r)) for r in scored]
        items = sum(len(k) for _, k in injected)
        contaminating = sum(1 for r, k in injected for item in k if not item.sessions & r.evidence_sessions)
        rows.append(
            {
                "min_score": threshold,
                "recall_rate": _mean(
                    [1.0 if any(i.sessions & r.evidence_sessions for i in k) else 0.0 for r, k in injected]
                ),
                "abstention_rate": _mean([0.0 if kept(r) else 1.0 for r in adversarial]),
                "contamination_rate": (contaminating / items) if items else None,
                "items_mean": _mean([float(len(k)) for _, k in injected]),
            }
        )
    return rows


def compare(ours: float | None, baseline: float | None) -> dict[str, float | None]:
    """Difference and ratio of our number against a baseline's (ratio None when the baseline is 0)."""
    if ours is None or baseline is None:
        return {"ours": ours, "baseline": baseline, "diff": None, "ratio": None}
    return {
        "ours": ours,
        "baseline": baseline,
        "diff": ours - baseline,
        "ratio": (ours / baseline) if baseline else None,
    }


def comparison_table(recall: Mapping[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    return {
        baseline: {str(k): compare(recall[OURS]["overall"][str(k)], recall[baseline]["overall"][str(k)]) for k in ks}
        for baseline in BASELINES
        if baseline in recall
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def target_checks(recall: Mapping[str, Any], l0: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value, the bar and by how much it is met or missed."""
    checks: list[dict[str, Any]] = []

    def check(name: str, value: float | None, bar: float) -> None:
        checks.append(
            {
                "target": name,
                "value": value,
                "bar": bar,
                "met": value is not None and value >= bar - 1e-12,
                "by": None if value is None else value - bar,
            }
        )

    ours_at_5 = recall.get(OURS, {}).get("overall", {}).get("5")
    check("L1 session recall@5", ours_at_5, TARGET_L1_RECALL_AT_5)
    baselines_at_5 = [
        recall[b]["overall"]["5"] for b in BASELINES if b in recall and recall[b]["overall"].get("5") is not None
    ]
    if ours_at_5 is not None and baselines_at_5:
        check("L1 recall@5 minus best baseline", ours_at_5 - max(baselines_at_5), TARGET_MARGIN_OVER_BASELINE)
    check("L0 abstention on category 5", l0["adversarial"]["abstention_rate"], TARGET_L0_ABSTENTION)
    check("L0 recall rate (categories 1-4)", l0["overall"]["recall_rate"], TARGET_L0_RECALL)
    return checks


def build_report(
    results: Sequence[QuestionResult],
    ks: Sequence[int],
    curve_ks: Sequence[int],
    *,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON report: recall per system and category, L0 rates, comparisons, targets, per question."""
    recall = recall_table(results, SYSTEMS, ks)
    curve = recall_table(results, SYSTEMS, curve_ks)
    l0 = l0_table(results)
    l0_latencies = [r.l0_latency_ms for r in results]
    l1_latencies = [r.l1_latency_ms for r in results]
    return {
        **meta,
        "ks": list(ks),
        "questions": {
            "total": len(results),
            "scored": sum(1 for r in results if r.scored),
            "adversarial": sum(1 for r in results if r.category == ADVERSARIAL),
            "answerable_without_evidence": sum(1 for r in results if r.answerable and not r.evidence_sessions),
            "by_category": {str(c): n for c, n in sorted(Counter(r.category for r in results).items())},
        },
        "session_recall": recall,
        "recall_curve": {system: curve[system]["overall"] for system in SYSTEMS},
        "comparison": comparison_table(recall, ks),
        "l0": l0,
        "l0_tradeoff": l0_tradeoff(results),
        "latency_ms": {
            "l0_auto": {"p50": percentile(l0_latencies, 0.5), "p95": percentile(l0_latencies, 0.95)},
            "l1_search": {"p50": percentile(l1_latencies, 0.5), "p95": percentile(l1_latencies, 0.95)},
        },
        "targets": target_checks(recall, l0),
        "per_question": [
            {
                "sample_id": r.sample_id,
                "number": r.number,
                "question": r.question,
                "category": r.category,
                "evidence_sessions": sorted(r.evidence_sessions),
                "rankings": {
                    system: {str(k): v for k, v in by_limit.items()} for system, by_limit in r.rankings.items()
                },
                "l0": {
                    "items": [
                        {"kind": item.kind, "sessions": sorted(item.sessions), "score": item.score}
                        for item in r.l0_items
                    ],
                    "tokens": r.l0_tokens,
                    "top_score": r.l0_top_score,
                    "recalled": r.l0_recalled,
                },
            }
            for r in results
        ],
    }


# ================================================================================================
# Rendering


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


def render_report(report: Mapping[str, Any], console: Console) -> None:
    from rich.table import Table

    ks = [str(k) for k in report["ks"]]
    recall = report["session_recall"]
    counts = report["questions"]

    overall = Table(title=f"Session recall@k, categories 1-4 ({counts['scored']} questions with evidence)")
    overall.add_column("system")
    for k in ks:
        overall.add_column(f"@{k}", justify="right")
    for system in SYSTEMS:
        overall.add_row(system, *(_fmt(recall[system]["overall"][k]) for k in ks))
    console.print(overall)

    for k in ks:
        by_category = Table(title=f"Session recall@{k} by category")
        by_category.add_column("category")
        by_category.add_column("n", justify="right")
        for system in SYSTEMS:
            by_category.add_column(system, justify="right")
        per_category = report["questions"]["by_category"]
        for category in recall[OURS]["by_category"]:
            label = f"{category} {CATEGORY_NAMES.get(int(category), '')}"
            scored_n = report["l0"]["by_category"][category]["questions"]
            by_category.add_row(
                label,
                f"{scored_n}/{per_category.get(category, scored_n)}",
                *(_fmt(recall[s]["by_category"][category][k]) for s in SYSTEMS),
            )
        by_category.add_row("overall", str(counts["scored"]), *(_fmt(recall[s]["overall"][k]) for s in SYSTEMS))
        console.print(by_category)

    versus = Table(title="tiermem L1 against each baseline (difference / ratio)")
    versus.add_column("baseline")
    for k in ks:
        versus.add_column(f"@{k}", justify="right")
    for baseline, by_k in report["comparison"].items():
        versus.add_row(
            baseline,
            *(f"{_signed(by_k[k]['diff'])} / {_fmt(by_k[k]['ratio'], 2)}×" for k in ks),
        )
    console.print(versus)

    l0 = report["l0"]
    l0_view = Table(title="L0 auto-inject (the question as the message, no earlier turns)")
    for column in ("category", "n", "recall rate", "contamination", "empty", "items/q", "tokens/q"):
        l0_view.add_column(column, justify="left" if column == "category" else "right")
    rows = [(f"{c} {CATEGORY_NAMES.get(int(c), '')}", stats) for c, stats in l0["by_category"].items()]
    rows.append(("overall 1-4", l0["overall"]))
    for label, stats in rows:
        l0_view.add_row(
            label,
            str(stats["questions"]),
            _fmt(stats["recall_rate"]),
            _fmt(stats["contamination_rate"]),
            _fmt(stats["empty_rate"]),
            _fmt(stats["items_mean"], 2),
            _fmt(stats["tokens_mean"], 1),
        )
    console.print(l0_view)
    adversarial = l0["adversarial"]
    console.print(
        f"L0 on category 5 (adversarial, {adversarial['questions']} questions): abstention rate "
        f"{_fmt(adversarial['abstention_rate'])}, items/q {_fmt(adversarial['items_mean'], 2)}, "
        f"tokens/q {_fmt(adversarial['tokens_mean'], 1)}; the distorted evidence session was injected for "
        f"{_fmt(adversarial['evidence_injected_rate'])}"
    )
    latency = report["latency_ms"]
    l0_latency, l1_latency = latency["l0_auto"], latency["l1_search"]
    console.print(
        f"latency in-process (ms): L0 p50 {_fmt(l0_latency['p50'], 1)} p95 {_fmt(l0_latency['p95'], 1)}; "
        f"L1 p50 {_fmt(l1_latency['p50'], 1)} p95 {_fmt(l1_latency['p95'], 1)}"
    )
    if report.get("l0_tradeoff"):
        sweep = Table(title="L0 with other minimum scores (same run, same stores; default 0.30)")
        for column in ("min score", "recall rate 1-4", "abstention cat. 5", "contamination", "items/q"):
            sweep.add_column(column, justify="right")
        for row in report["l0_tradeoff"]:
            sweep.add_row(
                f"{row['min_score']:.2f}",
                _fmt(row["recall_rate"]),
                _fmt(row["abstention_rate"]),
                _fmt(row["contamination_rate"]),
                _fmt(row["items_mean"], 2),
            )
        console.print(sweep)
    targets = Table(title="Targets")
    for column in ("target", "value", "bar", "met", "by"):
        targets.add_column(column)
    for check in report["targets"]:
        targets.add_row(
            check["target"],
            _fmt(check["value"]),
            _fmt(check["bar"], 2),
            "[green]yes[/]" if check["met"] else "[red]no[/]",
            _signed(check["by"]),
        )
    console.print(targets)


def draw_recall_png(report: Mapping[str, Any], path: Path) -> Path:
    """Left: session recall@k against k for every system (categories 1-4). Right: L0 recall rate and
    category-5 abstention against the L0 minimum score, with the targets (when a sweep was run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tradeoff = [row for row in report.get("l0_tradeoff", []) if row["recall_rate"] is not None]
    figure, panels = plt.subplots(1, 2 if tradeoff else 1, figsize=(13 if tradeoff else 7.5, 4.8), dpi=120)
    recall_axes = panels[0] if tradeoff else panels
    styles = {OURS: ("o-", 2.6), BM25: ("s--", 1.4), DENSE: ("^--", 1.4), HYBRID: ("D--", 1.4), LAST_N: ("x:", 1.4)}
    for system in SYSTEMS:
        curve = report["recall_curve"][system]
        points = sorted((int(k), v) for k, v in curve.items() if v is not None)
        if not points:
            continue
        marker, width = styles[system]
        recall_axes.plot([k for k, _ in points], [v for _, v in points], marker, linewidth=width, label=system)
    recall_axes.axhline(TARGET_L1_RECALL_AT_5, color="grey", linewidth=0.8, linestyle=":")
    recall_axes.set_xlabel("k (sessions retrieved)")
    recall_axes.set_ylabel("session recall@k")
    recall_axes.set_ylim(0.0, 1.02)
    recall_axes.grid(True, alpha=0.3)
    recall_axes.set_title(f"LoCoMo session recall@k ({report['questions']['scored']} questions, categories 1-4)")
    recall_axes.legend(loc="lower right")
    if tradeoff:
        l0_axes = panels[1]
        thresholds = [row["min_score"] for row in tradeoff]
        l0_axes.plot(thresholds, [row["recall_rate"] for row in tradeoff], "o-", label="L0 recall rate (cat. 1-4)")
        abstention = [row["abstention_rate"] for row in tradeoff]
        if all(value is not None for value in abstention):
            l0_axes.plot(thresholds, abstention, "s-", label="L0 abstention (cat. 5)")
        contamination = [row["contamination_rate"] for row in tradeoff]
        l0_axes.plot(
            thresholds, [c if c is not None else float("nan") for c in contamination], "x:", label="contamination"
        )
        l0_axes.axhline(TARGET_L0_RECALL, color="tab:blue", linewidth=0.8, linestyle="--")
        l0_axes.axhline(TARGET_L0_ABSTENTION, color="tab:orange", linewidth=0.8, linestyle="--")
        l0_axes.set_xlabel("L0 minimum score")
        l0_axes.set_ylim(0.0, 1.02)
        l0_axes.grid(True, alpha=0.3)
        l0_axes.set_title("L0 recall vs abstention as the minimum score rises")
        l0_axes.legend(loc="best")
    overrides = report.get("settings", {}).get("recall_overrides") or {}
    if overrides:
        figure.suptitle("recall settings changed: " + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


# ================================================================================================
# The stack: embedded servers, the consolidation services and the recall API in-process


class QueryCachingEmbedder(DelegatingEmbedder):
    """Wraps an embedder and remembers query vectors. The eval sends each question to L0, to L1 at
    several limits and to the dense baseline: the same text, the same vector, embedded once."""

    def __init__(self, inner: Embedder, max_entries: int = 4096) -> None:
        super().__init__(inner)
        self._cache: dict[str, list[float]] = {}
        self._max_entries = max_entries
        self.query_calls = 0

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cache.get(text)
        if cached is not None:
            return list(cached)
        self.query_calls += 1
        vector = await self._inner.embed_query(text)
        if len(self._cache) >= self._max_entries:
            self._cache.pop(next(iter(self._cache)))
        self._cache[text] = list(vector)
        return vector


class RecallClient:
    """The recall API app in-process: lifespan run, requests over httpx's ASGI transport with an API key."""

    def __init__(self, settings: RecallApiSettings, resources: Resources, api_key: str) -> None:
        from services.recall_api.app import create_app

        self.app = create_app(settings, resources)
        self._api_key = api_key
        self._stack = contextlib.AsyncExitStack()
        self._http: Any = None

    async def __aenter__(self) -> RecallClient:
        import httpx

        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.app),
                base_url="http://recall.eval",
                headers={"Authorization": f"Bearer {self._api_key}"},
                timeout=120,
            )
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = await self._http.post(path, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"POST {path} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    async def auto(self, user_id: str, message: str, **options: Any) -> AutoRecallResponse:
        from services.recall_api.schemas import AutoRecallResponse

        body = {"user_id": user_id, "message": message, **options}
        return AutoRecallResponse.model_validate(await self._post("/v1/recall/auto", body))

    async def search(
        self, user_id: str, query: str, *, limit: int, kinds: Sequence[str] | None = ("episode",)
    ) -> SearchResponse:
        from services.recall_api.schemas import SearchResponse

        body: dict[str, Any] = {"user_id": user_id, "query": query, "limit": limit}
        if kinds is not None:
            body["kinds"] = list(kinds)
        return SearchResponse.model_validate(await self._post("/v1/memories/search", body))


def consolidation_services() -> list[Any]:
    """The services that turn sessions into memory (the pruner is left out: it only deletes)."""
    from services.dedup.handlers import DEFINITION as DEDUP
    from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
    from services.semantic_extractor.handlers import DEFINITION as SEMANTIC

    return [EPISODIC, SEMANTIC, DEDUP]


@dataclass
class EvalStack:
    settings: RecallApiSettings
    resources: Resources
    running: RunningServices
    recall: RecallClient
    embedder: QueryCachingEmbedder
    tenant_id: str
    servers: EmbeddedServers | None = None
    # Recall API instances with higher L0 minimum scores (the LoCoMo threshold sweep), same stores.
    sweep: dict[float, RecallClient] = field(default_factory=dict)


def eval_settings(
    data_dir: Path,
    servers: EmbeddedServers,
    creds: Mapping[str, str],
    *,
    api_key: str,
    tenant_id: str,
    **overrides: Any,
) -> RecallApiSettings:
    from services.common.runtime.settings import GraphSettings, NatsSettings, VectorSettings
    from services.recall_api.settings import RecallApiSettings

    return RecallApiSettings(
        data_dir=data_dir,
        nats=NatsSettings(url=servers.nats.url, token=creds["nats_token"]),  # type: ignore[arg-type]
        graph=GraphSettings(
            backend="falkordb",
            host=servers.graph.host,
            port=servers.graph.port,
            password=creds["graph_password"],  # type: ignore[arg-type]
        ),
        vector=VectorSettings(backend="edge", path=data_dir / "qdrant-edge"),
        api_keys={api_key: tenant_id},
        **overrides,
    )


def sweep_thresholds(default: float) -> list[float]:
    """Minimum scores above the default, every SWEEP_STEP up to SWEEP_MAX."""
    steps = round((SWEEP_MAX - default) / SWEEP_STEP)
    return [round(default + SWEEP_STEP * step, 4) for step in range(1, steps + 1)]


@contextlib.asynccontextmanager
async def recall_stack(
    settings: RecallApiSettings,
    resources: Resources,
    api_key: str,
    servers: EmbeddedServers | None = None,
    *,
    l0_sweep: bool = False,
) -> AsyncIterator[EvalStack]:
    """Consolidation services and the recall API on already running servers (the tests' fixtures or
    `embedded_stack`), sharing `resources`; with `l0_sweep`, also one recall API per higher L0
    minimum score."""
    from services.cli.stack import start_services

    embedder = resources.embedder()
    if not isinstance(embedder, QueryCachingEmbedder):
        raise TypeError("recall_stack needs resources whose embedder is a QueryCachingEmbedder")
    running = await start_services(settings, consolidation_services(), resources)
    try:
        async with contextlib.AsyncExitStack() as clients:
            recall = await clients.enter_async_context(RecallClient(settings, resources, api_key))
            stack = EvalStack(settings, resources, running, recall, embedder, settings.api_keys[api_key], servers)
            if l0_sweep:
                for threshold in sweep_thresholds(settings.l0_min_score):
                    variant = settings.model_copy(update={"l0_min_score": threshold})
                    stack.sweep[threshold] = await clients.enter_async_context(
                        RecallClient(variant, resources, api_key)
                    )
            yield stack
    finally:
        await running.stop()


def caching_resources(settings: RecallApiSettings) -> Resources:
    from services.common.gateways.embedding import build_embedder
    from services.common.runtime.resources import Resources

    return Resources(settings, _embedder=QueryCachingEmbedder(build_embedder(settings.embedding)))


@contextlib.asynccontextmanager
async def embedded_stack(
    work_dir: Path, *, tenant_id: str, l0_sweep: bool = False, **overrides: Any
) -> AsyncIterator[EvalStack]:
    """nats-server and FalkorDB on loopback with data in `work_dir`, the consolidation services and the
    recall API in this process. Always stops everything."""
    from services.cli.stack import start_servers

    servers, creds = start_servers(work_dir)
    try:
        api_key = "eval_" + secrets.token_urlsafe(24)
        settings = eval_settings(work_dir, servers, creds, api_key=api_key, tenant_id=tenant_id, **overrides)
        async with recall_stack(settings, caching_resources(settings), api_key, servers, l0_sweep=l0_sweep) as stack:
            yield stack
    finally:
        servers.stop()


async def wait_for_consolidation(
    settings: RecallApiSettings, progress: Progress | None = None, *, timeout_s: float = 1800.0
) -> float:
    """Poll the consumers' backlog (shown as a progress bar) until it is empty, then confirm with
    `wait_until_idle`; returns the seconds waited."""
    from services.cli.consolidation import backlog, wait_until_idle

    definitions = consolidation_services()
    started = time.monotonic()
    task = progress.add_task("consolidating (backlog)", total=None) if progress is not None else None
    peak = 0
    while time.monotonic() - started < timeout_s:
        remaining = sum((await backlog(settings, definitions)).values())
        peak = max(peak, remaining)
        if progress is not None and task is not None:
            progress.update(task, total=max(peak, 1), completed=peak - remaining)
        if remaining == 0:
            break
        await asyncio.sleep(0.25)
    await wait_until_idle(settings, definitions, timeout_s=max(10.0, timeout_s - (time.monotonic() - started)))
    if progress is not None and task is not None:
        progress.update(task, total=max(peak, 1), completed=max(peak, 1))
    return time.monotonic() - started


# ================================================================================================
# The LoCoMo run


@dataclass(frozen=True)
class LocomoConfig:
    path: Path
    ks: tuple[int, ...] = DEFAULT_KS
    work_dir: Path | None = None  # kept when given; a temporary directory otherwise
    samples: tuple[str, ...] = ()  # sample ids to run (all when empty)
    max_questions: int | None = None  # per sample, for quick runs
    tenant_id: str = "locomo"
    episode_ttl_days: float = EVAL_EPISODE_TTL_DAYS
    # Recall settings to change for this run (e.g. ("episode_half_life_days", "36500")): to measure a
    # proposal with the same harness. Reported in the JSON; the defaults are the headline numbers.
    recall_overrides: tuple[tuple[str, str], ...] = ()

    @property
    def curve_ks(self) -> tuple[int, ...]:
        top = max(self.ks)
        return tuple(sorted({*self.ks, *(k for k in (1, 2, 3, 5, 7, 10, 15, 20) if k <= top)}))


@dataclass
class TurnCorpus:
    """The raw turns of one sample for the baselines: text, session, BM25 index, unit dense vectors."""

    texts: list[str]
    sessions: list[int]
    bm25: Bm25
    vectors: Any  # numpy array (turns × dim), rows of unit length


def corpus_texts(sample: LocomoSample) -> tuple[list[str], list[int]]:
    """Each turn as "Speaker: text" (how the pipeline's passages write it)."""
    texts = [f"{turn.speaker}: {turn.text}" for session in sample.sessions for turn in session.turns]
    sessions = [session.number for session in sample.sessions for _ in session.turns]
    return texts, sessions


async def build_corpus(
    sample: LocomoSample, embedder: Embedder, keywords: KeywordEncoder, cache_dir: Path | None
) -> TurnCorpus:
    import numpy as np

    texts, sessions = corpus_texts(sample)
    tokens = await asyncio.to_thread(lambda: [keywords.tokens(text) for text in texts])
    digest = hashlib.sha256("\x1e".join([embedder.model_name, *texts]).encode("utf-8")).hexdigest()[:16]
    cache = cache_dir / f"turns-{sample.user_id}-{digest}.npy" if cache_dir is not None else None
    if cache is not None and cache.exists():
        matrix = np.load(cache)
    else:
        matrix = np.asarray(await embedder.embed_passages(texts), dtype=np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        if cache is not None:
            np.save(cache, matrix)
    return TurnCorpus(texts=texts, sessions=sessions, bm25=Bm25(tokens), vectors=matrix)


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
    return {
        BM25: sessions_by_best_turn(bm25_scores, corpus.sessions, all_sessions),
        DENSE: sessions_by_best_turn(dense_scores, corpus.sessions, all_sessions),
        HYBRID: sessions_by_best_turn(fused, corpus.sessions, all_sessions),
        LAST_N: latest_sessions([(s.number, s.occurred_at) for s in sample.sessions]),
    }


async def item_sessions(
    stack: EvalStack, owner_user: str, items: Sequence[Any], session_numbers: Mapping[str, int]
) -> list[InjectedItem]:
    """Injected items with the sessions they came from: an episode's session; for a fact, every
    session its provenance records (read from the index, the item only names the latest)."""
    from services.common.domain.owner import Owner
    from services.common.stores.vector.port import FACTS

    owner = Owner(stack.tenant_id, owner_user)
    fact_ids = [item.id for item in items if item.kind == "fact"]
    provenance: dict[str, set[str]] = defaultdict(set)
    if fact_ids:
        index = await stack.resources.vector_index()
        for record in await index.get(FACTS, owner, fact_ids):
            provenance[record.id].update(str(s) for s in record.payload.get("session_ids") or [])
            for observation in record.payload.get("provenance") or []:
                if isinstance(observation, dict) and observation.get("session_id"):
                    provenance[record.id].add(str(observation["session_id"]))
    out: list[InjectedItem] = []
    for item in items:
        session_ids = set(provenance.get(item.id, set()))
        if item.session_id:
            session_ids.add(item.session_id)
        numbers = frozenset(session_numbers[s] for s in session_ids if s in session_numbers)
        out.append(InjectedItem(kind=item.kind, sessions=numbers, score=float(item.score)))
    return out


async def evaluate_question(
    stack: EvalStack,
    sample: LocomoSample,
    question: LocomoQuestion,
    corpus: TurnCorpus,
    ks: Sequence[int],
    session_numbers: Mapping[str, int],
) -> QuestionResult:
    user = sample.user_id
    # L0 first: its latency then includes embedding the question (later calls find it cached).
    started = time.perf_counter()
    auto = await stack.recall.auto(user, question.question)
    l0_latency = (time.perf_counter() - started) * 1000
    by_threshold = {stack.settings.l0_min_score: auto.items}
    for threshold, client in stack.sweep.items():
        by_threshold[threshold] = (await client.auto(user, question.question)).items
    rankings: dict[str, dict[int, list[int]]] = {OURS: {}}
    l1_latencies: list[float] = []
    for k in ks:
        started = time.perf_counter()
        found = await stack.recall.search(user, question.question, limit=k)
        l1_latencies.append((time.perf_counter() - started) * 1000)
        rankings[OURS][k] = unique_in_order(session_numbers.get(item.session_id or "") for item in found.items)
    keywords = stack.resources.keywords()
    query_terms = await asyncio.to_thread(keywords.tokens, question.question)
    query_vector = await stack.embedder.embed_query(question.question)
    all_sessions = len(sample.sessions)
    for name, ranking in baseline_rankings(corpus, query_terms, query_vector, sample).items():
        rankings[name] = {all_sessions: ranking}
    return QuestionResult(
        sample_id=sample.sample_id,
        number=question.number,
        question=question.question,
        category=question.category,
        evidence_sessions=question.evidence_sessions,
        rankings=rankings,
        l0_items=await item_sessions(stack, user, auto.items, session_numbers),
        l0_tokens=auto.tokens,
        l0_top_score=auto.top_score,
        l0_latency_ms=l0_latency,
        l1_latency_ms=statistics.fmean(l1_latencies) if l1_latencies else 0.0,
        l0_by_threshold={
            threshold: await item_sessions(stack, user, items, session_numbers)
            for threshold, items in by_threshold.items()
        },
    )


def select(samples: Sequence[LocomoSample], config: LocomoConfig) -> list[LocomoSample]:
    chosen = [s for s in samples if not config.samples or s.sample_id in config.samples]
    missing = set(config.samples) - {s.sample_id for s in samples}
    if missing:
        raise LocomoFormatError(f"no sample named {', '.join(sorted(missing))} in {config.path}")
    if config.max_questions is not None:
        chosen = [
            LocomoSample(s.sample_id, s.speaker_a, s.speaker_b, s.sessions, s.questions[: config.max_questions])
            for s in chosen
        ]
    return chosen


async def run_locomo(config: LocomoConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Ingest, consolidate, ask; returns the report (see `build_report`)."""
    from services.cli.ingest import publish_sessions

    if not config.ks or min(config.ks) < 1 or max(config.ks) > 100:
        raise ValueError("every k must be between 1 and 100")
    samples = select(load_locomo(config.path), config)
    timings: dict[str, float] = {}
    total_started = time.monotonic()
    owns_dir = config.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="tiermem-eval-")) if config.work_dir is None else config.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        started = time.monotonic()
        async with embedded_stack(
            work_dir,
            tenant_id=config.tenant_id,
            l0_sweep=True,
            episode_ttl_days=config.episode_ttl_days,
            **dict(config.recall_overrides),
        ) as stack:
            timings["start_s"] = time.monotonic() - started
            settings = stack.settings
            events = [e for sample in samples for e in session_events(sample, tenant_id=config.tenant_id)]
            started = time.monotonic()
            task = progress.add_task("publishing sessions", total=len(events)) if progress is not None else None

            def advance() -> None:
                if progress is not None and task is not None:
                    progress.advance(task)

            counts = await publish_sessions(stack.settings, events, advance)
            timings["consolidation_s"] = await wait_for_consolidation(stack.settings, progress)
            timings["ingest_total_s"] = time.monotonic() - started
            counters = _counters(stack.running)

            started = time.monotonic()
            keywords = stack.resources.keywords()
            corpus_task = progress.add_task("embedding raw turns (baselines)", total=len(samples)) if progress else None
            corpora: dict[str, TurnCorpus] = {}
            for sample in samples:
                corpora[sample.sample_id] = await build_corpus(sample, stack.embedder, keywords, work_dir)
                if progress is not None and corpus_task is not None:
                    progress.advance(corpus_task)
            timings["baseline_corpus_s"] = time.monotonic() - started

            started = time.monotonic()
            total_questions = sum(len(s.questions) for s in samples)
            question_task = progress.add_task("asking questions", total=total_questions) if progress else None
            results: list[QuestionResult] = []
            for sample in samples:
                session_numbers = {session_id_for(sample, s.number): s.number for s in sample.sessions}
                for question in sample.questions:
                    results.append(
                        await evaluate_question(
                            stack, sample, question, corpora[sample.sample_id], config.curve_ks, session_numbers
                        )
                    )
                    if progress is not None and question_task is not None:
                        progress.advance(question_task)
            timings["questions_s"] = time.monotonic() - started
            stored = await _stored_counts(stack, samples, config.tenant_id)
    finally:
        if owns_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    timings["total_s"] = time.monotonic() - total_started
    meta = {
        "dataset": str(config.path),
        "samples": [
            {"sample_id": s.sample_id, "sessions": len(s.sessions), "questions": len(s.questions)} for s in samples
        ],
        "published": {"sessions": counts.published, "duplicate": counts.duplicate},
        "pipeline_counters": counters,
        "stored": stored,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "settings": {
            "l0": (
                f"recall/auto, question as the message: max {settings.l0_default_max_entries} items, "
                f"{settings.l0_default_token_budget} tokens, keyword {settings.l0_keyword_weight} / dense "
                f"{settings.l0_dense_weight}, min score {settings.l0_min_score}"
            ),
            "l1": (
                f"memory_search kinds=[episode], limit=k for each k plotted: keyword {settings.l1_keyword_weight} / "
                f"dense {settings.l1_dense_weight}, min score {settings.l1_min_score}"
            ),
            "episode_ttl_days": config.episode_ttl_days,
            "baseline_hybrid": f"reciprocal rank fusion of BM25 and dense turn rankings, k={RRF_K}",
            "llm": "offline (extractive summaries, heuristic facts)",
            "recall_overrides": dict(config.recall_overrides),
            "episode_half_life_days": settings.episode_half_life_days,
        },
    }
    return build_report(results, config.ks, config.curve_ks, meta=meta)


def _counters(running: RunningServices) -> dict[str, int]:
    totals: dict[str, int] = {}
    for context in running.contexts.values():
        for name, value in context.counters.items():
            totals[name] = totals.get(name, 0) + value
    return dict(sorted(totals.items()))


async def _stored_counts(stack: EvalStack, samples: Sequence[LocomoSample], tenant_id: str) -> dict[str, int]:
    from services.common.domain.owner import Owner
    from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES

    index = await stack.resources.vector_index()
    totals = {"episodes": 0, "passages": 0, "facts": 0}
    for sample in samples:
        owner = Owner(tenant_id, sample.user_id)
        totals["episodes"] += await index.count(EPISODES, owner)
        totals["passages"] += await index.count(PASSAGES, owner)
        totals["facts"] += await index.count(FACTS, owner)
    return totals


# ================================================================================================
# Commands (registered by services/cli/main.py as `tiermem eval ...`)

eval_app = typer.Typer(
    name="eval", help="Measure memory: LoCoMo retrieval against baselines, Korean scenarios.", no_args_is_help=True
)


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise typer.BadParameter(f"--k takes comma-separated integers, got {text!r}") from exc
    if not ks or ks[0] < 1 or ks[-1] > 100:
        raise typer.BadParameter("every k must be between 1 and 100")
    return ks


def parse_overrides(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE pairs naming fields of the recall settings (values are validated by the settings)."""
    from services.recall_api.settings import RecallApiSettings

    parsed: list[tuple[str, str]] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in RecallApiSettings.model_fields:
            raise typer.BadParameter(f"--recall-setting takes KEY=VALUE with KEY a recall setting, got {pair!r}")
        parsed.append((key, value.strip()))
    return tuple(parsed)


def quiet_consumer_logs() -> None:
    """FastStream logs every message it handles at INFO; keep that out of the progress display unless
    the CLI was asked to be verbose (root logger at INFO or lower)."""
    import logging

    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        # FastStream sets its access logger's level itself when the broker starts; a filter stays.
        for name in ("faststream", "faststream.access", "faststream.access.nats"):
            logger = logging.getLogger(name)
            if not any(isinstance(f, _BelowWarning) for f in logger.filters):
                logger.addFilter(_BelowWarning())


class _BelowWarning:
    """Logging filter that drops records below WARNING."""

    def filter(self, record: Any) -> bool:
        return bool(record.levelno >= 30)


def _progress(console: Console) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


@eval_app.command("locomo")
def locomo_command(
    path: Annotated[Path, typer.Argument(help="LoCoMo JSON (e.g. ../shared/eval/locomo/locomo-dev.json).")],
    k: Annotated[str, typer.Option("--k", help="Comma-separated k for recall@k.")] = "5,10,20",
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON report here.")] = None,
    png: Annotated[
        Path | None, typer.Option("--png", help="Recall-vs-k chart (default: next to --out, else ./locomo-recall.png).")
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option("--work-dir", help="Keep the stack's data here (default: a temp dir, removed).")
    ] = None,
    sample: Annotated[list[str] | None, typer.Option("--sample", help="Only this sample id (repeatable).")] = None,
    questions: Annotated[
        int | None, typer.Option("--questions", min=1, help="Only the first N questions of each sample.")
    ] = None,
    recall_setting: Annotated[
        list[str] | None,
        typer.Option(
            "--recall-setting",
            help="KEY=VALUE of a recall setting to change for this run, e.g. episode_half_life_days=36500 "
            "(to measure a proposal; repeatable).",
        ),
    ] = None,
) -> None:
    """Ingest LoCoMo into an embedded stack, ask every question through L1 and L0, compare with baselines."""
    from rich.console import Console

    console = Console()
    err = Console(stderr=True)
    quiet_consumer_logs()
    config = LocomoConfig(
        path=path,
        ks=parse_ks(k),
        work_dir=work_dir,
        samples=tuple(sample or ()),
        max_questions=questions,
        recall_overrides=parse_overrides(recall_setting or []),
    )
    try:
        with _progress(err) as progress:
            report = asyncio.run(run_locomo(config, progress))
    except (LocomoFormatError, FileNotFoundError, ValidationError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    render_report(report, console)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
        console.print(f"report: {out}")
    chart = png or (out.with_suffix(".png") if out is not None else Path("locomo-recall.png"))
    console.print(f"chart: {draw_recall_png(report, chart)}")
    console.print(f"runtime: {report['timings_s']['total_s']:.0f} s ({report['timings_s']})")


@eval_app.command("scenarios")
def scenarios_command(
    path: Annotated[
        Path | None, typer.Argument(help="Scenario JSON (default: scripts/scenarios/ko_cross_session.json).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON report here.")] = None,
    work_dir: Annotated[Path | None, typer.Option("--work-dir", help="Keep the stack's data here.")] = None,
) -> None:
    """Run the Korean cross-session scenarios (plant in one session, ask in a later one) through L0."""
    from rich.console import Console

    from services.cli.scenarios import DEFAULT_SCENARIOS, render_scenarios, run_scenarios_embedded

    console = Console()
    quiet_consumer_logs()
    scenario_path = path or DEFAULT_SCENARIOS
    if not scenario_path.exists():
        Console(stderr=True).print(f"[red]error:[/] no scenario file at {scenario_path}")
        raise typer.Exit(2)
    report = asyncio.run(run_scenarios_embedded(scenario_path, work_dir))
    render_scenarios(report, console)
    if out is not None:
        out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
        console.print(f"report: {out}")
    if not report["summary"]["all_passed"]:
        raise typer.Exit(1)
