"""Compression of forgotten episodes, pure: several episodes of one owner that retention gave up on
become one summary episode, so what they said can still be found (L1 search, through the summary and
through one passage per source episode) while the detail (their passages of raw text) goes.

- Episodes are grouped by what decides who may see them (scope, channel, agent): a compressed summary
  is never more visible than any of its sources.
- They are grouped by their session metadata too, so a summary carries exactly its sources' metadata
  and a metadata filter finds what it compressed as it found the sources. A summary made of sources
  that disagree (only when called with such a group) keeps a key only where every source gives it the
  same value: it never claims a value for a source that did not carry it.
- The id is deterministic (uuid5 of the owner and the sorted source episode ids), so a pass that crashed
  after writing the summary and before deleting its sources writes the same point again.
- It keeps provenance to every source: `source_episode_ids` and `source_session_ids` (aligned, oldest
  first); erasing one of those episodes, or the user, erases the summary too. Raw sessions are not
  touched here: they stay until their own TTL.
- It expires at the earliest TTL of its sources: no source's content outlives its own retention.
- Its importance is the highest of its sources'; its recall record starts afresh, and `stored_at` is the
  pass's clock reading, so it gets the full never-recalled age before it is deleted in turn.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from services.common.domain.graphemes import truncate_with_ellipsis
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.stores.episodes import Episode, ModelUsage, Passage

COMPRESSION_MODEL = "pruner-compression"
"""The `usage.model` of a compressed episode: made without a model call."""

_MAX_ENTITY_NAMES = 50
_ABSTRACT_CHARS = 200


@dataclass(frozen=True, slots=True)
class CompressedEpisode:
    episode: Episode
    passages: list[Passage]


def compressed_episode_id(owner: Owner, source_episode_ids: Iterable[str]) -> str:
    return str(deterministic_uuid("compressed-episode", owner.tenant_id, owner.user_id, *sorted(source_episode_ids)))


def group_for_compression(episodes: Iterable[Episode], max_group: int) -> list[list[Episode]]:
    """Forgotten episodes in groups of at most `max_group` that share scope, channel, agent and session
    metadata, oldest first; the order (and so every id) depends only on the episodes, never on the order
    they were read in."""
    if max_group < 1:
        raise ValueError(f"max_group must be at least 1, got {max_group}")
    by_visibility: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], list[Episode]] = defaultdict(list)
    for episode in episodes:
        metadata = tuple(sorted(episode.metadata.items()))
        by_visibility[(episode.scope, episode.channel, episode.agent_id, metadata)].append(episode)
    groups: list[list[Episode]] = []
    for key in sorted(by_visibility):
        ordered = sorted(by_visibility[key], key=lambda e: (e.occurred_at, e.episode_id))
        groups.extend(ordered[start : start + max_group] for start in range(0, len(ordered), max_group))
    return groups


def _dated(episode: Episode, max_chars: int) -> str:
    text = " ".join(episode.summary.split()) or episode.abstract
    return f"[{episode.occurred_at.date().isoformat()}] {truncate_with_ellipsis(text, max(max_chars, 40))}"


def _entity_names(sources: Sequence[Episode]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for episode in sources:
        for name in episode.entity_names:
            seen.setdefault(name.casefold(), name)
    return tuple(list(seen.values())[:_MAX_ENTITY_NAMES])


def _agreed_metadata(sources: Sequence[Episode]) -> dict[str, str]:
    """The key/values every source carries (a key some source lacks or gives another value is left out)."""
    first, *rest = sources
    return {
        key: value
        for key, value in sorted(first.metadata.items())
        if all(other.metadata.get(key) == value for other in rest)
    }


def _earliest_expiry(sources: Sequence[Episode]) -> datetime | None:
    expiries = [e.expires_at for e in sources if e.expires_at is not None]
    return min(expiries) if expiries else None


def compress_episodes(owner: Owner, sources: Sequence[Episode], *, now: datetime, max_chars: int) -> CompressedEpisode:
    """One summary episode for `sources` (one group of `group_for_compression`), with one passage per
    source holding that source's dated summary. The summary lists every source's dated summary, each
    cut to an equal share of `max_chars`."""
    if not sources:
        raise ValueError("nothing to compress")
    ordered = sorted(sources, key=lambda e: (e.occurred_at, e.episode_id))
    # Aligned, oldest first: the i-th source episode was made from the i-th session (erasure of one
    # source episode finds its session here once the episode point is gone).
    episode_ids = tuple(e.episode_id for e in ordered)
    session_ids = tuple(e.session_id for e in ordered)
    episode_id = compressed_episode_id(owner, episode_ids)
    share = max_chars // len(ordered)
    first, last = ordered[0].occurred_at.date().isoformat(), ordered[-1].occurred_at.date().isoformat()
    span = first if first == last else f"{first} – {last}"
    abstract = truncate_with_ellipsis(
        f"{len(ordered)} earlier conversations ({span}): " + "; ".join(e.abstract for e in ordered if e.abstract),
        _ABSTRACT_CHARS,
    )
    language = Counter(e.language for e in ordered).most_common(1)[0][0]
    episode = Episode(
        episode_id=episode_id,
        session_id=f"compressed-{episode_id.replace('-', '')[:24]}",
        agent_id=ordered[0].agent_id,
        occurred_at=ordered[-1].occurred_at,
        summary="\n".join(_dated(e, share) for e in ordered),
        scope=ordered[0].scope,
        channel=ordered[0].channel,
        expires_at=_earliest_expiry(ordered),
        language=language,
        abstract=abstract,
        entity_names=_entity_names(ordered),
        stored_at_ts=now.timestamp(),
        usage=ModelUsage(model=COMPRESSION_MODEL),
        importance=max(e.importance for e in ordered),
        source_episode_ids=episode_ids,
        source_session_ids=session_ids,
        metadata=_agreed_metadata(ordered),
    )
    # One passage per source, under the source's session: a question about one of them finds it.
    passages = [
        replace(
            episode.passage(index, _dated(source, max_chars), first_turn=index, last_turn=index),
            session_id=source.session_id,
        )
        for index, source in enumerate(ordered)
    ]
    return CompressedEpisode(episode=episode, passages=passages)
