"""What "the value" of a forgotten fact is (services/common/domain/value_text.py and
services/pruner/value_needles.py), and that every place a value can reach has a redaction."""

from __future__ import annotations

from typing import Any

from services.common.domain.value_text import make_needle, needles_of, text_mentions
from services.common.gateways.keywords import KeywordEncoder, term_index
from services.common.stores.graph.repository import EntityRecord
from services.common.stores.value_places import PLACE_NAMES, keyword_terms
from services.pruner.fact_erasure import FactErasure
from services.pruner.value_needles import names_for_value


def _found(needle_text: str, text: str) -> bool:
    needle = make_needle(needle_text)
    assert needle is not None
    return needle.found_in(text)


def test_the_value_is_a_phrase_matched_case_insensitively_with_plural_and_hyphen_forms() -> None:
    assert _found("Xanthorrhoea nuts", "I'm allergic to xanthorrhoea nuts.")
    assert _found("Xanthorrhoea nuts", "no XANTHORRHOEA-NUT sauce, please")
    assert _found("Xanthorrhoea nuts", "a Xanthorrhoea\nnut")
    assert _found("I’m vegan", "I'm vegan")  # curly and straight apostrophes are one
    assert _found("Busan", "busan에서")


def test_what_only_shares_a_word_with_the_value_is_not_the_value() -> None:
    assert not _found("Xanthorrhoea nuts", "Noted: Xanthorrhoea allergy")  # that is the entity's name, below
    assert not _found("pine nuts", "I'm allergic to peanuts")
    assert not _found("pine nuts", "pineapple nuts")
    assert not _found("cashew allergy", "the allergy clinic is on Tuesday")
    assert not _found("cashew allergy", "I love peanut butter")


def test_a_short_capitalised_word_keeps_its_case() -> None:
    assert _found("Go", "written in Go.")
    assert not _found("Go", "let's go home")
    assert _found("AWS", "on AWS")
    assert not _found("AWS", "aws")


def test_needles_are_distinct_and_skip_blank_texts() -> None:
    assert [n.text for n in needles_of(["Busan", " ", "Busan", "The user lives in Busan."])] == [
        "Busan",
        "The user lives in Busan.",
    ]


def _entity(name: str, aliases: tuple[str, ...] = (), episodes: tuple[str, ...] = ("e1",)) -> EntityRecord:
    return EntityRecord(
        key=f"key-{name}",
        tenant_id="acme",
        scope="personal",
        name=name,
        name_norm=name.casefold(),
        entity_type="other",
        aliases=aliases,
        user_ids=("carol",),
        episode_ids=episodes,
        merged_keys=(),
        created_at_ts=None,
        updated_at_ts=None,
    )


def test_the_graphs_names_for_the_value_and_every_merged_alias_are_part_of_it() -> None:
    merged = _entity("Xanthorrhoea", aliases=("Xanthorhoea",), episodes=("e1", "e2"))
    names = names_for_value("Xanthorrhoea nuts", [merged], frozenset({"e1"}))
    assert names == ["Xanthorrhoea", "Xanthorhoea"]


def test_generic_short_and_unrelated_entities_are_not_part_of_the_value() -> None:
    entities = [
        _entity("nuts"),  # a common noun: forgetting it would forget "pine nuts"
        _entity("Xa"),  # too short to be told from a word
        _entity("Xanthorrhoea", episodes=("elsewhere",)),  # not observed with the fact
        _entity("Priya Raman"),  # observed with it, but not in the value
    ]
    assert names_for_value("Xanthorrhoea nuts", entities, frozenset({"e1"})) == []
    # An API save has no episode: an entity named exactly the value still counts.
    exact = _entity("Xanthorrhoea", aliases=("X. nuts",), episodes=("elsewhere",))
    assert names_for_value("Xanthorrhoea", [exact], frozenset({"e1"})) == ["Xanthorrhoea", "X. nuts"]
    assert names_for_value("Xanthorrhoea nuts", [exact], frozenset()) == ["Xanthorrhoea", "X. nuts"]


def test_every_place_a_value_can_reach_has_a_redaction() -> None:
    unbuilt: Any = None
    erasure = FactErasure(unbuilt, unbuilt, unbuilt, "fact", [], frozenset())
    assert tuple(erasure.redactors()) == PLACE_NAMES
    # The writers in flight are waited for after the raw sessions are replaced, and before verifying.
    steps = [name for name, _ in erasure.steps()]
    after_sessions = PLACE_NAMES.index("sessions") + 1
    assert steps == [
        *PLACE_NAMES[:after_sessions], "drain", *PLACE_NAMES[after_sessions:], "last_drain", "verify"
    ]  # fmt: skip


def test_labels_are_not_remembered_text() -> None:
    """A value that equals an id ("Carol" the name, "carol" the user id) is found in what was said,
    never in the fields that name or time a record: else every record of the user would mention it."""
    needles = needles_of(["Carol"])
    session: dict[str, Any] = {
        "tenant_id": "acme",
        "user_id": "carol",
        "session_id": "carol-1",
        "channel": "private",
        "messages": [{"role": "user", "content": "I booked the dentist.", "ts": "2026-05-02T10:00:00Z"}],
        "metadata": {"customer_id": "carol"},
    }
    assert not text_mentions(session, needles)
    session["messages"].append({"role": "assistant", "content": "Noted, Carol."})
    assert text_mentions(session, needles)
    assert text_mentions({"provenance": [{"episode_id": "e1", "note": "said by carol"}]}, needles)


def test_the_keyword_index_is_asked_about_single_words_only() -> None:
    """The index holds words without their order: a phrase would be 'found' wherever its words are."""
    encoder = KeywordEncoder()

    def terms(text: str) -> list[int]:
        needle = make_needle(text)
        assert needle is not None
        return keyword_terms(encoder, needle)

    assert len(terms("Xanthorrhoea")) == 1
    assert terms("pine nuts") == []
    assert terms("Go") == []  # "Go" and "go" are one term in the index
    # The word's own term, not its stem: an erasure of "running" must not find every text with "run".
    assert terms("running") == [term_index("running")]
