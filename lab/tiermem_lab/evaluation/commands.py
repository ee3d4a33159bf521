"""The `tiermem eval ...` commands (the `tiermem` CLI finds them through tiermem_lab.cli)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from tiermem_lab.evaluation import answer_options as ao
from tiermem_lab.evaluation.harness import quiet_consumer_logs
from tiermem_lab.evaluation.locomo import LocomoFormatError
from tiermem_lab.evaluation.locomo_burst import locomo_form

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from tiermem_lab.evaluation.locomo_run import LocomoConfig

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


def _progress(console: Console) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _draw_chart(report: dict[str, Any], chart: Path, console: Console) -> None:
    """The PNG when matplotlib is installed; otherwise say how to get it (the tables and JSON stand)."""
    from rich.markup import escape

    from tiermem_lab.evaluation.plot import PlottingUnavailableError, draw_recall_png

    try:
        console.print(f"chart: {draw_recall_png(report, chart)}")
    except PlottingUnavailableError as exc:
        console.print(f"[yellow]no chart:[/] {escape(str(exc))} (the tables and the JSON report are complete)")


LocomoPath = Annotated[
    Path,
    typer.Argument(
        help="LoCoMo JSON (e.g. ../shared/eval/locomo/locomo-dev.json), one conversation file of the release's "
        "locomo10_v2 folder, or that folder.",
    ),
]


@eval_app.command("locomo")
def locomo_command(
    path: LocomoPath,
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
    form: Annotated[
        str,
        typer.Option(
            "--form",
            help="chat: speaker A as user, B as assistant, names in `name`; group: every turn role user, the "
            "speaker's name only in the text (a group chat or an imported transcript); burst: as chat, but every "
            "turn sent as its sentences, one message each with its time (a messaging app; the baselines rank the "
            "same messages).",
        ),
    ] = "chat",
    answer_model: ao.AnswerModelOption = None,
    judge_model: ao.JudgeModelOption = None,
    answer_limit: ao.AnswerLimitOption = None,
    answer_concurrency: ao.AnswerConcurrencyOption = ao.DEFAULT_CONCURRENCY,
    answer_l1_k: ao.AnswerL1Option = 0,
    answer_api_base: ao.AnswerApiBaseOption = None,
    answer_price: ao.AnswerPriceOption = None,
) -> None:
    """Ingest LoCoMo into an embedded stack, ask every question through L1 and L0, compare with baselines;
    with --answer-model, also answer and judge them (J-score, reflection rate, tokens, cost)."""
    from rich.console import Console

    from tiermem_lab.evaluation.locomo_run import LocomoConfig
    from tiermem_lab.evaluation.report import render_report

    console = Console()
    err = Console(stderr=True)
    try:
        chosen_form = locomo_form(form)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    answers = ao.answer_config(
        err, answer_model, judge_model, answer_limit, answer_concurrency, answer_l1_k, answer_api_base, answer_price
    )
    quiet_consumer_logs()
    config = LocomoConfig(
        path=path,
        ks=parse_ks(k),
        work_dir=work_dir,
        samples=tuple(sample or ()),
        max_questions=questions,
        recall_overrides=parse_overrides(recall_setting or []),
        form=chosen_form,
        answers=answers,
    )
    report = _run_locomo(config, err)
    render_report(report, console)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
        console.print(f"report: {out}")
    _draw_chart(report, png or (out.with_suffix(".png") if out is not None else Path("locomo-recall.png")), console)
    console.print(f"runtime: {report['timings_s']['total_s']:.0f} s ({report['timings_s']})")
    ao.finish_answers(report, console, out)


def _run_locomo(config: LocomoConfig, err: Console) -> dict[str, Any]:
    """The run's report; exit 2 with the reason for input that is not LoCoMo, exit 1 with it when the
    stack's own nats-server goes away mid-run (killed, out of disk)."""
    from services.cli.broker_loss import exit_on_broker_loss
    from tiermem_lab.evaluation.locomo_run import run_locomo

    try:
        with _progress(err) as progress, exit_on_broker_loss(err, "the evaluation stopped", code=1):
            return asyncio.run(run_locomo(config, progress))
    except (LocomoFormatError, FileNotFoundError, ValidationError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


@eval_app.command("scenarios")
def scenarios_command(
    path: Annotated[
        Path | None, typer.Argument(help="Scenario JSON (default: the Korean set shipped with the lab).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON report here.")] = None,
    work_dir: Annotated[Path | None, typer.Option("--work-dir", help="Keep the stack's data here.")] = None,
) -> None:
    """Run the Korean cross-session scenarios (plant in one session, ask in a later one) through L0."""
    from rich.console import Console

    from tiermem_lab.evaluation.scenarios import DEFAULT_SCENARIOS, render_scenarios, run_scenarios_embedded

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
