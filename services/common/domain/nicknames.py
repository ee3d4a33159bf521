"""Names people call each other, pure. In a chat "Jonathan" is "Jonny" to his friend ("hey Jonny",
"thanks jo!", "Jonny, did you ..."): a later question using the nickname must find the passages
where Jonathan speaks. `speaker_aliases` reads such vocatives and gives each participant the other
names they are called.

Conservative by construction (a wrong alias makes every passage of that speaker match a stranger's
name):
- only vocative positions count: right after a greeting or thanks ("hey Jonny!", "thanks jo"),
  at the end of a message after a comma ("see you, Jonny!"), or at the start before a comma
  ("Jonny, did you ...", weaker: it needs to be seen twice);
- the name is one word, not a participant's own name, not a pronoun, a quantifier or a generic
  term of address ("hey guys", "thanks man"), and never used elsewhere in the session as an
  ordinary lowercase word;
- a capitalised form is taken from one strong vocative, a lowercase one needs two;
- the addressee is the other participant of a two-party chat; with more participants, the next
  other speaker, and only when the same name goes to the same person at least twice.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contracts.events import Message

# Openers after which a single word is the person addressed.
_OPENERS = (
    r"hey|hi|hiya|hello|yo|heya|howdy|thanks|thank you|thx|ty|cheers|morning|good morning|good night|"
    r"night|bye|congrats|congratulations|sorry|welcome|miss you|love you|see you|happy birthday"
)
_WORD = r"[^\W\d_][^\W\d_'’-]{1,19}"
# Where a vocative ends: punctuation, an emoji or the end of the message.
_END = r"(?=\s*(?:[,.!?;:~)]|$|[\U0001F300-\U0001FAFF\u2600-\u27BF]))"
_AFTER_OPENER = re.compile(rf"(?:^|[.!?]\s+)(?:{_OPENERS})[,!]?\s+(?P<name>{_WORD}){_END}", re.IGNORECASE)
# "see you, Jonny!": strong with an exclamation, a question or an emoji, weak with a full stop; never
# after a capitalised word ("Portland, Oregon." is a place).
_AT_END = re.compile(
    rf",\s*(?P<name>{_WORD})\s*(?P<end>[.!?~]*)\s*(?P<emoji>[\U0001F300-\U0001FAFF\u2600-\u27BF]\s*)*$"
)
# "Jonny, did you ...": a sentence-initial word before a comma is a name only when the rest speaks
# to the listener.
_AT_START = re.compile(rf"^(?P<name>{_WORD})\s*,\s+(?=[^.!]*(?:\b(?:you|your|u|ya)\b|\?))", re.IGNORECASE)

# Words that stand where a name would but are not one: pronouns, quantifiers, discourse words and
# generic terms of address (closed classes of English, not names of anyone).
_NOT_NAMES = frozenset(
    """
    i me you u ya yall y'all we us they them he him she her it everyone everybody all both guys guy folks
    team there again too so much lot lots tons anyway though then now today tonight tomorrow yesterday
    man dude bro bruh buddy bud mate pal friend friends girl girls boy boys babe baby honey dear love
    sweetie darling hun sis sir maam ma'am lady ladies gentlemen fam homie boss chief kid kids
    well oh ah um uh hmm wow yes yeah yep yup no nope ok okay sure alright right cool nice great good
    lol haha hahaha omg btw also but and or actually basically honestly seriously really anyways
    for the a an this that what why how when where who which here everything anything something nothing
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december
    """.split()  # noqa: SIM905 - a word list reads better as text
) | {word for opener in _OPENERS.split("|") for word in opener.split()}
_LOWER_WORD = re.compile(r"(?<![\w'’])[a-z][a-z'’-]+(?![\w'’])")


@dataclass(frozen=True, slots=True)
class _Vocative:
    name: str
    strong: bool
    message: int


def _after_capitalised(text: str, comma: int) -> bool:
    """Whether the word before the comma is capitalised: "Portland, Oregon" lists places, not people."""
    before = text[:comma].split()
    # A capital that only starts a sentence ("Thanks, Jonny!", "Great. Sure, Jonny!") says nothing.
    sentence_start = len(before) < 2 or before[-2].endswith((".", "!", "?"))
    return bool(before) and before[-1][:1].isupper() and not sentence_start


def _vocatives(text: str, message: int) -> list[_Vocative]:
    strong = [m.group("name") for m in _AFTER_OPENER.finditer(text)]
    weak: list[str] = []
    if (end := _AT_END.search(text)) is not None and not _after_capitalised(text, end.start()):
        exclaimed = bool(end.group("emoji")) or any(ch in end.group("end") for ch in "!?")
        (strong if exclaimed else weak).append(end.group("name"))
    start = _AT_START.match(text)
    if start is not None and start.group("name")[:1].isupper():
        weak.append(start.group("name"))
    found: dict[str, _Vocative] = {}  # one vote per name and message
    for name, is_strong in [*((n, True) for n in strong), *((n, False) for n in weak)]:
        if name.casefold() not in _NOT_NAMES and not name.casefold().endswith("ly") and name not in found:
            found[name] = _Vocative(name, is_strong, message)
    return list(found.values())


def _speaker(message: Message) -> str:
    return " ".join((message.name or "").split())


def _addressee(messages: Sequence[Message], index: int, participants: Sequence[str]) -> str | None:
    writer = _speaker(messages[index])
    others = [p for p in participants if p != writer]
    if len(others) == 1:
        return others[0]
    for later in messages[index + 1 :]:
        if _speaker(later) and _speaker(later) != writer:
            return _speaker(later)
    return None


def _ordinary_words(messages: Sequence[Message], vocative_spans: set[tuple[int, str]]) -> Counter[str]:
    """Lowercase words used outside vocatives, per message: a name is not an ordinary word."""
    counts: Counter[str] = Counter()
    for index, message in enumerate(messages):
        for word in _LOWER_WORD.findall(message.content):
            if (index, word) not in vocative_spans:
                counts[word.casefold()] += 1
    return counts


def _accepted(votes: Sequence[_Vocative], two_party: bool) -> bool:
    strong_capitalised = any(v.strong and v.name[:1].isupper() for v in votes)
    strong = sum(1 for v in votes if v.strong)
    capitalised = sum(1 for v in votes if v.name[:1].isupper())
    enough = strong_capitalised or strong >= 2 or capitalised >= 2
    return enough and (two_party or len({v.message for v in votes}) >= 2)


def _display_form(votes: Sequence[_Vocative]) -> str:
    capitalised = Counter(v.name for v in votes if v.name[:1].isupper())
    if capitalised:
        return capitalised.most_common(1)[0][0]
    return votes[0].name[:1].upper() + votes[0].name[1:]


def speaker_aliases(messages: Sequence[Message]) -> dict[str, tuple[str, ...]]:
    """Display name → other names the participant is called in the session (see the module doc).
    Only named user/assistant turns take part; a session with fewer than two named participants
    has no aliases."""
    chat = [m for m in messages if m.role in ("user", "assistant") and _speaker(m)]
    participants = list(dict.fromkeys(_speaker(m) for m in chat))
    if len(participants) < 2:
        return {}
    own_names = {word.casefold() for p in participants for word in re.findall(r"[^\W\d_]+", p)}
    votes: dict[tuple[str, str], list[_Vocative]] = defaultdict(list)
    spans: set[tuple[int, str]] = set()
    for index, message in enumerate(chat):
        for vocative in _vocatives(message.content, index):
            spans.add((index, vocative.name))
            addressee = _addressee(chat, index, participants)
            if addressee is not None and vocative.name.casefold() not in own_names:
                votes[(vocative.name.casefold(), addressee)].append(vocative)
    ordinary = _ordinary_words(chat, spans)
    addressees_of: Counter[str] = Counter(key for key, _ in votes)
    aliases: dict[str, list[str]] = defaultdict(list)
    for (key, addressee), found in votes.items():
        # One name for two people, or a word also used as a word, is not a nickname.
        if addressees_of[key] > 1 or ordinary[key] > 0 or not _accepted(found, len(participants) == 2):
            continue
        aliases[addressee].append(_display_form(found))
    return {name: tuple(found) for name, found in aliases.items()}


def aliases_from(value: object) -> dict[str, tuple[str, ...]]:
    """Aliases as stored (speaker → list of names); anything else, or a point from before aliases,
    reads as none."""
    if not isinstance(value, Mapping):
        return {}
    return {
        str(speaker): tuple(str(name) for name in names)
        for speaker, names in value.items()
        if isinstance(names, list | tuple)
    }
