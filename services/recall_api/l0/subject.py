"""Subject attribution for abstention, pure: the question is about one person, the memory that
matched is what someone else said or did.

A conversation between people (a group chat, an imported transcript, a labelled chat) stores each
turn with its speaker ("Caroline: I ran a charity race"). A question naming one of those speakers
("What did Melanie realise after the charity race?") is matched by the words of the event, whoever
it happened to. When the lines of the memory that carry the question's words were all said by
another known speaker, and do not name the person asked about either, the memory answers a different
question: injecting it would hand the model a false premise. Nothing relevant is known is then the
honest answer.

Known speakers are read from the memories themselves (the labels of their lines, the subjects of
facts), so the rule needs no list of names and applies to any conversation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_SPEAKER_LINE = re.compile(r"^\s*([^\s:：][^:：\n]{0,39}?)\s*[:：]\s+(\S.*)$")
_MAX_LABEL_WORDS = 4
# A line spoken to someone ("What are their names?", "did you see that band?") is about its listener,
# who may well be the person asked about: it never counts as evidence about someone else.
_SECOND_PERSON = re.compile(r"(?<!\w)(?:you|your|yours|yourself|u|ur|너|네가|니가|너의|당신|자네)(?!\w)|\?", re.I)

Tokenise = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class Line:
    speaker: str | None
    text: str


def speaker_lines(text: str) -> list[Line]:
    """The memory text as lines, each with its "Speaker:" label when it has one."""
    lines: list[Line] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        match = _SPEAKER_LINE.match(raw)
        if match is not None and len(match.group(1).split()) <= _MAX_LABEL_WORDS:
            lines.append(Line(match.group(1).strip(), match.group(2).strip()))
        else:
            lines.append(Line(None, raw.strip()))
    return lines


def known_speakers(texts: Iterable[str]) -> set[str]:
    """Every speaker label seen in the texts (casefolded)."""
    return {speaker for text in texts for speaker in _speakers(text)}


def _speakers(text: str) -> frozenset[str]:
    """The speaker labels of one text (casefolded), kept for texts up to `_CACHED_TEXT_CHARS`: L0 reads
    them for every candidate of every turn, and the same memories come back turn after turn; the bound
    keeps the cache's memory at ~8,192 × 4 KB whatever texts arrive."""
    return _cached_speakers(text) if len(text) <= _CACHED_TEXT_CHARS else _labels(text)


_CACHED_TEXT_CHARS = 4_096


@functools.lru_cache(maxsize=8_192)
def _cached_speakers(text: str) -> frozenset[str]:
    return _labels(text)


def _labels(text: str) -> frozenset[str]:
    return frozenset(line.speaker.casefold() for line in speaker_lines(text) if line.speaker)


def _mentions(text: str, person: str) -> bool:
    """`person` (casefolded) named in `text`: as a whole word, or inside Hangul text (Korean attaches
    particles: "민수가", "민수는")."""
    folded = text.casefold()
    if any("\uac00" <= ch <= "\ud7a3" for ch in person):
        return person in folded
    return re.search(rf"(?<!\w){re.escape(person)}(?!\w)", folded) is not None


def names_as_subject(text: str, person: str) -> bool:
    """`person` is named in `text` other than only as the one spoken to: "Thanks, Melanie!" and "Hey
    Melanie," address her (the line is about its speaker); "Melanie's pets" or "Melanie went" are
    about her."""
    if not _mentions(text, person):
        return False
    if any("\uac00" <= ch <= "\ud7a3" for ch in person):
        return True  # Korean vocatives (민수야, 민수 씨) are not told apart here: count the mention
    mentions = re.finditer(rf"(?<!\w){re.escape(person)}(?!\w)", text.casefold())
    return any(not re.match(r"\s*[!,?]", text[m.end() :]) for m in mentions)


def people_asked_about(query: str, speakers: Iterable[str]) -> set[str]:
    """The known speakers the query names."""
    return {person for person in speakers if person and _mentions(query, person)}


def evidence_lines(lines: Sequence[Line], query_terms: set[str], tokenise: Tokenise) -> list[Line]:
    """The lines sharing the most query terms with the query (at least one); empty when none does."""
    best: list[Line] = []
    best_overlap = 0
    for line in lines:
        overlap = len(query_terms & set(tokenise(line.text)))
        if overlap > best_overlap:
            best, best_overlap = [line], overlap
        elif overlap == best_overlap and overlap > 0:
            best.append(line)
    return best


@dataclass(frozen=True, slots=True)
class SubjectCheck:
    """The one known speaker the query asks about, the query's terms without names, every known speaker."""

    person: str
    terms: set[str]
    speakers: frozenset[str]


def subject_check(query: str, speakers: set[str], tokenise: Tokenise) -> SubjectCheck | None:
    """A check when the query names exactly one known speaker (None otherwise: nothing to attribute)."""
    named = people_asked_about(query, speakers)
    if len(named) != 1:
        return None
    name_terms = {term for person in speakers for term in tokenise(person)}
    terms = set(tokenise(query)) - name_terms
    return SubjectCheck(next(iter(named)), terms, frozenset(speakers)) if terms else None


def about_someone_else(check: SubjectCheck, text: str, tokenise: Tokenise, *, subject: str | None = None) -> bool:
    """True when the memory's evidence for the query is another known speaker's and does not name the
    person asked about. `subject`: a fact's subject (a fact about another known speaker is theirs; a
    subject that is no known speaker, "user" or a project, decides nothing)."""
    if subject is not None:
        folded = subject.casefold().strip()
        return folded in check.speakers and folded != check.person and not _mentions(text, check.person)
    lines = [line for line in speaker_lines(text) if line.speaker]
    evidence = evidence_lines(lines, check.terms, tokenise)
    if not evidence:
        return False
    if any(line.speaker and line.speaker.casefold() == check.person for line in evidence):
        return False
    if any(_SECOND_PERSON.search(line.text) for line in evidence):
        return False
    return not any(names_as_subject(line.text, check.person) for line in evidence)
