"""What to forget, decided without I/O: the prune rules (given a clock reading), the text matching
that finds where an erased fact was stated, and the redaction of a raw session.

Prune rules (DESIGN.md §3):
- an episode (and its passages) whose TTL has passed is expired;
- an episode not recalled for `unrecalled_max_age` — counted from its last recall, or from when it
  was stored when it was never recalled (the session's date only for points stored before the store
  recorded that), so importing old conversations does not make them prunable at the next pass — is
  forgotten before its TTL. Retention weighs importance first (at or above `keep_importance` an episode
  is never forgotten by age), then access (the age is stretched by importance and by recalls, see
  `hold_seconds`), then age. A forgotten episode is first compressed into a summary episode with its
  siblings (`compression.py`); a forgotten compressed summary is deleted;
- a superseded fact version goes `superseded_grace` after it was superseded;
- current facts (and the graph) are the semantic tier: no rule here ever touches them.

Redaction: an erased fact is found in text by its value, its sentence and the graph's names for the
value ("needles", matched as phrases: `services.common.domain.value_text` says how). Every sentence
that mentions a needle is dropped, so the rebuilt summary cannot state the fact again; this errs on the
side of forgetting a little too much."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from uuid import UUID

from contracts import Message, SessionCompleted
from services.common.domain.sentences import split_sentences
from services.common.domain.value_text import Needle, fact_needles, make_needle, mentions, value_mentions
from services.common.stores.episodes import PointTimes
from services.common.stores.facts import FactLifetime

__all__ = [
    "Needle",
    "fact_needles",
    "make_needle",
    "mentions",
    "value_mentions",
]

Clock = Callable[[], datetime]
"""Returns the current time (timezone-aware). Injected so tests control it."""

EpisodeVerdict = Literal["expired", "unrecalled"]
EpisodeRetention = Literal["expired", "unrecalled", "kept_by_importance"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _check_aware(now: datetime) -> float:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the clock must return timezone-aware datetimes, got {now!r}")
    return now.timestamp()


# --------------------------------------------------------------------------------------------------
# Prune rules


@dataclass(frozen=True, slots=True)
class PrunePolicy:
    """The prune rules' knobs. The retention knobs default to neutral (no importance threshold, no
    stretch): then the never-recalled rule is the plain age rule it was before importance existed."""

    unrecalled_max_age: timedelta | None
    """None disables the never-recalled rule."""
    superseded_grace: timedelta
    keep_importance: float | None = None
    """Episodes at or above this importance are never forgotten by age (only their TTL ends them)."""
    importance_stretch: float = 0.0
    """How far importance moves the never-recalled age: × (1 - s + 2·s·importance), so 0.5 → × (0.5 + importance)."""
    recall_stretch: float = 0.0
    """How far recalls move it: × (1 + r·ln(1 + recall_count))."""

    @classmethod
    def from_days(
        cls,
        unrecalled_max_age_days: float | None,
        superseded_grace_days: float,
        *,
        keep_importance: float | None = None,
        importance_stretch: float = 0.0,
        recall_stretch: float = 0.0,
    ) -> PrunePolicy:
        if unrecalled_max_age_days is not None and unrecalled_max_age_days <= 0:
            raise ValueError(f"unrecalled_max_age_days must be positive, got {unrecalled_max_age_days}")
        if superseded_grace_days < 0:
            raise ValueError(f"superseded_grace_days must not be negative, got {superseded_grace_days}")
        if not 0 <= importance_stretch < 1 or recall_stretch < 0:
            raise ValueError(
                f"importance_stretch must be in [0, 1), recall_stretch >= 0: {importance_stretch}, {recall_stretch}"
            )
        return cls(
            unrecalled_max_age=None if unrecalled_max_age_days is None else timedelta(days=unrecalled_max_age_days),
            superseded_grace=timedelta(days=superseded_grace_days),
            keep_importance=keep_importance,
            importance_stretch=importance_stretch,
            recall_stretch=recall_stretch,
        )

    def shortest_hold(self) -> timedelta | None:
        """The shortest never-recalled age any episode can get (importance 0, never recalled): where the
        scan for candidates starts."""
        if self.unrecalled_max_age is None:
            return None
        return self.unrecalled_max_age * (1.0 - self.importance_stretch)


def hold_seconds(times: PointTimes, policy: PrunePolicy) -> float:
    """How long the episode may go unrecalled before it is forgotten: the never-recalled age, stretched
    (or shrunk) by its importance, then stretched by how often it was recalled (an Ebbinghaus-style
    curve: every recall makes the memory last longer, with diminishing returns)."""
    if policy.unrecalled_max_age is None:
        return math.inf
    s = policy.importance_stretch
    by_importance = 1.0 - s + 2.0 * s * min(max(times.importance, 0.0), 1.0)
    by_access = 1.0 + policy.recall_stretch * math.log1p(max(times.recall_count, 0))
    return policy.unrecalled_max_age.total_seconds() * by_importance * by_access


def retention(times: PointTimes, now: datetime, policy: PrunePolicy) -> EpisodeRetention | None:
    """What happens to the episode at `now`: "expired" (its TTL, a hard limit), "unrecalled" (forgotten:
    compressed, or deleted when it already is a compressed summary), "kept_by_importance" (age alone would
    have forgotten it, importance or recalls keep it), or None (kept). Evaluated in the order importance,
    access, age. An episode that carries no usable time is kept: nothing is deleted on a guess."""
    now_ts = _check_aware(now)
    if times.expires_at_ts is not None and times.expires_at_ts <= now_ts:
        return "expired"
    if policy.unrecalled_max_age is None:
        return None
    # Counted from when the memory entered the store (or was last recalled), never from the session's
    # date: an imported 200-day-old session is new memory. Points from before `stored_at_ts` fall back.
    stored = times.stored_at_ts if times.stored_at_ts is not None else times.occurred_at_ts
    known = [t for t in (stored, times.last_recalled_at_ts) if t is not None]
    if not known:
        return None
    idle = now_ts - max(known)
    aged_out = idle >= policy.unrecalled_max_age.total_seconds()
    if policy.keep_importance is not None and times.importance >= policy.keep_importance:
        return "kept_by_importance" if aged_out else None
    if idle >= hold_seconds(times, policy):
        return "unrecalled"
    return "kept_by_importance" if aged_out else None


def episode_verdict(times: PointTimes, now: datetime, policy: PrunePolicy) -> EpisodeVerdict | None:
    """Why the episode should be pruned at `now`, or None to keep it (see `retention`)."""
    verdict = retention(times, now, policy)
    return None if verdict == "kept_by_importance" else verdict


def passage_expired(times: PointTimes, now: datetime) -> bool:
    """A passage left behind by its episode (a crash between the two deletes) past its TTL."""
    return times.expires_at_ts is not None and times.expires_at_ts <= _check_aware(now)


def superseded_fact_due(lifetime: FactLifetime, now: datetime, policy: PrunePolicy) -> bool:
    """True when the fact is a superseded version whose grace period has run out. Current facts are
    never due; a superseded fact without a usable end time is kept."""
    now_ts = _check_aware(now)
    if not lifetime.superseded or lifetime.ended_at_ts is None:
        return False
    return now_ts - lifetime.ended_at_ts >= policy.superseded_grace.total_seconds()


def seconds_until_next_pass(now_s: float, interval_s: float, earliest_s: float) -> float:
    """Seconds from `now_s` (epoch) to the next pass. Passes fall on multiples of the interval since
    the epoch (00:00, 06:00, … UTC for 6 h), so a service that restarts more often than the interval
    still prunes, and never before `earliest_s`."""
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    next_slot = (math.floor(now_s / interval_s) + 1) * interval_s
    if next_slot < earliest_s:
        next_slot = math.ceil(earliest_s / interval_s) * interval_s
    return max(next_slot - now_s, 0.0)


def plan_episode_prune(episodes: Iterable[PointTimes], now: datetime, policy: PrunePolicy) -> dict[str, EpisodeVerdict]:
    """Episode id → verdict, for the episodes among `episodes` that should go."""
    planned: dict[str, EpisodeVerdict] = {}
    for times in episodes:
        verdict = episode_verdict(times, now, policy)
        if verdict is not None:
            planned[times.point_id] = verdict
    return planned


def add_counts(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    """`total` with `more` added key by key (in place, returned for chaining)."""
    for key, value in more.items():
        total[key] = total.get(key, 0) + int(value)
    return total


# --------------------------------------------------------------------------------------------------
# Finding an erased fact in text


def session_mentions(event: SessionCompleted, needles: Sequence[Needle]) -> bool:
    return any(
        mentions(message.content, needles) or (message.name is not None and mentions(message.name, needles))
        for message in event.messages
    ) or value_mentions(event.metadata, needles)


@dataclass(frozen=True, slots=True)
class Redaction:
    messages: list[Message]
    sentences_removed: int
    messages_removed: int


def redact_messages(messages: Sequence[Message], needles: Sequence[Needle]) -> Redaction:
    """Drop every sentence that mentions a needle; a turn with nothing left goes. Untouched turns
    stay verbatim (the raw archive is kept as it was)."""
    kept: list[Message] = []
    sentences_removed = 0
    messages_removed = 0
    for message in messages:
        name = message.name if message.name is None or not mentions(message.name, needles) else None
        if not mentions(message.content, needles):
            kept.append(message if name == message.name else message.model_copy(update={"name": name}))
            continue
        sentences = split_sentences(message.content)
        remaining = [sentence for sentence in sentences if not mentions(sentence, needles)]
        sentences_removed += len(sentences) - len(remaining)
        content = " ".join(remaining)
        # A needle spanning two sentences is only visible in the joined text: then the turn goes.
        if not content.strip() or mentions(content, needles):
            messages_removed += 1
            sentences_removed += len(remaining)
            continue
        kept.append(message.model_copy(update={"content": content, "name": name}))
    return Redaction(messages=kept, sentences_removed=sentences_removed, messages_removed=messages_removed)


def redact_session(event: SessionCompleted, needles: Sequence[Needle], new_event_id: UUID) -> SessionCompleted | None:
    """The session without the erased text, under a new event id (same session id, so the summariser
    rebuilds the same episode); None when no turn is left."""
    redaction = redact_messages(event.messages, needles)
    if not redaction.messages:
        return None
    metadata = {key: value for key, value in event.metadata.items() if not value_mentions([key, value], needles)}
    return SessionCompleted.model_validate(
        {
            **event.model_dump(),
            "event_id": new_event_id,
            "messages": [message.model_dump() for message in redaction.messages],
            "metadata": metadata,
        }
    )
