"""`tiermem stats`: one screen about the running stack, for an operator (collected by
services/common/runtime/stack_stats.py, which the memory browser's pipeline page reads too).

- per durable consumer: pending (its lag), unacknowledged and redelivered messages (JetStream);
- the dead-letter stream's size;
- LLM tokens and cost so far, by purpose, scraped from the processes' `/metrics` (the recall API of
  `tiermem up` serves the whole embedded process's series; in production pass each consumer's
  health port with `--metrics-url`). Counters start at zero when a process starts;
- what the stores hold: episodes, facts and entities in total, as counted by the process serving
  the recall API (`tiermem_stored_items`; it owns the stores: an Edge shard is opened by one
  process only) every `TIERMEM_TELEMETRY__STORE_COUNTS_INTERVAL_S`;
- per tenant, only with `--per-tenant` (tenant names and sizes may be sensitive): sessions
  received, episodes created and entity upserts counted from the subjects of the event streams,
  and the stored episodes, facts and entities when the stack exports them
  (`TIERMEM_TELEMETRY__TENANT_COUNTS=true`). Never a user id.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table

from contracts import Subjects
from services.cli.stack import all_services
from services.common.runtime import stack_stats
from services.common.runtime.broker import BrokerUnavailable
from services.common.runtime.settings import TierMemSettings, load_settings
from services.common.runtime.stack_stats import COUNTED_EVENTS, STORED_KINDS, StackStats

__all__ = ["StackStats", "collect_stats", "render", "stats_command"]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
TENANT_SWITCH = "TIERMEM_TELEMETRY__TENANT_COUNTS=true"


async def collect_stats(settings: TierMemSettings, metrics_urls: list[str], *, per_tenant: bool = False) -> StackStats:
    """The stack's stats (services/common/runtime/stack_stats.py) for the consumers of every service
    this stack runs, in pipeline order."""
    consumers = [
        spec for definition in all_services() for spec in definition.consumers(Subjects(settings.nats.subject_root))
    ]
    return await stack_stats.collect_stats(settings, metrics_urls, per_tenant=per_tenant, consumers=consumers)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def render(stats: StackStats) -> Group:
    lag = _table("Consumers", ("consumer", "pending (lag)", "unacked", "redelivered"))
    for row in stats.consumers:
        lag.add_row(row.consumer, str(row.pending), str(row.ack_pending), str(row.redelivered))
    llm = _table(
        "LLM usage since the scraped processes started", ("purpose", "input tokens", "output tokens", "cost (USD)")
    )
    for usage in stats.llm:
        llm.add_row(usage.purpose, f"{usage.input_tokens:.0f}", f"{usage.output_tokens:.0f}", f"{usage.cost_usd:.6f}")
    parts: list[Any] = [lag, f"Dead letters: [bold]{stats.dead_letters}[/]", llm]
    if stats.stored_at is not None:
        age = max(0.0, time.time() - stats.stored_at)
        stored = _table(f"Stored (all tenants, counted {age:.0f}s ago)", STORED_KINDS)
        stored.add_row(*(str(stats.stored.get(kind, 0)) for kind in STORED_KINDS))
        parts.append(stored)
    else:
        parts.append("[yellow]stored counts unavailable:[/] no scraped process has counted the stores yet")
    if stats.per_tenant:
        columns = (*COUNTED_EVENTS.values(), *(STORED_KINDS if stats.stored_by_tenant_exported else ()))
        tenants = _table("Per tenant", ("tenant", *columns))
        for tenant, counts in stats.tenants.items():
            tenants.add_row(tenant, *(str(counts.get(name, 0)) for name in columns))
        parts.append(tenants)
        if not stats.stored_by_tenant_exported:
            parts.append(f"stored counts per tenant: start the stack with {TENANT_SWITCH}")
    parts += [f"[yellow]metrics unavailable:[/] {error}" for error in stats.metrics_errors]
    return Group(*parts)


def stats_command(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Data dir of the embedded stack.")] = None,
    metrics_url: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics-url",
            help="A /metrics URL to read LLM usage and store counts from (repeatable); default: the recall API.",
        ),
    ] = None,
    per_tenant: Annotated[
        bool,
        typer.Option(
            "--per-tenant",
            help="Also show counts per tenant (tenant names and sizes may be sensitive; never user ids). "
            f"Stored counts per tenant need the stack started with {TENANT_SWITCH}.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of tables.")] = False,
) -> None:
    """Lag per consumer, dead letters, LLM tokens and cost so far, what the stores hold, and (opt-in)
    the same per tenant."""
    settings = load_settings(data_dir)
    urls = metrics_url or [f"http://127.0.0.1:{settings.http_port}/metrics"]
    try:
        stats = asyncio.run(collect_stats(settings, urls, per_tenant=per_tenant))
    except (BrokerUnavailable, TimeoutError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        print(json.dumps(stats.as_json()))
        return
    console.print(render(stats))
