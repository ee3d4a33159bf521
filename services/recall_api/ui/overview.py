"""What a user's page shows above the list: how much is remembered (episodes, facts per status,
entities), and the list itself newest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import get_args

from services.common.domain.facts import FactStatus
from services.common.domain.owner import Owner
from services.common.stores.vector.port import SearchFilter
from services.recall_api.service import RecallService
from services.recall_api.write.memory_admin import ListFilters
from services.recall_api.write_schemas import ListKind, MemoryRecord

# The list is read whole (up to this many memories) to be sorted by date: the listing API pages in id
# order, which is stable under writes but says nothing about time.
MAX_SORTED = 2000
PAGE_SIZE = 50
_READ_PAGE = 500


@dataclass(frozen=True)
class MemoryCounts:
    episodes: int
    facts: int
    facts_by_status: dict[str, int]
    entities: int


@dataclass(frozen=True)
class DatedPage:
    """One page of the user's memories, newest first (by when it was said)."""

    items: list[MemoryRecord] = field(default_factory=list)
    page: int = 1
    pages: int = 1
    total: int = 0
    truncated: bool = False  # more than MAX_SORTED matched: only the first MAX_SORTED read are sorted


async def memory_counts(service: RecallService, owner: Owner) -> MemoryCounts:
    episodes = await (await service.resources.episodes()).count(owner)
    facts = await service.resources.facts()
    by_status = {
        fact_status: await facts.count(owner, SearchFilter(match={"status": fact_status}))
        for fact_status in get_args(FactStatus)
    }
    entities = (await (await service.resources.graph()).count(owner))["nodes"]
    return MemoryCounts(episodes, sum(by_status.values()), by_status, entities)


def _moment(record: MemoryRecord) -> datetime:
    """When it was said, as an instant (the stored times carry different offsets: compare in UTC)."""
    moment = datetime.fromisoformat(record.occurred_at or "")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def newest_first(items: list[MemoryRecord]) -> list[MemoryRecord]:
    """By when it was said, newest first; undated memories last; ties by id, so the order is stable."""
    dated = sorted((m for m in items if m.occurred_at), key=lambda m: m.id)
    dated.sort(key=_moment, reverse=True)
    return dated + sorted((m for m in items if not m.occurred_at), key=lambda m: m.id)


async def dated_page(
    service: RecallService, tenant_id: str, user_id: str, kind: ListKind, filters: ListFilters, page: int
) -> DatedPage:
    """Raises InvalidCursor / ListingRefused as `list_memories` does (a status filter on episodes)."""
    read: list[MemoryRecord] = []
    cursor: str | None = None
    while len(read) < MAX_SORTED:
        listed = await service.list_memories(
            tenant_id, user_id, kind, limit=min(_READ_PAGE, MAX_SORTED - len(read)), cursor=cursor, filters=filters
        )
        read += listed.items
        cursor = listed.next_cursor
        if cursor is None:
            break
    ordered = newest_first(read)
    pages = max(1, -(-len(ordered) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    shown = ordered[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    return DatedPage(shown, page, pages, len(ordered), truncated=cursor is not None)
