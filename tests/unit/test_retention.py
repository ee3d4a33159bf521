"""Retention by importance, then access, then age (services/pruner/logic.py `retention`), and the
pure compression of forgotten episodes (services/pruner/compression.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from services.common.domain.owner import Owner
from services.common.stores.episodes import Episode, PointTimes
from services.pruner.compression import compress_episodes, compressed_episode_id, group_for_compression
from services.pruner.logic import PrunePolicy, hold_seconds, retention

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = 86400.0
OWNER = Owner("acme", "alice")
POLICY = PrunePolicy.from_days(90, 30, keep_importance=0.8, importance_stretch=0.5, recall_stretch=1.0)


def _times(
    *, stored_days_ago: float, importance: float = 0.5, recalls: int = 0, recalled_days_ago: float | None = None
) -> PointTimes:
    return PointTimes(
        point_id="ep",
        occurred_at_ts=(NOW - timedelta(days=stored_days_ago + 1)).timestamp(),
        expires_at_ts=(NOW + timedelta(days=365)).timestamp(),
        last_recalled_at_ts=None
        if recalled_days_ago is None
        else (NOW - timedelta(days=recalled_days_ago)).timestamp(),
        stored_at_ts=(NOW - timedelta(days=stored_days_ago)).timestamp(),
        importance=importance,
        recall_count=recalls,
    )


def test_neutral_knobs_are_the_plain_age_rule() -> None:
    plain = PrunePolicy.from_days(90, 30)
    for importance in (0.0, 0.5, 1.0):
        for recalls in (0, 10):
            times = _times(stored_days_ago=95, importance=importance, recalls=recalls)
            assert retention(times, NOW, plain) == "unrecalled"
            assert retention(_times(stored_days_ago=85, importance=importance, recalls=recalls), NOW, plain) is None


def test_importance_first_an_important_episode_is_never_forgotten_by_age() -> None:
    assert retention(_times(stored_days_ago=2000, importance=0.9), NOW, POLICY) == "kept_by_importance"
    assert retention(_times(stored_days_ago=10, importance=0.9), NOW, POLICY) is None  # not due anyway
    expired = PointTimes(point_id="ep", expires_at_ts=NOW.timestamp(), importance=1.0, recall_count=50)
    assert retention(expired, NOW, POLICY) == "expired"  # the TTL is a hard limit


def test_access_then_age_recalls_and_importance_stretch_the_never_recalled_age() -> None:
    assert hold_seconds(_times(stored_days_ago=0), POLICY) == pytest.approx(90 * DAY)  # the defaults of old points
    assert hold_seconds(_times(stored_days_ago=0, importance=0.2), POLICY) == pytest.approx(63 * DAY)
    assert hold_seconds(_times(stored_days_ago=0, importance=0.5, recalls=5), POLICY) > 2.5 * 90 * DAY
    # An unimportant episode goes before the plain age; a mid one after it when recalled often.
    assert retention(_times(stored_days_ago=70, importance=0.1), NOW, POLICY) == "unrecalled"
    often = _times(stored_days_ago=400, importance=0.6, recalls=6, recalled_days_ago=120)
    assert retention(often, NOW, POLICY) == "kept_by_importance"
    assert retention(_times(stored_days_ago=400, importance=0.6, recalled_days_ago=120), NOW, POLICY) == "unrecalled"


def test_policy_rejects_a_stretch_that_could_forget_at_once() -> None:
    with pytest.raises(ValueError, match="importance_stretch"):
        PrunePolicy.from_days(90, 30, importance_stretch=1.0)
    assert POLICY.shortest_hold() == timedelta(days=45)


def _source(n: int, *, agent: str = "agent", channel: str = "private", importance: float = 0.2) -> Episode:
    occurred = NOW - timedelta(days=200 - n)
    return Episode(
        episode_id=f"00000000-0000-0000-0000-{n:012d}",
        session_id=f"s-{n}",
        agent_id=agent,
        occurred_at=occurred,
        summary=f"User: we talked about topic {n}.",
        channel=channel,  # type: ignore[arg-type]
        expires_at=occurred + timedelta(days=365),
        language="en",
        abstract=f"topic {n}",
        entity_names=(f"Topic{n}", "Shared"),
        importance=importance,
    )


def test_compression_keeps_provenance_visibility_and_the_earliest_ttl() -> None:
    sources = [_source(n, importance=0.1 * n) for n in (3, 1, 2)]
    compressed = compress_episodes(OWNER, sources, now=NOW, max_chars=4000)
    episode = compressed.episode
    assert episode.is_compressed
    assert episode.source_session_ids == ("s-1", "s-2", "s-3")
    assert episode.source_episode_ids == tuple(f"00000000-0000-0000-0000-{n:012d}" for n in (1, 2, 3))
    assert episode.episode_id == compressed_episode_id(OWNER, sorted(episode.source_episode_ids, reverse=True))
    assert episode.expires_at == min(s.expires_at for s in sources if s.expires_at)
    assert episode.occurred_at == max(s.occurred_at for s in sources)
    assert episode.importance == pytest.approx(0.3)
    assert episode.stored_at_ts == NOW.timestamp() and episode.recall_count == 0
    assert [line.split("] ", 1)[1] for line in episode.summary.splitlines()] == [
        f"User: we talked about topic {n}." for n in (1, 2, 3)
    ]
    assert [p.session_id for p in compressed.passages] == ["s-1", "s-2", "s-3"]
    assert all(p.episode_id == episode.episode_id for p in compressed.passages)
    assert episode.entity_names == ("Topic1", "Shared", "Topic2", "Topic3")
    # The same sources in any order give the same point.
    again = compress_episodes(OWNER, list(reversed(sources)), now=NOW, max_chars=4000)
    assert again == compressed


def test_groups_never_mix_visibility_and_respect_the_size_cap() -> None:
    episodes = [_source(n) for n in range(5)] + [_source(10, channel="group"), _source(11, agent="other")]
    groups = group_for_compression(episodes, max_group=2)
    assert sorted(len(g) for g in groups) == [1, 1, 1, 2, 2]
    for group in groups:
        assert len({(e.scope, e.channel, e.agent_id) for e in group}) == 1
    assert group_for_compression(reversed(episodes), max_group=2) == groups


def test_groups_never_mix_session_metadata_and_a_summary_keeps_the_pairs_all_its_sources_carry() -> None:
    atlas = [replace(_source(n), metadata={"project": "atlas", "team": "core"}) for n in (1, 2)]
    bori = [replace(_source(3), metadata={"project": "bori", "team": "core"})]
    plain = [_source(4)]
    groups = group_for_compression([*atlas, *bori, *plain], max_group=10)
    assert sorted([e.session_id for e in group] for group in groups) == [["s-1", "s-2"], ["s-3"], ["s-4"]]
    by_sessions = {
        tuple(e.session_id for e in group): compress_episodes(OWNER, group, now=NOW, max_chars=4000) for group in groups
    }
    summary = by_sessions[("s-1", "s-2")]
    assert summary.episode.metadata == {"project": "atlas", "team": "core"}
    assert all(p.metadata == summary.episode.metadata for p in summary.passages)  # filters reach passages too
    assert by_sessions[("s-4",)].episode.metadata == {}
    # Sources that disagree (a caller that did not group them): only what every one of them carried.
    mixed = compress_episodes(OWNER, [*atlas, *bori], now=NOW, max_chars=4000)
    assert mixed.episode.metadata == {"team": "core"}
    assert compress_episodes(OWNER, [*atlas, *plain], now=NOW, max_chars=4000).episode.metadata == {}
