"""The evaluation stack: embedded servers (nats-server, FalkorDB, Qdrant Edge), the consolidation
services, and the recall API in-process behind an httpx client; waiting for consolidation; mapping
what recall returned back to the sessions it came from."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.common.gateways.embedding_wrappers import DelegatingEmbedder
from tiermem_lab.evaluation.metrics import InjectedItem

if TYPE_CHECKING:
    from rich.progress import Progress

    from services.cli.stack import EmbeddedServers, RunningServices
    from services.common.gateways.embedder import Embedder
    from services.common.runtime.resources import Resources
    from services.recall_api.schemas import AutoRecallResponse, SearchResponse
    from services.recall_api.settings import RecallApiSettings

# L0 is also asked with these higher minimum scores (one recall API instance each, same stores).
SWEEP_STEP = 0.05
SWEEP_MAX = 0.7


class QueryCachingEmbedder(DelegatingEmbedder):
    """Wraps an embedder and remembers query vectors. The eval sends each question to L0, to L1 at
    several limits and to the dense baseline: the same text, the same vector, embedded once."""

    def __init__(self, inner: Embedder, max_entries: int = 4096) -> None:
        super().__init__(inner)
        self._cache: dict[str, list[float]] = {}
        self._max_entries = max_entries
        self.query_calls = 0

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cache.get(text)
        if cached is not None:
            return list(cached)
        self.query_calls += 1
        vector = await self._inner.embed_query(text)
        if len(self._cache) >= self._max_entries:
            self._cache.pop(next(iter(self._cache)))
        self._cache[text] = list(vector)
        return vector


class RecallClient:
    """The recall API app in-process: lifespan run, requests over httpx's ASGI transport with an API key."""

    def __init__(self, settings: RecallApiSettings, resources: Resources, api_key: str) -> None:
        from services.recall_api.app import create_app

        self.app = create_app(settings, resources)
        self._api_key = api_key
        self._stack = contextlib.AsyncExitStack()
        self._http: Any = None

    async def __aenter__(self) -> RecallClient:
        import httpx

        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.app),
                base_url="http://recall.eval",
                headers={"Authorization": f"Bearer {self._api_key}"},
                timeout=120,
            )
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = await self._http.post(path, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"POST {path} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    async def auto(self, user_id: str, message: str, **options: Any) -> AutoRecallResponse:
        from services.recall_api.schemas import AutoRecallResponse

        body = {"user_id": user_id, "message": message, **options}
        return AutoRecallResponse.model_validate(await self._post("/v1/recall/auto", body))

    async def search(
        self, user_id: str, query: str, *, limit: int, kinds: Sequence[str] | None = ("episode",)
    ) -> SearchResponse:
        from services.recall_api.schemas import SearchResponse

        body: dict[str, Any] = {"user_id": user_id, "query": query, "limit": limit}
        if kinds is not None:
            body["kinds"] = list(kinds)
        return SearchResponse.model_validate(await self._post("/v1/memories/search", body))


def consolidation_services() -> list[Any]:
    """The services that turn sessions into memory (the pruner is left out: it only deletes)."""
    from services.dedup.handlers import DEFINITION as DEDUP
    from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
    from services.semantic_extractor.handlers import DEFINITION as SEMANTIC

    return [EPISODIC, SEMANTIC, DEDUP]


@dataclass
class EvalStack:
    settings: RecallApiSettings
    resources: Resources
    running: RunningServices
    recall: RecallClient
    embedder: QueryCachingEmbedder
    tenant_id: str
    servers: EmbeddedServers | None = None
    # Recall API instances with higher L0 minimum scores (the LoCoMo threshold sweep), same stores.
    sweep: dict[float, RecallClient] = field(default_factory=dict)
    # The same sweep with the L0 gate off (minimum score only): the frontier the gate has to beat.
    sweep_ungated: dict[float, RecallClient] = field(default_factory=dict)


def eval_settings(
    data_dir: Path,
    servers: EmbeddedServers,
    creds: Mapping[str, str],
    *,
    api_key: str,
    tenant_id: str,
    **overrides: Any,
) -> RecallApiSettings:
    from services.common.runtime.settings import GraphSettings, NatsSettings, VectorSettings
    from services.recall_api.settings import RecallApiSettings

    return RecallApiSettings(
        data_dir=data_dir,
        nats=NatsSettings(url=servers.nats.url, token=creds["nats_token"]),  # type: ignore[arg-type]
        graph=GraphSettings(
            backend="falkordb",
            host=servers.graph.host,
            port=servers.graph.port,
            password=creds["graph_password"],  # type: ignore[arg-type]
        ),
        vector=VectorSettings(backend="edge", path=data_dir / "qdrant-edge"),
        api_keys={api_key: tenant_id},
        # Quality is measured here, not latency: a loaded machine must not turn answers keyword-only
        # (the L0 deadline, services/recall_api/l0/deadline.py) nor skip L1's alias expansion (its graph
        # lookup's timeout, then a pause for every search after it).
        **({"l0_embedding_deadline_ms": 600_000.0, "l1_alias_timeout_ms": 5_000.0} | overrides),
    )


# The L0 settings that turn the gate off (`ungated_settings`): a minimum score and nothing else.
UNGATED_L0 = {
    "l0_decision": "rules",
    "l0_relative_margin": 1.0,
    "l0_one_per_session": False,
    "l0_subject_attribution": False,
}
UNGATED_L0_EXTRA = {"l0_min_dense": 0.0, "l0_min_dense_share": 0.0, "l0_min_keyword": 0.0, "l0_detail_max_dense": 0.0}


def ungated_settings(settings: RecallApiSettings, min_score: float) -> RecallApiSettings:
    """`settings` with the L0 gate off and this minimum score: the frontier before the gate."""
    return settings.model_copy(update={**UNGATED_L0, **UNGATED_L0_EXTRA, "l0_min_score": min_score})


def sweep_thresholds(default: float) -> list[float]:
    """Minimum scores above the default, every SWEEP_STEP up to SWEEP_MAX."""
    steps = round((SWEEP_MAX - default) / SWEEP_STEP)
    return [round(default + SWEEP_STEP * step, 4) for step in range(1, steps + 1)]


@contextlib.asynccontextmanager
async def recall_stack(
    settings: RecallApiSettings,
    resources: Resources,
    api_key: str,
    servers: EmbeddedServers | None = None,
    *,
    l0_sweep: bool = False,
) -> AsyncIterator[EvalStack]:
    """Consolidation services and the recall API on already running servers (the tests' fixtures or
    `embedded_stack`), sharing `resources`; with `l0_sweep`, also one recall API per higher L0
    minimum score."""
    from services.cli.stack import start_services

    embedder = resources.embedder()
    if not isinstance(embedder, QueryCachingEmbedder):
        raise TypeError("recall_stack needs resources whose embedder is a QueryCachingEmbedder")
    running = await start_services(settings, consolidation_services(), resources)
    try:
        async with contextlib.AsyncExitStack() as clients:
            recall = await clients.enter_async_context(RecallClient(settings, resources, api_key))
            stack = EvalStack(settings, resources, running, recall, embedder, settings.api_keys[api_key], servers)
            if l0_sweep:
                for threshold in sweep_thresholds(settings.l0_min_score):
                    variant = settings.model_copy(update={"l0_min_score": threshold})
                    stack.sweep[threshold] = await clients.enter_async_context(
                        RecallClient(variant, resources, api_key)
                    )
                for threshold in [settings.l0_min_score, *sweep_thresholds(settings.l0_min_score)]:
                    stack.sweep_ungated[threshold] = await clients.enter_async_context(
                        RecallClient(ungated_settings(settings, threshold), resources, api_key)
                    )
            yield stack
    finally:
        await running.stop()


def caching_resources(settings: RecallApiSettings) -> Resources:
    from services.common.gateways.embedding import build_embedder
    from services.common.runtime.resources import Resources

    return Resources(settings, _embedder=QueryCachingEmbedder(build_embedder(settings.embedding)))


@contextlib.asynccontextmanager
async def embedded_stack(
    work_dir: Path, *, tenant_id: str, l0_sweep: bool = False, **overrides: Any
) -> AsyncIterator[EvalStack]:
    """nats-server and FalkorDB on loopback with data in `work_dir`, the consolidation services and the
    recall API in this process. Always stops everything."""
    from services.cli.stack import start_servers

    servers, creds = start_servers(work_dir)
    try:
        api_key = "eval_" + secrets.token_urlsafe(24)
        settings = eval_settings(work_dir, servers, creds, api_key=api_key, tenant_id=tenant_id, **overrides)
        async with recall_stack(settings, caching_resources(settings), api_key, servers, l0_sweep=l0_sweep) as stack:
            yield stack
    finally:
        servers.stop()


async def wait_for_consolidation(
    settings: RecallApiSettings, progress: Progress | None = None, *, timeout_s: float = 1800.0
) -> float:
    """Poll the consumers' backlog (shown as a progress bar) until it is empty, then confirm with
    `wait_until_idle`; returns the seconds waited."""
    from services.cli.consolidation import backlog, wait_until_idle

    definitions = consolidation_services()
    started = time.monotonic()
    task = progress.add_task("consolidating (backlog)", total=None) if progress is not None else None
    peak = 0
    while time.monotonic() - started < timeout_s:
        remaining = sum((await backlog(settings, definitions)).values())
        peak = max(peak, remaining)
        if progress is not None and task is not None:
            progress.update(task, total=max(peak, 1), completed=peak - remaining)
        if remaining == 0:
            break
        await asyncio.sleep(0.25)
    await wait_until_idle(settings, definitions, timeout_s=max(10.0, timeout_s - (time.monotonic() - started)))
    if progress is not None and task is not None:
        progress.update(task, total=max(peak, 1), completed=max(peak, 1))
    return time.monotonic() - started


async def item_sessions(
    stack: EvalStack, owner_user: str, items: Sequence[Any], session_numbers: Mapping[str, int]
) -> list[InjectedItem]:
    """Injected items with the sessions they came from: an episode's session; for a fact, every
    session its provenance records (read from the index, the item only names the latest)."""
    from services.common.domain.owner import Owner

    owner = Owner(stack.tenant_id, owner_user)
    fact_ids = [item.id for item in items if item.kind == "fact"]
    provenance: dict[str, set[str]] = defaultdict(set)
    if fact_ids:
        facts = await stack.resources.facts()
        for stored in await facts.get(owner, fact_ids):
            provenance[stored.fact_id].update(p.session_id for p in stored.fact.provenance if p.session_id)
    out: list[InjectedItem] = []
    for item in items:
        session_ids = set(provenance.get(item.id, set()))
        if item.session_id:
            session_ids.add(item.session_id)
        numbers = frozenset(session_numbers[s] for s in session_ids if s in session_numbers)
        out.append(InjectedItem(kind=item.kind, sessions=numbers, score=float(item.score)))
    return out


def quiet_consumer_logs() -> None:
    """FastStream logs every message it handles at INFO; keep that out of the progress display unless
    the CLI was asked to be verbose (root logger at INFO or lower)."""
    import logging

    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        # FastStream sets its access logger's level itself when the broker starts; a filter stays.
        for name in ("faststream", "faststream.access", "faststream.access.nats"):
            logger = logging.getLogger(name)
            if not any(isinstance(f, _BelowWarning) for f in logger.filters):
                logger.addFilter(_BelowWarning())


class _BelowWarning:
    """Logging filter that drops records below WARNING."""

    def filter(self, record: Any) -> bool:
        return bool(record.levelno >= 30)
