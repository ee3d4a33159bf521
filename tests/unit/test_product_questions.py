"""The product question set (lab/tiermem_lab/evaluation/data/product_questions.json) and how
`tiermem eval product` scores it: the file meets its floors, every reference resolves, the held-out
split shares no user with the dev split, and the measures mean what product_metrics.py says."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tiermem_lab.evaluation.product_metrics import ProductOutcome, summarize, summary_tables, target_checks
from tiermem_lab.evaluation.product_set import (
    DEFAULT_PRODUCT_SET,
    QUESTION_KINDS,
    SPLITS,
    ProductSet,
    ProductSetFormatError,
    as_sample,
    load_product_set,
    select_users,
    session_events,
)


@pytest.fixture(scope="module")
def product_set() -> ProductSet:
    return load_product_set(DEFAULT_PRODUCT_SET)


def test_the_set_meets_its_floors(product_set: ProductSet) -> None:
    sessions = [s for u in product_set.users for s in u.sessions]
    questions = [q for u in product_set.users for q in u.questions]
    assert len(sessions) >= 40
    assert len(questions) >= 200
    assert sum(1 for q in questions if not q.answerable) >= 60
    assert {u.language for u in product_set.users} == {"en", "ko"}
    answerable_kinds = {q.kind for q in questions if q.answerable}
    assert answerable_kinds == set(QUESTION_KINDS)
    # Plans that change: a later session revises an earlier answer, in both languages.
    revised = {u.language for u in product_set.users for q in u.questions if q.stale}
    assert revised == {"en", "ko"}
    # Sessions spread over weeks, for every user.
    for user in product_set.users:
        span = user.sessions[-1].started_at - user.sessions[0].started_at
        assert span.days >= 28, f"{user.user_id}: sessions span {span.days} days"


def test_every_reference_is_a_session_of_the_same_user(product_set: ProductSet) -> None:
    for user in product_set.users:
        own = {s.id for s in user.sessions}
        for question in user.questions:
            assert question.sessions, question.id
            assert set(question.sessions) <= own, question.id
            assert set(question.stale) <= own, question.id
            stale_before = all(user.number_of(s) < min(map(user.number_of, question.evidence)) for s in question.stale)
            assert stale_before, f"{question.id}: a stale session must come before the revising one"


def test_the_splits_are_disjoint_by_user_and_balanced(product_set: ProductSet) -> None:
    users_by_split = {split: {u.user_id for u in product_set.users if u.split == split} for split in SPLITS}
    assert set(users_by_split) == {"dev", "test"}
    assert not users_by_split["dev"] & users_by_split["test"]
    # Every session and question id names one user only, so nothing of a test user leaks into dev.
    assert len({s.id for u in product_set.users for s in u.sessions}) == sum(len(u.sessions) for u in product_set.users)
    counts = Counter(u.split for u in product_set.users for _ in u.questions)
    assert abs(counts["dev"] - counts["test"]) <= 0.1 * sum(counts.values())
    for split in SPLITS:
        chosen = select_users(product_set, split)
        assert {u.language for u in chosen} == {"en", "ko"}
        assert sum(1 for u in chosen for q in u.questions if not q.answerable) >= 30


def _raw() -> dict[str, Any]:
    return dict(json.loads(DEFAULT_PRODUCT_SET.read_text(encoding="utf-8")))


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_question_naming_a_session_of_another_user_is_refused(tmp_path: Path) -> None:
    data = _raw()
    first, second = data["users"][0], data["users"][1]
    first["questions"][0]["evidence"] = [second["sessions"][0]["id"]]
    with pytest.raises(ProductSetFormatError, match=f"no session {second['sessions'][0]['id']}"):
        load_product_set(_write(tmp_path, data))


def test_an_unanswerable_question_with_an_answer_is_refused(tmp_path: Path) -> None:
    data = _raw()
    question = next(q for q in data["users"][0]["questions"] if q.get("answerable") is False)
    question["answer"] = "something"
    with pytest.raises(ProductSetFormatError, match="answerable=false"):
        load_product_set(_write(tmp_path, data))


def test_a_user_in_both_splits_is_refused(tmp_path: Path) -> None:
    data = _raw()
    copy = json.loads(json.dumps(data["users"][0]))
    copy["split"] = "test"
    data["users"].append(copy)
    with pytest.raises(ProductSetFormatError, match="ids repeat"):
        load_product_set(_write(tmp_path, data))


def test_a_quick_slice_keeps_both_kinds_of_question(product_set: ProductSet) -> None:
    [user] = select_users(product_set, "test", ["en-leo"], max_questions=2)
    assert [q.answerable for q in user.questions].count(True) == 2
    assert [q.answerable for q in user.questions].count(False) == 2
    with pytest.raises(ProductSetFormatError, match="no user nobody"):
        select_users(product_set, "all", ["nobody"])


def test_sessions_are_ingested_with_their_own_times_in_both_forms(product_set: ProductSet) -> None:
    user = product_set.users[0]
    chat = session_events(user, tenant_id="t", form="chat")
    group = session_events(user, tenant_id="t", form="group")
    assert [e.session_id for e in chat] == [s.id for s in user.sessions]
    first = chat[0].messages
    assert first[0].name == user.display_name and first[0].role == "user"
    assert all(a.ts is not None and b.ts is not None and a.ts < b.ts for a, b in itertools.pairwise(first))
    assert {m.role for e in group for m in e.messages} == {"user"}
    assert group[0].messages[0].content.startswith(f"{user.display_name}: ")
    assert chat[0].event_id != group[0].event_id
    assert [s.number for s in as_sample(user).sessions] == list(range(1, len(user.sessions) + 1))


def _outcome(**fields: Any) -> ProductOutcome:
    defaults: dict[str, Any] = {
        "user_id": "u",
        "split": "test",
        "language": "en",
        "question_id": "q",
        "question": "?",
        "kind": "decision",
        "answerable": True,
        "sessions": ("s2",),
        "stale": (),
        "l1_sessions": (),
        "injected": (),
        "skipped_reason": None,
        "top_score": None,
        "tokens": 0,
    }
    return ProductOutcome(**(defaults | fields))


def test_the_measures_follow_their_definitions() -> None:
    outcomes = [
        # Recalled, with one contaminating item; L1 finds s2 at rank 6 only (a miss at 5).
        _outcome(injected=(("s2",), ("s9",)), l1_sessions=("s1", "s3", "s4", "s5", "s6", "s2")),
        # Not recalled: the stale answer was injected instead. L1 finds s2 first.
        _outcome(kind="changed", stale=("s1",), injected=(("s1",),), l1_sessions=("s2",)),
        # Not in memory: an item of the topic session was injected (no abstention).
        _outcome(answerable=False, sessions=("s3",), injected=(("s3",),)),
        # Not in memory: nothing injected, with a reason.
        _outcome(answerable=False, sessions=("s3",), skipped_reason="detail_not_known"),
        # Not in memory: nothing injected, and no reason given.
        _outcome(answerable=False, sessions=("s4",), language="ko"),
        # Not in memory: an item of an unrelated session was injected (no abstention either).
        _outcome(answerable=False, sessions=("s4",), injected=(("s7",),)),
    ]
    stats = summarize(outcomes)
    assert stats["answerable"] == 2 and stats["not_in_memory"] == 4
    assert stats["l1_recall_at_5"] == 0.5
    assert stats["l1_recall_at_1"] == 0.5  # the second question's s2 is first
    assert stats["l0_recall"] == 0.5
    assert stats["l0_contamination"] == pytest.approx(2 / 3)  # s9 and the stale s1, of 3 items
    assert stats["l0_abstention"] == 0.5
    assert stats["l0_topic_injected"] == 0.25
    assert stats["stale_injected"] == 1.0
    assert stats["empty_answers"] == 2 and stats["empty_without_reason"] == 0.5
    tables = summary_tables(outcomes, ())
    assert set(tables["by_kind"]) == {"decision", "changed", "not_in_memory"}
    assert tables["by_kind"]["not_in_memory"]["not_in_memory"] == 4
    assert set(tables["by_split_language"]) == {"test/en", "test/ko"}
    checks = {c["target"]: c for c in target_checks(tables["by_split"])}
    assert checks["L0 recall (answerable)"]["met"] is False and checks["L0 recall (answerable)"]["held_out"]
    assert checks["empty answers without a reason"]["met"] is False


def test_baselines_are_scored_on_their_own_rankings() -> None:
    hit = _outcome(baselines={"dense turns": ("s1", "s2")})
    miss = _outcome(baselines={"dense turns": ("s1", "s3", "s4", "s5", "s6", "s2")})
    stats = summarize([hit, miss], ["dense turns"])
    assert stats["baselines_recall_at_5"] == {"dense turns": 0.5}
    assert stats["baselines_recall_at_1"] == {"dense turns": 0.0}
