"""The `--answer-*` options of `tiermem eval locomo` and what the command does with them (the command
itself lives in `commands.py`). Without `--answer-model` nothing here runs and litellm is not imported."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tiermem_lab.evaluation.answers import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from tiermem_lab.evaluation.answers import AnswerEvalConfig

if TYPE_CHECKING:
    from rich.console import Console

AnswerModelOption = Annotated[
    str | None,
    typer.Option(
        "--answer-model",
        help="litellm model that answers every question with and without the injected memory, e.g. "
        "openai/gpt-4o-mini (needs its key, e.g. OPENAI_API_KEY). Adds J-score, reflection rate, tokens and cost.",
    ),
]
JudgeModelOption = Annotated[
    str | None, typer.Option("--judge-model", help="litellm model that judges the answers (default: --answer-model).")
]
AnswerLimitOption = Annotated[
    int | None,
    typer.Option("--answer-limit", min=1, help="Answer only N questions in all, spread over the categories."),
]
AnswerConcurrencyOption = Annotated[
    int, typer.Option("--answer-concurrency", min=1, max=64, help="Model calls in flight at once.")
]
AnswerL1Option = Annotated[
    int,
    typer.Option(
        "--answer-l1-k", min=0, max=100, help="Also give the answer model the L1 top-k episodes (0: L0 section only)."
    ),
]
AnswerApiBaseOption = Annotated[
    str | None,
    typer.Option("--answer-api-base", help="Base URL of an OpenAI-compatible server for the answer model."),
]
AnswerPriceOption = Annotated[
    str | None,
    typer.Option(
        "--answer-price",
        help="IN,OUT: USD per million prompt and completion tokens of the answer model (default: litellm's "
        "cost map; needed for models it does not know).",
    ),
]


def answer_config(
    err: Console,
    answer_model: str | None,
    judge_model: str | None = None,
    limit: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    l1_k: int = 0,
    api_base: str | None = None,
    price: str | None = None,
) -> AnswerEvalConfig | None:
    """The answer stage's configuration, checked before the long retrieval run (exit 2 with the
    reason when a model cannot be used); None when no answer model is given."""
    from tiermem_lab.evaluation.answers import AnswerSetupError, TokenPrice, check_models

    if not answer_model:
        given = [name for name, value in (("--judge-model", judge_model), ("--answer-limit", limit)) if value]
        given += [name for name, value in (("--answer-api-base", api_base), ("--answer-price", price)) if value]
        if given:
            err.print(f"[red]error:[/] {', '.join(given)} need --answer-model")
            raise typer.Exit(2)
        return None
    try:
        config = AnswerEvalConfig(
            answer_model=answer_model,
            judge_model=judge_model,
            api_base=api_base,
            price=TokenPrice.per_million(price) if price else None,
            limit=limit,
            concurrency=concurrency,
            l1_k=l1_k,
        )
        check_models(config)
    except AnswerSetupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    return config


def finish_answers(report: Mapping[str, Any], console: Console, out: Path | None) -> None:
    """Show the answer section, write it as markdown next to the JSON report; exit 1 when the stage
    was stopped (the JSON report is already written)."""
    from tiermem_lab.evaluation.answer_report import answers_markdown, render_answers

    section = report.get("answers")
    if not section:
        return
    render_answers(section, console)
    if out is not None:
        markdown = out.with_name(f"{out.stem}.answers.md")
        markdown.write_text(answers_markdown(section), encoding="utf-8")
        console.print(f"answers: {markdown}")
    if section.get("aborted"):
        raise typer.Exit(1)
