"""The recall service: every read (L0, L1, L2), `memory_save`, erasure requests and readiness, for one
tenant at a time. HTTP routes and MCP tools are thin shells over these methods, so both behave the
same. Isolation: every store call takes an `Owner` built from the authenticated tenant and the
requested user; nothing here can query without one.

This class only composes the levels (l0.py, l1.py, l2.py, facts.py over candidates.py) and holds
what they share: the resources, the metrics, the recall-count updater and the tokenizer."""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.domain.text import TokenCounter
from services.common.runtime.resources import Resources
from services.recall_api import erasure_requests
from services.recall_api.candidates import CandidateRetriever
from services.recall_api.errors import FactRejected, StoreUnavailable
from services.recall_api.facts import FactMemory
from services.recall_api.l0 import AutoRecall
from services.recall_api.l1 import MemorySearch
from services.recall_api.l2 import GraphSearch
from services.recall_api.metrics import RecallMetrics
from services.recall_api.recall_counts import RecallCountUpdater
from services.recall_api.schemas import (
    AutoRecallRequest,
    AutoRecallResponse,
    ErasureAccepted,
    ExpandedMemory,
    FactsResponse,
    GraphSearchRequest,
    GraphSearchResponse,
    SaveFactRequest,
    SaveFactResponse,
    SearchRequest,
    SearchResponse,
)
from services.recall_api.settings import RecallApiSettings

__all__ = ["FactRejected", "RecallService", "StoreUnavailable"]

log = logging.getLogger(__name__)


class RecallService:
    """Holds the shared resources, the metrics and the background recall-count updater."""

    def __init__(self, settings: RecallApiSettings, resources: Resources) -> None:
        self.settings = settings
        self.resources = resources
        self.subjects = Subjects(settings.nats.subject_root)
        self.metrics = RecallMetrics()
        self.recall_counts = RecallCountUpdater(resources, max_pending=settings.recall_count_queue_size)
        self._token_counter: TokenCounter | None = None
        retriever = CandidateRetriever(resources)
        self._l0 = AutoRecall(settings, retriever, self.token_counter, self.metrics, self.recall_counts)
        self._l1 = MemorySearch(settings, resources, retriever, self.nats, self.metrics, self.recall_counts)
        self._l2 = GraphSearch(settings, resources)
        self._facts = FactMemory(settings, resources, self.token_counter, self.metrics, self.recall_counts)

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, *, warm_up: bool = True) -> None:
        """Start the background updater and load models now, so the first turn is not the slow one."""
        self.recall_counts.start()
        if not warm_up:
            return
        await asyncio.to_thread(self.token_counter)  # the tokenizer is required: fail start-up without it
        try:
            keywords = self.resources.keywords()
            await asyncio.to_thread(keywords.warm_up)
            await self.resources.embedder().embed_query("warm up")
        except Exception as exc:  # a remote embedder may be down now and fine later: serve, and say so
            log.warning("recall-api warm-up failed (the first requests will be slow or fail): %s", exc)

    async def stop(self) -> None:
        # The broker connection belongs to `resources`; whoever owns them closes it.
        await self.recall_counts.stop()

    def token_counter(self) -> TokenCounter:
        if self._token_counter is None:
            self._token_counter = TokenCounter()
        return self._token_counter

    async def nats(self) -> NatsClient:
        """The shared broker connection; a broker that cannot be reached is `StoreUnavailable`."""
        try:
            return await self.resources.nats()
        except Exception as exc:
            raise StoreUnavailable(f"cannot connect to NATS at {self.settings.nats.url}: {exc}") from exc

    # ------------------------------------------------------------------------------ reads and writes

    async def auto(self, tenant_id: str, request: AutoRecallRequest) -> AutoRecallResponse:
        return await self._l0.auto(tenant_id, request)

    async def search(self, tenant_id: str, request: SearchRequest) -> SearchResponse:
        return await self._l1.search(tenant_id, request)

    async def expand(
        self, tenant_id: str, user_id: str, memory_id: str, *, channel: str = "private"
    ) -> ExpandedMemory | None:
        return await self._l1.expand(tenant_id, user_id, memory_id, channel=channel)

    async def graph_search(self, tenant_id: str, request: GraphSearchRequest) -> GraphSearchResponse:
        return await self._l2.graph_search(tenant_id, request)

    async def save_fact(self, tenant_id: str, request: SaveFactRequest) -> SaveFactResponse:
        return await self._facts.save_fact(tenant_id, request)

    async def recall_facts(
        self,
        tenant_id: str,
        user_id: str,
        *,
        token_budget: int | None = None,
        channel: str = "private",
        subject: str | None = None,
    ) -> FactsResponse:
        return await self._facts.recall_facts(
            tenant_id, user_id, token_budget=token_budget, channel=channel, subject=subject
        )

    async def request_erasure(
        self, tenant_id: str, user_id: str, *, idempotency_key: str | None = None, reason: str | None = None
    ) -> ErasureAccepted:
        return await erasure_requests.request_erasure(
            self.nats, self.subjects, tenant_id, user_id, idempotency_key=idempotency_key, reason=reason
        )

    # ------------------------------------------------------------------------------ health

    async def readiness(self) -> dict[str, str]:
        """'ok' or the error, per dependency: broker, vector index, graph."""
        probe = Owner("readyz", "readyz")
        timeout = self.settings.readiness_timeout_s

        async def broker() -> None:
            client = await self.nats()
            await client.flush(timeout=max(1, int(timeout)))

        async def vectors() -> None:
            await (await self.resources.episodes()).count(probe)

        async def graph() -> None:
            repository = await self.resources.graph()
            await repository.search_entities(probe, "readyz", limit=1)

        checks = {"broker": broker, "vector_index": vectors, "graph": graph}
        results: dict[str, str] = {}
        for name, check in checks.items():
            try:
                await asyncio.wait_for(check(), timeout=timeout)
                results[name] = "ok"
            except TimeoutError:
                results[name] = f"no answer within {timeout:g}s"
            except Exception as exc:  # readiness reports every failure, whatever its type
                results[name] = f"{type(exc).__name__}: {exc}"[:300]
        return results
