"""`tiermem eval product`: the command, and its report on the console (rich tables read from the JSON
report product_run.build_report makes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from tiermem_lab.evaluation.baselines import DENSE, DENSE_PASSAGES, PASSAGES, PASSAGES_POOLED_IDF
from tiermem_lab.evaluation.locomo import chat_form
from tiermem_lab.evaluation.product_set import DEFAULT_PRODUCT_SET, ProductSetFormatError, SplitChoice

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tiermem_lab.evaluation.product_run import ProductConfig

# The baselines shown beside L1 in the tables (every baseline is in the JSON report).
SHOWN_BASELINES = (DENSE, PASSAGES, DENSE_PASSAGES, PASSAGES_POOLED_IDF)
SHORT_NAMES = {
    DENSE: "dense turns",
    PASSAGES: "passages",
    DENSE_PASSAGES: "dense passages",
    PASSAGES_POOLED_IDF: "passages pooled IDF",
}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def summary_table(title: str, groups: Mapping[str, Mapping[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("group")
    columns = [
        "answerable",
        "not in memory",
        "L1 @1",
        "L1 @5",
        *(f"{SHORT_NAMES[b]} @5" for b in SHOWN_BASELINES),
        "L0 recall",
        "L0 contam.",
        "L0 abstention",
        "topic injected",
        "stale injected",
        "empty w/o reason",
    ]
    for column in columns:
        table.add_column(column, justify="right")
    for name, stats in groups.items():
        baselines = stats["baselines_recall_at_5"]
        table.add_row(
            name,
            str(stats["answerable"]),
            str(stats["not_in_memory"]),
            _fmt(stats["l1_recall_at_1"]),
            _fmt(stats["l1_recall_at_5"]),
            *(_fmt(baselines.get(b)) for b in SHOWN_BASELINES),
            _fmt(stats["l0_recall"]),
            _fmt(stats["l0_contamination"]),
            _fmt(stats["l0_abstention"]),
            _fmt(stats["l0_topic_injected"]),
            _fmt(stats["stale_injected"]),
            _fmt(stats["empty_without_reason"]),
        )
    return table


def baselines_table(summary: Mapping[str, Any], systems: list[str]) -> Table:
    from rich.table import Table

    table = Table(title="Session recall@1 and @5, answerable questions: tiermem L1 and every baseline")
    table.add_column("system")
    groups = {"all": summary["all"], **summary["by_split"]}
    for name in groups:
        table.add_column(f"{name} @1", justify="right")
        table.add_column(f"{name} @5", justify="right")
    table.add_row(systems[0], *(_fmt(stats[f"l1_recall_at_{k}"]) for stats in groups.values() for k in (1, 5)))
    for system in systems[1:]:
        cells = [_fmt(stats[f"baselines_recall_at_{k}"].get(system)) for stats in groups.values() for k in (1, 5)]
        table.add_row(system, *cells)
    return table


def targets_table(checks: list[Mapping[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title="Issue 50 bars (only the held-out 'test' split counts)")
    for column in ("split", "target", "value", "bar", "met"):
        table.add_column(column)
    for check in checks:
        table.add_row(
            check["split"] + (" (held out)" if check["held_out"] else ""),
            check["target"],
            _fmt(check["value"]),
            f"{check['bar']:.2f}",
            "[green]yes[/]" if check["met"] else "[red]no[/]",
        )
    return table


def render_product(report: Mapping[str, Any], console: Console) -> None:
    summary = report["summary"]
    console.print(f"{report['dataset']}: split {report['split']}, {report['form']} form")
    console.print(summary_table("By split", {"all": summary["all"], **summary["by_split"]}))
    console.print(summary_table("By split and language", summary["by_split_language"]))
    console.print(summary_table("By language", summary["by_language"]))
    console.print(summary_table("By question kind", summary["by_kind"]))
    console.print(baselines_table(summary, report["systems"]))
    console.print(targets_table(report["targets"]))
    console.print(f"runtime: {report['timings_s']}")


def product_command(
    split: Annotated[str, typer.Option("--split", help="dev, test (held out) or all.")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of tables.")] = False,
    form: Annotated[
        str,
        typer.Option(
            "--form",
            help="chat: the user's and the assistant's turns with their names; group: every turn role user, "
            "the speaker's name only in the text.",
        ),
    ] = "chat",
    user: Annotated[list[str] | None, typer.Option("--user", help="Only this user (repeatable).")] = None,
    questions: Annotated[
        int | None,
        typer.Option(
            "--questions", min=1, help="Only the first N answerable and N not-in-memory questions of each user."
        ),
    ] = None,
    path: Annotated[Path, typer.Option("--set", help="The question set JSON.")] = DEFAULT_PRODUCT_SET,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the JSON report here.")] = None,
    work_dir: Annotated[
        Path | None, typer.Option("--work-dir", help="Keep the stack's data here (default: a temp dir, removed).")
    ] = None,
) -> None:
    """Ingest the product question set (English and Korean chat) into an embedded stack and put every
    question to L0 and L1, against the raw-turn baselines; report per split, language and kind."""
    from rich.console import Console

    from services.cli.broker_loss import exit_on_broker_loss
    from tiermem_lab.evaluation.harness import quiet_consumer_logs
    from tiermem_lab.evaluation.product_run import ProductConfig

    err = Console(stderr=True)
    if split not in ("dev", "test", "all"):
        err.print(f"[red]error:[/] --split must be dev, test or all, not {split!r}")
        raise typer.Exit(2)
    try:
        config = ProductConfig(
            path=path,
            split=cast(SplitChoice, split),
            form=chat_form(form),
            users=tuple(user or ()),
            max_questions=questions,
            work_dir=work_dir,
        )
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    quiet_consumer_logs()
    try:
        with exit_on_broker_loss(err, "the evaluation stopped", code=1):
            report = _run(config, err)
    except (ProductSetFormatError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        render_product(report, Console())


def _run(config: ProductConfig, err: Console) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tiermem_lab.evaluation.product_run import run_product

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err) as progress:
        return asyncio.run(run_product(config, progress))
