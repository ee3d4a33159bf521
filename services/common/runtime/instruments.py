"""Prometheus instruments of the consumer runtime (on the process's default registry, which every
health port and the recall API's /metrics expose). Labels are bounded: consumer, outcome, kind;
never a tenant or a user (cardinality, and privacy)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

HANDLER_SECONDS = Histogram(
    "tiermem_handler_seconds",
    "Duration of one handler run (one delivery), by consumer and outcome (ok, retry, dead_letter).",
    ["consumer", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
REDELIVERIES = Counter(
    "tiermem_redeliveries",
    "Deliveries of a message that was delivered before (a nak, a crash or an ack timeout).",
    ["consumer"],
)
DEAD_LETTERS = Counter(
    "tiermem_dead_letters",
    "Dead-letter records written, by consumer and kind (poison: never retried; exhausted: out of deliveries).",
    ["consumer", "kind"],
)
