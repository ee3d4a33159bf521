"""Memory you can list, read with its history, correct and forget, for one owner at a time.

Listing pages in point-id order (episodes first, then facts, for `kind=all`), so the cursor is stable
while memories are written: a memory that exists from the first page to the last is returned exactly
once. Forgetting publishes the pruner's existing erasure (`ErasureRequested` for one fact or one
episode); corrections go through the write policy (`FactStore.correct`)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from contracts import ErasureTarget
from services.common.domain.facts import FactCandidate, FactProvenance
from services.common.domain.ids import deterministic_uuid, is_uuid
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.stores.episodes import Episode
from services.common.stores.facts import StoredFact
from services.common.stores.payload_fields import metadata_match
from services.common.stores.vector.port import SearchFilter
from services.recall_api.errors import FactRejected
from services.recall_api.write_schemas import (
    CorrectionRequest,
    CorrectionResponse,
    FactHistoryResponse,
    FactObservation,
    FactVersion,
    ListKind,
    MemoryListResponse,
    MemoryRecord,
)

PageKind = Literal["episode", "fact"]
_CURSOR_PREFIX = {"episode": "e", "fact": "f"}
_CURSOR_KIND: dict[str, PageKind] = {"e": "episode", "f": "fact"}


class ListingRefused(ValueError):
    """A listing that cannot be answered as asked; `field` names the parameter at fault."""

    field = "cursor"


class InvalidCursor(ListingRefused):
    """The cursor was not produced by this API (or was altered)."""


class StatusOfEpisodes(ListingRefused):
    """A status filter was asked of episodes, which have no status (only facts are tentative,
    confirmed or superseded)."""

    field = "status"


@dataclass(frozen=True, slots=True)
class Cursor:
    kind: PageKind
    start_id: str | None  # None: the first point of that kind


def encode_cursor(cursor: Cursor) -> str:
    text = f"{_CURSOR_PREFIX[cursor.kind]}:{cursor.start_id or ''}"
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def decode_cursor(value: str) -> Cursor:
    try:
        text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor("cursor is not one this API returned") from exc
    prefix, _, start_id = text.partition(":")
    if prefix not in _CURSOR_KIND or (start_id and not is_uuid(start_id)):
        raise InvalidCursor("cursor is not one this API returned")
    return Cursor(kind=_CURSOR_KIND[prefix], start_id=start_id or None)


@dataclass(frozen=True, slots=True)
class ListFilters:
    scope: str | None = None
    channel: str | None = None
    status: str | None = None
    after: datetime | None = None
    before: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def search_filter(self, kind: PageKind) -> SearchFilter:
        match: dict[str, str] = metadata_match(self.metadata)
        if kind == "fact" and self.status is not None:
            match["status"] = self.status
        return SearchFilter(
            scopes=None if self.scope is None else [self.scope],
            channels=None if self.channel is None else [self.channel],
            after=self.after,
            before=self.before,
            match=match,
        )


def episode_record(episode: Episode) -> MemoryRecord:
    return MemoryRecord(
        id=episode.episode_id,
        kind="episode",
        text=episode.abstract or episode.summary,
        occurred_at=episode.occurred_at.isoformat(),
        session_id=episode.session_id,
        scope=episode.scope,
        channels=[episode.channel],
        metadata={key: [value] for key, value in sorted(episode.metadata.items())},
    )


def fact_record(stored: StoredFact) -> MemoryRecord:
    fact = stored.fact
    latest = max(fact.provenance, key=lambda p: p.occurred_at)
    return MemoryRecord(
        id=fact.fact_id,
        kind="fact",
        text=fact.text,
        occurred_at=latest.occurred_at.isoformat(),
        session_id=latest.session_id,
        scope=fact.scope,
        channels=sorted(stored.channels),
        status=fact.status,
        subject=fact.subject,
        attribute=fact.attribute,
        value=fact.value,
        valid_from=fact.valid_from.isoformat(),
        valid_to=fact.valid_to.isoformat() if fact.valid_to else None,
        superseded_by=fact.superseded_by,
        metadata=fact.metadata_values,
    )


def fact_version(stored: StoredFact) -> FactVersion:
    fact = stored.fact
    observations = [
        FactObservation(
            source=p.source,
            user_stated=p.source == "api" or p.user_correction,
            episode_id=p.episode_id,
            session_id=p.session_id,
            occurred_at=p.occurred_at.isoformat(),
        )
        for p in fact.provenance
    ]
    latest = max(fact.provenance, key=lambda p: p.occurred_at)
    return FactVersion(
        id=fact.fact_id,
        text=fact.text,
        subject=fact.subject,
        attribute=fact.attribute,
        value=fact.value,
        scope=fact.scope,
        status=fact.status,
        volatility=fact.volatility,
        evidence_count=fact.evidence_count,
        valid_from=fact.valid_from.isoformat(),
        valid_to=fact.valid_to.isoformat() if fact.valid_to else None,
        superseded_by=fact.superseded_by,
        user_stated=latest.source == "api" or latest.user_correction,
        channels=sorted(stored.channels),
        provenance=observations,
    )


def history_response(fact_id: str, versions: list[StoredFact]) -> FactHistoryResponse:
    return FactHistoryResponse(fact_id=fact_id, versions=[fact_version(v) for v in versions])


def listed_kinds(kind: ListKind, filters: ListFilters) -> ListKind:
    """What a listing returns. A status belongs to facts alone, so a status filter lists facts only:
    an episode can neither match nor fail it, and listing episodes under it would answer a question
    the caller did not ask. Asking episodes for a status is refused."""
    if filters.status is None:
        return kind
    if kind == "episode":
        raise StatusOfEpisodes(
            f"status={filters.status} applies to facts only (episodes have no status): use kind=fact or kind=all"
        )
    return "fact"


def first_cursor(kind: ListKind) -> Cursor:
    return Cursor(kind="fact" if kind == "fact" else "episode", start_id=None)


def check_cursor_kind(kind: ListKind, cursor: Cursor) -> None:
    if kind != "all" and cursor.kind != kind:
        raise InvalidCursor(f"cursor belongs to a listing of {cursor.kind}s, not {kind}s")


def correction_candidate(
    owner: Owner, old: StoredFact, request: CorrectionRequest, now: datetime, idempotency_key: str | None
) -> FactCandidate:
    """The corrected value as a user-stated observation (source 'api') of the same scope, subject
    and attribute; the same idempotency key is the same observation."""
    key = idempotency_key or f"{request.value}\x1f{now.isoformat()}"
    observation = deterministic_uuid("correction", owner.tenant_id, owner.user_id, old.fact_id, key)
    fact = old.fact
    return FactCandidate(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        scope=fact.scope,
        subject=fact.subject,
        attribute=fact.attribute,
        value=request.value.strip(),
        text=request.text.strip(),
        language=fact.language,
        volatility=fact.volatility,
        provenance=FactProvenance(episode_id=str(observation), occurred_at=now, source="api", user_correction=True),
    )


def correction_response(old_id: str, new_id: str | None, outcome: str, status: str | None) -> CorrectionResponse:
    if new_id is None:
        raise FactRejected("the correction was rejected by the write policy")
    return CorrectionResponse(fact_id=new_id, superseded=old_id, outcome=outcome, status=status)  # type: ignore[arg-type]


def erasure_target(kind: PageKind, item_id: str) -> ErasureTarget:
    return ErasureTarget(kind=kind, item_id=item_id)


def utc_now() -> datetime:
    return datetime.now(UTC)


class MemoryAdmin:
    """List, read, correct and forget, over the typed stores; every call takes the owner."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    async def list(
        self, owner: Owner, kind: ListKind, *, limit: int, cursor: str | None, filters: ListFilters
    ) -> MemoryListResponse:
        """One page; raises InvalidCursor for a cursor this API did not return (or one of another
        listing) and StatusOfEpisodes for a status filter on episodes."""
        kind = listed_kinds(kind, filters)
        position = decode_cursor(cursor) if cursor else first_cursor(kind)
        check_cursor_kind(kind, position)
        items: list[MemoryRecord] = []
        next_cursor: Cursor | None = position
        while next_cursor is not None and len(items) < limit:
            wanted = limit - len(items)
            if next_cursor.kind == "episode":
                episodes = await self.resources.episodes()
                page = await episodes.page(
                    owner, filters.search_filter("episode"), limit=wanted, start_id=next_cursor.start_id
                )
                items += [episode_record(e) for e in page.episodes]
                following = Cursor("episode", page.next_id) if page.next_id else None
                if following is None and kind == "all":
                    following = Cursor("fact", None)
            else:
                facts = await self.resources.facts()
                fact_page = await facts.page(
                    owner, filters.search_filter("fact"), limit=wanted, start_id=next_cursor.start_id
                )
                items += [fact_record(f) for f in fact_page.facts]
                following = Cursor("fact", fact_page.next_id) if fact_page.next_id else None
            next_cursor = following
        return MemoryListResponse(items=items, next_cursor=None if next_cursor is None else encode_cursor(next_cursor))

    async def fact(self, owner: Owner, fact_id: str) -> StoredFact | None:
        if not is_uuid(fact_id):
            return None
        found = await (await self.resources.facts()).get(owner, [fact_id])
        return found[0] if found else None

    async def history(self, owner: Owner, fact_id: str) -> FactHistoryResponse | None:
        if not is_uuid(fact_id):
            return None
        versions = await (await self.resources.facts()).history(owner, fact_id)
        return history_response(fact_id, versions) if versions else None

    async def kind_of(self, owner: Owner, memory_id: str) -> PageKind | None:
        """Whether the owner has this memory, and what it is (None: the owner has no such memory)."""
        if not is_uuid(memory_id):
            return None
        if await (await self.resources.facts()).get(owner, [memory_id]):
            return "fact"
        if await (await self.resources.episodes()).get(owner, [memory_id]):
            return "episode"
        return None

    async def correct(
        self, owner: Owner, fact_id: str, request: CorrectionRequest, *, idempotency_key: str | None
    ) -> CorrectionResponse | None:
        old = await self.fact(owner, fact_id)
        if old is None:
            return None
        now = utc_now()
        candidate = correction_candidate(owner, old, request, now, idempotency_key)
        store = await self.resources.facts()
        result = await store.correct(owner, fact_id, candidate, channel=request.channel, now=now)
        if result is None:
            return None
        plan = result.plan
        if plan.outcome == "rejected":
            raise FactRejected(plan.rejected_reason or "rejected by the write policy")
        current = await store.get(owner, [plan.fact_id]) if plan.fact_id else []
        status = current[0].fact.status if current else None
        return correction_response(fact_id, plan.fact_id, plan.outcome, status)
