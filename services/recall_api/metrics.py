"""In-process recall metrics: how many entries each call injected and its top score, so the minimum
score and budgets can be tuned from real traffic. Exposed at `/metrics` in the Prometheus text
format; aggregated over tenants (no tenant or user appears in a label)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

TOP_SCORE_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS_MS: tuple[float, ...] = (5, 10, 20, 30, 50, 75, 100, 200, 500, 1000)


@dataclass
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.n += 1
        self.total += value
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        sep = "," if labels else ""
        pairs = zip(self.buckets, self.counts, strict=True)
        out = [f'{name}_bucket{{{labels}{sep}le="{bound}"}} {count}' for bound, count in pairs]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


class RecallMetrics:
    """Counters and histograms per endpoint ('auto', 'search', ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.skipped: Counter[tuple[str, str]] = Counter()
        self.injected_total: Counter[str] = Counter()
        self.empty: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.top_scores: dict[str, _Histogram] = {}
        self.latency_ms: dict[str, _Histogram] = {}
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
            if top_score is not None:
                self.top_scores.setdefault(endpoint, _Histogram(TOP_SCORE_BUCKETS)).observe(top_score)
            self.latency_ms.setdefault(endpoint, _Histogram(LATENCY_BUCKETS_MS)).observe(latency_ms)

    def record_error(self, endpoint: str) -> None:
        with self._lock:
            self.errors[endpoint] += 1

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
        with self._lock:
            lines = [
                "# HELP tiermem_recall_calls_total Recall calls per endpoint.",
                "# TYPE tiermem_recall_calls_total counter",
                *(f'tiermem_recall_calls_total{{endpoint="{e}"}} {n}' for e, n in sorted(self.calls.items())),
                "# HELP tiermem_recall_injected_total Entries returned or injected per endpoint.",
                "# TYPE tiermem_recall_injected_total counter",
                *(
                    f'tiermem_recall_injected_total{{endpoint="{e}"}} {n}'
                    for e, n in sorted(self.injected_total.items())
                ),
                "# HELP tiermem_recall_empty_total Calls that searched and returned nothing.",
                "# TYPE tiermem_recall_empty_total counter",
                *(f'tiermem_recall_empty_total{{endpoint="{e}"}} {n}' for e, n in sorted(self.empty.items())),
                "# HELP tiermem_recall_skipped_total Calls answered without searching, by reason.",
                "# TYPE tiermem_recall_skipped_total counter",
                *(
                    f'tiermem_recall_skipped_total{{endpoint="{e}",reason="{r}"}} {n}'
                    for (e, r), n in sorted(self.skipped.items())
                ),
                "# HELP tiermem_recall_errors_total Calls that failed.",
                "# TYPE tiermem_recall_errors_total counter",
                *(f'tiermem_recall_errors_total{{endpoint="{e}"}} {n}' for e, n in sorted(self.errors.items())),
                "# HELP tiermem_recall_top_score Best fused relevance seen per call (before the threshold).",
                "# TYPE tiermem_recall_top_score histogram",
            ]
            for endpoint, histogram in sorted(self.top_scores.items()):
                lines.extend(histogram.lines("tiermem_recall_top_score", f'endpoint="{endpoint}"'))
            lines += [
                "# HELP tiermem_recall_latency_ms Server-side latency per call in milliseconds.",
                "# TYPE tiermem_recall_latency_ms histogram",
            ]
            for endpoint, histogram in sorted(self.latency_ms.items()):
                lines.extend(histogram.lines("tiermem_recall_latency_ms", f'endpoint="{endpoint}"'))
            return "\n".join(lines) + "\n"
