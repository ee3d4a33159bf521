"""The pruner's pure rules: what goes at a given clock reading, and how an erased fact is found and
redacted from a raw session."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import Message
from services.common.stores.episodes import PointTimes, read_point_times
from services.common.stores.facts import FactLifetime, read_fact_lifetime
from services.pruner.logic import (
    PrunePolicy,
    episode_verdict,
    fact_needles,
    make_needle,
    mentions,
    passage_expired,
    plan_episode_prune,
    redact_messages,
    redact_session,
    seconds_until_next_pass,
    session_mentions,
    superseded_fact_due,
    value_mentions,
)
from tests.support.events import session_event

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
POLICY = PrunePolicy.from_days(unrecalled_max_age_days=90, superseded_grace_days=30)


def _times(payload: dict[str, Any], point_id: str = "point") -> PointTimes:
    """The times of a stored episode or passage, read as the store reads them."""
    return read_point_times(point_id, payload)


def _episode(
    *, occurred_days_ago: float, ttl_days: float = 180, recalled_days_ago: float | None = None
) -> dict[str, Any]:
    occurred = NOW - timedelta(days=occurred_days_ago)
    return {
        "kind": "episode",
        "occurred_at_ts": occurred.timestamp(),
        "expires_at_ts": (occurred + timedelta(days=ttl_days)).timestamp(),
        "recall_count": 0 if recalled_days_ago is None else 3,
        "last_recalled_at_ts": None
        if recalled_days_ago is None
        else (NOW - timedelta(days=recalled_days_ago)).timestamp(),
    }


# ---- episodes ------------------------------------------------------------------------------------


def test_episode_past_its_ttl_is_expired_even_when_recalled_recently() -> None:
    payload = _episode(occurred_days_ago=200, recalled_days_ago=1)
    assert episode_verdict(_times(payload), NOW, POLICY) == "expired"


def test_expiry_is_inclusive_at_the_exact_instant() -> None:
    payload = {"expires_at_ts": NOW.timestamp(), "occurred_at_ts": (NOW - timedelta(days=1)).timestamp()}
    assert episode_verdict(_times(payload), NOW, POLICY) == "expired"
    assert episode_verdict(_times(payload), NOW - timedelta(seconds=1), POLICY) is None


def test_never_recalled_episode_goes_after_the_age_not_before() -> None:
    young = _episode(occurred_days_ago=89)
    old = _episode(occurred_days_ago=91)
    assert episode_verdict(_times(young), NOW, POLICY) is None
    assert episode_verdict(_times(old), NOW, POLICY) == "unrecalled"


def test_recent_recall_keeps_an_old_episode_and_a_stale_recall_does_not() -> None:
    assert episode_verdict(_times(_episode(occurred_days_ago=150, recalled_days_ago=10)), NOW, POLICY) is None
    assert episode_verdict(_times(_episode(occurred_days_ago=150, recalled_days_ago=100)), NOW, POLICY) == "unrecalled"


def test_unrecalled_rule_can_be_disabled() -> None:
    policy = PrunePolicy.from_days(unrecalled_max_age_days=None, superseded_grace_days=30)
    assert episode_verdict(_times(_episode(occurred_days_ago=170)), NOW, policy) is None
    assert episode_verdict(_times(_episode(occurred_days_ago=181)), NOW, policy) == "expired"


def test_episode_without_usable_times_is_kept() -> None:
    assert episode_verdict(_times({"expires_at_ts": "soon", "occurred_at_ts": None}), NOW, POLICY) is None
    assert episode_verdict(_times({}), NOW, POLICY) is None
    assert episode_verdict(_times({"expires_at_ts": True}), NOW, POLICY) is None  # a bool is not a time


def test_naive_clock_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        episode_verdict(_times(_episode(occurred_days_ago=1)), datetime(2026, 6, 1), POLICY)


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="positive"):
        PrunePolicy.from_days(unrecalled_max_age_days=0, superseded_grace_days=1)
    with pytest.raises(ValueError, match="negative"):
        PrunePolicy.from_days(unrecalled_max_age_days=1, superseded_grace_days=-1)


def test_plan_lists_only_the_episodes_to_prune_with_their_reason() -> None:
    records = [
        _times(_episode(occurred_days_ago=5), "keep"),
        _times(_episode(occurred_days_ago=181), "expired"),
        _times(_episode(occurred_days_ago=120), "idle"),
        _times(_episode(occurred_days_ago=120, recalled_days_ago=3), "recalled"),
    ]
    assert plan_episode_prune(records, NOW, POLICY) == {"expired": "expired", "idle": "unrecalled"}


def test_the_same_episode_changes_verdict_as_the_clock_moves() -> None:
    payload = _episode(occurred_days_ago=0)
    assert episode_verdict(_times(payload), NOW, POLICY) is None
    assert episode_verdict(_times(payload), NOW + timedelta(days=91), POLICY) == "unrecalled"
    assert episode_verdict(_times(payload), NOW + timedelta(days=181), POLICY) == "expired"


def test_orphan_passage_expiry() -> None:
    assert passage_expired(_times({"expires_at_ts": (NOW - timedelta(hours=1)).timestamp()}), NOW)
    assert not passage_expired(_times({"expires_at_ts": (NOW + timedelta(hours=1)).timestamp()}), NOW)
    assert not passage_expired(_times({}), NOW)


# ---- facts ---------------------------------------------------------------------------------------


def _lifetime(payload: dict[str, Any]) -> FactLifetime:
    """A stored fact's lifetime, read as the store reads it."""
    return read_fact_lifetime("fact", payload)


def _fact(status: str, superseded_days_ago: float | None) -> dict[str, Any]:
    valid_to = None if superseded_days_ago is None else NOW - timedelta(days=superseded_days_ago)
    return {
        "status": status,
        "valid_to": valid_to.isoformat() if valid_to else None,
        "valid_to_ts": valid_to.timestamp() if valid_to else None,
        "superseded_by": str(uuid.uuid4()) if valid_to else None,
        "updated_at": (NOW - timedelta(days=400)).isoformat(),
    }


def test_current_facts_are_never_due_however_old() -> None:
    assert not superseded_fact_due(_lifetime(_fact("confirmed", None)), NOW + timedelta(days=10_000), POLICY)
    assert not superseded_fact_due(_lifetime(_fact("tentative", None)), NOW + timedelta(days=10_000), POLICY)


def test_superseded_fact_goes_after_the_grace_period() -> None:
    assert not superseded_fact_due(_lifetime(_fact("superseded", 29)), NOW, POLICY)
    assert superseded_fact_due(_lifetime(_fact("superseded", 30)), NOW, POLICY)


def test_superseded_fact_end_time_falls_back_to_iso_fields() -> None:
    payload = _fact("superseded", 40)
    payload["valid_to_ts"] = None
    assert superseded_fact_due(_lifetime(payload), NOW, POLICY)
    undatable = {"status": "superseded"}
    assert not superseded_fact_due(_lifetime(undatable), NOW, POLICY)


# ---- needles and redaction -----------------------------------------------------------------------


def test_latin_needle_respects_word_boundaries() -> None:
    needle = make_needle("Go")
    assert needle is not None
    assert needle.found_in("We write the billing service in Go.")
    assert needle.found_in("Go, Rust and Python")
    assert not needle.found_in("I searched on Google")
    assert not needle.found_in("let's go home")  # capitalised needle: a proper noun, case-sensitive


def test_lowercase_needle_matches_any_case_and_inner_whitespace() -> None:
    needle = make_needle("peanut  butter")
    assert needle is not None
    assert needle.found_in("PEANUT BUTTER is my weakness")
    assert needle.found_in("I love peanut\nbutter")
    assert not needle.found_in("peanutbutter")


def test_korean_needle_matches_with_attached_particles() -> None:
    needle = make_needle("부산")
    assert needle is not None
    assert needle.found_in("저 부산으로 이사했어요")
    assert needle.found_in("Busan은 부산에서")
    assert not needle.found_in("서울에 살아요")


def test_latin_needle_inside_korean_text() -> None:
    needle = make_needle("Busan")
    assert needle is not None
    assert needle.found_in("Busan에서 일해요")


def test_fact_needles_deduplicate_and_skip_blank() -> None:
    needles = fact_needles("Busan", "The user lives in Busan.")
    assert [n.text for n in needles] == ["Busan", "The user lives in Busan."]
    assert [n.text for n in fact_needles("  ", "Busan")] == ["Busan"]
    assert make_needle(" \n ") is None


def test_value_mentions_walks_nested_payloads() -> None:
    needles = fact_needles("Busan", "x")
    assert value_mentions({"a": [{"b": "moved to Busan"}]}, needles)
    assert value_mentions({"Busan": 1}, needles)
    assert not value_mentions({"a": [1, 2.0, None, {"b": "Seoul"}]}, needles)
    assert mentions("Busan", needles)


def test_redaction_drops_only_the_sentences_that_state_the_fact() -> None:
    needles = fact_needles("Busan", "The user lives in Busan.")
    messages = [
        Message(role="user", content="I moved to Busan last month. I work on the DGIA billing service."),
        Message(role="assistant", content="Noted. The billing service ships in June."),
        Message(role="user", content="Busan is great."),
    ]
    redaction = redact_messages(messages, needles)
    assert [m.content for m in redaction.messages] == [
        "I work on the DGIA billing service.",
        "Noted. The billing service ships in June.",
    ]
    assert redaction.messages[1] is messages[1]  # untouched turns stay verbatim
    assert redaction.sentences_removed == 2
    assert redaction.messages_removed == 1


def test_redacted_session_keeps_identity_and_drops_mentions_everywhere() -> None:
    event = session_event(
        session_id="s-1",
        texts=["저 부산으로 이사했어요. 요즘 Go로 일해요.", "좋네요! 부산 어디예요?", "해운대 근처예요."],
    )
    event = event.model_copy(update={"metadata": {"topic": "부산 이사", "client": "web"}})
    needles = fact_needles("부산", "사용자는 부산에 산다.")
    new_id = uuid.uuid4()
    redacted = redact_session(event, needles, new_id)
    assert redacted is not None
    assert redacted.event_id == new_id
    assert (redacted.session_id, redacted.tenant_id, redacted.user_id) == (event.session_id, "acme", "alice")
    assert [m.content for m in redacted.messages] == ["요즘 Go로 일해요.", "좋네요!", "해운대 근처예요."]
    assert redacted.metadata == {"client": "web"}
    assert session_mentions(event, needles)
    assert not session_mentions(redacted, needles)


def test_session_that_only_states_the_fact_redacts_to_nothing() -> None:
    event = session_event(texts=["I live in Busan.", "Busan!"])
    assert redact_session(event, fact_needles("Busan", "x"), uuid.uuid4()) is None


def test_needle_spanning_two_sentences_drops_the_whole_turn() -> None:
    needles = fact_needles("zzz", "I am allergic. To nuts")
    redaction = redact_messages([Message(role="user", content="Hi. I am allergic. To nuts and more")], needles)
    assert redaction.messages == []


# ---- schedule ------------------------------------------------------------------------------------

HOUR = 3600.0


def test_passes_fall_on_interval_boundaries() -> None:
    interval = 6 * HOUR
    day = 20_000 * 24 * HOUR  # a midnight UTC
    assert seconds_until_next_pass(day + 1 * HOUR, interval, earliest_s=0) == 5 * HOUR
    assert seconds_until_next_pass(day + 6 * HOUR, interval, earliest_s=0) == 6 * HOUR  # just ran: the next one
    assert seconds_until_next_pass(day + 5 * HOUR + 59 * 60, interval, earliest_s=0) == 60


def test_no_pass_before_the_start_up_delay() -> None:
    interval = 6 * HOUR
    day = 20_000 * 24 * HOUR
    now = day + 6 * HOUR - 30  # a boundary in 30 s, but the delay is 60 s
    assert seconds_until_next_pass(now, interval, earliest_s=now + 60) == 6 * HOUR + 30
    with pytest.raises(ValueError, match="positive"):
        seconds_until_next_pass(now, 0, earliest_s=now)
