"""Fitting the L0 decision model, pure (numpy): a logistic regression with an L2 penalty by iteratively
reweighted least squares over standardised features, and the threshold chosen on the training turns by
a stated objective. The turns come from `l0_train` (the embedded stack); nothing here reads data.

Labels: a candidate is 1 when it comes from a session that holds the answer (LoCoMo's evidence
sessions, the product set's evidence sessions), 0 otherwise; every candidate of a question whose
answer is not in memory (LoCoMo category 5, the product set's not-in-memory questions) is 0.

The threshold is the grid point with the highest mean recall over the training groups (dataset × chat
form) among those that keep the mean contamination at most 0.35 and every group's abstention at least
0.35, the issue's L0 bars for LoCoMo: recall, the share of answerable questions with an item from an
evidence session injected; contamination, the share of injected items (answerable questions) from no
evidence session; abstention, the share of not-answerable questions with nothing injected. Every group
counts the same whatever its size. When no grid point meets both bars, the one with the best mean of
recall - contamination - (1 - abstention) is taken.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from services.recall_api.l0.decision import FEATURES, DecisionModel

Matrix = npt.NDArray[np.float64]
THRESHOLDS = tuple(round(0.05 + 0.01 * step, 2) for step in range(91))  # 0.05 .. 0.95
MAX_CONTAMINATION = 0.35
MIN_ABSTENTION = 0.35
OBJECTIVE = (
    f"the highest mean recall over the training groups with mean contamination <= {MAX_CONTAMINATION} and every "
    f"group's abstention >= {MIN_ABSTENTION}; if no threshold meets both, the best mean of recall - contamination "
    "- (1 - abstention)"
)


@dataclass(frozen=True)
class TrainTurn:
    """One question as L0 saw it: its group ("locomo/chat"), whether memory holds its answer, the
    label and features of each ranked candidate, and `choose`: the indexes of the candidates L0 would
    inject under a model (None: the hand rules)."""

    group: str
    answerable: bool
    labels: tuple[int, ...]
    features: tuple[tuple[float, ...], ...]
    choose: Callable[[DecisionModel | None], list[int]]


@dataclass(frozen=True)
class Fitted:
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    intercept: float
    iterations: int

    def model(self, threshold: float) -> DecisionModel:
        return DecisionModel(FEATURES, self.mean, self.scale, self.weights, self.intercept, threshold)


def standardise(x: Matrix) -> tuple[Matrix, Matrix, Matrix]:
    """Columns centred and scaled by their known values; an unknown value (NaN) becomes 0 (the mean)."""
    known = ~np.isnan(x)
    counts = known.sum(axis=0)
    filled = np.where(known, x, 0.0)
    mean = np.divide(filled.sum(axis=0), counts, out=np.zeros(x.shape[1]), where=counts > 0)
    centred = np.where(known, x - mean, 0.0)
    variance = np.divide((centred**2).sum(axis=0), counts, out=np.zeros(x.shape[1]), where=counts > 0)
    scale = np.sqrt(variance)
    scale[scale < 1e-9] = 1.0
    return centred / scale, mean, scale


def fit_logistic(x: Matrix, y: Matrix, *, l2: float = 1.0, max_iterations: int = 100) -> Fitted:
    """Logistic regression of `y` (0/1) on `x` (rows of FEATURES, NaN unknown), L2 penalty `l2` on the
    weights (not the intercept), by Newton steps (IRLS) until the step is negligible."""
    if x.shape[0] == 0:
        raise ValueError("no training candidates")
    z, mean, scale = standardise(x)
    design = np.hstack([np.ones((z.shape[0], 1)), z])
    penalty = np.full(design.shape[1], l2)
    penalty[0] = 0.0
    beta = np.zeros(design.shape[1])
    iterations = 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - the count is reported
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ beta, -30, 30)))
        w = p * (1 - p)
        hessian = design.T @ (design * w[:, None]) + np.diag(penalty) + 1e-9 * np.eye(design.shape[1])
        gradient = design.T @ (y - p) - penalty * beta
        step = np.linalg.solve(hessian, gradient)
        beta = beta + step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return Fitted(
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in beta[1:]),
        intercept=float(beta[0]),
        iterations=iterations,
    )


def design_matrix(turns: Sequence[TrainTurn]) -> tuple[Matrix, Matrix]:
    rows = [row for turn in turns for row in turn.features]
    labels = [label for turn in turns for label in turn.labels]
    x = np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
    return x, np.array(labels, dtype=np.float64)


def group_metrics(turns: Sequence[TrainTurn], chosen: Sequence[Sequence[int]]) -> dict[str, dict[str, Any]]:
    """Recall, contamination, abstention and the objective per group, for the `chosen` indexes of each turn."""
    by_group: dict[str, list[tuple[TrainTurn, Sequence[int]]]] = {}
    for turn, picked in zip(turns, chosen, strict=True):
        by_group.setdefault(turn.group, []).append((turn, picked))
    out: dict[str, dict[str, Any]] = {}
    for group, pairs in sorted(by_group.items()):
        answerable = [(t, c) for t, c in pairs if t.answerable]
        unanswerable = [c for t, c in pairs if not t.answerable]
        injected = sum(len(c) for _, c in answerable)
        wrong = sum(1 for t, c in answerable for i in c if not t.labels[i])
        recall = (
            statistics.fmean(1.0 if any(t.labels[i] for i in c) else 0.0 for t, c in answerable) if answerable else 0.0
        )
        contamination = wrong / injected if injected else 0.0
        abstention = statistics.fmean(0.0 if c else 1.0 for c in unanswerable) if unanswerable else 1.0
        out[group] = {
            "answerable": len(answerable),
            "not_answerable": len(unanswerable),
            "recall": round(recall, 4),
            "contamination": round(contamination, 4),
            "abstention": round(abstention, 4),
            "items_per_answerable": round(injected / len(answerable), 3) if answerable else 0.0,
            "objective": round(recall - contamination - (1 - abstention), 4),
        }
    return out


def objective(metrics: Mapping[str, Mapping[str, Any]]) -> float:
    """The mean over the groups of recall - contamination - (1 - abstention)."""
    return statistics.fmean(float(m["objective"]) for m in metrics.values()) if metrics else 0.0


def _mean(metrics: Mapping[str, Mapping[str, Any]], key: str) -> float:
    return statistics.fmean(float(m[key]) for m in metrics.values()) if metrics else 0.0


def meets_the_bars(metrics: Mapping[str, Mapping[str, Any]]) -> bool:
    return _mean(metrics, "contamination") <= MAX_CONTAMINATION and all(
        float(m["abstention"]) >= MIN_ABSTENTION for m in metrics.values()
    )


@dataclass(frozen=True)
class ThresholdChoice:
    threshold: float
    metrics: dict[str, dict[str, Any]]
    objective: float  # the mean recall when the bars are met, else the fallback objective
    met_bars: bool
    curve: list[dict[str, float]]  # per threshold: mean recall, contamination, abstention, fallback objective


def choose_threshold(turns: Sequence[TrainTurn], fitted: Fitted, grid: Sequence[float] = THRESHOLDS) -> ThresholdChoice:
    """The grid threshold by the module's objective (the lowest one among ties: more recall)."""
    scored: list[tuple[float, dict[str, dict[str, Any]]]] = []
    curve: list[dict[str, float]] = []
    for threshold in grid:
        model = fitted.model(threshold)
        metrics = group_metrics(turns, [turn.choose(model) for turn in turns])
        scored.append((threshold, metrics))
        curve.append(
            {
                "threshold": threshold,
                "recall": round(_mean(metrics, "recall"), 4),
                "contamination": round(_mean(metrics, "contamination"), 4),
                "abstention": round(_mean(metrics, "abstention"), 4),
                "objective": round(objective(metrics), 4),
            }
        )
    if not scored:
        raise ValueError("an empty threshold grid")
    feasible = [(t, m) for t, m in scored if meets_the_bars(m)]
    if feasible:
        threshold, metrics = max(feasible, key=lambda tm: (_mean(tm[1], "recall"), -tm[0]))
        return ThresholdChoice(threshold, metrics, _mean(metrics, "recall"), True, curve)
    threshold, metrics = max(scored, key=lambda tm: (objective(tm[1]), -tm[0]))
    return ThresholdChoice(threshold, metrics, objective(metrics), False, curve)
