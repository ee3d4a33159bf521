"""`tiermem audit user <tenant> <user>`: every remaining trace of a user in every store; exits 1
when anything remains. `tiermem audit value "<text>" [--tenant T [--user U]]`: every place a text is
still found (the places a fact erasure redacts, `services/common/stores/value_places`); exits 1 when
it is found anywhere, 0 when the count is 0. Both ask the running pruner (it owns the stores) and open
the stores here only when no pruner answers; exit 2 when the audit itself fails."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.broker import short_lived_nats
from services.common.runtime.resources import Resources
from services.common.runtime.settings import TierMemSettings, load_settings
from services.common.stores.erasure import AuditReport, AuditRequest, ControlError, audit_user, request_control
from services.common.stores.value_places import (
    DEFAULT_SCAN_LIMIT,
    PlaceStores,
    ScanLimitExceeded,
    ValueAudit,
    ValueAuditRequest,
    audit_value,
)

console = Console()
err_console = Console(stderr=True)

audit_app = typer.Typer(help="Find what the stores still hold about someone.", no_args_is_help=True)


async def run_audit(settings: TierMemSettings, owner: Owner, timeout_s: float) -> AuditReport:
    subjects = Subjects(settings.nats.subject_root)
    async with short_lived_nats(settings.nats, "tiermem-cli-audit") as client:
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
    """List every remaining trace of a user (vectors, graph, session / derived / dead-letter streams,
    open per-turn sessions); exit code 1 when anything remains."""
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


async def run_value_audit(settings: TierMemSettings, request: ValueAuditRequest, timeout_s: float) -> ValueAudit:
    subjects = Subjects(settings.nats.subject_root)
    async with short_lived_nats(settings.nats, "tiermem-cli-audit") as client:
        result = await request_control(client, subjects, "audit_value", request, timeout_s)
        if result is not None:
            return ValueAudit.model_validate(result)
        resources = Resources(settings)
        try:
            stores = PlaceStores(
                subjects=subjects,
                js=client.jetstream(),
                index=await resources.vector_index(),
                graph=await resources.graph(),
                keywords=resources.keywords(),
                scan_limit=DEFAULT_SCAN_LIMIT,
            )
            return await audit_value(stores, request.text, tenant_id=request.tenant_id, user_id=request.user_id)
        finally:
            await resources.close()


def render_value_audit(audit: ValueAudit) -> Table:
    # The searched text is not printed: it is what someone asked to be forgotten.
    table = Table(title=f"places searched for the value ({len(audit.owners)} owners)")
    table.add_column("place")
    table.add_column("found", justify="right")
    for name, count in audit.counts.items():
        table.add_row(name, f"[red]{count}[/]" if count else "0")
    return table


@audit_app.command("value")
def audit_value_command(
    text: Annotated[str, typer.Argument(help="The text to look for (matched as a phrase, as an erasure matches it).")],
    tenant_id: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's users.")] = None,
    user_id: Annotated[str | None, typer.Option("--user", help="Only this user (needs --tenant).")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the running pruner.")] = 120.0,
) -> None:
    """Search every place a remembered value can reach (open per-turn sessions, raw sessions of both
    roles, derived events,
    dead letters, episodes, passages, facts, the keyword index, graph names and aliases, erasure
    progress) for a text; print where it is found. Exit code 0: found 0 times; 1: found; 2: error."""
    if user_id is not None and tenant_id is None:
        err_console.print("[red]error:[/] --user needs --tenant")
        raise typer.Exit(2)
    try:
        if user_id is not None and tenant_id is not None:
            Owner(tenant_id, user_id)
        request = ValueAuditRequest(text=text, tenant_id=tenant_id, user_id=user_id)
    except ValueError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    settings = load_settings(data_dir)
    try:
        audit = asyncio.run(run_value_audit(settings, request, timeout_s))
    except (ControlError, TimeoutError, ValueError, OSError, ScanLimitExceeded) as exc:
        err_console.print(f"[red]error:[/] audit failed: {exc}")
        raise typer.Exit(2) from exc
    console.print(render_value_audit(audit))
    for where, hits in audit.found.items():
        console.print(f"  {where}: {', '.join(hits)}")
    console.print(f"found {audit.total}" if audit.total else "[green]found 0[/]: the value is nowhere")
    if audit.total:
        raise typer.Exit(1)
