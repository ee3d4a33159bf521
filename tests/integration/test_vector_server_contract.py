"""The vector contract (tests/integration/test_vector_contract.py) against a real Qdrant server, when
one is reachable: set TIERMEM_TEST_QDRANT_URL (and TIERMEM_TEST_QDRANT_API_KEY if it wants one), e.g.
the `qdrant` service of infra/compose.yaml:

    docker compose -f infra/compose.yaml up -d qdrant
    TIERMEM_TEST_QDRANT_URL=http://127.0.0.1:6333 TIERMEM_TEST_QDRANT_API_KEY=$QDRANT_API_KEY \\
      .venv/bin/pytest tests/integration/test_vector_server_contract.py

The same test functions run here on fixtures of this module: a server is shared, so every test works
in collections of its own (a unique name prefix), populated for it and dropped after it."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pytest
import pytest_asyncio
from qdrant_client import AsyncQdrantClient

from services.common.domain.owner import Owner
from services.common.stores.vector.port import (
    EPISODES,
    HybridWeights,
    PreparedHybrid,
    ScoredRecord,
    SearchFilter,
    SparseVector,
    StoredRecord,
    VectorIndex,
    VectorRecord,
)
from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex
from tests.integration import test_vector_contract as contract
from tests.integration.test_vector_contract import (  # collected again here, on this module's fixtures
    DIM,
    Corpus,
    corpus,
    test_adapter_stamps_the_owner_and_rejects_a_disagreeing_one,
    test_delete_by_filter_removes_exactly_the_matches,
    test_delete_by_filter_returns_the_count_and_removes,
    test_delete_without_filter_removes_all_of_the_owner_only,
    test_ensure_collection_is_idempotent_and_checks_the_dimension,
    test_invalid_ids_are_rejected,
    test_reopening_the_same_directory_keeps_every_point,
    test_set_payload_updates_only_the_owners_points,
    test_upsert_is_idempotent_and_replaces,
    test_upsert_never_takes_over_another_owners_point,
)

QDRANT_URL = os.environ.get("TIERMEM_TEST_QDRANT_URL")
QDRANT_API_KEY = os.environ.get("TIERMEM_TEST_QDRANT_API_KEY") or None

pytestmark = [
    *contract.pytestmark,
    pytest.mark.skipif(not QDRANT_URL, reason="runs only when TIERMEM_TEST_QDRANT_URL names a Qdrant server"),
]

__all__ = [
    "corpus",
    "test_adapter_stamps_the_owner_and_rejects_a_disagreeing_one",
    "test_delete_by_filter_removes_exactly_the_matches",
    "test_delete_by_filter_returns_the_count_and_removes",
    "test_delete_without_filter_removes_all_of_the_owner_only",
    "test_ensure_collection_is_idempotent_and_checks_the_dimension",
    "test_invalid_ids_are_rejected",
    "test_reopening_the_same_directory_keeps_every_point",
    "test_set_payload_updates_only_the_owners_points",
    "test_upsert_is_idempotent_and_replaces",
    "test_upsert_never_takes_over_another_owners_point",
]


def server_client() -> AsyncQdrantClient:
    return AsyncQdrantClient(url=QDRANT_URL, api_key=QDRANT_API_KEY)


class PrefixedVectorIndex:
    """The server adapter with every collection name prefixed: one test's collections on a shared server."""

    def __init__(self, inner: QdrantServerVectorIndex, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    def _name(self, collection: str) -> str:
        return f"{self._prefix}{collection}"

    async def ensure_collection(self, collection: str, dense_dim: int) -> None:
        await self._inner.ensure_collection(self._name(collection), dense_dim)

    async def upsert(self, collection: str, owner: Owner, records: Sequence[VectorRecord]) -> None:
        await self._inner.upsert(self._name(collection), owner, records)

    async def hybrid_query(
        self,
        collection: str,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> list[ScoredRecord]:
        return await self._inner.hybrid_query(
            self._name(collection),
            owner,
            dense=dense,
            sparse=sparse,
            weights=weights,
            limit=limit,
            search_filter=search_filter,
        )

    async def prepare_hybrid(
        self,
        collection: str,
        owner: Owner,
        *,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> PreparedHybrid:
        return await self._inner.prepare_hybrid(
            self._name(collection), owner, sparse=sparse, weights=weights, limit=limit, search_filter=search_filter
        )

    async def finish_hybrid(self, prepared: PreparedHybrid, dense: Sequence[float] | None) -> list[ScoredRecord]:
        return await self._inner.finish_hybrid(prepared, dense)

    async def get(self, collection: str, owner: Owner, ids: Sequence[str]) -> list[StoredRecord]:
        return await self._inner.get(self._name(collection), owner, ids)

    async def scroll(
        self,
        collection: str,
        owner: Owner,
        search_filter: SearchFilter | None = None,
        limit: int = 1000,
        *,
        start_id: str | None = None,
    ) -> list[StoredRecord]:
        return await self._inner.scroll(self._name(collection), owner, search_filter, limit, start_id=start_id)

    async def set_payload(self, collection: str, owner: Owner, ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        await self._inner.set_payload(self._name(collection), owner, ids, payload)

    async def delete(self, collection: str, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        return await self._inner.delete(self._name(collection), owner, search_filter)

    async def count(self, collection: str, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        return await self._inner.count(self._name(collection), owner, search_filter)

    async def list_owners(self, collection: str) -> list[Owner]:
        return await self._inner.list_owners(self._name(collection))

    async def close(self) -> None:
        await self._inner.close()


def _opener(prefix: str) -> Callable[[], VectorIndex]:
    """Opens the prefixed index on a new client each time (a reopen is a new connection)."""
    return lambda: PrefixedVectorIndex(QdrantServerVectorIndex(server_client()), prefix)


async def _drop(prefix: str) -> None:
    client = server_client()
    try:
        for collection in (await client.get_collections()).collections:
            if collection.name.startswith(prefix):
                await client.delete_collection(collection.name)
    finally:
        await client.close()


@pytest.fixture
async def index_factory(corpus: Corpus) -> AsyncIterator[Callable[[], VectorIndex]]:
    """This test's populated collections (the contract module copies a populated data dir instead)."""
    prefix = f"t{secrets.token_hex(4)}_"
    opener = _opener(prefix)
    populating = opener()
    try:
        await contract._populate(populating, corpus)
    finally:
        await populating.close()
    try:
        yield opener
    finally:
        await _drop(prefix)


@pytest.fixture
async def index(index_factory: Callable[[], VectorIndex]) -> AsyncIterator[VectorIndex]:
    opened = index_factory()
    await opened.ensure_collection(EPISODES, DIM)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.mark.asyncio(loop_scope="class")
class TestReads(contract.TestReads):
    """The contract's read-only tests on one populated set of collections for the class."""

    @pytest_asyncio.fixture(scope="class", loop_scope="class")
    async def index(self, corpus: Corpus) -> AsyncIterator[VectorIndex]:  # type: ignore[override]
        prefix = f"r{secrets.token_hex(4)}_"
        opened = _opener(prefix)()
        try:
            await contract._populate(opened, corpus)
            yield opened
        finally:
            await opened.close()
            await _drop(prefix)
