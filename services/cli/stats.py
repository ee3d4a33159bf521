"""`tiermem stats`: one screen about the running stack, for an operator.

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
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from nats.js.errors import NotFoundError
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.table import Table

from contracts import Subjects
from services.cli.stack import all_services
from services.common.runtime.broker import BrokerUnavailable, connect_nats
from services.common.runtime.settings import TierMemSettings, load_settings

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
COUNTED_EVENTS = {
    "session.completed": "sessions",
    "episode.created": "episodes_created",
    "entity.upserted": "entity_upserts",
}
STORED_KINDS = ("episodes", "facts", "entities")
TENANT_SWITCH = "TIERMEM_TELEMETRY__TENANT_COUNTS=true"


@dataclass(frozen=True)
class ConsumerLag:
    consumer: str
    pending: int
    ack_pending: int
    redelivered: int  # of the messages pending now (JetStream does not keep a lifetime count)


@dataclass(frozen=True)
class LlmUsage:
    purpose: str
    input_tokens: float
    output_tokens: float
    cost_usd: float


@dataclass
class StackStats:
    consumers: list[ConsumerLag] = field(default_factory=list)
    dead_letters: int = 0
    llm: list[LlmUsage] = field(default_factory=list)
    metrics_errors: list[str] = field(default_factory=list)
    stored: dict[str, int] = field(default_factory=dict)  # kind → count, all tenants; empty: not exported
    stored_at: float | None = None  # when the scraped process last counted
    per_tenant: bool = False
    tenants: dict[str, dict[str, int]] = field(default_factory=dict)  # only with per_tenant
    stored_by_tenant_exported: bool = False

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "consumers": [vars(lag) for lag in self.consumers],
            "dead_letters": self.dead_letters,
            "llm": [vars(usage) for usage in self.llm],
            "metrics_errors": self.metrics_errors,
            "stored": self.stored,
            "stored_at": self.stored_at,
        }
        if self.per_tenant:
            document["tenants"] = self.tenants
        return document


async def _stream_counts(settings: TierMemSettings, stats: StackStats) -> None:
    """Lag per consumer, the dead-letter stream's size and (per tenant only) the event counts."""
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "tiermem-stats", bounded=True)
    try:
        js = client.jetstream()
        for definition in all_services():
            for spec in definition.consumers(subjects):
                try:
                    info = await js.consumer_info(spec.stream, spec.durable)
                except NotFoundError:  # not provisioned yet: that service never ran against this NATS
                    continue
                stats.consumers.append(
                    ConsumerLag(
                        spec.durable, info.num_pending or 0, info.num_ack_pending or 0, info.num_redelivered or 0
                    )
                )
        with contextlib.suppress(NotFoundError):
            stats.dead_letters = int((await js.stream_info(subjects.dead_letter_stream)).state.messages)
        if stats.per_tenant:
            await _tenant_event_counts(js, subjects, stats)
    finally:
        await client.close()


async def _tenant_event_counts(js: Any, subjects: Subjects, stats: StackStats) -> None:
    tenants: dict[str, Counter[str]] = {}
    for stream in (subjects.session_stream, subjects.derived_stream):
        try:
            info = await js.stream_info(stream, subjects_filter=">")
        except NotFoundError:
            continue
        for subject, count in (info.state.subjects or {}).items():
            kind = ".".join(subject.split(".")[1:3])
            tenant, _user = subjects.tokens_from(subject)
            if tenant is not None and kind in COUNTED_EVENTS:
                tenants.setdefault(tenant, Counter())[COUNTED_EVENTS[kind]] += int(count)
    for tenant, counts in tenants.items():
        stats.tenants.setdefault(tenant, {}).update(counts)


class _ScrapedSeries:
    """The series `tiermem stats` reads, summed over the scraped processes (LLM usage) or taken
    from the process that counted the stores last."""

    def __init__(self) -> None:
        self.llm: dict[str, dict[str, float]] = {}
        self.stored: dict[str, int] = {}
        self.stored_by_tenant: dict[str, dict[str, int]] = {}
        self.stored_at: float | None = None

    def add(self, exposition: str) -> None:
        stored: dict[str, int] = {}
        by_tenant: dict[str, dict[str, int]] = {}
        counted_at: float | None = None
        for family in text_string_to_metric_families(exposition):
            for sample in family.samples:
                labels = sample.labels
                if sample.name in ("tiermem_llm_tokens_total", "tiermem_llm_cost_usd_total") and "purpose" in labels:
                    row = self.llm.setdefault(labels["purpose"], {"input": 0.0, "output": 0.0, "cost": 0.0})
                    key = labels.get("direction", "input") if sample.name == "tiermem_llm_tokens_total" else "cost"
                    row[key] += sample.value
                elif sample.name == "tiermem_stored_items":
                    stored[labels["kind"]] = int(sample.value)
                elif sample.name == "tiermem_stored_items_by_tenant":
                    by_tenant.setdefault(labels["tenant"], {})[labels["kind"]] = int(sample.value)
                elif sample.name == "tiermem_stored_counted_at_seconds":
                    counted_at = sample.value
        if counted_at is not None and (self.stored_at is None or counted_at > self.stored_at):
            self.stored, self.stored_by_tenant, self.stored_at = stored, by_tenant, counted_at


async def _scrape(urls: list[str], stats: StackStats) -> None:
    series = _ScrapedSeries()
    async with httpx.AsyncClient(timeout=5.0) as http:
        for url in urls:
            try:
                response = await http.get(url)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                stats.metrics_errors.append(f"{url}: {type(exc).__name__}: {exc}")
                continue
            series.add(response.text)
    stats.llm = [LlmUsage(p, row["input"], row["output"], row["cost"]) for p, row in sorted(series.llm.items())]
    stats.stored, stats.stored_at = series.stored, series.stored_at
    if stats.per_tenant:
        stats.stored_by_tenant_exported = bool(series.stored_by_tenant)
        for tenant, counts in series.stored_by_tenant.items():
            stats.tenants.setdefault(tenant, {}).update(counts)


async def collect_stats(settings: TierMemSettings, metrics_urls: list[str], *, per_tenant: bool = False) -> StackStats:
    """Everything `tiermem stats` shows (per-tenant counts only when asked); raises
    BrokerUnavailable when NATS does not answer."""
    stats = StackStats(per_tenant=per_tenant)
    await _stream_counts(settings, stats)
    await _scrape(metrics_urls, stats)
    stats.tenants = dict(sorted(stats.tenants.items()))
    return stats


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
