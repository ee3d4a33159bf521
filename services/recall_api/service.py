"""The recall service: every read (L0, L1, L2), `memory_save`, erasure requests and readiness, for one
tenant at a time. HTTP routes and MCP tools are thin shells over these methods, so both behave the
same. Isolation: every store call takes an `Owner` built from the authenticated tenant and the
requested user; nothing here can query without one.

This class only composes the levels (l0/, search/, graph/, facts/, over retrieval/) and the
write/ side, and holds what they share: the resources, the metrics, the recall-count updater and
the tokenizer."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.client import Client as NatsClient

from contracts import SessionCompleted, Subjects
from contracts.session_form import SessionForm
from contracts.session_input import SessionRejected, complete_session, parse_session
from services.common.domain.owner import Owner
from services.common.domain.tokens import TokenCounter
from services.common.runtime.resources import Resources
from services.recall_api.errors import FactRejected, StoreUnavailable
from services.recall_api.facts.fact_memory import FactMemory
from services.recall_api.facts.procedures import ProcedureMemory, ProceduresResponse
from services.recall_api.graph.graph_search import GraphSearch
from services.recall_api.l0.auto_recall import AutoRecall
from services.recall_api.retrieval.candidates import CandidateRetriever
from services.recall_api.retrieval.metrics import RecallMetrics
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
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
from services.recall_api.search.memory_search import MemorySearch
from services.recall_api.settings import RecallApiSettings
from services.recall_api.write import erasure_requests, sessions_in
from services.recall_api.write.event_status import event_status
from services.recall_api.write.memory_admin import ListFilters, MemoryAdmin, erasure_target, fact_record
from services.recall_api.write.turn_schemas import OpenSessionView, SessionEnded, TurnsAccepted, TurnsRequest
from services.recall_api.write.turns_in import OpenSessions
from services.recall_api.write_schemas import (
    CorrectionRequest,
    CorrectionResponse,
    EventStatus,
    FactHistoryResponse,
    ForgetAccepted,
    ListKind,
    MemoryListResponse,
    MemoryRecord,
    SessionAccepted,
    SessionBatchResponse,
)

__all__ = ["FactRejected", "RecallService", "SessionRejected", "StoreUnavailable"]

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
        self._procedures = ProcedureMemory(settings, resources, self.token_counter, self.recall_counts)
        self._admin = MemoryAdmin(resources)
        self.open_sessions = OpenSessions(
            self.nats,
            self.subjects,
            settings.limits,
            idle_s=settings.open_session_idle_s,
            sweep_s=settings.open_session_sweep_s,
            closed_keep_s=settings.open_session_closed_keep_s,
            replicas=settings.nats.replicas,
        )
        self._idle_closer: asyncio.Task[None] | None = None

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

    def start_idle_closer(self) -> None:
        """Complete idle per-turn sessions in the background (the HTTP app runs it; write/turns_in.py
        says why here and why two replicas may both run it)."""
        if self._idle_closer is None:
            self._idle_closer = asyncio.create_task(self.open_sessions.run_closer(), name="open-session-closer")

    async def stop(self) -> None:
        # The broker connection belongs to `resources`; whoever owns them closes it.
        if self._idle_closer is not None:
            await cancel_until_done(self._idle_closer)
            self._idle_closer = None
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
            # The address and the error go to the log only: the 503 body must not reveal them.
            log.error("cannot connect to NATS at %s: %s", self.settings.nats.url, exc)
            raise StoreUnavailable("the message broker is not reachable") from exc

    # ------------------------------------------------------------------------------ reads and writes

    async def auto(self, tenant_id: str, request: AutoRecallRequest) -> AutoRecallResponse:
        return await self._l0.auto(tenant_id, request)

    async def search(self, tenant_id: str, request: SearchRequest) -> SearchResponse:
        return await self._l1.search(tenant_id, request)

    async def expand(
        self, tenant_id: str, user_id: str, memory_id: str, *, channel: str = "private", count_recall: bool = True
    ) -> ExpandedMemory | None:
        return await self._l1.expand(tenant_id, user_id, memory_id, channel=channel, count_recall=count_recall)

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

    async def procedures(
        self,
        tenant_id: str,
        user_id: str,
        *,
        channel: str = "private",
        query: str | None = None,
        token_budget: int | None = None,
        include_shared: bool = True,
    ) -> ProceduresResponse:
        return await self._procedures.procedures(
            tenant_id, user_id, channel=channel, query=query, token_budget=token_budget, include_shared=include_shared
        )

    async def request_erasure(
        self, tenant_id: str, user_id: str, *, idempotency_key: str | None = None, reason: str | None = None
    ) -> ErasureAccepted:
        # The user's buffered turns go before the cut is read: a session that was closing then either
        # published below the cut (erased with the rest) or sees its record gone and deletes its event.
        await self.open_sessions.erase_user(Owner(tenant_id, user_id))
        return await erasure_requests.request_erasure(
            self.nats,
            self.subjects,
            tenant_id,
            user_id,
            idempotency_key=idempotency_key,
            reason=reason,
            tombstones=self.resources.tombstones,
        )

    # ------------------------------------------------------------------------------ sessions in, memory management

    async def add_session(self, tenant_id: str, session: SessionCompleted | SessionForm) -> SessionAccepted:
        """Publish one session, completed when it is a short form (WrongTenant / SessionRejected when it
        may not or cannot be)."""
        event = (
            complete_session(session, self.settings.limits, tenant_id) if isinstance(session, SessionForm) else session
        )
        sessions_in.check_tenant(tenant_id, event)
        checked = parse_session(event.model_dump(mode="json"), self.settings.limits)
        return await sessions_in.publish_session(self.nats, self.subjects, checked)

    async def add_sessions(self, tenant_id: str, records: list[object]) -> SessionBatchResponse:
        return await sessions_in.publish_batch(self.nats, self.subjects, tenant_id, records, self.settings.limits)

    async def add_turns(self, tenant_id: str, user_id: str, session_id: str, request: TurnsRequest) -> TurnsAccepted:
        return await self.open_sessions.append(Owner(tenant_id, user_id), session_id, request)

    async def end_session(self, tenant_id: str, user_id: str, session_id: str) -> SessionEnded | None:
        return await self.open_sessions.end(Owner(tenant_id, user_id), session_id)

    async def open_session(self, tenant_id: str, user_id: str, session_id: str) -> OpenSessionView | None:
        return await self.open_sessions.read(Owner(tenant_id, user_id), session_id)

    async def event_status(self, tenant_id: str, user_id: str, event_id: str) -> EventStatus | None:
        client = await self.nats()
        episodes = await self.resources.episodes()
        return await event_status(
            client.jetstream(),
            self.subjects,
            episodes,
            Owner(tenant_id, user_id),
            event_id,
            limit=self.settings.event_status_scan_limit,
        )

    async def list_memories(
        self, tenant_id: str, user_id: str, kind: ListKind, *, limit: int, cursor: str | None, filters: ListFilters
    ) -> MemoryListResponse:
        return await self._admin.list(Owner(tenant_id, user_id), kind, limit=limit, cursor=cursor, filters=filters)

    async def fact(self, tenant_id: str, user_id: str, fact_id: str) -> MemoryRecord | None:
        stored = await self._admin.fact(Owner(tenant_id, user_id), fact_id)
        return None if stored is None else fact_record(stored)

    async def fact_history(self, tenant_id: str, user_id: str, fact_id: str) -> FactHistoryResponse | None:
        return await self._admin.history(Owner(tenant_id, user_id), fact_id)

    async def correct_fact(
        self, tenant_id: str, fact_id: str, request: CorrectionRequest, *, idempotency_key: str | None = None
    ) -> CorrectionResponse | None:
        owner = Owner(tenant_id, request.user_id)
        return await self._admin.correct(owner, fact_id, request, idempotency_key=idempotency_key)

    async def forget(
        self, tenant_id: str, user_id: str, memory_id: str, *, idempotency_key: str | None = None
    ) -> ForgetAccepted | None:
        """Erase one fact or episode through the pruner; None when the owner has no such memory."""
        kind = await self._admin.kind_of(Owner(tenant_id, user_id), memory_id)
        if kind is None:
            return None
        accepted = await erasure_requests.request_erasure(
            self.nats,
            self.subjects,
            tenant_id,
            user_id,
            idempotency_key=idempotency_key,
            reason=f"forget one {kind}",
            target=erasure_target(kind, memory_id),
            tombstones=self.resources.tombstones,
        )
        return ForgetAccepted(
            event_id=accepted.event_id,
            duplicate=accepted.duplicate,
            kind=kind,
            status_url=sessions_in.status_url(accepted.event_id, user_id),
        )

    # ------------------------------------------------------------------------------ health

    async def readiness(self) -> dict[str, str]:
        """'ok', 'unavailable' or 'timeout' per dependency: broker, vector index, graph. /readyz is
        unauthenticated, so addresses and error text go to the log, never into the answer."""
        probe = Owner("readyz", "readyz")
        timeout = self.settings.readiness_timeout_s

        async def broker() -> None:
            client = await self.nats()
            # nats-py's flush() returns at once while the client is reconnecting: ask the state first.
            if not client.is_connected:
                raise ConnectionError("the NATS client is not connected (the server is down or unreachable)")
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
                log.warning("readiness: %s gave no answer within %gs", name, timeout)
                results[name] = "timeout"
            except Exception as exc:  # readiness reports every failure, whatever its type
                log.warning("readiness: %s unavailable: %s: %s", name, type(exc).__name__, exc)
                results[name] = "unavailable"
        return results


async def cancel_until_done(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait for it to end. On Python 3.11 `asyncio.wait_for` (nats-py's key-value watch
    uses it) can swallow a cancellation that arrives as its inner future completes; the task then goes on
    to its next sleep, and one cancel would leave the caller waiting forever. So cancel until it has ended."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    with contextlib.suppress(asyncio.CancelledError):
        await task
