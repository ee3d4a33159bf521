"""Recall metrics, to tune the minimum score and the budgets from real traffic: per call, how many
entries were injected or returned and the best score seen (before the threshold), its latency in
seconds, and the calls skipped without searching (trivial messages) by reason. Aggregated over
tenants: no tenant or user appears in a label.

The series are prometheus-client instruments on the service's own registry (one per service, so
several recall services in one process, as in tests, never collide); `/metrics` exposes it with the
process-wide default registry (process metrics, HTTP requests, LLM and embedding instruments). A
small in-process tally stays beside them for `snapshot()` (the CLI and tests read it)."""

from __future__ import annotations

import threading
from collections import Counter as Tally

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

TOP_SCORE_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
INJECTED_BUCKETS: tuple[float, ...] = (0, 1, 2, 3, 5, 8, 13, 20, 50)
LATENCY_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5)


class RecallMetrics:
    """Counters and histograms per endpoint ('auto', 'search', ...)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._calls = Counter(
            "tiermem_recall_calls", "Recall calls per endpoint.", ["endpoint"], registry=self.registry
        )
        self._injected_total = Counter(
            "tiermem_recall_injected",
            "Entries returned or injected per endpoint.",
            ["endpoint"],
            registry=self.registry,
        )
        self._empty = Counter(
            "tiermem_recall_empty", "Calls that searched and returned nothing.", ["endpoint"], registry=self.registry
        )
        self._skipped = Counter(
            "tiermem_recall_skipped",
            "Calls answered without searching, by reason (e.g. trivial).",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self._errors = Counter("tiermem_recall_errors", "Calls that failed.", ["endpoint"], registry=self.registry)
        self._injected_count = Histogram(
            "tiermem_recall_injected_count",
            "Entries injected or returned by one call that searched.",
            ["endpoint"],
            buckets=INJECTED_BUCKETS,
            registry=self.registry,
        )
        self._top_score = Histogram(
            "tiermem_recall_top_score",
            "Best fused relevance seen per call (before the threshold).",
            ["endpoint"],
            buckets=TOP_SCORE_BUCKETS,
            registry=self.registry,
        )
        self._latency = Histogram(
            "tiermem_recall_seconds",
            "Server-side latency of one recall call in seconds.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.calls: Tally[str] = Tally()
        self.skipped: Tally[tuple[str, str]] = Tally()
        self.injected_total: Tally[str] = Tally()
        self.empty: Tally[str] = Tally()
        self.errors: Tally[str] = Tally()
        self.last: dict[str, tuple[int, float | None]] = {}

    def record(
        self, endpoint: str, *, injected: int, top_score: float | None, latency_ms: float, skipped: str | None = None
    ) -> None:
        with self._lock:
            self.calls[endpoint] += 1
            self.injected_total[endpoint] += injected
            self.last[endpoint] = (injected, top_score)
            if skipped:
                self.skipped[(endpoint, skipped)] += 1
            elif injected == 0:
                self.empty[endpoint] += 1
        self._calls.labels(endpoint=endpoint).inc()
        self._injected_total.labels(endpoint=endpoint).inc(injected)
        if skipped:
            self._skipped.labels(endpoint=endpoint, reason=skipped).inc()
        else:
            self._injected_count.labels(endpoint=endpoint).observe(injected)
            if injected == 0:
                self._empty.labels(endpoint=endpoint).inc()
        if top_score is not None:
            self._top_score.labels(endpoint=endpoint).observe(top_score)
        self._latency.labels(endpoint=endpoint).observe(latency_ms / 1000.0)

    def record_error(self, endpoint: str) -> None:
        with self._lock:
            self.errors[endpoint] += 1
        self._errors.labels(endpoint=endpoint).inc()

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {
                "calls": dict(self.calls),
                "injected_total": dict(self.injected_total),
                "empty": dict(self.empty),
                "skipped": {f"{e}:{r}": n for (e, r), n in self.skipped.items()},
                "errors": dict(self.errors),
                "last": {e: {"injected": i, "top_score": s} for e, (i, s) in self.last.items()},
            }

    def prometheus(self) -> str:
        """The service's series and the process-wide ones, in the Prometheus text format."""
        return (generate_latest(self.registry) + generate_latest(REGISTRY)).decode("utf-8")
