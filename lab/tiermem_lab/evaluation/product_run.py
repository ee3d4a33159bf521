"""`tiermem eval product`: the product question set (product_set.py) through the real embedded stack,
scored as product_metrics.py defines.

Every chosen user's sessions are published as `SessionCompleted` events (chat or group form), the
consolidation services run until the backlog is empty, and then every question goes, as that user's
message with no earlier turns, to L0 `recall/auto` and to L1 `memory_search` (episodes, limit 5). The
baselines of `eval locomo` (baselines.py: BM25, dense and hybrid over raw turns, the 4-turn passage
hybrid with per-user and pooled IDF, the last sessions) rank the same user's sessions with the same
embedding model. All users share one tenant, as the users of one deployment do.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiermem_lab.evaluation.baselines import (
    OURS,
    SYSTEMS,
    TurnCorpus,
    baseline_rankings,
    build_corpus,
    pool_passage_idf,
)
from tiermem_lab.evaluation.harness import EvalStack, embedded_stack, item_sessions, wait_for_consolidation
from tiermem_lab.evaluation.locomo import ChatForm
from tiermem_lab.evaluation.product_metrics import (
    RECALL_K,
    ProductOutcome,
    per_question,
    summary_tables,
    target_checks,
)
from tiermem_lab.evaluation.product_set import (
    DEFAULT_PRODUCT_SET,
    ProductQuestion,
    ProductUser,
    SplitChoice,
    as_sample,
    load_product_set,
    select_users,
    session_events,
)

if TYPE_CHECKING:
    from rich.progress import Progress

BASELINE_SYSTEMS = tuple(system for system in SYSTEMS if system != OURS)


@dataclass(frozen=True)
class ProductConfig:
    path: Path = DEFAULT_PRODUCT_SET
    split: SplitChoice = "all"
    form: ChatForm = "chat"
    users: tuple[str, ...] = ()  # only these users (all of the split when empty)
    max_questions: int | None = None  # per user, for quick runs
    work_dir: Path | None = None  # kept when given; a temporary directory otherwise
    tenant_id: str = "product"


def _step(progress: Progress | None, description: str, total: int) -> Callable[[], None]:
    if progress is None:
        return lambda: None
    task = progress.add_task(description, total=total)
    return lambda: progress.advance(task)


async def ask(
    stack: EvalStack, user: ProductUser, question: ProductQuestion, corpus: TurnCorpus | None
) -> ProductOutcome:
    """One question through L0 and L1 (and the baselines, given the user's corpus)."""
    numbers = {session.id: number for number, session in enumerate(user.sessions, start=1)}
    by_number = {number: session_id for session_id, number in numbers.items()}
    auto = await stack.recall.auto(user.user_id, question.question)
    items = await item_sessions(stack, user.user_id, auto.items, numbers)
    found = await stack.recall.search(user.user_id, question.question, limit=RECALL_K)
    l1 = tuple(dict.fromkeys(s for item in found.items if (s := item.session_id) is not None and s in numbers))
    baselines: dict[str, tuple[str, ...]] = {}
    if corpus is not None:
        terms = await asyncio.to_thread(stack.resources.keywords().tokens, question.question)
        vector = await stack.embedder.embed_query(question.question)
        for system, ranking in baseline_rankings(corpus, terms, vector, as_sample(user)).items():
            baselines[system] = tuple(by_number[number] for number in ranking)
    return ProductOutcome(
        user_id=user.user_id,
        split=user.split,
        language=user.language,
        question_id=question.id,
        question=question.question,
        kind=question.kind,
        answerable=question.answerable,
        sessions=question.sessions,
        stale=question.stale,
        l1_sessions=l1,
        injected=tuple(tuple(sorted(by_number[n] for n in item.sessions)) for item in items),
        skipped_reason=auto.skipped_reason,
        top_score=auto.top_score,
        tokens=auto.tokens,
        baselines=baselines,
    )


async def ingest(
    stack: EvalStack, users: Sequence[ProductUser], form: ChatForm, progress: Progress | None = None
) -> dict[str, int]:
    """Publish every session of `users`, then wait until the pipeline consumed them."""
    from services.cli.ingest import publish_sessions

    events = [event for user in users for event in session_events(user, tenant_id=stack.tenant_id, form=form)]
    counts = await publish_sessions(stack.settings, events, _step(progress, "publishing sessions", len(events)))
    await wait_for_consolidation(stack.settings, progress)
    return {"sessions": len(events), "published": counts.published, "duplicate": counts.duplicate}


async def build_corpora(stack: EvalStack, users: Sequence[ProductUser], work_dir: Path) -> dict[str, TurnCorpus]:
    """Each user's raw turns for the baselines; the pooled passage IDF is taken over the run's users."""
    keywords = stack.resources.keywords()
    corpora = {u.user_id: await build_corpus(as_sample(u), stack.embedder, keywords, work_dir) for u in users}
    pool_passage_idf(corpora.values())
    return corpora


async def ask_all(
    stack: EvalStack,
    users: Sequence[ProductUser],
    corpora: Mapping[str, TurnCorpus],
    progress: Progress | None = None,
) -> list[ProductOutcome]:
    advance = _step(progress, "asking questions", sum(len(u.questions) for u in users))
    outcomes: list[ProductOutcome] = []
    for user in users:
        for question in user.questions:
            outcomes.append(await ask(stack, user, question, corpora.get(user.user_id)))
            advance()
    return outcomes


def build_report(
    config: ProductConfig, users: Sequence[ProductUser], outcomes: Sequence[ProductOutcome], meta: Mapping[str, Any]
) -> dict[str, Any]:
    tables = summary_tables(outcomes, BASELINE_SYSTEMS)
    return {
        "dataset": str(config.path),
        "split": config.split,
        "form": config.form,
        "users": [
            {"user_id": u.user_id, "split": u.split, "language": u.language, "sessions": len(u.sessions)} for u in users
        ],
        **meta,
        "systems": [OURS, *BASELINE_SYSTEMS],
        "summary": tables,
        "targets": target_checks(tables["by_split"]),
        "per_question": per_question(outcomes),
    }


async def run_product(config: ProductConfig, progress: Progress | None = None) -> dict[str, Any]:
    """A fresh embedded stack (temporary unless `config.work_dir`): ingest, consolidate, ask; the report."""
    users = select_users(load_product_set(config.path), config.split, config.users, config.max_questions)
    started = time.monotonic()
    owns_dir = config.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="tiermem-product-")) if config.work_dir is None else config.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    try:
        async with embedded_stack(work_dir, tenant_id=config.tenant_id) as stack:
            mark = time.monotonic()
            published = await ingest(stack, users, config.form, progress)
            timings["ingest_s"] = time.monotonic() - mark
            mark = time.monotonic()
            corpora = await build_corpora(stack, users, work_dir)
            outcomes = await ask_all(stack, users, corpora, progress)
            timings["questions_s"] = time.monotonic() - mark
    finally:
        if owns_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    timings["total_s"] = time.monotonic() - started
    meta = {"published": published, "timings_s": {k: round(v, 2) for k, v in timings.items()}}
    return build_report(config, users, outcomes, meta)
