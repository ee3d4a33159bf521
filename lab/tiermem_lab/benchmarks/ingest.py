"""The ingest benchmark: sessions through the real pipeline on an embedded stack, timed against
embedding the same texts alone with the same model in the same run. The sessions are synthetic
(`synthetic.py`) or a LoCoMo file's, as `tiermem eval locomo` ingests them (chat or group form): the
second is how anyone measures ingest on conversations of their own."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.common.gateways.embedding_wrappers import DelegatingEmbedder
from tiermem_lab.benchmarks.synthetic import BENCH_TENANT

if TYPE_CHECKING:
    from rich.console import Console

    from contracts import SessionCompleted
    from services.common.gateways.embedder import Embedder
    from services.recall_api.settings import RecallApiSettings
    from tiermem_lab.evaluation.locomo import ChatForm

INGEST_TARGET_RATIO = 1.3


@dataclass(frozen=True)
class IngestResult:
    sessions: int
    users: int
    korean_sessions: int
    source: str
    turns: int
    end_to_end_s: float
    publish_s: float
    embed_only_s: float
    embedded_texts: int
    distinct_texts: int
    embedded_queries: int
    stored: dict[str, int]
    counters: dict[str, int]

    @property
    def sessions_per_s(self) -> float:
        return self.sessions / self.end_to_end_s if self.end_to_end_s else 0.0

    @property
    def ratio(self) -> float:
        return self.end_to_end_s / self.embed_only_s if self.embed_only_s else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "users": self.users,
            "korean_sessions": self.korean_sessions,
            "source": self.source,
            "turns": self.turns,
            "end_to_end_s": round(self.end_to_end_s, 2),
            "publish_s": round(self.publish_s, 2),
            "embed_only_s": round(self.embed_only_s, 2),
            "embedded_texts": self.embedded_texts,
            "distinct_texts": self.distinct_texts,
            "embedded_queries": self.embedded_queries,
            "sessions_per_s": round(self.sessions_per_s, 2),
            "ratio_end_to_end_to_embed_only": round(self.ratio, 2),
            "target_ratio": INGEST_TARGET_RATIO,
            "stored": self.stored,
            "counters": self.counters,
        }


class RecordingEmbedder(DelegatingEmbedder):
    """Passes calls through and records every text embedded (passages and queries apart): exactly the
    embedding work the pipeline did, to be timed again on its own."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.passages: list[str] = []
        self.queries: list[str] = []
        self.recording = False

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        if self.recording:
            self.passages.extend(texts)
        return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        if self.recording:
            self.queries.append(text)
        return await self._inner.embed_query(text)


@dataclass(frozen=True)
class _PipelineRun:
    publish_s: float
    end_to_end_s: float
    counters: dict[str, int]
    stored: dict[str, int]


def locomo_sessions(path: Path, form: ChatForm, limit: int | None = None) -> list[SessionCompleted]:
    """The sessions of a LoCoMo file, conversation by conversation in the file's order, as the eval
    publishes them (one user per conversation); the first `limit` when given. Raises LocomoFormatError
    or OSError for a file that is not one."""
    from tiermem_lab.evaluation.locomo import load_locomo, session_events

    samples = load_locomo(path)
    events = [event for sample in samples for event in session_events(sample, tenant_id=BENCH_TENANT, form=form)]
    return events[:limit] if limit is not None else events


async def run_ingest_bench(
    events: Sequence[SessionCompleted],
    *,
    source: str,
    work_dir: Path | None = None,
    progress: Any = None,
) -> IngestResult:
    """Publish `events` to an embedded stack, time until consolidation is idle, then time embedding the
    texts the pipeline embedded alone (same model, warmed, in batches of the configured size; queries one
    by one as the pipeline sends them). `source` says in the report where the sessions came from."""
    from services.cli.stack import start_servers
    from services.common.gateways.embedding import build_embedder
    from tiermem_lab.evaluation.harness import eval_settings

    if not events:
        raise ValueError("no sessions to ingest")
    owns_dir = work_dir is None
    directory = Path(tempfile.mkdtemp(prefix="tiermem-bench-ingest-")) if work_dir is None else work_dir
    servers, creds = start_servers(directory)
    try:
        settings = eval_settings(directory, servers, creds, api_key="bench_" + "k" * 24, tenant_id=BENCH_TENANT)
        recorder = RecordingEmbedder(build_embedder(settings.embedding))
        pipeline = await _time_pipeline(settings, recorder, events, progress)
    finally:
        servers.stop()
        if owns_dir:
            shutil.rmtree(directory, ignore_errors=True)
    embed_only = await _time_embedding_alone(settings, recorder)
    return IngestResult(
        sessions=len(events),
        users=len({e.user_id for e in events}),
        korean_sessions=sum(1 for e in events if e.locale == "ko"),
        source=source,
        turns=sum(len(e.messages) for e in events),
        end_to_end_s=pipeline.end_to_end_s,
        publish_s=pipeline.publish_s,
        embed_only_s=embed_only,
        embedded_texts=len(recorder.passages),
        distinct_texts=len(set(recorder.passages)),
        embedded_queries=len(recorder.queries),
        stored=pipeline.stored,
        counters=dict(sorted(pipeline.counters.items())),
    )


async def _time_pipeline(
    settings: RecallApiSettings, recorder: RecordingEmbedder, events: Sequence[SessionCompleted], progress: Any
) -> _PipelineRun:
    """The consolidation services on the running servers, warmed; publish → idle, recording what is embedded."""
    from services.cli.ingest import publish_sessions
    from services.cli.stack import start_services
    from services.common.domain.owner import Owner
    from services.common.runtime.resources import Resources
    from tiermem_lab.evaluation.harness import consolidation_services, wait_for_consolidation

    resources = Resources(settings, _embedder=recorder)
    # Model and tokenizer loading is start-up, not ingest: both sides start warm.
    await recorder.embed_query("warm up")
    await asyncio.to_thread(resources.keywords().warm_up)
    await resources.vector_index()
    running = await start_services(settings, consolidation_services(), resources)
    try:
        recorder.recording = True
        started = time.perf_counter()
        await publish_sessions(settings, list(events), progress)
        publish_s = time.perf_counter() - started
        await wait_for_consolidation(settings, timeout_s=3600)
        end_to_end = time.perf_counter() - started
        recorder.recording = False
        counters: dict[str, int] = {}
        for context in running.contexts.values():
            for name, value in context.counters.items():
                counters[name] = counters.get(name, 0) + value
        owners = sorted({Owner(e.tenant_id, e.user_id) for e in events}, key=lambda o: o.user_id)
        stored = await _stored(resources, owners)
    finally:
        await running.stop()
    return _PipelineRun(publish_s=publish_s, end_to_end_s=end_to_end, counters=counters, stored=stored)


async def _time_embedding_alone(settings: RecallApiSettings, recorder: RecordingEmbedder) -> float:
    """A fresh embedder, warmed and without a passage cache, embeds each distinct text the pipeline
    embedded once (the floor: the same texts, no work repeated) in one call, then the queries one by one."""
    from services.common.gateways.embedding import build_embedder

    baseline = build_embedder(settings.embedding.model_copy(update={"local_passage_cache": 0}))
    await baseline.embed_query("warm up")
    started = time.perf_counter()
    await baseline.embed_passages(list(dict.fromkeys(recorder.passages)))
    for query in recorder.queries:
        await baseline.embed_query(query)
    return time.perf_counter() - started


async def _stored(resources: Any, owners: list[Any]) -> dict[str, int]:
    episodes, facts = await resources.episodes(), await resources.facts()
    totals = {"episodes": 0, "passages": 0, "facts": 0}
    for owner in owners:
        totals["episodes"] += await episodes.count(owner)
        totals["passages"] += await episodes.count_passages(owner)
        totals["facts"] += await facts.count(owner)
    return totals


def render_ingest(result: IngestResult, console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"Ingest: {result.source} through the pipeline (offline LLM mode)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("sessions (Korean)", f"{result.sessions} ({result.korean_sessions})"),
        ("users", str(result.users)),
        ("turns", f"{result.turns} ({result.turns / max(result.sessions, 1):.1f} per session)"),
        ("stored episodes / passages / facts", " / ".join(str(v) for v in result.stored.values())),
        ("end to end (publish → idle)", f"{result.end_to_end_s:.1f} s"),
        ("  of which publishing", f"{result.publish_s:.1f} s"),
        ("sessions per second", f"{result.sessions_per_s:.2f}"),
        ("texts the pipeline asked to embed (distinct)", f"{result.embedded_texts} ({result.distinct_texts})"),
        (
            f"embedding the {result.distinct_texts} distinct texts + {result.embedded_queries} queries only",
            f"{result.embed_only_s:.1f} s",
        ),
        ("ratio end-to-end / embed-only", f"{result.ratio:.2f}× (target ≤ {INGEST_TARGET_RATIO})"),
    ]
    for measure, value in rows:
        table.add_row(measure, value)
    console.print(table)
    verdict = "met" if result.ratio <= INGEST_TARGET_RATIO else "NOT met"
    console.print(f"target ratio ≤ {INGEST_TARGET_RATIO}: {verdict}")
