"""The never-recalled rule counts from when an episode was stored (or last recalled), not from the
session's date: importing old conversations must not make them prunable at the next pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.common.stores.episodes import read_point_times
from services.pruner.logic import PrunePolicy, episode_verdict

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
POLICY = PrunePolicy.from_days(unrecalled_max_age_days=90, superseded_grace_days=30)


def _verdict(occurred_days: float, stored_days: float | None, recalled_days: float | None = None) -> str | None:
    payload = {
        "occurred_at_ts": (NOW - timedelta(days=occurred_days)).timestamp(),
        "expires_at_ts": (NOW + timedelta(days=165)).timestamp(),
        "stored_at_ts": None if stored_days is None else (NOW - timedelta(days=stored_days)).timestamp(),
        "last_recalled_at_ts": None if recalled_days is None else (NOW - timedelta(days=recalled_days)).timestamp(),
    }
    return episode_verdict(read_point_times("e", payload), NOW, POLICY)


def test_an_old_session_imported_today_is_kept() -> None:
    assert _verdict(occurred_days=200, stored_days=0) is None


def test_an_episode_stored_long_ago_and_never_recalled_is_pruned() -> None:
    assert _verdict(occurred_days=200, stored_days=120) == "unrecalled"


def test_a_recent_recall_keeps_an_episode_stored_long_ago() -> None:
    assert _verdict(occurred_days=200, stored_days=120, recalled_days=10) is None


def test_points_from_before_stored_at_fall_back_to_the_session_date() -> None:
    assert _verdict(occurred_days=200, stored_days=None) == "unrecalled"
    assert _verdict(occurred_days=30, stored_days=None) is None
