"""What a running service holds: settings, subjects, the publisher and the stores it needs.

Stores are opened lazily and shared: in the embedded stack all services run in one process and
share one Qdrant Edge shard per collection (a shard belongs to one process)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from contracts import Subjects
from services.common.runtime.broker import BrokerConnectTimeout, close_nats, connect_nats, unreachable_message
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.settings import TierMemSettings
from services.common.runtime.telemetry import TracedCypherExecutor, traced_vector_index

if TYPE_CHECKING:
    from services.common.gateways.embedder import Embedder
    from services.common.gateways.keywords import KeywordEncoder
    from services.common.gateways.llm import LlmGateway
    from services.common.stores.episodes import EpisodeStore
    from services.common.stores.facts import FactStore
    from services.common.stores.graph.repository import GraphRepository
    from services.common.stores.tombstones import TombstoneStore
    from services.common.stores.vector.edge import EdgeVectorIndex
    from services.common.stores.vector.port import VectorIndex


@dataclass
class Resources:
    """Lazily opened stores and gateways, built from settings."""

    settings: TierMemSettings
    _vector_index: VectorIndex | None = None
    _graph: GraphRepository | None = None
    _embedder: Embedder | None = None
    _llm: LlmGateway | None = None
    _keywords: KeywordEncoder | None = None
    _nats: NatsClient | None = None
    _tombstones: TombstoneStore | None = None
    _edge: EdgeVectorIndex | None = None  # the Edge index, claimed (claim_local_stores) before it is opened
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def nats(self) -> NatsClient:
        """The process's own admin connection (stream reads, purges, control requests), opened on
        first use and re-opened if it was closed. Bounded: a broker that is down is an error after
        the connect timeout, not a hang."""
        if self._nats is None or self._nats.is_closed:
            async with self._lock:
                if self._nats is None or self._nats.is_closed:
                    try:
                        self._nats = await asyncio.wait_for(
                            connect_nats(self.settings.nats, "tiermem-resources"),
                            timeout=self.settings.nats.connect_timeout_s + 1,
                        )
                    except TimeoutError as exc:  # the reason an operator can act on, not a bare timeout
                        raise BrokerConnectTimeout(unreachable_message(self.settings.nats)) from exc
        return self._nats

    async def jetstream(self) -> JetStreamContext:
        """A JetStream context on the admin connection."""
        return (await self.nats()).jetstream()

    async def tombstones(self) -> TombstoneStore:
        """Erasure tombstones and in-flight writer records (one per process: it counts this
        process's work per user), on the admin connection."""
        if self._tombstones is None:
            from services.common.stores.tombstones import TombstoneStore

            js = await self.jetstream()  # takes the lock itself
            async with self._lock:
                if self._tombstones is None:
                    nats = self.settings.nats
                    self._tombstones = TombstoneStore(js, Subjects(nats.subject_root), replicas=nats.replicas)
        return self._tombstones

    async def vector_index(self) -> VectorIndex:
        if self._vector_index is None:
            async with self._lock:
                if self._vector_index is None:
                    self._vector_index = await self._open_vector_index()
        return self._vector_index

    async def _open_vector_index(self) -> VectorIndex:
        from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES

        vector = self.settings.vector
        index: VectorIndex
        if vector.backend == "edge":
            index = self._edge_index()
        else:
            from qdrant_client import AsyncQdrantClient

            from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

            client = AsyncQdrantClient(
                url=vector.url, api_key=vector.api_key.get_secret_value() if vector.api_key else None
            )
            index = QdrantServerVectorIndex(client)
        dim = self.embedder().dim
        for collection in (EPISODES, PASSAGES, FACTS):
            await index.ensure_collection(collection, dim)
        return traced_vector_index(index, "qdrant")

    def claim_local_stores(self) -> None:
        """Take the lock on this process's local store data (Qdrant Edge's) now, without opening it:
        that data belongs to one process, and a second one on the same data dir should fail at its
        start with the holder's pid (DirInUse), not at its first search or message."""
        if self.settings.vector.backend == "edge" and self._vector_index is None:
            self._edge_index().claim()

    def _edge_index(self) -> EdgeVectorIndex:
        if self._edge is None:
            from services.common.stores.vector.edge import EdgeVectorIndex
            from services.common.stores.vector.edge_window_rows import WindowVectorsConfig

            vector = self.settings.vector
            self._edge = EdgeVectorIndex(
                vector.path or Path(self.settings.data_dir) / "qdrant-edge",
                optimize_threshold=vector.index_build_threshold,
                index_builds=vector.index_builds,
                dense_window=vector.dense_window,
                window_vectors=WindowVectorsConfig() if vector.window_vectors else None,
            )
        return self._edge

    async def episodes(self) -> EpisodeStore:
        """Episodes and passages, typed, on the shared vector index, embedder and keyword encoder."""
        from services.common.stores.episodes import EpisodeStore

        return EpisodeStore(await self.vector_index(), self.embedder(), self.keywords())

    async def facts(self) -> FactStore:
        """Facts behind the write policy, on the shared vector index, embedder and keyword encoder."""
        from services.common.stores.facts import FactStore

        return FactStore(await self.vector_index(), self.embedder(), self.keywords())

    async def graph(self) -> GraphRepository:
        if self._graph is None:
            async with self._lock:
                if self._graph is None:
                    self._graph = await self._open_graph()
        return self._graph

    async def _open_graph(self) -> GraphRepository:
        from services.common.stores.graph.repository import GraphRepository

        graph = self.settings.graph
        if graph.backend == "falkordb":
            from services.common.stores.graph.falkordb import FalkorDBExecutor

            executor: object = FalkorDBExecutor(
                host=graph.host,
                port=graph.port,
                password=graph.password.get_secret_value() if graph.password else None,
                graph_name=graph.graph_name,
            )
        else:
            from services.common.stores.graph.neo4j import Neo4jExecutor

            executor = Neo4jExecutor(
                uri=graph.neo4j_uri,
                user=graph.neo4j_user,
                password=graph.neo4j_password.get_secret_value() if graph.neo4j_password else "",
                database=graph.neo4j_database,
            )
        repository = GraphRepository(TracedCypherExecutor(executor, graph.backend))  # type: ignore[arg-type]
        await repository.executor.bootstrap()
        return repository

    def embedder(self) -> Embedder:
        if self._embedder is None:
            from services.common.gateways.embedding import build_embedder
            from services.common.gateways.embedding_wrappers import CachedQueryEmbedder, TracedEmbedder

            self._embedder = CachedQueryEmbedder(TracedEmbedder(build_embedder(self.settings.embedding)))
        return self._embedder

    def llm(self) -> LlmGateway:
        if self._llm is None:
            from services.common.gateways.llm import LlmConfig, LlmGateway

            self._llm = LlmGateway(LlmConfig.model_validate(self.settings.llm.model_dump()))
        return self._llm

    def keywords(self) -> KeywordEncoder:
        if self._keywords is None:
            from services.common.gateways.keywords import KeywordEncoder

            self._keywords = KeywordEncoder()
        return self._keywords

    async def close(self) -> None:
        if self._llm is not None:
            await self._llm.aclose()
            self._llm = None
        if self._tombstones is not None:
            await self._tombstones.close()
            self._tombstones = None
        if self._nats is not None:
            await close_nats(self._nats)
            self._nats = None
        if self._vector_index is not None:
            await self._vector_index.close()
            self._vector_index = None
        elif self._edge is not None:  # claimed, never opened: releases its lock
            await self._edge.close()
        self._edge = None
        if self._graph is not None:
            await self._graph.executor.close()
            self._graph = None


SettingsT = TypeVar("SettingsT", bound=TierMemSettings)


@dataclass
class ServiceContext(Generic[SettingsT]):
    """Everything a service's handlers receive."""

    settings: SettingsT
    subjects: Subjects
    publisher: EventPublisher
    dead_letters: DeadLetterWriter
    resources: Resources
    counters: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by
