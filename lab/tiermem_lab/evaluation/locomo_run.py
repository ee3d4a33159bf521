"""The LoCoMo run: ingest every sample into a fresh embedded stack, wait for consolidation, then put
every question to

- L1 `memory_search` (episodes, `limit=k`): session recall@k — an evidence session among the sessions
  of the episodes returned;
- L0 `recall/auto` (the question as the message, no earlier turns): recall rate (an item from an
  evidence session injected), contamination rate (share of injected items from no evidence session),
  tokens injected; for category 5 (adversarial: not answerable) the abstention rate (nothing injected);
- the raw-turn baselines (`baselines`), over the same sample.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiermem_lab.evaluation.baselines import (
    OURS,
    PASSAGE_DENSE_WEIGHT,
    PASSAGE_KEYWORD_WEIGHT,
    PASSAGE_TURNS,
    RRF_K,
    TurnCorpus,
    baseline_rankings,
    build_corpus,
    pool_passage_idf,
    unique_in_order,
)
from tiermem_lab.evaluation.harness import EvalStack, embedded_stack, item_sessions, wait_for_consolidation
from tiermem_lab.evaluation.locomo import (
    LocomoFormatError,
    LocomoQuestion,
    LocomoSample,
    load_locomo,
    session_events,
    session_id_for,
)
from tiermem_lab.evaluation.locomo_burst import (
    SECONDS_BETWEEN_MESSAGES,
    SECONDS_BETWEEN_TURNS,
    LocomoForm,
    ingest_form,
    sample_form,
)
from tiermem_lab.evaluation.metrics import QuestionResult, build_report

if TYPE_CHECKING:
    from rich.progress import Progress

    from services.cli.ingest import PublishCounts
    from services.cli.stack import RunningServices
    from services.recall_api.settings import RecallApiSettings
    from tiermem_lab.evaluation.answers import AnswerEvalConfig

DEFAULT_KS = (5, 10, 20)


@dataclass(frozen=True)
class LocomoConfig:
    path: Path
    ks: tuple[int, ...] = DEFAULT_KS
    work_dir: Path | None = None  # kept when given; a temporary directory otherwise
    samples: tuple[str, ...] = ()  # sample ids to run (all when empty)
    max_questions: int | None = None  # per sample, for quick runs
    tenant_id: str = "locomo"
    # Recall settings to change for this run (e.g. ("episode_half_life_days", "36500")): to measure a
    # proposal with the same harness. Reported in the JSON; the defaults are the headline numbers.
    recall_overrides: tuple[tuple[str, str], ...] = ()
    # How the sessions arrive: labelled chat, group chat / imported transcript, or chat typed as bursts
    # of one-sentence messages with their times (locomo_burst.py; the baselines rank the same messages).
    form: LocomoForm = "chat"
    answers: AnswerEvalConfig | None = None  # answer-level evaluation (answers.py); None skips it

    @property
    def curve_ks(self) -> tuple[int, ...]:
        top = max(self.ks)
        return tuple(sorted({*self.ks, *(k for k in (1, 2, 3, 5, 7, 10, 15, 20) if k <= top)}))


@dataclass
class LocomoRun:
    """What one run measured, before it is scored into the report."""

    settings: RecallApiSettings
    results: list[QuestionResult]
    counts: PublishCounts
    counters: dict[str, int]
    stored: dict[str, int]
    timings: dict[str, float]
    answers: dict[str, Any] | None = None  # the report's `answers` section, when it ran
    ingest: dict[str, Any] = field(default_factory=dict)  # the episodic-summarizer's turn and passage settings


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
    ungated = {t: (await client.auto(user, question.question)).items for t, client in stack.sweep_ungated.items()}
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
        l0_ungated_by_threshold={
            threshold: await item_sessions(stack, user, items, session_numbers) for threshold, items in ungated.items()
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


def _progress_step(progress: Progress | None, description: str, total: int) -> Callable[[], None]:
    """A callback that advances a new task of the progress display (does nothing without one)."""
    if progress is None:
        return lambda: None
    task = progress.add_task(description, total=total)
    return lambda: progress.advance(task)


async def run_locomo(config: LocomoConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Ingest, consolidate, ask; returns the report (see `metrics.build_report`)."""
    if not config.ks or min(config.ks) < 1 or max(config.ks) > 100:
        raise ValueError("every k must be between 1 and 100")
    samples = [sample_form(sample, config.form) for sample in select(load_locomo(config.path), config)]
    total_started = time.monotonic()
    owns_dir = config.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="tiermem-eval-")) if config.work_dir is None else config.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        run = await _run_on_embedded_stack(config, samples, work_dir, progress)
    finally:
        if owns_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    run.timings["total_s"] = time.monotonic() - total_started
    return build_report(run.results, config.ks, config.curve_ks, meta=_report_meta(config, samples, run))


async def _run_on_embedded_stack(
    config: LocomoConfig, samples: Sequence[LocomoSample], work_dir: Path, progress: Progress | None
) -> LocomoRun:
    timings: dict[str, float] = {}
    started = time.monotonic()
    async with embedded_stack(
        work_dir,
        tenant_id=config.tenant_id,
        l0_sweep=True,
        **dict(config.recall_overrides),
    ) as stack:
        timings["start_s"] = time.monotonic() - started
        counts = await _ingest(stack, samples, config, progress, timings)
        counters = _counters(stack.running)
        ingest = _ingest_settings(stack.running)
        started = time.monotonic()
        corpora = await _build_corpora(stack, samples, work_dir, progress)
        timings["baseline_corpus_s"] = time.monotonic() - started
        started = time.monotonic()
        results = await _ask_questions(stack, samples, corpora, config.curve_ks, progress)
        timings["questions_s"] = time.monotonic() - started
        stored = await _stored_counts(stack, samples, config.tenant_id)
        answers = None
        if config.answers is not None:
            from tiermem_lab.evaluation.answers import run_answer_eval

            started = time.monotonic()
            answers = await run_answer_eval(stack, samples, config.answers, progress)
            timings["answers_s"] = time.monotonic() - started
    return LocomoRun(stack.settings, results, counts, counters, stored, timings, answers, ingest)


async def _ingest(
    stack: EvalStack,
    samples: Sequence[LocomoSample],
    config: LocomoConfig,
    progress: Progress | None,
    timings: dict[str, float],
) -> PublishCounts:
    """Publish every session and wait until the pipeline consumed them (`consolidation_s`, `ingest_total_s`)."""
    from services.cli.ingest import publish_sessions

    events = [
        e
        for sample in samples
        for e in session_events(sample, tenant_id=config.tenant_id, form=ingest_form(config.form))
    ]
    started = time.monotonic()
    advance = _progress_step(progress, "publishing sessions", len(events))
    counts = await publish_sessions(stack.settings, events, advance)
    timings["consolidation_s"] = await wait_for_consolidation(stack.settings, progress)
    timings["ingest_total_s"] = time.monotonic() - started
    return counts


async def _build_corpora(
    stack: EvalStack, samples: Sequence[LocomoSample], work_dir: Path, progress: Progress | None
) -> dict[str, TurnCorpus]:
    keywords = stack.resources.keywords()
    advance = _progress_step(progress, "embedding raw turns (baselines)", len(samples))
    corpora: dict[str, TurnCorpus] = {}
    for sample in samples:
        corpora[sample.sample_id] = await build_corpus(sample, stack.embedder, keywords, work_dir)
        advance()
    pool_passage_idf(corpora.values())
    return corpora


async def _ask_questions(
    stack: EvalStack,
    samples: Sequence[LocomoSample],
    corpora: Mapping[str, TurnCorpus],
    ks: Sequence[int],
    progress: Progress | None,
) -> list[QuestionResult]:
    advance = _progress_step(progress, "asking questions", sum(len(s.questions) for s in samples))
    results: list[QuestionResult] = []
    for sample in samples:
        session_numbers = {session_id_for(sample, s.number): s.number for s in sample.sessions}
        for question in sample.questions:
            results.append(
                await evaluate_question(stack, sample, question, corpora[sample.sample_id], ks, session_numbers)
            )
            advance()
    return results


def _report_meta(config: LocomoConfig, samples: Sequence[LocomoSample], run: LocomoRun) -> dict[str, Any]:
    settings = run.settings
    return {
        "dataset": str(config.path),
        "form": config.form,
        "messages": sum(len(session.turns) for s in samples for session in s.sessions),
        **({"burst": _BURST_META} if config.form == "burst" else {}),
        "samples": [
            {"sample_id": s.sample_id, "sessions": len(s.sessions), "questions": len(s.questions)} for s in samples
        ],
        "unreadable_evidence": [
            {"sample_id": s.sample_id, "question": q.number, "entries": list(q.unreadable_evidence)}
            for s in samples
            for q in s.questions
            if q.unreadable_evidence
        ],
        "published": {"sessions": run.counts.published, "duplicate": run.counts.duplicate},
        "pipeline_counters": run.counters,
        "stored": run.stored,
        "timings_s": {k: round(v, 2) for k, v in run.timings.items()},
        "settings": {
            "l0": (
                f"recall/auto, question as the message: max {settings.l0_default_max_entries} items, "
                f"{settings.l0_default_token_budget} tokens, keyword {settings.l0_keyword_weight} / dense "
                f"{settings.l0_dense_weight}, min score {settings.l0_min_score}; decision {settings.l0_decision} "
                "(model: the shipped coefficients, then one per session; rules: the gate that follows); gate: within "
                f"{settings.l0_relative_margin} of the top, dense >= {settings.l0_min_dense} and >= "
                f"{settings.l0_min_dense_share} of the best, keyword >= {settings.l0_min_keyword}, one per session "
                f"{settings.l0_one_per_session}, subject attribution {settings.l0_subject_attribution}, detail "
                f"check (value questions) dense bar {settings.l0_detail_max_dense}, repeats left out"
            ),
            "l1": (
                f"memory_search kinds=[episode], limit=k for each k plotted: keyword {settings.l1_keyword_weight} / "
                f"dense {settings.l1_dense_weight}, min score {settings.l1_min_score}, at least "
                f"{settings.l1_min_fetch} hits fetched per collection"
            ),
            "baseline_hybrid": f"reciprocal rank fusion of BM25 and dense turn rankings, k={RRF_K}",
            "baseline_passages": (
                f"{PASSAGE_TURNS}-turn windows, {PASSAGE_KEYWORD_WEIGHT} keyword (BM25) / {PASSAGE_DENSE_WEIGHT} "
                "dense on the stores' [0, 1] parts, a session ranked by its best passage; the pooled variant "
                "takes the keyword IDF over the windows of every conversation in the run"
            ),
            "ingest": run.ingest,
            "llm": "offline (extractive summaries, heuristic facts)",
            "recall_overrides": dict(config.recall_overrides),
            "episode_half_life_days": settings.episode_half_life_days,
        },
        **({"answers": run.answers} if run.answers is not None else {}),
    }


_BURST_META = {
    "split": "each turn into its sentences and lines, one message each, a photo with the sentence it follows",
    "seconds_between_messages": SECONDS_BETWEEN_MESSAGES,
    "seconds_between_turns": SECONDS_BETWEEN_TURNS,
}
# The episodic-summarizer's settings that decide what a turn and a passage are (set from the
# environment, e.g. TIERMEM_BURST_GAP_SECONDS): a run's numbers depend on them.
_INGEST_SETTINGS = ("burst_gap_seconds", "passage_segment_gap_minutes", "passage_max_turns", "passage_max_chars")


def _ingest_settings(running: RunningServices) -> dict[str, Any]:
    from services.episodic_summarizer.handlers import NAME

    context = running.contexts.get(NAME)
    if context is None:
        return {}
    return {name: getattr(context.settings, name) for name in _INGEST_SETTINGS if hasattr(context.settings, name)}


def _counters(running: RunningServices) -> dict[str, int]:
    totals: dict[str, int] = {}
    for context in running.contexts.values():
        for name, value in context.counters.items():
            totals[name] = totals.get(name, 0) + value
    return dict(sorted(totals.items()))


async def _stored_counts(stack: EvalStack, samples: Sequence[LocomoSample], tenant_id: str) -> dict[str, int]:
    from services.common.domain.owner import Owner

    episodes, facts = await stack.resources.episodes(), await stack.resources.facts()
    totals = {"episodes": 0, "passages": 0, "facts": 0}
    for sample in samples:
        owner = Owner(tenant_id, sample.user_id)
        totals["episodes"] += await episodes.count(owner)
        totals["passages"] += await episodes.count_passages(owner)
        totals["facts"] += await facts.count(owner)
    return totals
