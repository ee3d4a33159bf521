"""`tiermem eval l0-train`: fit the L0 decision model (services/recall_api/l0/decision.py) on the
training data only, and write the coefficients the product ships.

Training data: the LoCoMo dev conversations (the PATH given, e.g. ../shared/eval/locomo/locomo-dev.json)
and the product question set's dev split, each in both chat forms: four embedded stacks, one per
dataset and form, each ingested and consolidated as `eval locomo` and `eval product` do. Every
question then goes through L0's own search and ranking, in process, and every ranked candidate past
the floor becomes one example (features from `select.l0_scene`, the same function inference uses).
The product set's `test` split and LoCoMo's other conversations are never read here.

The fit and the threshold are `l0_fit`'s. The output records the features, coefficients, threshold,
the objective it maximised, the training metrics of the model and of the hand rules, the command and a
hash of the data, so the file says how to make it again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tiermem_lab.evaluation.l0_fit import (
    OBJECTIVE,
    TrainTurn,
    choose_threshold,
    design_matrix,
    fit_logistic,
    group_metrics,
)

if TYPE_CHECKING:
    from rich.console import Console

    from contracts import SessionCompleted
    from services.recall_api.l0.decision import DecisionModel
    from services.recall_api.l0.select import L0Policy, Scene
    from services.recall_api.retrieval.candidates import ScoreParts
    from services.recall_api.retrieval.ranking import Ranked
    from tiermem_lab.evaluation.harness import EvalStack
    from tiermem_lab.evaluation.locomo import ChatForm

FORMS: tuple[ChatForm, ...] = ("chat", "group")
L2 = 1.0


@functools.cache
def max_entries() -> int:
    """L0's entry limit when the turn does not ask for one (TIERMEM_L0_DEFAULT_MAX_ENTRIES), as the
    evaluations ask: the rules' verdict feature and the simulated decision stop there, as inference does."""
    from services.recall_api.settings import RecallApiSettings

    return RecallApiSettings().l0_default_max_entries


@dataclass(frozen=True)
class Question:
    """A training question: who asks it, the text, and the sessions holding its answer (empty: not in memory)."""

    user_id: str
    text: str
    evidence: frozenset[str]
    answerable: bool


@dataclass(frozen=True)
class Dataset:
    name: str
    events: Callable[[str, ChatForm], list[SessionCompleted]]  # (tenant, form) → the sessions to publish
    questions: list[Question]
    digest: str


def locomo_dataset(path: Path) -> Dataset:
    from tiermem_lab.evaluation.locomo import load_locomo, session_events, session_id_for

    samples = load_locomo(path)
    questions = []
    for sample in samples:
        for q in sample.questions:
            evidence = frozenset(session_id_for(sample, n) for n in q.evidence_sessions)
            if q.category == 5:
                questions.append(Question(sample.user_id, q.question, frozenset(), answerable=False))
            elif evidence:
                questions.append(Question(sample.user_id, q.question, evidence, answerable=True))

    def events(tenant: str, form: ChatForm) -> list[SessionCompleted]:
        return [e for sample in samples for e in session_events(sample, tenant_id=tenant, form=form)]

    return Dataset("locomo", events, questions, hashlib.sha256(path.read_bytes()).hexdigest())


def product_dataset(path: Path) -> Dataset:
    """The product set's dev split only (the test split is held out)."""
    from tiermem_lab.evaluation.product_set import load_product_set, select_users, session_events

    users = select_users(load_product_set(path), "dev", (), None)
    questions = [
        Question(user.user_id, q.question, frozenset(q.evidence), answerable=q.answerable)
        for user in users
        for q in user.questions
    ]
    canonical = json.dumps([u.model_dump(mode="json") for u in users], sort_keys=True, ensure_ascii=False)

    def events(tenant: str, form: ChatForm) -> list[SessionCompleted]:
        return [e for user in users for e in session_events(user, tenant_id=tenant, form=form)]

    return Dataset("product-dev", events, questions, hashlib.sha256(canonical.encode()).hexdigest())


@dataclass(frozen=True)
class RawTurn:
    """One question as L0's search and ranking left it: what the features and the simulated decision
    are computed from, offline (stored per group, so the fit can be run again without the stacks)."""

    group: str
    answerable: bool
    evidence: frozenset[str]
    text: str
    ranked: list[Ranked]
    parts: dict[str, ScoreParts]


async def _raw_turn(stack: EvalStack, question: Question, group: str) -> RawTurn:
    """The question through L0's query, search and ranking (as `AutoRecall.auto` runs them)."""
    from services.common.domain.fact_attributes import is_procedure_attribute
    from services.common.domain.owner import Owner
    from services.common.domain.trivial import is_trivial_message
    from services.common.stores.vector.port import HybridWeights
    from services.recall_api.l0.query import build_l0_query
    from services.recall_api.retrieval import ranking
    from services.recall_api.retrieval.candidates import CandidateRetriever, CandidateSearch

    settings = stack.settings
    text = build_l0_query(question.text, [], max_codepoints=settings.l0_query_max_codepoints)
    if is_trivial_message(question.text) or not text:
        return RawTurn(group, question.answerable, question.evidence, text, [], {})
    retriever = CandidateRetriever(stack.resources)
    now = datetime.now(UTC)
    search = CandidateSearch(
        weights=HybridWeights(keyword=settings.l0_keyword_weight, dense=settings.l0_dense_weight),
        fetch=settings.l0_default_max_entries * settings.fetch_factor,
        kinds=("episode", "fact"),
        channel="private",
        agent_id=None,
        include_superseded=False,
        now=now,
    )
    found = await retriever.candidate_set(Owner(stack.tenant_id, question.user_id), await retriever.embed(text), search)
    candidates = [c for c in found.candidates if not (c.fact and is_procedure_attribute(c.fact.attribute))]
    ranked = ranking.rank_candidates(
        candidates,
        now=now,
        min_score=settings.l0_min_score,
        episode_half_life_days=settings.episode_half_life_days,
        episode_recency_weight=settings.episode_recency_weight,
        importance_weight=settings.importance_weight,
    )
    return RawTurn(group, question.answerable, question.evidence, text, ranked, dict(found.parts))


def train_turn(raw: RawTurn, tokenise: Callable[[str], list[str]], rules: L0Policy) -> TrainTurn:
    """The turn's labelled features (the same `l0_scene` inference reads) and its simulated decision."""
    from services.recall_api.l0.select import candidate_sessions, l0_scene

    scene = l0_scene(raw.ranked, raw.parts, raw.text, tokenise, rules, limit=max_entries())
    labels = tuple(int(bool(candidate_sessions(r.candidate) & raw.evidence)) for r in raw.ranked)
    features = tuple(scene.features(i, mismatch=scene.mismatch(i)) for i in range(len(raw.ranked)))
    return TrainTurn(raw.group, raw.answerable, labels, features, _chooser(scene, raw.parts, raw.text, rules))


def _chooser(
    scene: Scene, parts: Mapping[str, ScoreParts], text: str, rules: L0Policy
) -> Callable[[DecisionModel | None], list[int]]:
    """What L0 would inject for the turn under a model (None: the hand rules), as ranked indexes; the
    entry limit applies, the token budget (300 tokens, roomy for a few short items) is not simulated."""
    from dataclasses import replace

    from services.recall_api.l0.select import select_injection

    position = {r.candidate.id: i for i, r in enumerate(scene.ranked)}

    def choose(model: DecisionModel | None) -> list[int]:
        policy = rules if model is None else replace(rules, model=model)
        selection = select_injection(scene.ranked, parts, text, scene.tokenise, policy, limit=max_entries())
        return [position[r.candidate.id] for r in selection.chosen]

    return choose


async def collect(dataset: Dataset, form: ChatForm, work_dir: Path) -> list[RawTurn]:
    """One embedded stack: publish the dataset in `form`, wait for consolidation, ask every question."""
    from services.cli.ingest import publish_sessions
    from tiermem_lab.evaluation.harness import embedded_stack, wait_for_consolidation

    group = f"{dataset.name}/{form}"
    tenant = "l0train"
    async with embedded_stack(work_dir / group.replace("/", "-"), tenant_id=tenant) as stack:
        await publish_sessions(stack.settings, dataset.events(tenant, form), lambda: None)
        await wait_for_consolidation(stack.settings)
        return [await _raw_turn(stack, question, group) for question in dataset.questions]


def cached_group(cache: Path, dataset: Dataset, form: ChatForm, work_dir: Path, console: Console) -> list[RawTurn]:
    """The group's raw turns from `cache` when collected there from the same data, else collected now
    (and stored there)."""
    import asyncio
    import pickle

    path = cache / f"{dataset.name}-{form}-{dataset.digest[:16]}.pickle"
    if path.exists():
        loaded: list[RawTurn] = pickle.loads(path.read_bytes())  # our own cache file
        console.print(f"{dataset.name}/{form}: {len(loaded)} questions from {path}")
        return loaded
    turns = asyncio.run(collect(dataset, form, work_dir))
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(turns))
    console.print(f"{dataset.name}/{form}: {len(turns)} questions, {sum(len(t.ranked) for t in turns)} candidates")
    return turns


def coefficients_document(
    turns: Sequence[TrainTurn], datasets: Sequence[Dataset], command: str, l2: float
) -> dict[str, Any]:
    """Fit, choose the threshold, and describe both (the JSON the product ships)."""
    from services.recall_api.l0.decision import FEATURES

    x, y = design_matrix(turns)
    fitted = fit_logistic(x, y, l2=l2)
    choice = choose_threshold(turns, fitted)
    rules = group_metrics(turns, [turn.choose(None) for turn in turns])
    return {
        "features": list(FEATURES),
        "mean": [round(v, 6) for v in fitted.mean],
        "scale": [round(v, 6) for v in fitted.scale],
        "weights": [round(v, 6) for v in fitted.weights],
        "intercept": round(fitted.intercept, 6),
        "threshold": choice.threshold,
        "objective": OBJECTIVE,
        "objective_met_bars": choice.met_bars,
        "training": {
            "command": command,
            "data": {d.name: {"sha256": d.digest, "questions": len(d.questions)} for d in datasets},
            "forms": list(FORMS),
            "candidates": int(x.shape[0]),
            "positives": int(y.sum()),
            "l2": l2,
            "iterations": fitted.iterations,
        },
        "train_metrics": {"model": choice.metrics, "rules": rules},
        "threshold_curve": choice.curve,
    }


def default_output() -> Path:
    from services.recall_api.l0 import decision

    return Path(decision.__file__).with_name(decision.COEFFICIENTS)


LocomoDev = Annotated[
    Path, typer.Argument(help="The LoCoMo training conversations (../shared/eval/locomo/locomo-dev.json).")
]


def l0_train_command(
    locomo: LocomoDev,
    out: Annotated[
        Path | None, typer.Option("--out", help="Where to write the coefficients (default: the package's own file).")
    ] = None,
    product_set: Annotated[
        Path | None, typer.Option("--set", help="The product question set JSON (dev split used).")
    ] = None,
    l2: Annotated[float, typer.Option("--l2", min=0.0, help="L2 penalty on the standardised weights.")] = L2,
    cache: Annotated[
        Path | None,
        typer.Option("--cache", help="Keep each group's collected candidates here and reuse them (same data)."),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Only collect this group into --cache (e.g. locomo/chat), no fit; repeatable."),
    ] = None,
) -> None:
    """Fit the L0 decision model on LoCoMo dev and the product set's dev split (both chat forms) and write
    its coefficients, threshold and training metrics (rules vs model)."""
    from rich.console import Console

    from services.common.gateways.keywords import KeywordEncoder
    from services.recall_api.l0.auto_recall import l0_policy
    from services.recall_api.settings import RecallApiSettings
    from tiermem_lab.evaluation.harness import quiet_consumer_logs
    from tiermem_lab.evaluation.product_set import DEFAULT_PRODUCT_SET

    console = Console()
    quiet_consumer_logs()
    datasets = [locomo_dataset(locomo), product_dataset(product_set or DEFAULT_PRODUCT_SET)]
    groups = [(d, form) for d in datasets for form in FORMS]
    if only and (cache is None or not {f"{d.name}/{f}" for d, f in groups} >= set(only)):
        console.print(
            "[red]error:[/] --only takes groups of "
            + ", ".join(f"{d.name}/{f}" for d, f in groups)
            + " and needs --cache"
        )
        raise typer.Exit(2)
    command = "tiermem eval l0-train " + " ".join(shlex.quote(arg) for arg in sys.argv[3:])
    raw: list[RawTurn] = []
    with tempfile.TemporaryDirectory(prefix="tiermem-l0-train-") as scratch:
        for dataset, form in groups:
            if only and f"{dataset.name}/{form}" not in only:
                continue
            raw.extend(cached_group(cache or Path(scratch) / "cache", dataset, form, Path(scratch), console))
    if only:
        return
    tokenise = KeywordEncoder().tokens  # what the stack's resources tokenise with
    rules = l0_policy(RecallApiSettings(l0_decision="rules"))
    turns = [train_turn(r, tokenise, rules) for r in raw]
    document = coefficients_document(turns, datasets, command.strip(), l2)
    target = out or default_output()
    target.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _print_metrics(document, console)
    console.print(f"coefficients: {target} (threshold {document['threshold']})")


def _print_metrics(document: Mapping[str, Any], console: Console) -> None:
    from rich.table import Table

    table = Table(title="L0 on the training data (model vs rules)")
    for column in ("group", "decision", "recall", "contamination", "abstention", "items", "objective"):
        table.add_column(column)
    for decision in ("model", "rules"):
        for group, m in document["train_metrics"][decision].items():
            table.add_row(
                group,
                decision,
                f"{m['recall']:.3f}",
                f"{m['contamination']:.3f}",
                f"{m['abstention']:.3f}",
                f"{m['items_per_answerable']:.2f}",
                f"{m['objective']:.3f}",
            )
    console.print(table)
