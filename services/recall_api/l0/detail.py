"""Detail coverage for abstention, pure: the topic is known, the asked detail was never said.

"What time is the flight to Jeju?" after a session that only planned a family trip to Jeju matches
that session on its topic word alone. The honest L0 answer is nothing: the memory cannot answer the
question, and injecting it invites the model to make the detail up. So when the query names a known
entity (a name from the memories themselves: their speakers and extracted entity names), asks about
at least one other content word, and a memory covers none of those words (and is not close in meaning
either), that memory is left out.

Content words are the query's keyword terms minus the entity's own word; in Korean only nouns and
foreign words count (a verb like 가다 "go" is in every plan and says nothing about the detail). The
words naming the answer's kind ("which *database*", 무슨 *DB*) and the action asked about ("did we
*pick*") are not asked for, since an answer says "postgres 16" and people paraphrase the verb
(question_roles.py); a memory that says them still covers the question, and a question with nothing
else to ask about gets no check.

The check applies only to a question that asks for a value: what, which, when, where, who, how many
(뭐, 무슨, 어느, 언제, 어디, 누구, 몇, 얼마). Such a question is answered by one stated detail, and a memory
that never states it cannot answer. A question that asks how something went or why ("how is the
project going?", "바질 잎이 왜 노랗게 변할까?") and a request ("plan my routine") are answered by the topic
itself: the memory of it is the context the answer needs, whatever words the question uses. The
interrogatives are the closed word class of each language's grammar, not a list made for any data;
for Korean they are read from kiwi's morphemes (뭘로 → 뭐/NP + 로), so particles and contractions do not
hide them.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.common.gateways import kiwi
from services.common.gateways.keywords import FALLBACK_MARKS
from services.recall_api.l0.question_roles import ASPECT_ADVERBS, not_details

if TYPE_CHECKING:
    from kiwipiepy import Token

Tokenise = Callable[[str], list[str]]
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_NOUN_TAGS = ("NNG", "NNP", "SL", "SH", "SN", "XR")


@dataclass(frozen=True, slots=True)
class DetailCheck:
    """The known entities the query names and the content terms it asks about besides them."""

    entities: frozenset[str]
    details: frozenset[str]
    # The question's words that name the answer's kind or the action: a memory that says one of them
    # covers the question, but they are not asked for (question_roles.py).
    roles: frozenset[str] = frozenset()


def _query_words_naming(query: str, entities: Iterable[str]) -> tuple[set[str], list[str]]:
    """The entities (casefolded) the query names, and the whole query words that name them (a Korean
    word carries particles and compounds: "한빛페이는" names "한빛")."""
    words = query.casefold().split()
    named: set[str] = set()
    naming_words: list[str] = []
    for entity in {e.casefold().strip() for e in entities if e.strip()}:
        hits = [word for word in words if entity in word] if _HANGUL.search(entity) else []
        if not hits:
            pattern = re.compile(rf"(?<!\w){re.escape(entity)}(?!\w)")
            hits = [word for word in words if pattern.search(word)] if pattern.search(query.casefold()) else []
        if hits:
            named.add(entity)
            naming_words.extend(hits)
    return named, naming_words


@functools.lru_cache(maxsize=256)
def _query_morphemes(query: str) -> tuple[Token, ...]:
    """Kiwi's morphemes of a query, kept for the turns that repeat it: the detail check reads them
    twice a turn (its interrogative, its nouns), ~0.3 ms each for a Korean query."""
    return tuple(kiwi.tokenize(query))


def prepare_query(query: str) -> None:
    """Analyse a Korean query's morphemes now, for the detail check after the search: L0 calls this
    while the query embeds, when the cores have room (the embedding's threads wait passively between
    its steps, so work on the event loop meanwhile does not slow the embedding)."""
    if _HANGUL.search(query):
        _query_morphemes(query)


# 무슨 DB, 어떤 프레임워크, 어느 병원: the noun after the interrogative determiner names the answer's kind.
_KO_KIND_DETERMINERS = frozenset({"무슨", "어떤", "어느"})


def _korean_answer_kind(query: str) -> set[str]:
    tokens = _query_morphemes(query)
    return {
        after.form.casefold()
        for token, after in itertools.pairwise(tokens)
        if token.form in _KO_KIND_DETERMINERS and after.tag.startswith(_NOUN_TAGS)
    }


def _korean_nouns(query: str) -> set[str]:
    return {token.form.casefold() for token in _query_morphemes(query) if token.tag.startswith(_NOUN_TAGS)}


# Interrogatives that ask for one stated value. Korean by kiwi morpheme (어떤 "which" asks for a value;
# 어떻게 "how" and 왜 "why" do not); English by word, "how" only with a quantity word after it.
_KO_VALUE_INTERROGATIVES = frozenset({"뭐", "무엇", "어디", "언제", "누구", "몇", "무슨", "어느", "얼마", "어떤"})
_EN_VALUE_INTERROGATIVES = frozenset({"what", "which", "when", "where", "who", "whom", "whose"})
_EN_HOW_QUANTITIES = frozenset({"many", "much", "long", "old", "often", "far", "big"})
_LATIN_WORD = re.compile(r"[a-z']+")


def asks_for_value(query: str) -> bool:
    """The question asks for one stated value (what, when, who, how many; 뭐, 언제, 누구, 몇 ...)."""
    if _HANGUL.search(query) and any(token.form in _KO_VALUE_INTERROGATIVES for token in _query_morphemes(query)):
        return True
    words = _LATIN_WORD.findall(query.casefold())
    if any(word in _EN_VALUE_INTERROGATIVES for word in words):
        return True
    return any(word == "how" and after in _EN_HOW_QUANTITIES for word, after in itertools.pairwise(words))


def detail_check(query: str, entities: Iterable[str], tokenise: Tokenise) -> DetailCheck | None:
    """A check when the query asks for a value, names a known entity and asks about something besides
    it."""
    if not asks_for_value(query):
        return None
    named, naming_words = _query_words_naming(query, entities)
    if not named:
        return None
    entity_terms = {term for word in naming_words for term in tokenise(word)}
    terms = [
        t
        for t in tokenise(query)
        if not t.startswith(FALLBACK_MARKS) and t not in entity_terms and not any(t in word for word in naming_words)
    ]
    # The answer's kind, the action and aspect words count when a memory says them, but a question
    # that asks about nothing else gets no check (question_roles.py).
    roles = set(tokenise(" ".join(sorted(not_details(query) | ASPECT_ADVERBS))))
    if any(_HANGUL.search(t) for t in terms):
        nouns = _korean_nouns(query)
        roles |= _korean_answer_kind(query)
        terms = [t for t in terms if not _HANGUL.search(t) or t in nouns]
    asked = frozenset(terms)
    details = asked - roles
    return DetailCheck(frozenset(named), details, asked & roles) if details else None


# Terms sharing this many leading characters count as the same word ("camped" / "camping",
# "painted" / "painting"): the keyword encoder only folds plurals.
STEM_PREFIX = 5


def stem(term: str) -> str:
    """The term's first `STEM_PREFIX` characters for a longer Latin word, else the term itself."""
    return term[:STEM_PREFIX] if len(term) > STEM_PREFIX and not _HANGUL.search(term) else term


def covers(check: DetailCheck, text: str, tokenise: Tokenise) -> bool:
    """The text names at least one asked detail (same word, or the same stem for longer Latin words)."""
    stems = {stem(term) for term in tokenise(text)}
    return any(stem(detail) in stems for detail in check.details | check.roles)


def misses_the_detail(check: DetailCheck, text: str, tokenise: Tokenise, dense: float | None, max_dense: float) -> bool:
    """The memory covers none of the asked details and is not close in meaning (dense part below
    `max_dense`; unknown counts as not close)."""
    if dense is not None and dense >= max_dense:
        return False
    return not covers(check, text, tokenise)
