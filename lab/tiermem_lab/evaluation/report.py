"""The LoCoMo report on the console (rich tables), read from the JSON report `metrics.build_report` makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tiermem_lab.evaluation.baselines import OURS, SYSTEMS
from tiermem_lab.evaluation.locomo import CATEGORY_NAMES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


def _table(title: str, left: Iterable[str], right: Iterable[str]) -> Table:
    """A table whose `left` columns are left-aligned (labels) and `right` columns right-aligned (numbers)."""
    from rich.table import Table

    table = Table(title=title)
    for column in left:
        table.add_column(column)
    for column in right:
        table.add_column(column, justify="right")
    return table


def recall_overall_table(report: Mapping[str, Any]) -> Table:
    ks = [str(k) for k in report["ks"]]
    recall = report["session_recall"]
    scored = report["questions"]["scored"]
    table = _table(
        f"Session recall@k, categories 1-4 ({scored} questions with evidence)", ["system"], [f"@{k}" for k in ks]
    )
    for system in SYSTEMS:
        if system in recall:  # a report from before a baseline was added lacks it
            table.add_row(system, *(_fmt(recall[system]["overall"][k]) for k in ks))
    return table


def recall_by_category_table(report: Mapping[str, Any], k: str) -> Table:
    recall = report["session_recall"]
    counts = report["questions"]
    table = _table(f"Session recall@{k} by category", ["category"], ["n", *SYSTEMS])
    per_category = counts["by_category"]
    for category in recall[OURS]["by_category"]:
        label = f"{category} {CATEGORY_NAMES.get(int(category), '')}"
        scored_n = report["l0"]["by_category"][category]["questions"]
        table.add_row(
            label,
            f"{scored_n}/{per_category.get(category, scored_n)}",
            *(_fmt(recall[s]["by_category"][category][k]) for s in SYSTEMS),
        )
    table.add_row("overall", str(counts["scored"]), *(_fmt(recall[s]["overall"][k]) for s in SYSTEMS))
    return table


def comparison_view(report: Mapping[str, Any]) -> Table:
    ks = [str(k) for k in report["ks"]]
    table = _table("tiermem L1 against each baseline (difference / ratio)", ["baseline"], [f"@{k}" for k in ks])
    for baseline, by_k in report["comparison"].items():
        table.add_row(baseline, *(f"{_signed(by_k[k]['diff'])} / {_fmt(by_k[k]['ratio'], 2)}×" for k in ks))
    return table


def l0_view(l0: Mapping[str, Any]) -> Table:
    table = _table(
        "L0 auto-inject (the question as the message, no earlier turns)",
        ["category"],
        ["n", "recall rate", "contamination", "empty", "items/q", "tokens/q"],
    )
    rows = [(f"{c} {CATEGORY_NAMES.get(int(c), '')}", stats) for c, stats in l0["by_category"].items()]
    rows.append(("overall 1-4", l0["overall"]))
    for label, stats in rows:
        table.add_row(
            label,
            str(stats["questions"]),
            _fmt(stats["recall_rate"]),
            _fmt(stats["contamination_rate"]),
            _fmt(stats["empty_rate"]),
            _fmt(stats["items_mean"], 2),
            _fmt(stats["tokens_mean"], 1),
        )
    return table


def abstention_line(adversarial: Mapping[str, Any]) -> str:
    return (
        f"L0 on category 5 (adversarial, {adversarial['questions']} questions): abstention rate "
        f"{_fmt(adversarial['abstention_rate'])}, items/q {_fmt(adversarial['items_mean'], 2)}, "
        f"tokens/q {_fmt(adversarial['tokens_mean'], 1)}; the distorted evidence session was injected for "
        f"{_fmt(adversarial['evidence_injected_rate'])}"
    )


def latency_line(latency: Mapping[str, Any]) -> str:
    l0_latency, l1_latency = latency["l0_auto"], latency["l1_search"]
    return (
        f"latency in-process (ms): L0 p50 {_fmt(l0_latency['p50'], 1)} p95 {_fmt(l0_latency['p95'], 1)}; "
        f"L1 p50 {_fmt(l1_latency['p50'], 1)} p95 {_fmt(l1_latency['p95'], 1)}"
    )


def tradeoff_view(tradeoff: Iterable[Mapping[str, Any]]) -> Table:
    table = _table(
        "L0 with other minimum scores (same run, same stores; default 0.30)",
        [],
        ["min score", "recall rate 1-4", "abstention cat. 5", "contamination", "items/q"],
    )
    for row in tradeoff:
        table.add_row(
            f"{row['min_score']:.2f}",
            _fmt(row["recall_rate"]),
            _fmt(row["abstention_rate"]),
            _fmt(row["contamination_rate"]),
            _fmt(row["items_mean"], 2),
        )
    return table


def frontier_view(frontier: Mapping[str, Any]) -> Table:
    """The L0 frontier: recall and contamination at each minimum score, without the gate and with it."""
    table = _table(
        "L0 frontier: minimum score only (before) vs with the L0 gate (same run, same stores)",
        [],
        [
            "min score",
            "recall before",
            "contam. before",
            "abst. before",
            "recall gated",
            "contam. gated",
            "abst. gated",
        ],
    )
    gated = {row["min_score"]: row for row in frontier.get("gated", [])}
    for row in frontier.get("ungated", []):
        after = gated.get(row["min_score"], {})
        table.add_row(
            f"{row['min_score']:.2f}",
            _fmt(row["recall_rate"]),
            _fmt(row["contamination_rate"]),
            _fmt(row["abstention_rate"]),
            _fmt(after.get("recall_rate")),
            _fmt(after.get("contamination_rate")),
            _fmt(after.get("abstention_rate")),
        )
    return table


def targets_view(checks: Iterable[Mapping[str, Any]]) -> Table:
    table = _table("Targets", ["target", "value", "bar", "met", "by"], [])
    for check in checks:
        table.add_row(
            check["target"],
            _fmt(check["value"]),
            _fmt(check["bar"], 2),
            "[green]yes[/]" if check["met"] else "[red]no[/]",
            _signed(check["by"]),
        )
    return table


def unreadable_evidence_line(report: Mapping[str, Any]) -> str | None:
    """Which evidence entries named no dialogue turn (left out of scoring), when any did."""
    entries = report.get("unreadable_evidence") or []
    if not entries:
        return None
    shown = ", ".join(f"{e['sample_id']} q{e['question']} {e['entries']}" for e in entries[:5])
    more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    return f"evidence entries naming no dialogue turn, left out of scoring: {shown}{more}"


def render_report(report: Mapping[str, Any], console: Console) -> None:
    if unreadable := unreadable_evidence_line(report):
        console.print(unreadable)
    console.print(recall_overall_table(report))
    for k in report["ks"]:
        console.print(recall_by_category_table(report, str(k)))
    console.print(comparison_view(report))
    console.print(l0_view(report["l0"]))
    console.print(abstention_line(report["l0"]["adversarial"]))
    console.print(latency_line(report["latency_ms"]))
    if report.get("l0_tradeoff"):
        console.print(tradeoff_view(report["l0_tradeoff"]))
    if (report.get("l0_frontier") or {}).get("ungated"):
        console.print(frontier_view(report["l0_frontier"]))
    console.print(targets_view(report["targets"]))
