"""The fact write policy (DESIGN.md §4): supersession, confirmation, idempotent replay, order
independence, and the candidate checks."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from services.common.domain.facts import (
    Fact,
    FactCandidate,
    FactWritePlan,
    attribute_spec,
    check_fact_candidate,
    decay,
    half_life_days,
    make_fact_id,
    normalise_attribute,
    plan_fact_write,
    transient_reason,
)
from services.common.domain.sentences import split_sentences

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def candidate(
    value: str,
    *,
    day: float,
    episode: str | None = None,
    attribute: str = "lives_in",
    subject: str = "user",
    text: str | None = None,
    user_id: str = "u1",
    scope: str = "personal",
    language: str = "en",
    source: str = "extraction",
) -> FactCandidate:
    return FactCandidate.model_validate(
        {
            "tenant_id": "t1",
            "user_id": user_id,
            "scope": scope,
            "subject": subject,
            "attribute": attribute,
            "value": value,
            "text": text or f"The user {attribute.replace('_', ' ')} {value}.",
            "language": language,
            "provenance": {
                "episode_id": episode or f"ep-{value}-{day}",
                "session_id": "s-1",
                "occurred_at": T0 + timedelta(days=day),
                "source": source,
            },
        }
    )


class Store:
    """What the caller does with a plan: upsert every fact by id (nothing is ever deleted)."""

    def __init__(self) -> None:
        self.facts: dict[str, Fact] = {}

    def apply(self, plan: FactWritePlan) -> FactWritePlan:
        for fact in plan.upserts:
            self.facts[fact.fact_id] = fact
        return plan

    def write(self, item: FactCandidate, *, now: datetime = NOW, threshold: int = 2) -> FactWritePlan:
        return self.apply(plan_fact_write(item, list(self.facts.values()), now=now, confirm_threshold=threshold))

    def by_value(self, value: str) -> Fact:
        matches = [fact for fact in self.facts.values() if fact.value == value]
        assert len(matches) == 1, f"expected one fact for {value!r}, got {matches}"
        return matches[0]

    def current(self, attribute: str = "lives_in") -> list[Fact]:
        return [fact for fact in self.facts.values() if fact.attribute == attribute and fact.is_current]


def test_moving_supersedes_the_old_place_and_keeps_it() -> None:
    store = Store()
    first = store.write(candidate("Seoul", day=0))
    assert first.outcome == "created"
    seoul = store.by_value("Seoul")
    assert (seoul.status, seoul.evidence_count, seoul.valid_to) == ("tentative", 1, None)

    moved = store.write(candidate("Busan", day=30, text="The user moved to Busan."))
    assert moved.outcome == "superseding"
    assert {fact.value for fact in moved.upserts} == {"Seoul", "Busan"}
    busan, seoul = store.by_value("Busan"), store.by_value("Seoul")
    assert [fact.value for fact in store.current()] == ["Busan"]
    assert busan.status == "tentative"
    assert busan.valid_from == T0 + timedelta(days=30)
    assert seoul.status == "superseded"
    assert seoul.valid_to == T0 + timedelta(days=30)
    assert seoul.superseded_by == busan.fact_id
    assert seoul.valid_from == T0
    assert len(store.facts) == 2  # history kept, nothing deleted


def test_a_further_mention_confirms_the_current_value() -> None:
    store = Store()
    store.write(candidate("Seoul", day=0))
    store.write(candidate("Busan", day=30))
    plan = store.write(candidate("Busan", day=45))
    assert plan.outcome == "reinforced"
    busan = store.by_value("Busan")
    assert (busan.status, busan.evidence_count, len(busan.provenance)) == ("confirmed", 2, 2)
    assert busan.valid_from == T0 + timedelta(days=30)  # the period started with the first mention
    assert [fact.fact_id for fact in plan.upserts] == [busan.fact_id]


def test_replaying_the_same_candidate_changes_nothing() -> None:
    store = Store()
    items = [candidate("Seoul", day=0), candidate("Busan", day=30), candidate("Busan", day=45)]
    for item in items:
        store.write(item)
        before = dict(store.facts)
        replay = store.write(item, now=NOW + timedelta(days=1))
        assert replay.is_noop, replay
        assert replay.outcome == "duplicate"
        assert store.facts == before
    for item in items:  # a replay of the whole history, too
        assert store.write(item, now=NOW + timedelta(days=2)).is_noop


def test_the_same_episode_counts_once_even_with_other_wording() -> None:
    store = Store()
    store.write(candidate("Busan", day=1, episode="ep-7"))
    plan = store.write(candidate("Busan", day=1, episode="ep-7", text="The user lives in Busan now."))
    assert plan.is_noop
    assert store.by_value("Busan").evidence_count == 1


def test_an_older_candidate_delivered_late_does_not_supersede_the_newer_value() -> None:
    store = Store()
    store.write(candidate("Busan", day=30))
    late = store.write(candidate("Seoul", day=0))
    assert late.outcome == "historical"
    busan, seoul = store.by_value("Busan"), store.by_value("Seoul")
    assert [fact.value for fact in store.current()] == ["Busan"]
    assert busan.fact_id not in {fact.fact_id for fact in late.upserts}  # the newer fact is untouched
    assert seoul.status == "superseded"
    assert seoul.superseded_by == busan.fact_id
    assert seoul.valid_to == T0 + timedelta(days=30)


def test_a_late_value_between_two_others_is_spliced_into_the_history() -> None:
    store = Store()
    store.write(candidate("Seoul", day=0))
    store.write(candidate("Busan", day=30))
    store.write(candidate("Daegu", day=10))
    seoul, daegu, busan = store.by_value("Seoul"), store.by_value("Daegu"), store.by_value("Busan")
    assert (seoul.superseded_by, seoul.valid_to) == (daegu.fact_id, T0 + timedelta(days=10))
    assert (daegu.superseded_by, daegu.valid_to) == (busan.fact_id, T0 + timedelta(days=30))
    assert busan.is_current


def test_moving_back_reactivates_the_earlier_fact_instead_of_cloning_it() -> None:
    store = Store()
    store.write(candidate("Seoul", day=0))
    store.write(candidate("Busan", day=30))
    original_id = store.by_value("Seoul").fact_id
    plan = store.write(candidate("Seoul", day=60, text="The user moved back to Seoul."))
    assert plan.outcome == "reactivated"
    assert len(store.facts) == 2
    seoul, busan = store.by_value("Seoul"), store.by_value("Busan")
    assert seoul.fact_id == original_id
    assert seoul.is_current
    assert seoul.superseded_by is None
    assert seoul.valid_from == T0 + timedelta(days=60)  # its latest period
    assert seoul.text == "The user moved back to Seoul."
    assert [p.occurred_at for p in seoul.provenance] == [T0, T0 + timedelta(days=60)]  # earlier period kept
    assert (busan.status, busan.superseded_by, busan.valid_to) == (
        "superseded",
        seoul.fact_id,
        T0 + timedelta(days=60),
    )


def test_multi_valued_attributes_accumulate() -> None:
    store = Store()
    store.write(candidate("coffee", day=0, attribute="likes"))
    plan = store.write(candidate("tea", day=5, attribute="likes"))
    assert plan.outcome == "created"
    assert {fact.value for fact in store.current("likes")} == {"coffee", "tea"}
    assert all(not fact.single_valued for fact in store.facts.values())


def test_facts_about_other_subjects_or_attributes_are_left_alone() -> None:
    store = Store()
    store.write(candidate("Paris", day=0, subject="wife"))
    store.write(candidate("Naver", day=0, attribute="employer"))
    plan = store.write(candidate("Busan", day=5))
    assert plan.outcome == "created"
    assert {fact.value for fact in plan.upserts} == {"Busan"}
    assert store.by_value("Paris").is_current
    assert store.by_value("Naver").is_current


def test_scopes_are_separate_histories() -> None:
    store = Store()
    store.write(candidate("Seoul", day=0, scope="personal"))
    plan = store.write(candidate("Busan", day=5, scope="team"))
    assert plan.outcome == "created"
    assert len(store.current()) == 2


def test_another_owners_fact_is_a_caller_bug() -> None:
    theirs = plan_fact_write(candidate("Seoul", day=0, user_id="u2"), [], now=NOW).upserts
    with pytest.raises(ValueError, match="belongs to t1/u2"):
        plan_fact_write(candidate("Busan", day=1), theirs, now=NOW)


def test_two_versions_of_one_fact_are_rejected() -> None:
    fact = plan_fact_write(candidate("Seoul", day=0), [], now=NOW).upserts[0]
    other = fact.model_copy(update={"evidence_count": 5})
    with pytest.raises(ValueError, match="two different versions"):
        plan_fact_write(candidate("Busan", day=1), [fact, other], now=NOW)


def test_confirm_threshold_is_configurable() -> None:
    store = Store()
    for day in (0, 1):
        store.write(candidate("Busan", day=day), threshold=3)
    assert store.by_value("Busan").status == "tentative"
    store.write(candidate("Busan", day=2), threshold=3)
    assert store.by_value("Busan").status == "confirmed"


def test_invalid_arguments_fail_loudly() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        plan_fact_write(candidate("Busan", day=0), [], now=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="confirm_threshold"):
        plan_fact_write(candidate("Busan", day=0), [], now=NOW, confirm_threshold=0)
    with pytest.raises(ValidationError):
        candidate("Busan", day=0, user_id="not a token")


# --------------------------------------------------------------------------------------------------
# Candidate checks


@pytest.mark.parametrize(
    ("text", "attribute", "reason"),
    [
        ("The user lives in Seoul. The user likes tea.", "lives_in", "2 sentences"),
        ("I'm hungry right now.", "likes", "transient state"),
        ("The user is tired.", "mood", "transient state"),
        ("오늘 피곤해", "mood", "transient state"),
        ("배고파요", "state", "transient state"),
        ("The user is using Vim today.", "uses_tool", "momentary"),
        ("사용자는 지금 커피를 마신다.", "likes", "momentary"),
        ("   ", "likes", "empty text"),
    ],
)
def test_candidates_that_break_the_write_policy_are_rejected_with_a_reason(
    text: str, attribute: str, reason: str
) -> None:
    plan = plan_fact_write(candidate("x", day=0, attribute=attribute, text=text), [], now=NOW)
    assert plan.outcome == "rejected"
    assert plan.is_noop
    assert plan.rejected_reason is not None
    assert reason in plan.rejected_reason


def test_an_empty_value_is_rejected() -> None:
    item = candidate(" ", day=0, text="The user lives in.")
    assert check_fact_candidate(item) == "empty value"


@pytest.mark.parametrize(
    ("text", "attribute"),
    [
        ("The user moved to Busan today.", "lives_in"),  # a lasting change, dated
        ("The user is tired of Java.", "dislikes"),  # a preference, not a state
        ("The user is vegetarian.", "diet"),
        ("사용자는 부산으로 이사했다.", "lives_in"),
        ("Dr. Kim is the user's doctor.", "knows"),
        ("The user works on D.G.I.A. with Minsu.", "works_on"),
    ],
)
def test_durable_single_sentences_pass(text: str, attribute: str) -> None:
    assert check_fact_candidate(candidate("x", day=0, attribute=attribute, text=text)) is None


def test_transient_reason_without_attribute_treats_time_words_as_momentary() -> None:
    assert transient_reason("I use Vim right now") is not None
    assert transient_reason("The user lives in Busan.") is None


def test_split_sentences() -> None:
    assert split_sentences("Dr. Kim lives in Seoul.") == ["Dr. Kim lives in Seoul."]
    assert split_sentences("D.G.I.A. is great. I use R.") == ["D.G.I.A. is great.", "I use R."]
    assert split_sentences("저는 서울에 살아요. 커피를 좋아해요!\n고마워요") == [
        "저는 서울에 살아요.",
        "커피를 좋아해요!",
        "고마워요",
    ]
    assert split_sentences("I use Node.js and Python 3.12 daily.") == ["I use Node.js and Python 3.12 daily."]


# --------------------------------------------------------------------------------------------------
# Registry, ids, decay


def test_attribute_registry() -> None:
    assert normalise_attribute("Lives in") == "lives_in"
    assert normalise_attribute("worksAt") == "employer"
    assert normalise_attribute("location") == "lives_in"
    assert attribute_spec("lives_in").single_valued
    assert attribute_spec("employer").single_valued
    assert attribute_spec("diet").single_valued
    assert not attribute_spec("likes").single_valued
    assert not attribute_spec("allergy").single_valued
    assert attribute_spec("uses_tool").volatility == "high"
    assert attribute_spec("likes").volatility == "medium"
    assert attribute_spec("name").volatility == "low"
    unknown = attribute_spec("Favourite Colour")
    assert (unknown.name, unknown.single_valued, unknown.volatility) == ("favourite_colour", False, "medium")


def test_fact_ids_are_deterministic_and_normalised() -> None:
    base = make_fact_id("t1", "u1", "personal", "user", "lives_in", "Seoul")
    assert base == make_fact_id("t1", "u1", "personal", "User", "Lives in", "  seoul ")
    assert base == make_fact_id("t1", "u1", "personal", "나", "location", "Seoul.")
    assert base != make_fact_id("t1", "u2", "personal", "user", "lives_in", "Seoul")
    assert base != make_fact_id("t2", "u1", "personal", "user", "lives_in", "Seoul")
    assert base != make_fact_id("t1", "u1", "team", "user", "lives_in", "Seoul")
    assert base != make_fact_id("t1", "u1", "personal", "friend", "lives_in", "Seoul")
    assert make_fact_id("t1", "u1", "personal", "user", "uses_tool", "C++") != make_fact_id(
        "t1", "u1", "personal", "user", "uses_tool", "C"
    )
    plan = plan_fact_write(candidate("Seoul", day=0), [], now=NOW)
    assert plan.fact_id == base


def test_decay_follows_the_half_life() -> None:
    assert (half_life_days("high"), half_life_days("medium"), half_life_days("low")) == (30.0, 180.0, 3650.0)
    for volatility in ("high", "medium", "low"):
        assert decay(0, volatility) == 1.0
        assert decay(half_life_days(volatility), volatility) == pytest.approx(0.5)
        assert decay(-5, volatility) == 1.0
    assert decay(90, "high") < decay(90, "medium") < decay(90, "low")
    with pytest.raises(ValueError, match="NaN"):
        decay(float("nan"), "low")


# --------------------------------------------------------------------------------------------------
# Properties: any delivery order converges; replay is a no-op; the invariants of a history hold


def _comparable(facts: Iterable[Fact]) -> dict[str, Fact]:
    stamp = datetime(2000, 1, 1, tzinfo=UTC)
    return {fact.fact_id: fact.model_copy(update={"created_at": stamp, "updated_at": stamp}) for fact in facts}


def _random_history(rng: random.Random, attribute: str) -> list[FactCandidate]:
    values = ["Seoul", "Busan", "Daegu", "Jeju"]
    items: list[FactCandidate] = []
    for index in range(rng.randint(1, 9)):
        day = rng.choice(range(0, 400, 7)) + index / 100  # distinct times
        items.append(candidate(rng.choice(values), day=day, episode=f"ep-{index}", attribute=attribute))
    # duplicated deliveries of some observations
    items.extend(rng.sample(items, k=rng.randint(0, len(items))))
    return items


def _check_history_invariants(facts: Sequence[Fact], items: Sequence[FactCandidate]) -> None:
    current = [fact for fact in facts if fact.is_current]
    assert len(current) == 1
    latest = max(items, key=lambda item: item.provenance.occurred_at)
    assert current[0].value == latest.value
    by_id = {fact.fact_id: fact for fact in facts}
    for fact in facts:
        assert fact.evidence_count == len(fact.provenance) == len({p.key for p in fact.provenance})
        assert fact.provenance == sorted(fact.provenance, key=lambda p: (p.occurred_at, p.source, p.episode_id))
        if fact.is_current:
            assert fact.superseded_by is None
            assert fact.status == ("confirmed" if fact.evidence_count >= 2 else "tentative")
        else:
            assert fact.status == "superseded"
            assert fact.valid_to is not None
            assert fact.superseded_by in by_id
            successor = by_id[fact.superseded_by]
            assert successor.fact_id != fact.fact_id
            assert fact.valid_from < fact.valid_to
            # the successor was observed exactly when this fact's period ended
            assert fact.valid_to in {p.occurred_at for p in successor.provenance}


@pytest.mark.parametrize("seed", range(40))
def test_any_delivery_order_converges_on_the_same_facts(seed: int) -> None:
    rng = random.Random(seed)
    attribute = rng.choice(["lives_in", "likes"])
    items = _random_history(rng, attribute)
    results = []
    for _ in range(3):
        order = items[:]
        rng.shuffle(order)
        store = Store()
        for item in order:
            store.write(item)
        results.append(_comparable(store.facts.values()))
        for item in order:  # replay after everything was applied: nothing changes
            assert store.write(item, now=NOW + timedelta(days=3)).is_noop
        if attribute == "lives_in":
            _check_history_invariants(list(store.facts.values()), items)
        else:
            assert all(fact.is_current for fact in store.facts.values())
    assert results[0] == results[1] == results[2]
