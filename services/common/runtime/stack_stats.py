"""What the running stack reports about itself, for an operator: lag per durable consumer, the
dead-letter stream's size, LLM tokens and cost so far, what the stores hold and (opt-in) the same per
tenant. One collector, read by `tiermem stats` (services/cli/stats.py) and the memory browser's
pipeline page, so the two never disagree.

- per durable consumer: pending (its lag), unacknowledged and redelivered messages (JetStream);
- the dead-letter stream's size;
- LLM tokens and cost so far, by purpose, from Prometheus expositions (scraped `/metrics` URLs, or a
  process's own exposition). Counters start at zero when a process starts;
- the stored episodes, facts and entities, as counted by the process serving the recall API
  (`tiermem_stored_items`) every `TIERMEM_TELEMETRY__STORE_COUNTS_INTERVAL_S`;
- per tenant, only when asked (tenant names and sizes may be sensitive): sessions received, episodes
  created and entity upserts counted from the subjects of the event streams, and the stored counts
  when the stack exports them (`TIERMEM_TELEMETRY__TENANT_COUNTS=true`). Never a user id.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from nats.js.errors import NotFoundError
from prometheus_client.parser import text_string_to_metric_families

from contracts import Subjects
from services.common.runtime.broker import short_lived_nats
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.settings import TierMemSettings

COUNTED_EVENTS = {
    "session.completed": "sessions",
    "episode.created": "episodes_created",
    "entity.upserted": "entity_upserts",
}
STORED_KINDS = ("episodes", "facts", "entities")


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

    @property
    def llm_cost_usd(self) -> float:
        return sum(usage.cost_usd for usage in self.llm)

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


async def _durables(js: Any, subjects: Subjects, consumers: Sequence[ConsumerSpec] | None) -> list[tuple[str, str]]:
    """(stream, durable) of the given consumers, in their order; without a list (a process that does
    not know which services run, such as the recall API), every durable on the streams they read."""
    if consumers is not None:
        return [(spec.stream, spec.durable) for spec in consumers]
    found: list[tuple[str, str]] = []
    for stream in subjects.consumed_streams:
        with contextlib.suppress(NotFoundError):
            found += sorted((stream, info.name) for info in await js.consumers_info(stream) if info.config.durable_name)
    return found


async def _stream_counts(
    settings: TierMemSettings, stats: StackStats, consumers: Sequence[ConsumerSpec] | None
) -> None:
    """Lag per consumer, the dead-letter stream's size and (per tenant only) the event counts."""
    subjects = Subjects(settings.nats.subject_root)
    async with short_lived_nats(settings.nats, "tiermem-stats") as client:
        js = client.jetstream()
        for stream, durable in await _durables(js, subjects, consumers):
            try:
                info = await js.consumer_info(stream, durable)
            except NotFoundError:  # not provisioned yet: that service never ran against this NATS
                continue
            stats.consumers.append(
                ConsumerLag(durable, info.num_pending or 0, info.num_ack_pending or 0, info.num_redelivered or 0)
            )
        with contextlib.suppress(NotFoundError):
            stats.dead_letters = int((await js.stream_info(subjects.dead_letter_stream)).state.messages)
        if stats.per_tenant:
            await _tenant_event_counts(js, subjects, stats)


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
    """The series the stats read, summed over the scraped processes (LLM usage) or taken from the
    process that counted the stores last."""

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


async def _scrape(urls: Sequence[str], expositions: Sequence[str], stats: StackStats) -> None:
    series = _ScrapedSeries()
    for exposition in expositions:
        series.add(exposition)
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


async def collect_stats(
    settings: TierMemSettings,
    metrics_urls: Sequence[str],
    *,
    per_tenant: bool = False,
    consumers: Sequence[ConsumerSpec] | None = None,
    expositions: Sequence[str] = (),
) -> StackStats:
    """Everything `tiermem stats` shows (per-tenant counts only when asked), from NATS and from the
    `/metrics` URLs plus any exposition text already at hand (a process reading its own series);
    raises BrokerUnavailable when NATS does not answer."""
    stats = StackStats(per_tenant=per_tenant)
    await _stream_counts(settings, stats, consumers)
    await _scrape(metrics_urls, expositions, stats)
    stats.tenants = dict(sorted(stats.tenants.items()))
    return stats
