"""The prune pass: every rule of `logic` applied to every owner of the vector collections (forgotten
episodes compressed by `compression` first, deleted later), reported as a PruneReport event. The
graph is the semantic tier and is never pruned; neither are current facts."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from contracts import PruneReport
from services.common.domain.ids import deterministic_uuid, unowned_message_id
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources, ServiceContext
from services.common.stores.episodes import Episode, EpisodeStore
from services.common.stores.facts import FactStore
from services.common.stores.tombstones import TombstoneStore, UserBeingErased
from services.common.stores.vector.port import SearchFilter
from services.pruner.compression import compress_episodes, group_for_compression
from services.pruner.logic import (
    PrunePolicy,
    add_counts,
    passage_expired,
    plan_episode_prune,
    retention,
    superseded_fact_due,
)
from services.pruner.settings import PrunerSettings

log = logging.getLogger(__name__)

# Store time windows are half-open ([after, before)); expiry is inclusive, hence the margin. The
# rules re-check every point, so the margin can only make a page return a point that stays.
_INCLUSIVE_MARGIN = timedelta(milliseconds=1)
# Counted by the pass but reported beside `removed` (they are not removals).
_RETENTION_COUNTS = ("episodes_compressed", "summaries_written", "kept_by_importance")
COMPRESSION_WRITER = "pruner-compression"


def prune_policy(settings: PrunerSettings) -> PrunePolicy:
    return PrunePolicy.from_days(
        settings.unrecalled_max_age_days,
        settings.superseded_grace_days,
        keep_importance=settings.importance_keep_threshold,
        importance_stretch=settings.importance_stretch,
        recall_stretch=settings.recall_stretch,
    )


def _tally(verdicts: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[f"episodes_{verdict}"] = counts.get(f"episodes_{verdict}", 0) + 1
    return counts


async def _delete_episodes(episodes: EpisodeStore, owner: Owner, episode_ids: Sequence[str]) -> dict[str, int]:
    return {"passages": (await episodes.delete(owner, episode_ids)).passages}


async def _prune_expired_episodes(
    episodes: EpisodeStore, owner: Owner, now: datetime, policy: PrunePolicy, page_size: int
) -> dict[str, int]:
    """Episodes past their TTL. Every page holds only expired points, so each round shrinks the set."""
    removed: dict[str, int] = {}
    until = now + _INCLUSIVE_MARGIN
    while True:
        page = await episodes.scroll_times(owner, SearchFilter(before=until, time_field="expires_at_ts"), page_size)
        planned = plan_episode_prune(page, now, policy)
        if not planned:
            break
        add_counts(removed, _tally(planned.values()))
        add_counts(removed, await _delete_episodes(episodes, owner, list(planned)))
        if len(page) < page_size:
            break
    return removed


async def _prune_unrecalled_episodes(
    episodes: EpisodeStore,
    tombstones: TombstoneStore | None,
    owner: Owner,
    now: datetime,
    policy: PrunePolicy,
    settings: PrunerSettings,
) -> tuple[dict[str, int], bool]:
    """Episodes not recalled for long enough given their importance and recalls (`logic.retention`):
    old enough by session time for the shortest possible hold (an episode is stored after its session
    ended, so this never misses one), then checked in full. Forgotten episodes are compressed (or
    deleted when compression is off, or when they already are compressed summaries). Returns the counts
    and whether the scan hit the scan limit."""
    removed: dict[str, int] = {}
    shortest = policy.shortest_hold()
    if shortest is None:
        return removed, False
    candidates = await episodes.scroll_times(
        owner, SearchFilter(before=now - shortest + _INCLUSIVE_MARGIN, time_field="occurred_at_ts"), settings.scan_limit
    )
    truncated = len(candidates) >= settings.scan_limit
    verdicts = {times.point_id: (times, retention(times, now, policy)) for times in candidates}
    add_counts(removed, {"kept_by_importance": sum(v == "kept_by_importance" for _, v in verdicts.values())})
    # Expired ones (their TTL passed during the pass) are deleted, never compressed.
    compressible = {
        times.point_id
        for times, verdict in verdicts.values()
        if verdict == "unrecalled" and tombstones is not None and not times.compressed
    }
    to_compress = [point_id for point_id in verdicts if point_id in compressible]
    to_delete = [
        point_id
        for point_id, (_, verdict) in verdicts.items()
        if verdict in ("unrecalled", "expired") and point_id not in compressible
    ]
    if to_compress and tombstones is not None:
        try:
            compressed, direct = await _compress(episodes, tombstones, owner, to_compress, now, settings)
        except UserBeingErased:
            # The erasure removes them anyway; nothing is written for a user being erased.
            log.info("prune: %s/%s is being erased; compression skipped", owner.tenant_id, owner.user_id)
        else:
            add_counts(removed, compressed)
            to_delete.extend(direct)
    page_size = settings.prune_page_size
    for start in range(0, len(to_delete), page_size):
        chunk = to_delete[start : start + page_size]
        add_counts(removed, _tally(verdicts[episode_id][1] or "unrecalled" for episode_id in chunk))
        add_counts(removed, await _delete_episodes(episodes, owner, chunk))
    return removed, truncated


async def _compress(
    episodes: EpisodeStore,
    tombstones: TombstoneStore,
    owner: Owner,
    episode_ids: Sequence[str],
    now: datetime,
    settings: PrunerSettings,
) -> tuple[dict[str, int], list[str]]:
    """Fold the episodes into compressed summaries (written first), then delete them. Returns the counts
    and the ids to delete outright: those that cannot be read as episodes, and those a summary already
    folded in (a pass that crashed between writing a summary and deleting its sources)."""
    counts: dict[str, int] = {}
    readable: list[Episode] = []
    for start in range(0, len(episode_ids), settings.prune_page_size):
        readable.extend(await episodes.get(owner, episode_ids[start : start + settings.prune_page_size]))
    folded = {
        source
        for summary in await episodes.scroll(
            owner, SearchFilter(match={"source_episode_ids": list(episode_ids)}), settings.scan_limit
        )
        for source in summary.source_episode_ids
    }
    pending = [episode for episode in readable if episode.episode_id not in folded]
    for group in group_for_compression(pending, settings.compress_max_group):
        add_counts(counts, await _compress_group(episodes, tombstones, owner, group, now, settings))
    found = {episode.episode_id for episode in pending}
    return counts, [episode_id for episode_id in episode_ids if episode_id not in found]


async def _compress_group(
    episodes: EpisodeStore,
    tombstones: TombstoneStore,
    owner: Owner,
    group: Sequence[Episode],
    now: datetime,
    settings: PrunerSettings,
) -> dict[str, int]:
    """One compressed summary for the group, then the group goes. Guarded like every writer: a summary is
    never written for a user whose erasure runs or has removed these sessions (it would bring them back)."""
    lineage = max((e.raw_stream_sequence for e in group if e.raw_stream_sequence is not None), default=None)
    async with tombstones.guard(owner, COMPRESSION_WRITER, lineage, wait=False) as guard:
        if guard.erased:
            return {}
        compressed = compress_episodes(owner, group, now=now, max_chars=settings.compressed_summary_max_chars)
        if not await guard.still_allowed():
            return {}
        # The summary is written before its sources go: a crash in between loses nothing, and the next
        # pass deletes the sources (they are already folded in).
        await episodes.write(owner, compressed.episode, compressed.passages)
    sources = [episode.episode_id for episode in group]
    counts = await _delete_episodes(episodes, owner, sources)
    return add_counts(
        counts, {"episodes_unrecalled": len(sources), "episodes_compressed": len(sources), "summaries_written": 1}
    )


async def _prune_orphaned_passages(
    episodes: EpisodeStore, owner: Owner, now: datetime, page_size: int
) -> dict[str, int]:
    """Passages whose episode is gone (a crash between the two deletes), past their TTL."""
    removed: dict[str, int] = {}
    until = now + _INCLUSIVE_MARGIN
    while True:
        page = await episodes.scroll_passage_times(
            owner, SearchFilter(before=until, time_field="expires_at_ts"), page_size
        )
        expired = [times.point_id for times in page if passage_expired(times, now)]
        if not expired:
            break
        add_counts(removed, {"passages": await episodes.delete_passages(owner, expired)})
        if len(page) < page_size:
            break
    return removed


async def _prune_superseded_facts(
    facts: FactStore, owner: Owner, now: datetime, policy: PrunePolicy, page_size: int
) -> dict[str, int]:
    """Superseded fact versions past the grace period. Current facts are never candidates."""
    removed: dict[str, int] = {}
    cutoff = now - policy.superseded_grace
    while True:
        page = await facts.scroll_lifetimes(
            owner, SearchFilter(before=cutoff + _INCLUSIVE_MARGIN, time_field="valid_to_ts"), page_size
        )
        due = [lifetime.fact_id for lifetime in page if superseded_fact_due(lifetime, now, policy)]
        if not due:
            break
        add_counts(removed, {"facts_superseded": await facts.delete(owner, due)})
        if len(page) < page_size:
            break
    return removed


async def _prune_owner(
    episodes: EpisodeStore,
    facts: FactStore,
    tombstones: TombstoneStore | None,
    owner: Owner,
    now: datetime,
    policy: PrunePolicy,
    settings: PrunerSettings,
) -> tuple[dict[str, int], bool]:
    """Apply every rule to one owner; returns the counts and whether a scan hit the scan limit."""
    page_size = settings.prune_page_size
    removed = await _prune_expired_episodes(episodes, owner, now, policy, page_size)
    unrecalled, truncated = await _prune_unrecalled_episodes(episodes, tombstones, owner, now, policy, settings)
    add_counts(removed, unrecalled)
    add_counts(removed, await _prune_orphaned_passages(episodes, owner, now, page_size))
    add_counts(removed, await _prune_superseded_facts(facts, owner, now, policy, page_size))
    return removed, truncated


async def run_prune_pass(resources: Resources, settings: PrunerSettings, now: datetime) -> PruneReport:
    """One pass over every owner of the episode and fact stores, evaluated at `now`."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    started = datetime.now(UTC)
    policy = prune_policy(settings)
    episodes, facts = await resources.episodes(), await resources.facts()
    # Compression writes, so it is guarded by the erasure tombstones like every other writer.
    tombstones = await resources.tombstones() if settings.forget_compress else None
    owners = await episodes.owners() | await facts.owners()
    removed = {"episodes_expired": 0, "episodes_unrecalled": 0, "passages": 0, "facts_superseded": 0}
    retained: dict[str, int] = {}
    truncated: list[str] = []
    for owner in sorted(owners, key=lambda o: (o.tenant_id, o.user_id)):
        counts, owner_truncated = await _prune_owner(episodes, facts, tombstones, owner, now, policy, settings)
        add_counts(retained, {key: counts.pop(key, 0) for key in _RETENTION_COUNTS})
        add_counts(removed, counts)
        if owner_truncated:
            truncated.append(f"{owner.tenant_id}/{owner.user_id}")
    return PruneReport(
        event_id=deterministic_uuid("prune-completed", now.isoformat()),
        now=now,
        started_at=started,
        finished_at=datetime.now(UTC),
        owners_scanned=len(owners),
        removed=removed,
        truncated_owners=truncated,
        episodes_compressed=retained.get("episodes_compressed", 0),
        summaries_written=retained.get("summaries_written", 0),
        kept_by_importance=retained.get("kept_by_importance", 0),
    )


async def prune_once(ctx: ServiceContext[PrunerSettings], now: datetime) -> PruneReport:
    """Run one pass and report it: a log line, counters on the context, and a PruneReport event on
    `prune_completed()` in the derived stream (its event id is the Nats-Msg-Id, so a pass repeated at
    the same clock reading is published once)."""
    report = await run_prune_pass(ctx.resources, ctx.settings, now)
    for name, count in report.removed.items():
        ctx.count(f"pruned_{name}", count)
    ctx.count("prune_passes")
    await ctx.publisher.publish(
        report,
        ctx.subjects.prune_completed(),
        msg_id=unowned_message_id("prune-completed", report.event_id),
        stream=ctx.subjects.derived_stream,
    )
    log.info(
        "prune pass at %s: %s over %d owners in %.1fs%s",
        now.isoformat(),
        ", ".join(f"{name}={count}" for name, count in report.removed.items()),
        report.owners_scanned,
        (report.finished_at - report.started_at).total_seconds(),
        f"; scan limit hit for {', '.join(report.truncated_owners)}" if report.truncated_owners else "",
    )
    if report.truncated_owners:
        # Owners are tenant/user pairs: only how many at WARNING; the report event names them.
        log.warning(
            "prune scan limit (%d) reached for %d owners", ctx.settings.scan_limit, len(report.truncated_owners)
        )
    return report
