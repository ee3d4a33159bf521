"""What the stores hold, counted for operators: episodes, facts and entities, in total and (opt-in)
per tenant, as Prometheus gauges on the process's `/metrics` (what `tiermem stats` reads).

The process that serves the recall API counts (it has the stores open in every shape; an embedded
Qdrant Edge shard cannot be opened by a second process such as the CLI). Counting walks every
owner, so it runs in the background every `store_counts_interval_s`, never on a scrape, and a
scrape reads the last result. Per-tenant series exist only with `TIERMEM_TELEMETRY__TENANT_COUNTS=true`:
tenant names in a monitoring system may be sensitive, and a label per tenant is unbounded. No
series ever names a user."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.common.runtime.resources import Resources
from services.common.stores.vector.port import EPISODES, FACTS

log = logging.getLogger(__name__)
KINDS = ("episodes", "facts", "entities")
_OWNERS_PER_TURN = 50  # owners counted between two turns of the event loop


@dataclass(frozen=True)
class StoredCounts:
    """One count of the stores: per tenant, per kind (episodes, facts, entities)."""

    by_tenant: dict[str, dict[str, int]]
    counted_at: float = field(default_factory=time.time)

    def totals(self) -> dict[str, int]:
        return {kind: sum(counts.get(kind, 0) for counts in self.by_tenant.values()) for kind in KINDS}


async def count_stored(resources: Resources) -> StoredCounts:
    """Episodes and facts of every owner (summed per tenant) and entity nodes per tenant."""
    index = await resources.vector_index()
    episodes, facts, graph = await resources.episodes(), await resources.facts(), await resources.graph()
    by_tenant: dict[str, Counter[str]] = {}
    for number, owner in enumerate(await index.list_owners(EPISODES), 1):
        by_tenant.setdefault(owner.tenant_id, Counter())["episodes"] += await episodes.count(owner)
        await _yield_every(number)
    for number, owner in enumerate(await index.list_owners(FACTS), 1):
        by_tenant.setdefault(owner.tenant_id, Counter())["facts"] += await facts.count(owner)
        await _yield_every(number)
    for tenant, entities in (await graph.entity_counts_by_tenant()).items():
        by_tenant.setdefault(tenant, Counter())["entities"] += entities
    return StoredCounts({tenant: {kind: counts[kind] for kind in KINDS} for tenant, counts in by_tenant.items()})


async def _yield_every(number: int, owners: int = _OWNERS_PER_TURN) -> None:
    """An in-process store's count never suspends, so 10k owners counted in a row held the event
    loop (and every L0 turn) for ~0.2 s: give the loop a turn every `owners` counts."""
    if number % owners == 0:
        await asyncio.sleep(0)


class StoredCountsCollector(Collector):
    """The last count as gauges: `tiermem_stored_items{kind}` always, and
    `tiermem_stored_items_by_tenant{kind,tenant}` when per-tenant counts are enabled."""

    def __init__(self) -> None:
        self.latest: StoredCounts | None = None
        self.per_tenant = False

    def collect(self) -> Iterator[Metric]:
        latest = self.latest
        if latest is None:
            return
        totals = GaugeMetricFamily(
            "tiermem_stored_items", "Items the stores hold (all tenants), at the last count.", labels=["kind"]
        )
        for kind, count in latest.totals().items():
            totals.add_metric([kind], count)
        yield totals
        yield GaugeMetricFamily(
            "tiermem_stored_counted_at_seconds", "Unix time of the last count of the stores.", value=latest.counted_at
        )
        if self.per_tenant:
            by_tenant = GaugeMetricFamily(
                "tiermem_stored_items_by_tenant",
                "Items the stores hold per tenant, at the last count (opt-in: TIERMEM_TELEMETRY__TENANT_COUNTS).",
                labels=["kind", "tenant"],
            )
            for tenant, counts in sorted(latest.by_tenant.items()):
                for kind in KINDS:
                    by_tenant.add_metric([kind, tenant], counts.get(kind, 0))
            yield by_tenant


# One per process, on the default registry every `/metrics` exposes; the latest counter wins.
STORED_COUNTS = StoredCountsCollector()
REGISTRY.register(STORED_COUNTS)


async def keep_counting(resources: Resources, interval_s: float, per_tenant: bool) -> None:
    """Count the stores now and then every `interval_s` until cancelled; a failed count is logged
    and the previous one stays (a scrape must still answer while a store is away)."""
    STORED_COUNTS.per_tenant = per_tenant
    # Under an unsampled parent: a count is one store call per owner every interval, which would
    # flood the tracing backend with root spans that explain no request.
    unsampled = NonRecordingSpan(SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(0)))
    while True:
        try:
            with trace.use_span(unsampled, end_on_exit=False):
                STORED_COUNTS.latest = await count_stored(resources)
        except Exception as exc:  # any store failure: keep serving the last count
            log.warning("counting the stores failed: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(interval_s)
