"""VectorIndex on a Qdrant server through `qdrant_client.AsyncQdrantClient` (production adapter).

CI runs it against `AsyncQdrantClient(path=...)` local mode, which ignores payload indexes (the
calls are still made) and scans, so only semantics, not speed, are tested there.

Same schema and semantics as the Edge adapter (shared in adapter_support and fusion): named dense
vector "dense" (cosine), sparse vector "keywords" with the IDF modifier, tenant_id indexed with
`is_tenant=True`, keyword and epoch-seconds time indexes for the filter fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from services.common.domain.owner import Owner
from services.common.stores.vector import port
from services.common.stores.vector.adapter_support import (
    DEFAULT_TIME_FIELDS,
    DENSE_VECTOR,
    KEYWORD_INDEX_FIELDS,
    SPARSE_VECTOR,
    TENANT_FIELD,
    USER_FIELD,
    WORDLESS_FIELD,
    BranchHit,
    Conditions,
    as_written,
    check_collection_name,
    fuse_branches,
    owned_payload,
    owner_conditions,
    owner_keyword_hits,
    payload_update,
    point_id,
    point_ids,
    scored_records,
    search_weights,
    stamp_wordless,
    stored_keyword_vectors,
)
from services.common.stores.vector.fusion import FusionConfig, validate_weights
from services.common.stores.vector.owner_terms import (
    DEFAULT_SAMPLE,
    DEFAULT_TTL_S,
    OwnerTerms,
    OwnerTermsCache,
    checked_sample,
    owner_terms,
)

_FACET_LIMIT = 1_000_000


class QdrantServerVectorIndex:
    """`VectorIndex` on a Qdrant server. The client is owned by the caller until `close()`, which closes it.

    `owner_terms_ttl` bounds how stale an owner's cached keyword statistics (owner_terms.py) may get
    when another process writes their points; writes through this adapter drop them at once.
    `owner_terms_sample`: the owner's points read for them at most.
    """

    def __init__(
        self,
        client: AsyncQdrantClient,
        *,
        fusion: FusionConfig | None = None,
        time_fields: Sequence[str] = DEFAULT_TIME_FIELDS,
        owner_terms_ttl: float = DEFAULT_TTL_S,
        owner_terms_sample: int = DEFAULT_SAMPLE,
    ) -> None:
        self._client = client
        self._fusion = fusion or FusionConfig()
        self._time_fields = tuple(time_fields)
        self._owner_terms = OwnerTermsCache(ttl=owner_terms_ttl)
        self._owner_terms_sample = checked_sample(owner_terms_sample)

    # -- lifecycle ---------------------------------------------------------------------------

    async def ensure_collection(self, collection: str, dense_dim: int) -> None:
        """Create the collection if missing (tolerating a concurrent creator), check its vector
        config, and create any missing payload index."""
        check_collection_name(collection)
        if dense_dim < 1:
            raise ValueError(f"dense_dim must be >= 1, got {dense_dim}")
        if not await self._client.collection_exists(collection):
            try:
                await self._client.create_collection(
                    collection,
                    vectors_config={DENSE_VECTOR: models.VectorParams(size=dense_dim, distance=models.Distance.COSINE)},
                    sparse_vectors_config={SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                )
            except (UnexpectedResponse, ValueError):
                # Another service created it in the meantime (409 / local "already exists"): fine if it
                # exists now; otherwise the error was something else.
                if not await self._client.collection_exists(collection):
                    raise
        info = await self._client.get_collection(collection)
        self._check_config(collection, info, dense_dim)
        existing = set(info.payload_schema or {})
        wanted: list[tuple[str, models.PayloadSchemaType | models.KeywordIndexParams]] = [
            (TENANT_FIELD, models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True))
        ]
        wanted += [(name, models.PayloadSchemaType.KEYWORD) for name in KEYWORD_INDEX_FIELDS]
        wanted += [(name, models.PayloadSchemaType.FLOAT) for name in self._time_fields]
        wanted.append((WORDLESS_FIELD, models.PayloadSchemaType.BOOL))
        for name, schema in wanted:
            if name not in existing:
                await self._client.create_payload_index(collection, name, field_schema=schema, wait=True)
        self._owner_terms.drop(collection)

    @staticmethod
    def _check_config(collection: str, info: models.CollectionInfo, dense_dim: int) -> None:
        vectors = info.config.params.vectors
        dense = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
        if dense is None or dense.size != dense_dim or dense.distance != models.Distance.COSINE:
            raise ValueError(
                f"collection {collection!r} exists with vectors {vectors!r}; expected {DENSE_VECTOR!r}: "
                f"{dense_dim} dims, cosine"
            )
        sparse = (info.config.params.sparse_vectors or {}).get(SPARSE_VECTOR)
        if sparse is None or sparse.modifier != models.Modifier.IDF:
            raise ValueError(f"collection {collection!r} lacks sparse vector {SPARSE_VECTOR!r} with the IDF modifier")

    async def close(self) -> None:
        await self._client.close()

    async def _terms(self, collection: str, owner: Owner) -> OwnerTerms:
        """The owner's keyword statistics (owner_terms.py): their points with keywords (all but those
        stamped wordless), and the keyword vectors of the first `owner_terms_sample` in point-id order."""
        cached = self._owner_terms.lookup(collection, owner)
        if cached is not None:
            return cached
        conditions = owner_conditions(owner)
        conditions.excluded.append((WORDLESS_FIELD, True))
        worded = _server_filter(conditions)
        corpus_size = (await self._client.count(collection, count_filter=worded, exact=True)).count
        records, _ = await self._client.scroll(
            collection,
            scroll_filter=worded,
            limit=self._owner_terms_sample,
            with_payload=False,
            with_vectors=[SPARSE_VECTOR],
        )
        terms = owner_terms(corpus_size, stored_keyword_vectors(records, models.SparseVector).values())
        return self._owner_terms.keep(collection, owner, terms)

    # -- writes ------------------------------------------------------------------------------

    async def upsert(self, collection: str, owner: Owner, records: Sequence[port.VectorRecord]) -> None:
        points = [self._point(owner, record) for record in records]  # validate all before writing
        if not points:
            return
        owner_filter = _server_filter(owner_conditions(owner))
        # Point ids are global to the collection: refuse (loudly) to overwrite another owner's point.
        # The conditional upsert below also keeps a racing writer from doing so.
        foreign = models.Filter(
            must=[models.HasIdCondition(has_id=[point.id for point in points])], must_not=[owner_filter]
        )
        taken = (await self._client.count(collection, count_filter=foreign, exact=True)).count
        if taken:
            raise ValueError(f"{taken} of these point ids belong to another owner in {collection!r}; nothing written")
        await self._client.upsert(collection, points=points, update_filter=owner_filter, wait=True)
        self._owner_terms.drop(collection, owner)

    @staticmethod
    def _point(owner: Owner, record: port.VectorRecord) -> models.PointStruct:
        if len(record.sparse.indices) != len(record.sparse.values):
            raise ValueError(f"record {record.id}: sparse indices and values differ in length")
        dense = record.dense.tolist() if isinstance(record.dense, np.ndarray) else [float(x) for x in record.dense]
        vector: dict[str, Any] = {DENSE_VECTOR: dense}
        if record.sparse.indices:  # a point without keywords has no sparse vector: outside the IDF corpus
            vector[SPARSE_VECTOR] = models.SparseVector(
                indices=list(record.sparse.indices), values=list(record.sparse.values)
            )
        return models.PointStruct(
            id=point_id(record.id),
            vector=vector,
            payload=stamp_wordless(owned_payload(owner, record.payload), record.sparse),
        )

    async def set_payload(self, collection: str, owner: Owner, ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        update = payload_update(owner, payload)
        conditions = owner_conditions(owner)
        conditions.ids = point_ids(ids)
        if not update or conditions.matches_nothing:
            return
        await self._client.set_payload(collection, payload=update, points=_server_filter(conditions), wait=True)

    async def delete(self, collection: str, owner: Owner, search_filter: port.SearchFilter | None = None) -> int:
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return 0
        server_filter = _server_filter(conditions)
        matched = (await self._client.count(collection, count_filter=server_filter, exact=True)).count
        if matched:
            await self._client.delete(
                collection, points_selector=models.FilterSelector(filter=server_filter), wait=True
            )
            self._owner_terms.drop(collection, owner)
        return matched

    # -- reads -------------------------------------------------------------------------------

    async def hybrid_query(
        self,
        collection: str,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: port.SparseVector,
        weights: port.HybridWeights,
        limit: int,
        search_filter: port.SearchFilter | None = None,
    ) -> list[port.ScoredRecord]:
        validate_weights(weights)
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return []
        server_filter = _server_filter(conditions)
        candidates = self._fusion.candidates(limit)
        ran = search_weights(weights, dense)
        if ran is None:  # no query vector, and keywords weigh 0
            return []
        weights = ran
        run_dense = weights.dense > 0
        run_keyword = weights.keyword > 0
        query_vector = np.asarray(dense if run_dense and dense is not None else (), dtype=np.float32)
        requests: list[models.QueryRequest] = []
        if run_dense:
            requests.append(
                models.QueryRequest(
                    query=query_vector.tolist(),
                    using=DENSE_VECTOR,
                    filter=server_filter,
                    limit=candidates,
                    with_payload=True,
                    # Keyword vectors give each candidate its keyword score with the owner's IDF.
                    with_vector=[SPARSE_VECTOR] if run_keyword and sparse.indices else False,
                )
            )
        if run_keyword and sparse.indices:
            requests.append(
                models.QueryRequest(
                    query=models.SparseVector(indices=list(sparse.indices), values=list(sparse.values)),
                    using=SPARSE_VECTOR,
                    filter=server_filter,
                    limit=candidates,
                    with_payload=True,
                    # Stored dense vectors (normalised by the engine) give keyword-only hits their cosine.
                    with_vector=[DENSE_VECTOR, SPARSE_VECTOR] if run_dense else [SPARSE_VECTOR],
                )
            )
        responses, terms = await self._branches_and_terms(
            collection, owner, requests, bool(run_keyword and sparse.indices)
        )
        dense_points = next(responses).points if run_dense else None
        keyword_points = (next(responses).points if sparse.indices else []) if run_keyword else None
        # The server reads payloads with the branches (one round trip); the fusion takes ids and scores.
        payloads = {
            str(point.id): as_written(point.payload) for point in [*(keyword_points or ()), *(dense_points or ())]
        }
        dense_hits = None if dense_points is None else [_branch_hit(point) for point in dense_points]
        keyword_hits = None if keyword_points is None else [_branch_hit(point) for point in keyword_points]
        corpus_size = 1
        if keyword_points and terms is not None:
            stored = stored_keyword_vectors([*keyword_points, *(dense_points or ())], models.SparseVector)
            keyword_hits = owner_keyword_hits(sparse, dense_hits, keyword_hits or [], stored, terms)
            corpus_size = terms.corpus_size
        fused = fuse_branches(
            dense_hits,
            keyword_hits,
            query_vector,
            weights,
            corpus_size=corpus_size,
            limit=limit,
            config=self._fusion,
        )
        return scored_records(fused, payloads)

    async def _branches_and_terms(
        self, collection: str, owner: Owner, requests: list[models.QueryRequest], keyword: bool
    ) -> tuple[Iterator[models.QueryResponse], OwnerTerms | None]:
        """The branches' answers and, when the keyword branch runs, the owner's keyword statistics read
        alongside them: a cold owner costs one round trip, not two in a row."""
        if not requests:
            return iter([]), None
        batch = self._client.query_batch_points(collection, requests=requests)
        if not keyword:
            return iter(await batch), None
        responses, terms = await asyncio.gather(batch, self._terms(collection, owner))
        return iter(responses), terms

    async def prepare_hybrid(
        self,
        collection: str,
        owner: Owner,
        *,
        sparse: port.SparseVector,
        weights: port.HybridWeights,
        limit: int,
        search_filter: port.SearchFilter | None = None,
    ) -> port.PreparedHybrid:
        """Reads nothing ahead: the server answers both branches in one round trip, at finish."""
        return port.PreparedHybrid(collection, owner, sparse, weights, limit, search_filter)

    async def finish_hybrid(
        self, prepared: port.PreparedHybrid, dense: Sequence[float] | None
    ) -> list[port.ScoredRecord]:
        return await self.hybrid_query(
            prepared.collection,
            prepared.owner,
            dense=dense,
            sparse=prepared.sparse,
            weights=prepared.weights,
            limit=prepared.limit,
            search_filter=prepared.search_filter,
        )

    async def get(self, collection: str, owner: Owner, ids: Sequence[str]) -> list[port.StoredRecord]:
        conditions = owner_conditions(owner)
        conditions.ids = point_ids(ids)
        if conditions.matches_nothing:
            return []
        records, _ = await self._client.scroll(
            collection, scroll_filter=_server_filter(conditions), limit=len(conditions.ids), with_payload=True
        )
        found = {
            str(record.id): port.StoredRecord(id=str(record.id), payload=as_written(record.payload))
            for record in records
        }
        return [found[wanted] for wanted in conditions.ids if wanted in found]

    async def scroll(
        self,
        collection: str,
        owner: Owner,
        search_filter: port.SearchFilter | None = None,
        limit: int = 1000,
        *,
        start_id: str | None = None,
    ) -> list[port.StoredRecord]:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return []
        records, _ = await self._client.scroll(
            collection,
            scroll_filter=_server_filter(conditions),
            limit=limit,
            with_payload=True,
            offset=None if start_id is None else point_id(start_id),
        )
        return [port.StoredRecord(id=str(record.id), payload=as_written(record.payload)) for record in records]

    async def count(self, collection: str, owner: Owner, search_filter: port.SearchFilter | None = None) -> int:
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return 0
        return (await self._client.count(collection, count_filter=_server_filter(conditions), exact=True)).count

    async def list_owners(self, collection: str) -> list[Owner]:
        owners: list[Owner] = []
        tenants = await self._client.facet(collection, TENANT_FIELD, limit=_FACET_LIMIT, exact=True)
        for tenant_hit in tenants.hits:
            tenant = str(tenant_hit.value)
            tenant_filter = models.Filter(
                must=[models.FieldCondition(key=TENANT_FIELD, match=models.MatchValue(value=tenant))]
            )
            users = await self._client.facet(
                collection, USER_FIELD, facet_filter=tenant_filter, limit=_FACET_LIMIT, exact=True
            )
            owners.extend(Owner(tenant_id=tenant, user_id=str(user_hit.value)) for user_hit in users.hits)
        return sorted(owners, key=lambda owner: (owner.tenant_id, owner.user_id))


def _branch_hit(point: models.ScoredPoint) -> BranchHit:
    vectors = point.vector
    dense = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
    return BranchHit(
        id=str(point.id),
        score=point.score,
        dense_vector=cast("list[float]", dense) if isinstance(dense, list) else None,
    )


def _server_filter(conditions: Conditions) -> models.Filter:
    must: list[models.Condition] = [
        models.FieldCondition(key=key, match=models.MatchValue(value=value)) for key, value in conditions.equals
    ]
    must += [models.FieldCondition(key=key, match=models.MatchAny(any=values)) for key, values in conditions.any_of]
    must += [
        models.FieldCondition(key=key, range=models.Range(gte=lower, lt=upper))
        for key, lower, upper in conditions.ranges
    ]
    if conditions.ids is not None:
        must.append(models.HasIdCondition(has_id=list(conditions.ids)))
    must_not: list[models.Condition] = [
        models.FieldCondition(key=key, match=models.MatchValue(value=value)) for key, value in conditions.excluded
    ]
    return models.Filter(must=must, must_not=must_not or None)
