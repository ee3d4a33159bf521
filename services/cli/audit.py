"""`tiermem audit user <tenant> <user>`: every remaining trace of a user in every store; exits 1
when anything remains. Asks the running pruner (it owns the stores) and opens the stores here only
when no pruner answers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.broker import connect_nats
from services.common.runtime.resources import Resources
from services.common.runtime.settings import TierMemSettings, load_settings
from services.common.stores.erasure import AuditReport, AuditRequest, ControlError, audit_user, request_control

console = Console()
err_console = Console(stderr=True)

audit_app = typer.Typer(help="Find what the stores still hold about someone.", no_args_is_help=True)


async def run_audit(settings: TierMemSettings, owner: Owner, timeout_s: float) -> AuditReport:
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "tiermem-cli-audit", bounded=True)
    try:
        request = AuditRequest(tenant_id=owner.tenant_id, user_id=owner.user_id)
        result = await request_control(client, subjects, "audit", request, timeout_s)
        if result is not None:
            return AuditReport.model_validate(result)
        resources = Resources(settings)
        try:
            return await audit_user(
                index=await resources.vector_index(),
                graph=await resources.graph(),
                js=client.jetstream(),
                subjects=subjects,
                owner=owner,
            )
        finally:
            await resources.close()
    finally:
        await client.close()


def render_audit(report: AuditReport) -> Table:
    table = Table(title=f"traces of {report.tenant_id}/{report.user_id}")
    table.add_column("store")
    table.add_column("count", justify="right")
    for name, count in report.traces().items():
        table.add_row(name, f"[red]{count}[/]" if count else "0")
    table.add_row("[dim]erasure records (kept as proof)[/]", f"[dim]{report.erasure_records}[/]")
    return table


@audit_app.command("user")
def audit_user_command(
    tenant_id: Annotated[str, typer.Argument(help="Tenant id.")],
    user_id: Annotated[str, typer.Argument(help="User id.")],
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the running pruner.")] = 60.0,
) -> None:
    """List every remaining trace of a user (vectors, graph, session / derived / dead-letter streams);
    exit code 1 when anything remains."""
    try:
        owner = Owner(tenant_id, user_id)
    except ValueError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    settings = load_settings(data_dir)
    try:
        report = asyncio.run(run_audit(settings, owner, timeout_s))
    except (ControlError, TimeoutError, ValueError, OSError) as exc:
        err_console.print(f"[red]error:[/] audit failed: {exc}")
        raise typer.Exit(2) from exc
    console.print(render_audit(report))
    if not report.clean:
        console.print(f"[red]{report.remaining} traces remain[/]")
        raise typer.Exit(1)
    console.print("[green]no traces remain[/]")
