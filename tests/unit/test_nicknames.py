"""Names people call each other (domain/nicknames.py), on synthetic chats: vocatives give aliases,
ordinary words, generic terms of address and the participants' own names never do."""

from __future__ import annotations

from contracts.events import Message
from services.common.domain.nicknames import aliases_from, speaker_aliases


def chat(*turns: tuple[str, str]) -> list[Message]:
    names = list(dict.fromkeys(name for name, _ in turns))
    roles = {name: ("user" if i == 0 else "assistant") for i, name in enumerate(names)}
    return [Message(role=roles[name], name=name, content=text) for name, text in turns]  # type: ignore[arg-type]


def test_a_capitalised_vocative_after_a_greeting_names_the_other_participant() -> None:
    messages = chat(("Maria", "hey Jonny! how was the concert?"), ("Jonathan", "amazing, thanks Maria"))
    assert speaker_aliases(messages) == {"Jonathan": ("Jonny",)}


def test_vocatives_at_the_end_and_the_start_count() -> None:
    at_end = chat(("Maria", "See you tomorrow, Jonny!"), ("Jonathan", "bye"))
    assert speaker_aliases(at_end) == {"Jonathan": ("Jonny",)}
    # A full stop makes it weak, and a capitalised word before the comma makes it a place.
    assert speaker_aliases(chat(("Maria", "It was fun, Jonny."), ("Jonathan", "yes"))) == {}
    places = chat(("Maria", "We moved to Portland, Oregon!"), ("Jonathan", "cool"), ("Maria", "Love Salem, Oregon!"))
    assert speaker_aliases(places) == {}
    # Sentence-initial before a comma is weak: once is not enough, twice (speaking to the listener) is.
    once = chat(("Maria", "Jonny, did you book it?"), ("Jonathan", "yes"))
    assert speaker_aliases(once) == {}
    twice = chat(("Maria", "Jonny, did you book it?"), ("Jonathan", "yes"), ("Maria", "Jonny, are you coming?"))
    assert speaker_aliases(twice) == {"Jonathan": ("Jonny",)}


def test_a_lowercase_form_needs_two_sightings() -> None:
    once = chat(("Maria", "thanks jo!"), ("Jonathan", "np"))
    assert speaker_aliases(once) == {}
    twice = chat(("Maria", "thanks jo!"), ("Jonathan", "np"), ("Maria", "night jo"))
    assert speaker_aliases(twice) == {"Jonathan": ("Jo",)}


def test_generic_address_own_names_and_ordinary_words_are_not_aliases() -> None:
    messages = chat(
        ("Maria", "hey guys! thanks man. Hi there!"),
        ("Jonathan", "Thanks Maria! Hey Mar, thank you!"),  # "Mar" is Maria's: fine, but not Jonathan's
        ("Maria", "Honestly, you rock. Anyway, did you eat? thanks love"),
        ("Maria", "night sunshine"),
        ("Maria", "bye sunshine"),
        ("Jonathan", "the sunshine was lovely today"),  # an ordinary word: not a name
    )
    assert speaker_aliases(messages) == {"Maria": ("Mar",)}


def test_an_alias_in_a_group_needs_the_same_person_twice() -> None:
    group = chat(
        ("Ann", "hey Bobby!"),
        ("Robert", "hi"),
        ("Cleo", "yo"),
        ("Ann", "thanks Bobby!"),
        ("Robert", "sure"),
    )
    assert speaker_aliases(group) == {"Robert": ("Bobby",)}
    once = group[:3]
    assert speaker_aliases(once) == {}


def test_a_name_said_to_two_people_or_a_lone_speaker_gives_nothing() -> None:
    assert speaker_aliases(chat(("Maria", "hey Jonny!"))) == {}
    confused = chat(
        ("Ann", "hey Bo!"),
        ("Robert", "hi"),
        ("Ann", "hey Bo!"),
        ("Robert", "x"),
        ("Ann", "hey Bo!"),
        ("Cleo", "me?"),
        ("Ann", "thanks Bo!"),
        ("Cleo", "ok"),
    )
    assert speaker_aliases(confused) == {}


def test_stored_aliases_read_back_and_junk_reads_as_none() -> None:
    assert aliases_from({"Jonathan": ["Jonny"]}) == {"Jonathan": ("Jonny",)}
    assert aliases_from(None) == {} and aliases_from("Jonny") == {} and aliases_from({"x": "y"}) == {}
