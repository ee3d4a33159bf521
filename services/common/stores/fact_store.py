"""Applying the fact write policy to the `facts` collection. The one path for facts, used by the
semantic-extractor and by the recall API's explicit `memory_save`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.common.domain.facts import Fact, FactCandidate, FactWritePlan, normalise_subject, plan_fact_write
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.vector.port import FACTS, SearchFilter, VectorIndex, VectorRecord


@dataclass(frozen=True, slots=True)
class FactWriteResult:
    plan: FactWritePlan
    written: list[Fact]


def fact_payload(fact: Fact, channels: Sequence[str]) -> dict[str, Any]:
    """The stored payload: every Fact field, plus what filters and ranking need."""
    payload: dict[str, Any] = fact.model_dump(mode="json")
    latest = max(p.occurred_at for p in fact.provenance)
    payload.update(
        {
            "kind": "fact",
            "subject_key": normalise_subject(fact.subject),
            # Which channels the fact was stated in: a fact said only in private never reaches a group.
            "channel": sorted(set(channels)),
            "occurred_at": latest.isoformat(),
            "occurred_at_ts": latest.timestamp(),
            "valid_from_ts": fact.valid_from.timestamp(),
            "valid_to_ts": fact.valid_to.timestamp() if fact.valid_to else None,
            "episode_ids": sorted({p.episode_id for p in fact.provenance}),
            "session_ids": sorted({p.session_id for p in fact.provenance if p.session_id}),
        }
    )
    return payload


def fact_from_payload(payload: dict[str, Any]) -> Fact:
    return Fact.model_validate({name: payload[name] for name in Fact.model_fields if name in payload})


RECALL_FIELDS = ("recall_count", "last_recalled_at_ts")


async def existing_facts(index: VectorIndex, owner: Owner, subject: str) -> list[tuple[Fact, dict[str, Any]]]:
    """Stored facts on the subject, each with its stored payload (channels, recall counts)."""
    records = await index.scroll(
        FACTS, owner, SearchFilter(match={"subject_key": normalise_subject(subject)}), limit=10_000
    )
    return [(fact_from_payload(r.payload), r.payload) for r in records]


async def write_fact(
    index: VectorIndex,
    embedder: Embedder,
    keywords: KeywordEncoder,
    candidate: FactCandidate,
    *,
    channel: str,
    now: datetime,
    confirm_threshold: int = 2,
) -> FactWriteResult:
    """Plan against the stored facts on the same subject, then store the plan's upserts."""
    owner = Owner(candidate.tenant_id, candidate.user_id)
    stored = await existing_facts(index, owner, candidate.subject)
    payload_by_id = {fact.fact_id: payload for fact, payload in stored}
    plan = plan_fact_write(candidate, [fact for fact, _ in stored], now=now, confirm_threshold=confirm_threshold)
    if plan.is_noop:
        return FactWriteResult(plan=plan, written=[])
    texts = [fact.text for fact in plan.upserts]
    vectors = await embedder.embed_passages(texts)
    sparse = await asyncio.to_thread(keywords.encode_documents, texts)
    records = []
    for fact, dense, keyword_vector in zip(plan.upserts, vectors, sparse, strict=True):
        previous = payload_by_id.get(fact.fact_id, {})
        channels = list(previous.get("channel") or [])
        if fact.fact_id == plan.fact_id:
            channels.append(channel)
        payload = fact_payload(fact, channels or [channel])
        # A rewrite must not reset what recall recorded (the pruner's never-recalled signal).
        payload.update({name: previous[name] for name in RECALL_FIELDS if name in previous})
        records.append(VectorRecord(id=fact.fact_id, dense=dense, sparse=keyword_vector, payload=payload))
    await index.upsert(FACTS, owner, records)
    return FactWriteResult(plan=plan, written=list(plan.upserts))


def _visible_channel(channels: Sequence[str]) -> str:
    # A fact ever stated in a group stays visible to groups; otherwise it stays private.
    return "group" if "group" in channels else "private"


async def rekey_subject(
    index: VectorIndex,
    embedder: Embedder,
    keywords: KeywordEncoder,
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
    for subject_key in dict.fromkeys(normalise_subject(name) for name in from_subjects):
        if subject_key == target_key:
            continue
        records = await index.scroll(FACTS, owner, SearchFilter(match={"subject_key": subject_key}), limit=10_000)
        observations = sorted(
            (
                (observation, fact, list(record.payload.get("channel") or []))
                for record in records
                for fact in [fact_from_payload(record.payload)]
                for observation in fact.provenance
            ),
            key=lambda item: (item[0].occurred_at, item[1].fact_id, item[0].episode_id),
        )
        for observation, fact, channels in observations:
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
            await write_fact(
                index,
                embedder,
                keywords,
                candidate,
                channel=_visible_channel(channels),
                now=now,
                confirm_threshold=confirm_threshold,
            )
        if records:
            await index.delete(FACTS, owner, SearchFilter(ids=[record.id for record in records]))
            moved += len(records)
    return moved
