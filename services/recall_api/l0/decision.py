"""The L0 decision, pure: is this candidate worth injecting on this turn?

Each ranked candidate is described by general signals of the turn (`FEATURES`): how well it matches
(its fused relevance and both halves of it), how far it sits from the turn's best match, how much of
the message's wording its evidence covers, whether the message asks for one stated value that the
evidence does not cover, whether the evidence is about another known speaker than the one asked
about, its kind and rank. A logistic model turns them into p(the candidate comes from a conversation
that answers the message); a candidate is injected when p reaches the shipped threshold (and the
structural rules after it keep it: one item per session, facts first, the entry and token limits).

The coefficients are fitted offline on labelled conversations by `tiermem eval l0-train` (the lab)
and shipped beside this module (`decision_coefficients.json`) with the command and data that made
them. Inference is a dot product and a sigmoid over a handful of numbers: no library, no model file
beyond the coefficients. Why a model and not stacked hand rules: each rule was a hard cut on one
signal, tuned where one dataset was wrong; a calibrated weighting of the same signals trades them
against each other, and its threshold is chosen by a stated objective on the training data.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from services.recall_api.l0.detail import stem
from services.recall_api.l0.gate import GateItem

# The order of the model's inputs; the shipped coefficients name the same list (checked on load).
FEATURES: tuple[str, ...] = (
    "relevance",  # the fused relevance
    "dense",  # its dense part
    "keyword",  # its keyword part
    "gap_to_top",  # the turn's best relevance minus this one's
    "dense_share",  # dense part / the best dense part among the turn's candidates
    "keyword_share",  # keyword part / the best keyword part among them
    "rank",  # log(1 + position in the ranking)
    "fact",  # 1 for a fact, 0 for an episode
    "tentative",  # 1 for a fact read once from a conversation (not confirmed, not saved on purpose)
    "asks_value",  # the message asks for one stated value (what, when, who; 뭐, 언제, 누구 ...)
    "coverage",  # share of the message's terms the candidate's evidence holds
    "value_uncovered",  # asks_value × (1 - coverage): a value asked, little of it stated
    "subject_mismatch",  # the evidence is another known speaker's, not the one asked about
    "query_terms",  # log(1 + the message's terms)
    "candidates",  # log(1 + candidates past the floor)
    "rules_chosen",  # the hand rules (TIERMEM_L0_DECISION=rules) would inject it
)
_INDEX = {name: i for i, name in enumerate(FEATURES)}
# A part the search did not report (the embedding missed the L0 deadline) gives no evidence either way.
_UNKNOWN = float("nan")

# How each feature is named when it is what pulled a candidate below the bar: (below its training
# mean, above it). A feature pulls down from whichever side its weight counts against: a positive
# weight from below ("a weak match"), a negative one from above ("matched by shared words more than by
# meaning": the model trusts a keyword-led match less than the keyword part alone suggests). Naming it
# from its own side keeps the sentence true of the candidate whatever sign a refit gives the weight.
_PULLED_DOWN_BY: dict[str, tuple[str, str]] = {
    "relevance": ("a weak match", "a strong match"),
    "dense": ("far in meaning from the message", "close in meaning to the message"),
    "keyword": ("few words shared with the message", "many words shared with the message"),
    "gap_to_top": ("close to the best match", "well below the best match"),
    "dense_share": ("further in meaning than the best match", "as close in meaning as the best match"),
    "keyword_share": ("fewer shared words than the best match", "matched by shared words more than by meaning"),
    "rank": ("ranked high", "ranked low"),
    "fact": ("an episode, not a fact", "a fact"),
    "tentative": ("a confirmed memory", "a tentative fact"),
    "asks_value": ("the message asks for no single value", "the message asks for a value"),
    "coverage": ("covers little of the message's wording", "covers much of the message's wording"),
    "value_uncovered": ("states the detail asked", "does not state the detail asked"),
    "subject_mismatch": ("about the person asked about", "about someone other than the person asked about"),
    "query_terms": ("a short message", "a long message"),
    "candidates": ("few candidates matched", "many candidates matched alike"),
    "rules_chosen": ("the hand rules leave it out", "the hand rules would inject it"),
}

COEFFICIENTS = "decision_coefficients.json"


@dataclass(frozen=True, slots=True)
class QueryContext:
    """What the features need of the turn: the message's terms and value question, and the best
    relevance, dense and keyword parts among its candidates."""

    terms: frozenset[str]
    asks_value: bool
    top_relevance: float
    best_dense: float | None
    best_keyword: float | None
    candidates: int


def query_context(terms: frozenset[str], asks_value: bool, items: Sequence[GateItem]) -> QueryContext:
    """The turn's context for `items` (ranked, past the floor)."""
    dense = [item.dense for item in items if item.dense is not None]
    keyword = [item.keyword for item in items if item.keyword is not None]
    return QueryContext(
        terms=terms,
        asks_value=asks_value,
        top_relevance=max((item.relevance for item in items), default=0.0),
        best_dense=max(dense) if dense else None,
        best_keyword=max(keyword) if keyword else None,
        candidates=len(items),
    )


def coverage(query_terms: frozenset[str], text_terms: frozenset[str]) -> float:
    """The share of the query's terms the text holds (the same term, or the same stem for longer Latin
    words: "painted" / "painting"); 0 for a query without terms."""
    if not query_terms:
        return 0.0
    stems = {stem(term) for term in text_terms}
    return sum(1 for term in query_terms if stem(term) in stems) / len(query_terms)


def _share(part: float | None, best: float | None) -> float:
    if part is None or best is None:
        return _UNKNOWN
    return part / best if best > 0 else 0.0


def candidate_features(
    item: GateItem,
    rank: int,
    context: QueryContext,
    text_terms: frozenset[str],
    *,
    subject_mismatch: bool,
    rules_chosen: bool = False,
) -> tuple[float, ...]:
    """The model's inputs for one candidate, in `FEATURES` order (NaN: unknown, contributes nothing).
    `rank`: its 0-based position in the ranking; `text_terms`: `surface_terms` of its evidence text."""
    covered = coverage(context.terms, text_terms)
    asks = 1.0 if context.asks_value else 0.0
    return (
        item.relevance,
        item.dense if item.dense is not None else _UNKNOWN,
        item.keyword if item.keyword is not None else _UNKNOWN,
        context.top_relevance - item.relevance,
        _share(item.dense, context.best_dense),
        _share(item.keyword, context.best_keyword),
        math.log1p(rank),
        1.0 if item.kind == "fact" else 0.0,
        0.0 if item.standalone else 1.0,
        asks,
        covered,
        asks * (1.0 - covered),
        1.0 if subject_mismatch else 0.0,
        math.log1p(len(context.terms)),
        math.log1p(context.candidates),
        1.0 if rules_chosen else 0.0,
    )


@dataclass(frozen=True, slots=True)
class DecisionModel:
    """A logistic model over standardised `FEATURES`: p = sigmoid(intercept + Σ w·(x - mean) / scale);
    a candidate passes when p ≥ `threshold`."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    intercept: float
    threshold: float

    def __post_init__(self) -> None:
        if self.features != FEATURES:
            raise ValueError(f"L0 decision coefficients name features {list(self.features)}, expected {list(FEATURES)}")
        if not len(self.mean) == len(self.scale) == len(self.weights) == len(FEATURES):
            raise ValueError("L0 decision coefficients: mean, scale and weights must each have one value per feature")
        if any(s <= 0 or not math.isfinite(s) for s in self.scale):
            raise ValueError("L0 decision coefficients: every scale must be a positive number")
        if not 0 < self.threshold < 1:
            raise ValueError("L0 decision coefficients: the threshold must be between 0 and 1")

    def contributions(self, x: Sequence[float]) -> list[float]:
        """Each feature's term of the logit (0 for an unknown feature)."""
        return [
            0.0 if math.isnan(value) else w * (value - m) / s
            for value, m, s, w in zip(x, self.mean, self.scale, self.weights, strict=True)
        ]

    def probability(self, x: Sequence[float]) -> float:
        logit = self.intercept + sum(self.contributions(x))
        return 1.0 / (1.0 + math.exp(-logit)) if logit > -500 else 0.0

    def passes(self, p: float) -> bool:
        return p >= self.threshold

    def cut_reason(self, x: Sequence[float], p: float, *, person: str | None = None, rules: str | None = None) -> str:
        """The sentence for a candidate below the bar: its p, the bar, and the feature that pulled it
        down most. `rules`: why the hand rules, one of the model's inputs, leave it out too; a reader
        learns more from "states no clock time for it" than from "the hand rules leave it out", so it
        takes that phrase's place, or follows the feature that weighed more."""
        terms = self.contributions(x)
        weakest = min(range(len(terms)), key=terms.__getitem__)
        name = self.features[weakest]
        above = x[weakest] > self.mean[weakest]
        if terms[weakest] >= 0:
            why = "no signal strong enough"  # nothing counted against it: it is the bar itself
        elif name == "subject_mismatch" and above and person:
            why = f"about someone other than {person}"
        elif name == "rules_chosen" and not above and rules:
            why, rules = rules, None
        else:
            why = _PULLED_DOWN_BY[name][above]
        also = f"; the hand rules: {rules}" if rules and rules != why else ""
        return f"below the confidence bar (p={p:.2f} < {self.threshold:.2f}): {why}{also}"

    def with_threshold(self, threshold: float) -> DecisionModel:
        return DecisionModel(self.features, self.mean, self.scale, self.weights, self.intercept, threshold)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DecisionModel:
        try:
            return cls(
                features=tuple(str(name) for name in data["features"]),
                mean=tuple(float(v) for v in data["mean"]),
                scale=tuple(float(v) for v in data["scale"]),
                weights=tuple(float(v) for v in data["weights"]),
                intercept=float(data["intercept"]),
                threshold=float(data["threshold"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"L0 decision coefficients are incomplete: {exc}") from exc


def feature_index(name: str) -> int:
    return _INDEX[name]


def read_coefficients(path: Path | None = None) -> dict[str, Any]:
    """The shipped coefficients file (or `path`) as stored."""
    if path is not None:
        text = path.read_text(encoding="utf-8")
    else:
        text = resources.files(__package__ or "services.recall_api.l0").joinpath(COEFFICIENTS).read_text("utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("L0 decision coefficients must be a JSON object")
    return data


@functools.cache
def shipped_model() -> DecisionModel:
    """The model shipped with the package, read once."""
    return DecisionModel.from_mapping(read_coefficients())
