"""The `facts` collection behind the fact write policy (`domain/facts.py`): the one path by which
facts are written (semantic extraction, the recall API's `memory_save`, dedup's re-keying) and read.

This module is the only place that knows the point layout: every `Fact` field, plus what filters
and ranking need (subject key, channels, epoch times) and what recall records (recall counts). A
point that is not a valid fact is skipped with a log line wherever facts are read, never a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from services.common.domain.facts import (
    Fact,
    FactCandidate,
    FactWritePlan,
    normalise_attribute,
    normalise_subject,
    plan_fact_write,
)
from services.common.domain.owner import Owner
from services.common.domain.sensitive import sensitive
from services.common.gateways.embedder import Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.maintenance import (
    PointText,
    epoch_field,
    iso_epoch_field,
    owners_of,
    point_text,
    record_recalls,
)
from services.common.stores.vector.port import (
    FACTS,
    HybridWeights,
    PreparedHybrid,
    SearchFilter,
    SparseVector,
    VectorIndex,
    VectorRecord,
)

log = logging.getLogger(__name__)

_SCAN_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class StoredFact:
    """A fact as stored: the fact, the channels it was stated in (a fact said only in private
    never reaches a group) and what recall recorded (the pruner's never-recalled signal)."""

    fact: Fact
    channels: tuple[str, ...] = ()
    recall_count: int = 0
    last_recalled_at_ts: float | None = None

    @property
    def fact_id(self) -> str:
        return self.fact.fact_id

    @property
    def visible_channel(self) -> str:
        """A fact ever stated in a group stays visible to groups; otherwise it stays private."""
        return "group" if "group" in self.channels else "private"


@dataclass(frozen=True, slots=True)
class FactHit:
    stored: StoredFact
    score: float  # fused score in [0, 1]
    dense_score: float | None = None  # the fused score's parts, for recall's agreement gate
    keyword_score: float | None = None


@dataclass(frozen=True, slots=True)
class FactWriteResult:
    plan: FactWritePlan
    written: list[Fact]


@dataclass(frozen=True, slots=True)
class FactPage:
    """One page of the owner's facts in point-id order; `next_id` starts the next page (None: the end)."""

    facts: list[StoredFact]
    next_id: str | None


@dataclass(frozen=True, slots=True)
class FactLifetime:
    """Whether a fact point is a superseded version, and since when: what pruning decides on. Read
    field by field from any point, also one that is not a valid fact."""

    fact_id: str
    superseded: bool  # status superseded, an end of validity, or a successor
    ended_at_ts: float | None  # when it stopped being current: valid_to (epoch, else ISO), else its last update


# --------------------------------------------------------------------------------------------------
# The point layout (the only place that knows it)


def _fact_payload(fact: Fact, channels: Sequence[str]) -> dict[str, Any]:
    """The stored payload (without recall counts): every Fact field, plus what filters and ranking need."""
    payload: dict[str, Any] = fact.model_dump(mode="json")
    latest = max(p.occurred_at for p in fact.provenance)
    payload.update(
        {
            "kind": "fact",
            "subject_key": normalise_subject(fact.subject),
            "channel": sorted(set(channels)),
            "occurred_at": latest.isoformat(),
            "occurred_at_ts": latest.timestamp(),
            "valid_from_ts": fact.valid_from.timestamp(),
            "valid_to_ts": fact.valid_to.timestamp() if fact.valid_to else None,
            "episode_ids": sorted({p.episode_id for p in fact.provenance}),
            "session_ids": sorted({p.session_id for p in fact.provenance if p.session_id}),
            "metadata": fact.metadata_values,
        }
    )
    return payload


def _stored_payload(stored: StoredFact) -> dict[str, Any]:
    payload = _fact_payload(stored.fact, stored.channels)
    # Recall counts appear once recall recorded something (points never recalled carry none).
    if stored.recall_count or stored.last_recalled_at_ts is not None:
        payload.update(recall_count=stored.recall_count, last_recalled_at_ts=stored.last_recalled_at_ts)
    return payload


def _fact_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The `Fact` fields of a payload (store keys such as `kind` or `recall_count` left out)."""
    return {name: payload[name] for name in Fact.model_fields if name in payload}


def read_stored_fact(point_id: str, payload: Mapping[str, Any]) -> StoredFact | None:
    """The one payload → fact reader: the stored fact, or None (with a warning) when the point is
    not a valid fact."""
    try:
        fact = Fact.model_validate(_fact_fields(payload))
    except ValidationError as exc:
        # The validation error quotes the payload's values (memory text).
        log.warning("skipping fact point %s with an invalid payload: %s", point_id, sensitive(exc))
        return None
    channel = payload.get("channel")
    channels = (channel,) if isinstance(channel, str) else tuple(str(c) for c in channel or ())
    count = payload.get("recall_count")
    last = payload.get("last_recalled_at_ts")
    return StoredFact(
        fact=fact,
        channels=channels,
        recall_count=int(count) if isinstance(count, int | float) else 0,
        last_recalled_at_ts=float(last) if isinstance(last, int | float) else None,
    )


def read_fact_lifetime(point_id: str, payload: Mapping[str, Any]) -> FactLifetime:
    """Whether a fact point is a superseded version, and since when, whatever else it holds."""
    superseded = (
        payload.get("status") == "superseded"
        or payload.get("valid_to") is not None
        or payload.get("valid_to_ts") is not None
        or payload.get("superseded_by") is not None
    )
    ended = (
        epoch_field(payload, "valid_to_ts")
        or iso_epoch_field(payload, "valid_to")
        or iso_epoch_field(payload, "updated_at")
    )
    return FactLifetime(fact_id=point_id, superseded=superseded, ended_at_ts=ended)


# --------------------------------------------------------------------------------------------------
# The store


class FactStore:
    """Facts of one vector index, written only through the write policy; every call is scoped to
    an `Owner`."""

    def __init__(self, index: VectorIndex, embedder: Embedder, keywords: KeywordEncoder) -> None:
        self._index = index
        self._embedder = embedder
        self._keywords = keywords

    async def existing(self, owner: Owner, subject: str) -> list[StoredFact]:
        """The stored facts on the subject (under any of its spellings: the subject key)."""
        return await self.scroll(
            owner, SearchFilter(match={"subject_key": normalise_subject(subject)}), limit=_SCAN_LIMIT
        )

    async def write(
        self,
        owner: Owner,
        candidate: FactCandidate,
        *,
        channel: str,
        now: datetime,
        confirm_threshold: int = 2,
    ) -> FactWriteResult:
        """Plan against the stored facts on the same subject, then store the plan's upserts, keeping
        their channels and recall counts."""
        if (candidate.tenant_id, candidate.user_id) != (owner.tenant_id, owner.user_id):
            raise ValueError(
                f"candidate of {candidate.tenant_id}/{candidate.user_id} written as {owner.tenant_id}/{owner.user_id}"
            )
        stored = {s.fact_id: s for s in await self.existing(owner, candidate.subject)}
        plan = plan_fact_write(
            candidate, [s.fact for s in stored.values()], now=now, confirm_threshold=confirm_threshold
        )
        if plan.is_noop:
            return FactWriteResult(plan=plan, written=[])
        texts = [fact.text for fact in plan.upserts]
        vectors = await self._embedder.embed_passages(texts)
        sparse: list[SparseVector] = await asyncio.to_thread(self._keywords.encode_documents, texts)
        records = []
        for fact, dense, keyword_vector in zip(plan.upserts, vectors, sparse, strict=True):
            previous = stored.get(fact.fact_id) or StoredFact(fact=fact)
            channels = list(previous.channels)
            if fact.fact_id == plan.fact_id:
                channels.append(channel)
            # A rewrite must not reset what recall recorded (the pruner's never-recalled signal).
            updated = StoredFact(
                fact=fact,
                channels=tuple(channels or [channel]),
                recall_count=previous.recall_count,
                last_recalled_at_ts=previous.last_recalled_at_ts,
            )
            records.append(
                VectorRecord(id=fact.fact_id, dense=dense, sparse=keyword_vector, payload=_stored_payload(updated))
            )
        await self._index.upsert(FACTS, owner, records)
        return FactWriteResult(plan=plan, written=list(plan.upserts))

    async def rekey_subject(
        self,
        owner: Owner,
        *,
        from_subjects: Sequence[str],
        to_subject: str,
        now: datetime,
        confirm_threshold: int = 2,
    ) -> int:
        """Move the facts about merged-away entity names onto the surviving name. Every stored
        observation is replayed through the write policy (oldest first), so supersession and
        confirmation come out as if the canonical name had been used all along; the old points are
        deleted last, so a crash midway is finished by running it again. Returns the facts moved."""
        target_key = normalise_subject(to_subject)
        moved = 0
        for subject in dict.fromkeys(normalise_subject(name) for name in from_subjects):
            if subject == target_key:
                continue
            records = await self._index.scroll(
                FACTS, owner, SearchFilter(match={"subject_key": subject}), limit=_SCAN_LIMIT
            )
            readable = {r.id: s for r in records if (s := read_stored_fact(r.id, r.payload)) is not None}
            observations = sorted(
                ((observation, s) for s in readable.values() for observation in s.fact.provenance),
                key=lambda item: (item[0].occurred_at, item[1].fact_id, item[0].episode_id),
            )
            for observation, s in observations:
                fact = s.fact
                candidate = FactCandidate(
                    tenant_id=owner.tenant_id,
                    user_id=owner.user_id,
                    scope=fact.scope,
                    subject=to_subject,
                    attribute=fact.attribute,
                    value=fact.value,
                    text=fact.text,
                    language=fact.language,
                    volatility=fact.volatility,
                    provenance=observation,
                )
                await self.write(
                    owner, candidate, channel=s.visible_channel, now=now, confirm_threshold=confirm_threshold
                )
            # Only what was replayed goes; an unreadable point stays where it is, for someone to look at.
            if readable:
                await self._index.delete(FACTS, owner, SearchFilter(ids=list(readable)))
                moved += len(readable)
        return moved

    async def get(self, owner: Owner, fact_ids: Sequence[str]) -> list[StoredFact]:
        """The owner's facts among `fact_ids` (other owners' ids read as absent)."""
        if not fact_ids:
            return []
        records = await self._index.get(FACTS, owner, fact_ids)
        return [s for r in records if (s := read_stored_fact(r.id, r.payload)) is not None]

    async def scroll(
        self, owner: Owner, search_filter: SearchFilter | None = None, limit: int = 1000
    ) -> list[StoredFact]:
        """The owner's facts matching the filter (status, scopes, channels, ids...), up to `limit`."""
        records = await self._index.scroll(FACTS, owner, search_filter, limit)
        return [s for r in records if (s := read_stored_fact(r.id, r.payload)) is not None]

    async def page(
        self, owner: Owner, search_filter: SearchFilter | None = None, *, limit: int, start_id: str | None = None
    ) -> FactPage:
        """Up to `limit` of the owner's facts in point-id order from `start_id` (inclusive): a stable
        order to page through while facts are written (see `EpisodeStore.page`)."""
        records = await self._index.scroll(FACTS, owner, search_filter, limit + 1, start_id=start_id)
        next_id = records[limit].id if len(records) > limit else None
        facts = [s for r in records[:limit] if (s := read_stored_fact(r.id, r.payload)) is not None]
        return FactPage(facts=facts, next_id=next_id)

    async def history(self, owner: Owner, fact_id: str) -> list[StoredFact]:
        """Every version of the fact's (scope, subject, attribute), oldest first by `valid_from`:
        the values it had, each with its validity, successor and provenance. Empty when the owner
        has no such fact."""
        found = await self.get(owner, [fact_id])
        if not found:
            return []
        fact = found[0].fact
        attribute = normalise_attribute(fact.attribute)
        versions = [
            stored
            for stored in await self.existing(owner, fact.subject)
            if stored.fact.scope == fact.scope and normalise_attribute(stored.fact.attribute) == attribute
        ]
        return sorted(versions, key=lambda s: (s.fact.valid_from, s.fact.created_at, s.fact_id))

    async def correct(
        self,
        owner: Owner,
        fact_id: str,
        correction: FactCandidate,
        *,
        channel: str,
        now: datetime,
        confirm_threshold: int = 2,
    ) -> FactWriteResult | None:
        """A user's correction of a stored fact, through the write policy: the corrected value is
        written as a new observation, and the old version is superseded (valid_to, superseded_by),
        never overwritten, also where the policy alone would keep both (a multi-valued attribute).
        None when the owner has no such fact."""
        found = await self.get(owner, [fact_id])
        if not found:
            return None
        result = await self.write(owner, correction, channel=channel, now=now, confirm_threshold=confirm_threshold)
        new_id = result.plan.fact_id
        if new_id is None or new_id == fact_id:
            return result
        old = (await self.get(owner, [fact_id]) or found)[0]
        if old.fact.is_current:
            ended = old.fact.model_copy(
                update={"valid_to": now, "superseded_by": new_id, "status": "superseded", "updated_at": now}
            )
            await self.rewrite(owner, StoredFact(ended, old.channels, old.recall_count, old.last_recalled_at_ts))
            result = FactWriteResult(plan=result.plan, written=[*result.written, ended])
        return result

    async def search(
        self,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> list[FactHit]:
        """Hybrid search over the owner's facts, best first."""
        return await self.finish_search(PreparedHybrid(FACTS, owner, sparse, weights, limit, search_filter), dense)

    async def prepare_search(
        self,
        owner: Owner,
        *,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> PreparedHybrid:
        """The first step of `search`, run before the query vector exists (VectorIndex.prepare_hybrid)."""
        return await self._index.prepare_hybrid(
            FACTS, owner, sparse=sparse, weights=weights, limit=limit, search_filter=search_filter
        )

    async def finish_search(self, prepared: PreparedHybrid, dense: Sequence[float] | None) -> list[FactHit]:
        hits = await self._index.finish_hybrid(prepared, dense)
        return [
            FactHit(s, h.score, h.dense_score, h.keyword_score)
            for h in hits
            if (s := read_stored_fact(h.id, h.payload)) is not None
        ]

    async def rewrite(self, owner: Owner, stored: StoredFact) -> None:
        """Replace a stored fact's payload in place, vectors untouched: for changes that keep the
        text (provenance dropped by an erasure). Anything else goes through `write`."""
        await self._index.set_payload(FACTS, owner, [stored.fact_id], _stored_payload(stored))

    async def delete(self, owner: Owner, fact_ids: Sequence[str]) -> int:
        if not fact_ids:
            return 0
        return await self._index.delete(FACTS, owner, SearchFilter(ids=list(fact_ids)))

    async def count(self, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        """Fact points matching the filter, readable or not."""
        return await self._index.count(FACTS, owner, search_filter)

    # ---------------------------------------------------------------------------------------------
    # Maintenance: recall counts, pruning and erasure reach every point, readable or not

    async def record_recalls(self, owner: Owner, recalls: Mapping[str, tuple[int, float]]) -> int:
        """Add to the facts' recall counts: per fact id, (times recalled, latest epoch time). Ids the
        owner does not have are skipped; returns the facts updated."""
        return await record_recalls(self._index, FACTS, owner, recalls)

    async def owners(self) -> set[Owner]:
        """Every owner with a fact point."""
        return await owners_of(self._index, (FACTS,))

    async def scroll_lifetimes(
        self, owner: Owner, search_filter: SearchFilter | None, limit: int
    ) -> list[FactLifetime]:
        """Whether each of the owner's fact points matching the filter is superseded, and since when."""
        records = await self._index.scroll(FACTS, owner, search_filter, limit)
        return [read_fact_lifetime(r.id, r.payload) for r in records]

    async def fact_texts(self, owner: Owner, limit: int) -> list[PointText]:
        """The searchable text of every fact point of the owner (up to `limit`)."""
        return [point_text(r.id, r.payload) for r in await self._index.scroll(FACTS, owner, None, limit)]

    async def delete_citing(self, owner: Owner, episode_id: str) -> int:
        """Delete every fact point whose provenance still cites the episode, readable or not (an
        erased episode's facts that could not be rewritten without it)."""
        return await self._index.delete(FACTS, owner, SearchFilter(match={"episode_ids": episode_id}))

    async def delete_owner(self, owner: Owner) -> int:
        """Every fact point of the owner (an erased user)."""
        return await self._index.delete(FACTS, owner)
