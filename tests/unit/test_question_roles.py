"""The words of a value question a memory need not repeat (l0/question_roles.py), and the detail check
that leaves them out: pure."""

from __future__ import annotations

import pytest

from services.common.gateways.keywords import KeywordEncoder
from services.recall_api.l0.detail import detail_check, misses_the_detail
from services.recall_api.l0.question_roles import not_details

ENCODER = KeywordEncoder()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # the kind of the answer, after what / which, up to the auxiliary
        ("which database did we pick for Atlas?", {"database", "pick"}),
        ("what db are we on for atlas", {"db"}),
        ("What kind of car does John drive?", {"kind", "car", "drive"}),
        ("what type of bird is Captain", {"type", "bird"}),
        ("what self-hosted runners did we have", {"self", "hosted", "runners", "have"}),
        # the main verb after the auxiliary and its subject, past aspect adverbs
        ("what can't Bori eat again?", {"eat"}),
        ("when did we sign with amplitude?", {"sign"}),
        ("what are we still using for CI", {"using"}),
        ("when is pocket shipping now?", {"shipping"}),
        ("What did Caroline's dog eat?", {"eat"}),
        ("when did the team finally ship it", {"ship"}),
        # a subject question: the verb right after who
        ("who fixed the SSO bug?", {"fixed"}),
    ],
)
def test_the_answer_kind_and_the_action_are_read_from_the_grammar(question: str, expected: set[str]) -> None:
    assert not_details(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "What is Bori's breed?",  # be + a noun: no action asked about
        "what's the name of Bori's vet?",  # contracted be, a noun phrase after it
        "where is the party",  # no verb after the subject
        "which of the two offers did she take",  # "of" after which: no kind, the subject is "she"
        "tell me about Atlas",  # no interrogative
    ],
)
def test_a_question_without_those_roles_gives_nothing_or_only_its_verb(question: str) -> None:
    found = not_details(question)
    assert not found & {"breed", "name", "vet", "party", "two", "offers", "atlas"}


def test_which_of_gives_no_kind_but_keeps_the_verb() -> None:
    assert not_details("which of the two offers did she take") == {"take"}


def test_the_check_asks_only_for_what_the_question_is_about() -> None:
    decided = "Maya: postgres 16. mongo was on the table for like 2 weeks but Priya pushed hard for pg"
    check = detail_check("which database did we pick for Atlas?", {"atlas"}, ENCODER.tokens)
    # Only the kind and the action besides the entity: nothing left to ask of a memory.
    assert check is None
    allergy = detail_check("what can't Bori eat again?", {"bori"}, ENCODER.tokens)
    assert allergy is None
    vet = detail_check("which vet does Bori go to?", {"bori"}, ENCODER.tokens)
    assert vet is None  # "vet" is the answer's kind, "go" the action
    hotel_trip = detail_check("what did we book for the Lisbon offsite?", {"lisbon"}, ENCODER.tokens)
    assert hotel_trip is not None and hotel_trip.details == {"offsite"}
    assert misses_the_detail(hotel_trip, decided, ENCODER.tokens, dense=None, max_dense=0.2)
    assert not misses_the_detail(hotel_trip, "Maya: the Lisbon offsite is in May", ENCODER.tokens, None, 0.2)


def test_korean_kind_after_an_interrogative_determiner_is_not_a_detail() -> None:
    check = detail_check("한빛페이 무슨 DB 쓰기로 했지?", {"한빛"}, ENCODER.tokens)
    assert check is None or "db" not in check.details
    kept = detail_check("한빛페이 데이터베이스는 뭘로 하기로 했지?", {"한빛"}, ENCODER.tokens)
    assert kept is not None and "데이터" in kept.details  # 뭐 is a pronoun: the noun is a detail
