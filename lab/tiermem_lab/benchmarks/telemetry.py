"""The telemetry cost benchmark (`tiermem bench telemetry`, not a test): the same workload with
tracing recording and exporting versus tracing off, in one process so that machine noise hits both
sides alike.

The workload, on an embedded stack (nats-server, FalkorDB, Qdrant Edge) through the path `tiermem up`
runs (the composition root with the consolidation services and the recall HTTP API on loopback):
- ingest: N synthetic sessions published, timed until consolidation is idle (offline LLM mode);
  trials alternate off/on, on/off, ... after one discarded warm-up trial, each trial on fresh
  streams, a fresh graph and a fresh Edge directory (the embedder and keyword models are shared
  and warm); each pair gives an on/off ratio of ingest time;
- L0: `POST /v1/recall/auto` over HTTP (query embedding included, client-side latency), tracing
  switched call by call (on, off, off, on, ...; every message distinct so the query-embedding
  cache favours neither side) so both sides share the noise at the finest grain; the ratio is
  median(on) / median(off) per trial.

"on": every span is sampled and goes through a `BatchSpanProcessor` (what OTLP export uses) to an
exporter that counts and drops them (no network: the cost measured is tiermem's, not a
collector's). "off": the process's sampler drops every span (non-recording spans, nothing
exported). The prometheus-client instruments count in both (they have no off switch and cost
about a microsecond per update). Because whole-trial ingest times swing by more than 5% on a busy
machine, the span cost is also measured directly (the same spans created recording and not, in a
tight loop) and turned into an estimate: spans per trial × extra cost per span / ingest time.
Target ≤ 1.05."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from tiermem_lab.benchmarks.synthetic import BENCH_TENANT, synthetic_sessions

if TYPE_CHECKING:
    from contracts import SessionCompleted
    from services.cli.stack import EmbeddedServers
    from services.common.gateways.embedder import Embedder
    from services.recall_api.settings import RecallApiSettings

TELEMETRY_TARGET_RATIO = 1.05
API_KEY = "bench_telemetry_" + "k" * 24


class CountingExporter(SpanExporter):
    """Receives every exported span batch (so the spans are recorded, batched and handed over as for
    OTLP) and only counts them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@dataclass(frozen=True)
class Trial:
    tracing: bool  # during the ingest
    ingest_s: float
    l0_on_ms: list[float]
    l0_off_ms: list[float]
    spans: int  # exported during the ingest
    l0_spans_per_call: float  # exported per traced L0 call

    @property
    def l0_ratio(self) -> float:
        return statistics.median(self.l0_on_ms) / statistics.median(self.l0_off_ms)


@dataclass
class TelemetryResult:
    sessions: int
    queries: int
    trials: list[Trial] = field(default_factory=list)
    span_cost_us: float = 0.0  # extra microseconds per span, recording and exporting vs off

    def pairs(self) -> list[tuple[Trial, Trial]]:
        """(off, on) per repeat, in the order they ran."""
        offs = [trial for trial in self.trials if not trial.tracing]
        ons = [trial for trial in self.trials if trial.tracing]
        return list(zip(offs, ons, strict=True))

    def ingest_ratios(self) -> list[float]:
        return [on.ingest_s / off.ingest_s for off, on in self.pairs()]

    def l0_ratios(self) -> list[float]:
        return [trial.l0_ratio for trial in self.trials]

    def estimated_l0_ratio(self) -> float:
        """1 + the spans of one traced L0 call × their extra cost, over the L0 median with tracing off."""
        estimates = [
            1 + trial.l0_spans_per_call * self.span_cost_us / 1e3 / statistics.median(trial.l0_off_ms)
            for trial in self.trials
        ]
        return statistics.median(estimates)

    def estimated_ingest_ratio(self) -> float:
        """1 + the recorded spans' extra cost over the ingest time with tracing off (per pair, median)."""
        estimates = [1 + on.spans * self.span_cost_us / 1e6 / off.ingest_s for off, on in self.pairs()]
        return statistics.median(estimates)

    def as_dict(self) -> dict[str, Any]:
        def summary(ratios: list[float]) -> dict[str, float]:
            return {"min": round(min(ratios), 3), "median": round(statistics.median(ratios), 3)}

        return {
            "sessions": self.sessions,
            "queries": self.queries,
            "trials": [
                {
                    "tracing": trial.tracing,
                    "ingest_s": round(trial.ingest_s, 3),
                    "l0_median_on_ms": round(statistics.median(trial.l0_on_ms), 2),
                    "l0_median_off_ms": round(statistics.median(trial.l0_off_ms), 2),
                    "spans_exported_during_ingest": trial.spans,
                }
                for trial in self.trials
            ],
            "span_cost_us": round(self.span_cost_us, 2),
            "ratio_on_to_off": {
                "ingest": summary(self.ingest_ratios()),
                "ingest_estimated_from_span_cost": round(self.estimated_ingest_ratio(), 4),
                "l0_estimated_from_span_cost": round(self.estimated_l0_ratio(), 4),
                "l0_median": summary(self.l0_ratios()),
            },
            "target_ratio": TELEMETRY_TARGET_RATIO,
        }


async def run_telemetry_bench(
    sessions: int, *, users: int, queries: int, repeats: int, seed: int = 7, progress: Any = None
) -> TelemetryResult:
    """One warm-up trial, then `repeats` pairs of trials (off/on, then on/off, ...)."""
    from services.cli.stack import start_servers
    from services.common.gateways.embedding import build_embedder
    from services.common.runtime.telemetry import SAMPLER, tracer_provider

    events = synthetic_sessions(sessions, users=users, turns=8, seed=seed)
    messages = [(event.user_id, event.messages[0].content) for event in events]
    # Distinct texts (a call number appended): a repeated text would hit the query-embedding cache.
    l0_calls = [
        (user, f"{text} ({i})") for i, (user, text) in enumerate(messages[i % len(messages)] for i in range(queries))
    ]
    exporter = CountingExporter()
    processor = BatchSpanProcessor(exporter)
    tracer_provider().add_span_processor(processor)
    directory = Path(tempfile.mkdtemp(prefix="tiermem-bench-telemetry-"))
    servers, creds = start_servers(directory)
    result = TelemetryResult(sessions=len(events), queries=queries)
    try:
        embedder: Embedder | None = None
        order = [True] + [
            tracing for repeat in range(repeats) for tracing in ((False, True), (True, False))[repeat % 2]
        ]
        for number, tracing in enumerate(order):
            SAMPLER.recording = tracing
            settings = _trial_settings(directory / f"trial-{number}", servers, creds, number)
            if embedder is None:
                embedder = build_embedder(settings.embedding)
                await embedder.embed_query("warm up")
            trial = await _trial(settings, embedder, events, l0_calls, tracing, (exporter, processor))
            if number > 0:  # the first trial warms caches and code paths: discarded
                result.trials.append(trial)
            if progress is not None:
                progress(number, len(order), trial)
        result.span_cost_us = span_cost_us()
    finally:
        SAMPLER.recording = True
        servers.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return result


def _trial_settings(data_dir: Path, servers: EmbeddedServers, creds: dict[str, str], number: int) -> RecallApiSettings:
    from services.cli.servers.net import free_port
    from services.common.runtime.settings import NatsSettings, TelemetrySettings
    from tiermem_lab.evaluation.harness import eval_settings

    settings = eval_settings(data_dir, servers, creds, api_key=API_KEY, tenant_id=BENCH_TENANT)
    # Fresh streams and graph per trial: every trial ingests the same sessions into empty stores.
    nats = NatsSettings(url=settings.nats.url, token=settings.nats.token, subject_root=f"benchtel{number}")
    graph = settings.graph.model_copy(update={"graph_name": f"benchtel{number}"})
    return settings.model_copy(
        update={
            "nats": nats,
            "graph": graph,
            "http_port": free_port(),
            "telemetry": TelemetrySettings(store_counts_interval_s=0),  # no background counting in the timings
        }
    )


async def _trial(
    settings: RecallApiSettings,
    embedder: Embedder,
    events: Sequence[SessionCompleted],
    l0_calls: Sequence[tuple[str, str]],
    tracing: bool,
    export: tuple[CountingExporter, BatchSpanProcessor],
) -> Trial:
    """Ingest (publish → idle) with tracing as given, then the L0 calls with tracing alternating,
    on one composition root with the HTTP API."""
    from services.cli.ingest import publish_sessions
    from services.cli.stack import recall_http_api
    from services.common.gateways.embedding_wrappers import CachedQueryEmbedder, TracedEmbedder
    from services.common.runtime.resources import Resources
    from services.common.runtime.root import bootstrap
    from services.common.runtime.telemetry import SAMPLER
    from tiermem_lab.evaluation.harness import consolidation_services, wait_for_consolidation

    exporter, processor = export
    # As `Resources` wraps its own embedder (spans and the query cache), around the shared warm model.
    resources = Resources(settings, _embedder=CachedQueryEmbedder(TracedEmbedder(embedder)))
    await asyncio.to_thread(resources.keywords().warm_up)
    await resources.vector_index()
    root = await bootstrap(
        settings,
        consolidation_services(),
        resources=resources,
        http_api=recall_http_api("127.0.0.1", settings.http_port, log_level="warning"),
    )
    try:
        processor.force_flush()  # spans of the previous trial's shutdown are not this trial's
        SAMPLER.recording = tracing
        before = exporter.spans
        started = time.perf_counter()
        await publish_sessions(settings, list(events))
        await wait_for_consolidation(settings, timeout_s=3600)
        ingest_s = time.perf_counter() - started
        processor.force_flush()
        spans = exporter.spans - before
        l0_on, l0_off = await _l0_alternating(settings, l0_calls)
        processor.force_flush()
        traced_calls = sum(1 for number in range(len(l0_calls)) if _traced(number))
        l0_spans_per_call = (exporter.spans - before - spans) / traced_calls
    finally:
        SAMPLER.recording = True
        await root.stop()
    return Trial(tracing, ingest_s, l0_on, l0_off, spans, l0_spans_per_call)


async def _l0_alternating(
    settings: RecallApiSettings, l0_calls: Sequence[tuple[str, str]], warmup: int = 10
) -> tuple[list[float], list[float]]:
    """Client-side milliseconds of L0 calls after `warmup` untimed ones, tracing on and off in the
    pattern on, off, off, on, ... (every message distinct, so the query-embedding cache favours
    neither side)."""
    import httpx

    from services.common.runtime.telemetry import SAMPLER

    timings: dict[bool, list[float]] = {True: [], False: []}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{settings.http_port}", headers={"Authorization": f"Bearer {API_KEY}"}
    ) as client:
        for number, (user, message) in enumerate(l0_calls):
            recording = _traced(number)
            SAMPLER.recording = recording
            started = time.perf_counter()
            response = await client.post("/v1/recall/auto", json={"user_id": user, "message": message}, timeout=60)
            if number >= warmup:
                timings[recording].append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return timings[True], timings[False]


def _traced(call_number: int) -> bool:
    return call_number % 4 in (0, 3)


def span_cost_us(spans: int = 1000, rounds: int = 10) -> float:
    """Extra microseconds per span when recorded and exported (vs off): spans shaped like tiermem's
    (a CLIENT span with five attributes under a parent), in a tight loop, best of `rounds` each way,
    alternating. Each loop stays under the export queue's size and starts with the queue flushed,
    so no span is dropped (a dropped span would cost less than an exported one)."""
    from opentelemetry import trace

    from services.common.runtime.telemetry import SAMPLER, tracer_provider

    tracer = trace.get_tracer("tiermem.bench.telemetry")
    attributes: dict[str, str | int] = {
        "db.system.name": "qdrant",
        "db.operation.name": "count",
        "db.collection.name": "facts",
        "a": 1,
        "b": 2,
    }

    def loop(recording: bool) -> float:
        tracer_provider().force_flush()
        SAMPLER.recording = recording
        started = time.perf_counter()
        with tracer.start_as_current_span("parent"):
            for _ in range(spans):
                with tracer.start_as_current_span("count vector", kind=trace.SpanKind.CLIENT) as span:
                    span.set_attributes(attributes)
        return (time.perf_counter() - started) / spans * 1e6

    timings: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for recording in (True, False):
                timings[recording].append(loop(recording))
    finally:
        SAMPLER.recording = True
    return max(0.0, min(timings[True]) - min(timings[False]))


def render_telemetry(result: TelemetryResult) -> list[str]:
    """The lines `tiermem bench telemetry` prints."""
    lines = [
        f"Telemetry cost: {result.sessions} sessions ingested + {result.queries} L0 calls per trial, "
        f"{len(result.pairs())} off/on pairs of ingest trials (after one warm-up trial); L0 alternates per call",
        "  trial  ingest tracing  ingest s  spans  L0 median on ms  L0 median off ms",
    ]
    for number, trial in enumerate(result.trials, start=1):
        lines.append(
            f"  {number:>5}  {'on ' if trial.tracing else 'off'}            {trial.ingest_s:8.2f}  {trial.spans:5d}  "
            f"{statistics.median(trial.l0_on_ms):15.2f}  {statistics.median(trial.l0_off_ms):16.2f}"
        )
    for name, ratios in (("ingest time", result.ingest_ratios()), ("L0 median latency", result.l0_ratios())):
        lowest, middle = min(ratios), statistics.median(ratios)
        verdict = "met" if middle <= TELEMETRY_TARGET_RATIO else "NOT met"
        lines.append(
            f"ratio on/off, {name}: min {lowest:.3f}×, median {middle:.3f}× "
            f"(target ≤ {TELEMETRY_TARGET_RATIO}: {verdict} on the median)"
        )
    lines.append(
        f"span cost: {result.span_cost_us:.1f} µs extra per recorded span → estimated ingest ratio "
        f"{result.estimated_ingest_ratio():.4f}× (spans per trial × cost / ingest time with tracing off), "
        f"estimated L0 ratio {result.estimated_l0_ratio():.4f}× (spans per call × cost / L0 median off)"
    )
    return lines


def telemetry_command(
    sessions: Annotated[int, typer.Option(min=1, help="Synthetic sessions ingested per trial.")] = 40,
    users: Annotated[int, typer.Option(min=1, help="Users they are spread over.")] = 8,
    queries: Annotated[
        int, typer.Option(min=1, help="L0 messages per trial (each sent with tracing on and off).")
    ] = 200,
    repeats: Annotated[int, typer.Option(min=1, help="Off/on pairs (after one warm-up trial).")] = 3,
    seed: Annotated[int, typer.Option()] = 7,
    out: Annotated[Path | None, typer.Option(help="Write the result as JSON here.")] = None,
) -> None:
    """The cost of tracing: ingest time and L0 latency with spans recorded and exported vs off, in one run."""
    import json

    from rich.console import Console

    from tiermem_lab.evaluation.harness import quiet_consumer_logs

    console = Console()
    quiet_consumer_logs()

    def report(number: int, total: int, trial: Trial) -> None:
        label = "warm-up" if number == 0 else f"trial {number}/{total - 1}"
        console.print(
            f"{label}: tracing {'on' if trial.tracing else 'off'}, ingest {trial.ingest_s:.2f} s, "
            f"L0 median on/off {trial.l0_ratio:.3f}×, {trial.spans} spans",
            highlight=False,
        )

    result = asyncio.run(
        run_telemetry_bench(sessions, users=users, queries=queries, repeats=repeats, seed=seed, progress=report)
    )
    for line in render_telemetry(result):
        console.print(line, highlight=False)
    if out is not None:
        out.write_text(json.dumps(result.as_dict(), indent=2), encoding="utf-8")
        console.print(f"result: {out}")
