"""`tiermem prune --now`: one prune pass, run by the running pruner when there is one (it owns the
stores), else here against the stores named by the settings."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from contracts import PruneReport, Subjects
from services.common.runtime.broker import build_broker, connect_broker, short_lived_nats
from services.common.runtime.provisioning import provision
from services.common.runtime.settings import TierMemSettings, load_settings
from services.common.stores.erasure import ControlError, request_control

console = Console()
err_console = Console(stderr=True)


async def run_prune_now(settings: TierMemSettings, timeout_s: float) -> tuple[PruneReport, str]:
    """The PruneReport of one pass, and who ran it ("running pruner" or "this process")."""
    subjects = Subjects(settings.nats.subject_root)
    async with short_lived_nats(settings.nats, "tiermem-cli-prune") as client:
        result = await request_control(client, subjects, "prune", None, timeout_s)
        if result is not None:
            return PruneReport.model_validate(result), "running pruner"
        await provision(client.jetstream(), settings.nats)
    return await _prune_here(settings), "this process"


async def _prune_here(settings: TierMemSettings) -> PruneReport:
    # The CLI is a composition root: it may build a service's context (services may not).
    from services.common.runtime.service import build_context
    from services.pruner.handlers import DEFINITION
    from services.pruner.logic import utc_now
    from services.pruner.prune import prune_once

    pruner_settings = DEFINITION.settings_from(settings)
    broker = build_broker(pruner_settings, "cli-prune", bounded=True)
    await connect_broker(broker, pruner_settings.nats)
    context = build_context(pruner_settings, broker)
    try:
        report = await prune_once(context, utc_now())
    finally:
        await context.resources.close()
        await broker.stop()
    return report


def prune_command(
    now: Annotated[bool, typer.Option("--now", help="Run one prune pass now.")] = False,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for a running pruner to finish the pass.")
    ] = 600.0,
) -> None:
    """Forget expired and never-recalled episodes and old superseded facts (the pruner also does this
    on its schedule, every 6 h by default)."""
    if not now:
        err_console.print("nothing to do: pass --now to run a pass (the schedule runs inside the pruner service)")
        raise typer.Exit(2)
    settings = load_settings(data_dir)
    try:
        report, where = asyncio.run(run_prune_now(settings, timeout_s))
    except (ControlError, TimeoutError, ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/] prune failed: {exc}")
        raise typer.Exit(1) from exc
    counts = ", ".join(f"{k} {v}" for k, v in report.removed.items())
    console.print(f"pruned ({where}, {report.owners_scanned} owners): {counts}")
    console.print(
        f"compressed {report.episodes_compressed} episodes into {report.summaries_written} summaries; "
        f"kept by importance or recalls: {report.kept_by_importance}"
    )
    if report.truncated_owners:
        console.print(f"[yellow]scan limit reached for[/] {report.truncated_owners}; the next pass continues there")
