"""The LoCoMo chart (PNG). matplotlib is the optional `eval` extra: it is imported only here, only when
a chart is drawn, and its absence is reported as `PlottingUnavailableError` (the tables and JSON do
not need it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.cli.evaluation.baselines import BM25, DENSE, HYBRID, LAST_N, OURS, SYSTEMS
from services.cli.evaluation.metrics import TARGET_L0_ABSTENTION, TARGET_L0_RECALL, TARGET_L1_RECALL_AT_5

INSTALL_HINT = "pip install 'tiermem[eval]'"
_STYLES = {OURS: ("o-", 2.6), BM25: ("s--", 1.4), DENSE: ("^--", 1.4), HYBRID: ("D--", 1.4), LAST_N: ("x:", 1.4)}


class PlottingUnavailableError(RuntimeError):
    """matplotlib is not installed (it comes with the `eval` extra)."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlottingUnavailableError(
            f"the PNG chart needs matplotlib, which comes with the eval extra: {INSTALL_HINT}"
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


def draw_recall_png(report: Mapping[str, Any], path: Path) -> Path:
    """Left: session recall@k against k for every system (categories 1-4). Right: L0 recall rate and
    category-5 abstention against the L0 minimum score, with the targets (when a sweep was run).
    Raises `PlottingUnavailableError` without matplotlib."""
    plt = _pyplot()
    tradeoff = [row for row in report.get("l0_tradeoff", []) if row["recall_rate"] is not None]
    figure, panels = plt.subplots(1, 2 if tradeoff else 1, figsize=(13 if tradeoff else 7.5, 4.8), dpi=120)
    _plot_recall_curves(panels[0] if tradeoff else panels, report)
    if tradeoff:
        _plot_l0_tradeoff(panels[1], tradeoff)
    overrides = report.get("settings", {}).get("recall_overrides") or {}
    if overrides:
        figure.suptitle("recall settings changed: " + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
