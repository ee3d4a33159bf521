"""`tiermem stats`: one screen about the running stack, for an operator.

- per durable consumer: pending (its lag), unacknowledged and redelivered messages (JetStream);
- the dead-letter stream's size;
- LLM tokens and cost so far, by purpose, scraped from the processes' `/metrics` (the recall API of
  `tiermem up` serves the whole embedded process's series; in production pass each consumer's
  health port with `--metrics-url`). Counters start at zero when a process starts;
- per tenant: sessions received, episodes created and entity upserts, counted from the subjects
  of the event streams (the stores themselves belong to the running process: an Edge shard is
  opened by one process only, so events are what another process can count). Facts have no
  event of their own and are not counted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
COUNTED_EVENTS = {"session.completed": "sessions", "episode.created": "episodes", "entity.upserted": "entity_upserts"}


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
    tenants: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "consumers": [vars(lag) for lag in self.consumers],
            "dead_letters": self.dead_letters,
            "llm": [vars(usage) for usage in self.llm],
            "metrics_errors": self.metrics_errors,
            "tenants": self.tenants,
        }


async def _stream_counts(settings: TierMemSettings, stats: StackStats) -> None:
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
        stats.tenants = {tenant: dict(counts) for tenant, counts in sorted(tenants.items())}
    finally:
        await client.close()


async def _llm_usage(urls: list[str], stats: StackStats) -> None:
    totals: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(timeout=5.0) as http:
        for url in urls:
            try:
                response = await http.get(url)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                stats.metrics_errors.append(f"{url}: {type(exc).__name__}: {exc}")
                continue
            for family in text_string_to_metric_families(response.text):
                for sample in family.samples:
                    purpose = sample.labels.get("purpose")
                    if purpose is None:
                        continue
                    row = totals.setdefault(purpose, {"input": 0.0, "output": 0.0, "cost": 0.0})
                    if sample.name == "tiermem_llm_tokens_total":
                        row[sample.labels.get("direction", "input")] += sample.value
                    elif sample.name == "tiermem_llm_cost_usd_total":
                        row["cost"] += sample.value
    stats.llm = [LlmUsage(p, row["input"], row["output"], row["cost"]) for p, row in sorted(totals.items())]


async def collect_stats(settings: TierMemSettings, metrics_urls: list[str]) -> StackStats:
    """Everything `tiermem stats` shows; raises BrokerUnavailable when NATS does not answer."""
    stats = StackStats()
    await _stream_counts(settings, stats)
    await _llm_usage(metrics_urls, stats)
    return stats


def render(stats: StackStats) -> Group:
    lag = Table(title="Consumers")
    for column in ("consumer", "pending (lag)", "unacked", "redelivered"):
        lag.add_column(column, justify="left" if column == "consumer" else "right")
    for row in stats.consumers:
        lag.add_row(row.consumer, str(row.pending), str(row.ack_pending), str(row.redelivered))
    llm = Table(title="LLM usage since the scraped processes started")
    for column in ("purpose", "input tokens", "output tokens", "cost (USD)"):
        llm.add_column(column, justify="left" if column == "purpose" else "right")
    for usage in stats.llm:
        llm.add_row(usage.purpose, f"{usage.input_tokens:.0f}", f"{usage.output_tokens:.0f}", f"{usage.cost_usd:.6f}")
    tenants = Table(title="Per tenant (events)")
    for column in ("tenant", *COUNTED_EVENTS.values()):
        tenants.add_column(column, justify="left" if column == "tenant" else "right")
    for tenant, counts in stats.tenants.items():
        tenants.add_row(tenant, *(str(counts.get(name, 0)) for name in COUNTED_EVENTS.values()))
    notes = [f"[yellow]metrics unavailable:[/] {error}" for error in stats.metrics_errors]
    return Group(lag, f"Dead letters: [bold]{stats.dead_letters}[/]", llm, tenants, *notes)


def stats_command(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Data dir of the embedded stack.")] = None,
    metrics_url: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics-url", help="A /metrics URL to read LLM usage from (repeatable); default: the recall API."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of tables.")] = False,
) -> None:
    """Lag per consumer, dead letters, LLM tokens and cost so far, and per-tenant counts."""
    settings = load_settings(data_dir)
    urls = metrics_url or [f"http://127.0.0.1:{settings.http_port}/metrics"]
    try:
        stats = asyncio.run(collect_stats(settings, urls))
    except (BrokerUnavailable, TimeoutError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        print(json.dumps(stats.as_json()))
        return
    console.print(render(stats))
