"""The LoCoMo chart (PNG). matplotlib is the lab's optional `plot` extra: it is imported only here, only when
a chart is drawn, and its absence is reported as `PlottingUnavailableError` (the tables and JSON do
not need it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tiermem_lab.evaluation.baselines import (
    BM25,
    DENSE,
    DENSE_PASSAGES,
    HYBRID,
    LAST_N,
    OURS,
    PASSAGES,
    PASSAGES_POOLED_IDF,
    SYSTEMS,
)
from tiermem_lab.evaluation.metrics import (
    TARGET_L0_ABSTENTION,
    TARGET_L0_CONTAMINATION,
    TARGET_L0_RECALL,
    TARGET_L1_RECALL_AT_5,
)

INSTALL_HINT = "pip install -e 'lab[plot]'"
_STYLES = {
    OURS: ("o-", 2.6),
    BM25: ("s--", 1.4),
    DENSE: ("^--", 1.4),
    HYBRID: ("D--", 1.4),
    PASSAGES: ("v-.", 1.6),
    DENSE_PASSAGES: ("<-.", 1.2),
    PASSAGES_POOLED_IDF: ("1:", 1.2),
    LAST_N: ("x:", 1.4),
}


class PlottingUnavailableError(RuntimeError):
    """matplotlib is not installed (it comes with the lab's `plot` extra)."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlottingUnavailableError(
            f"the PNG chart needs matplotlib, which comes with the lab's plot extra: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_recall_curves(axes: Any, report: Mapping[str, Any]) -> None:
    for system in SYSTEMS:
        curve = report["recall_curve"][system]
        points = sorted((int(k), v) for k, v in curve.items() if v is not None)
        if not points:
            continue
        marker, width = _STYLES[system]
        axes.plot([k for k, _ in points], [v for _, v in points], marker, linewidth=width, label=system)
    axes.axhline(TARGET_L1_RECALL_AT_5, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("k (sessions retrieved)")
    axes.set_ylabel("session recall@k")
    axes.set_ylim(0.0, 1.02)
    axes.grid(True, alpha=0.3)
    axes.set_title(f"LoCoMo session recall@k ({report['questions']['scored']} questions, categories 1-4)")
    axes.legend(loc="lower right")


def _plot_l0_tradeoff(axes: Any, tradeoff: Sequence[Mapping[str, Any]]) -> None:
    thresholds = [row["min_score"] for row in tradeoff]
    axes.plot(thresholds, [row["recall_rate"] for row in tradeoff], "o-", label="L0 recall rate (cat. 1-4)")
    abstention = [row["abstention_rate"] for row in tradeoff]
    if all(value is not None for value in abstention):
        axes.plot(thresholds, abstention, "s-", label="L0 abstention (cat. 5)")
    contamination = [row["contamination_rate"] for row in tradeoff]
    axes.plot(thresholds, [c if c is not None else float("nan") for c in contamination], "x:", label="contamination")
    axes.axhline(TARGET_L0_RECALL, color="tab:blue", linewidth=0.8, linestyle="--")
    axes.axhline(TARGET_L0_ABSTENTION, color="tab:orange", linewidth=0.8, linestyle="--")
    axes.set_xlabel("L0 minimum score")
    axes.set_ylim(0.0, 1.02)
    axes.grid(True, alpha=0.3)
    axes.set_title("L0 recall vs abstention as the minimum score rises")
    axes.legend(loc="best")


def _frontier_points(rows: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    # A minimum score that leaves a handful of items in 300 questions has no meaningful contamination
    # (one wrong item of two reads 0.5): such points are left off the curve.
    points = [
        (row["contamination_rate"], row["recall_rate"])
        for row in rows
        if row.get("contamination_rate") is not None
        and row.get("recall_rate") is not None
        and (row.get("items_mean") or 0.0) >= 0.05
    ]
    return [x for x, _ in points], [y for _, y in points]


def _plot_l0_frontier(axes: Any, frontier: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """L0 recall against contamination, one point per minimum score: with the gate and without it
    (the same run, the same stores). Up and to the left is better."""
    for key, label, style in (("ungated", "minimum score only (before)", "s--"), ("gated", "with the L0 gate", "o-")):
        xs, ys = _frontier_points(frontier.get(key, []))
        if xs:
            axes.plot(xs, ys, style, label=label)
            axes.annotate(f"{frontier[key][0]['min_score']:.2f}", (xs[0], ys[0]), fontsize=7)
    axes.axhline(TARGET_L0_RECALL, color="tab:blue", linewidth=0.8, linestyle="--")
    axes.axvline(TARGET_L0_CONTAMINATION, color="tab:red", linewidth=0.8, linestyle="--")
    axes.set_xlabel("contamination (share of injected items from no evidence session)")
    axes.set_ylabel("L0 recall rate (cat. 1-4)")
    axes.set_xlim(0.0, 1.0)
    axes.set_ylim(0.0, 1.02)
    axes.grid(True, alpha=0.3)
    axes.set_title("L0 precision-recall frontier (points: minimum scores)")
    axes.legend(loc="lower right")


def draw_recall_png(report: Mapping[str, Any], path: Path) -> Path:
    """Left: session recall@k against k for every system (categories 1-4). Middle: L0 recall rate and
    category-5 abstention against the L0 minimum score, with the targets (when a sweep was run).
    Right: the L0 frontier, recall against contamination, with and without the gate (when both sweeps
    were run). Raises `PlottingUnavailableError` without matplotlib."""
    plt = _pyplot()
    tradeoff = [row for row in report.get("l0_tradeoff", []) if row["recall_rate"] is not None]
    frontier = report.get("l0_frontier") or {}
    columns = 1 + bool(tradeoff) + bool(tradeoff and frontier.get("ungated"))
    figure, panels = plt.subplots(1, columns, figsize=(6.5 * columns, 4.8), dpi=120)
    panels = list(panels) if columns > 1 else [panels]
    _plot_recall_curves(panels[0], report)
    if tradeoff:
        _plot_l0_tradeoff(panels[1], tradeoff)
    if columns == 3:
        _plot_l0_frontier(panels[2], frontier)
    overrides = report.get("settings", {}).get("recall_overrides") or {}
    if overrides:
        figure.suptitle("recall settings changed: " + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
