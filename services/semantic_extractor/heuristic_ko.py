"""The Korean reader of the heuristic extractor: proper nouns from Kiwi's morphemes, predicate
patterns ("서울에 살아요", "Vim을 써요") with their tense and mood, and the subject check on topic and
subject markers ("제 친구는 R을 써요" is the friend's).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from services.common.domain.facts import USER_SUBJECT, normalise_text_key, transient_reason
from services.semantic_extractor.gazetteers import (
    KO_RELATION_NOUNS,
    ORGANISATIONS,
    PLACES,
    TECH_LOWERCASE_OK,
    TECHNOLOGIES,
)
from services.semantic_extractor.heuristic_context import (
    MULTI_VALUE_ATTRIBUTES,
    ExtractionContext,
    Speaker,
    cooccurrence,
    guess_type,
    is_capitalised,
    record_fact,
)
from services.semantic_extractor.korean_morphology import HANGUL, Morpheme, korean_morphemes
from services.semantic_extractor.schema import EntityType

_NOUNISH = frozenset({"NNP", "NNG", "SL", "SN", "SH", "NR", "XSN", "XPN", "NNB", "SW", "SO"})
_PROPER = frozenset({"NNP", "SL", "SH"})
_KO_STOP_NOUNS = frozenset(
    {
        "요즘", "지금", "현재", "오늘", "이제", "항상", "주로", "보통", "정말", "진짜", "제일", "가장", "요새", "최근",
        "원래", "계속", "다시", "매일", "아직", "예전", "나중", "처음", "요번", "이번", "저번", "작년", "올해", "내년",
    }
)  # fmt: skip
_KO_USER_PRONOUNS = frozenset({"저", "나", "내", "제"})
_KO_WE_PRONOUNS = frozenset({"우리", "저희"})
_KO_USER_NOUNS = frozenset({"사용자", "유저", "본인"})
_KO_TOPIC_FORMS = frozenset({"는", "은", "ᆫ"})
_KO_TITLES = frozenset(
    {"씨", "님", "팀장", "대리", "과장", "부장", "차장", "사장", "교수", "박사", "선생님", "선배", "후배", "군", "양"}
)
_KO_DIET = re.compile(
    r"(?P<val>채식주의자|채식주의|비건|페스코|베지테리언|채식)\s*(?:이에요|예요|입니다|이야|야|이다|다|해요|합니다|해|중이에요|을\s*해요|을\s*합니다|을\s*하고)"
)
_KO_DIET_VALUES = {"채식주의": "채식주의자", "채식": "채식주의자", "베지테리언": "채식주의자"}


@dataclass(frozen=True, slots=True)
class _KoPredicate:
    attribute: str
    head: int  # index of the token the value's particle attaches to
    particle_forms: frozenset[str]
    particle_tags: frozenset[str]
    mood_from: int  # first token after the predicate stem
    past_ok: bool = False
    proper_value: bool = False


def korean_sentence(sentence: str, speaker: Speaker, context: ExtractionContext) -> None:
    tokens = korean_morphemes(sentence)
    keys = _korean_entities(sentence, tokens, context)
    cooccurrence(keys, context)
    if sentence.rstrip().endswith("?"):
        return
    for predicate in _korean_predicates(tokens):
        spans, negated_before = _ko_value_spans(tokens, predicate)
        if not spans:
            continue
        mood = _ko_mood(tokens, predicate.mood_from)
        if negated_before or mood & {"negated", "want", "future", "conditional"}:
            continue
        if "past" in mood and not predicate.past_ok:
            continue
        if transient_reason(sentence, attribute=predicate.attribute) is not None:
            continue
        subject = _ko_subject(tokens, spans[0][0], speaker, context, predicate.attribute)
        if subject is None:
            continue
        for first, last in spans:
            value_tokens = tokens[first : last + 1]
            value = sentence[value_tokens[0].start : value_tokens[-1].end].strip()
            if predicate.attribute == "works_on":
                value = re.sub(r"\s*(?:프로젝트|project)$", "", value, flags=re.IGNORECASE).strip()
            if not value or value in _KO_STOP_NOUNS:
                continue
            if predicate.proper_value and not _ko_is_named(value, value_tokens):
                continue
            record_fact(subject, predicate.attribute, value, context)
    _korean_name_fact(sentence, tokens, speaker, context)
    for match in _KO_DIET.finditer(sentence):
        index = next((i for i, tok in enumerate(tokens) if tok.start >= match.start()), len(tokens))
        after = next((i for i, tok in enumerate(tokens) if tok.start >= match.end("val")), len(tokens))
        if _ko_mood(tokens, after) & {"negated", "want", "future", "conditional", "past"}:
            continue
        subject = _ko_subject(tokens, index, speaker, context, "diet")
        if subject is not None:
            value = match.group("val")
            context.add_fact(subject, "diet", _KO_DIET_VALUES.get(value, value))


_JKB = frozenset({"JKB"})
_JKO = frozenset({"JKO"})
_AT = frozenset({"에"})
_IN = frozenset({"에", "에서"})
_TO = frozenset({"으로", "로", "에"})
_OBJECT = frozenset({"을", "를", "ᆯ"})


@dataclass(frozen=True, slots=True)
class _PredicatePattern:
    """A predicate stem and where its value stands: `stem` says how the stem is written, as a verb
    ("살다"), a noun that takes 하다 ("거주하다") or a bare noun ("이사")."""

    attribute: str
    forms: frozenset[str]
    stem: Literal["verb", "noun+하", "noun"]
    particle_forms: frozenset[str]
    particle_tags: frozenset[str]
    past_ok: bool = False
    proper_value: bool = False


_PREDICATE_PATTERNS: tuple[_PredicatePattern, ...] = (
    _PredicatePattern("lives_in", frozenset({"살"}), "verb", _IN, _JKB, proper_value=True),
    _PredicatePattern("lives_in", frozenset({"거주"}), "noun+하", _IN, _JKB, proper_value=True),
    _PredicatePattern("lives_in", frozenset({"이사"}), "noun", _TO, _JKB, past_ok=True, proper_value=True),
    _PredicatePattern("employer", frozenset({"일", "근무"}), "noun+하", frozenset({"에서"}), _JKB, proper_value=True),
    _PredicatePattern("employer", frozenset({"다니"}), "verb", _AT, _JKB, proper_value=True),
    _PredicatePattern("uses_tool", frozenset({"쓰"}), "verb", _OBJECT, _JKO, proper_value=True),
    _PredicatePattern("uses_tool", frozenset({"사용", "이용"}), "noun+하", _OBJECT, _JKO, proper_value=True),
    _PredicatePattern("prefers", frozenset({"선호"}), "noun+하", _OBJECT, _JKO),
    _PredicatePattern("likes", frozenset({"좋아하"}), "verb", _OBJECT, _JKO),
    _PredicatePattern("dislikes", frozenset({"싫어하"}), "verb", _OBJECT, _JKO),
    _PredicatePattern("works_on", frozenset({"개발", "진행", "담당"}), "noun+하", _OBJECT, _JKO),
    _PredicatePattern("works_on", frozenset({"참여"}), "noun+하", _AT, _JKB),
    # "맡았어요": took charge of it, and still has it.
    _PredicatePattern("works_on", frozenset({"맡"}), "verb", _OBJECT, _JKO, past_ok=True),
)
_ALLERGY_NOUNS = frozenset({"알레르기", "알러지"})


def _korean_predicates(tokens: list[Morpheme]) -> list[_KoPredicate]:
    predicates: list[_KoPredicate] = []
    for index in range(len(tokens)):
        predicate = (
            _stem_predicate(tokens, index) or _project_predicate(tokens, index) or _allergy_predicate(tokens, index)
        )
        if predicate is not None:
            predicates.append(predicate)
    return predicates


def _stem_predicate(tokens: list[Morpheme], index: int) -> _KoPredicate | None:
    """The `_PREDICATE_PATTERNS` predicate whose stem is the token at `index`, if any."""
    tok = tokens[index]
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    with_ha = nxt is not None and nxt.form == "하" and nxt.tag in {"XSV", "VV"}
    for pattern in _PREDICATE_PATTERNS:
        if tok.form not in pattern.forms:
            continue
        if (pattern.stem == "verb" and tok.tag == "VV") or (pattern.stem == "noun" and tok.tag == "NNG"):
            mood_from = index + 1
        elif pattern.stem == "noun+하" and with_ha:
            mood_from = index + 2
        else:
            continue
        return _KoPredicate(
            pattern.attribute,
            index,
            pattern.particle_forms,
            pattern.particle_tags,
            mood_from,
            past_ok=pattern.past_ok,
            proper_value=pattern.proper_value,
        )
    return None


def _project_predicate(tokens: list[Morpheme], index: int) -> _KoPredicate | None:
    """하다 right after a project ("온비서 프로젝트를 해요") means working on it."""
    tok = tokens[index]
    if tok.form == "하" and tok.tag == "VV" and index >= 2 and tokens[index - 2].form == "프로젝트":
        return _KoPredicate("works_on", index, _OBJECT, _JKO, index + 1)
    return None


def _allergy_predicate(tokens: list[Morpheme], index: int) -> _KoPredicate | None:
    """An allergy that is had ("땅콩 알레르기가 있어요"): the value stands before the noun, the mood follows 있다."""
    tok = tokens[index]
    if tok.form not in _ALLERGY_NOUNS or tok.tag != "NNG":
        return None
    if not any(t.form == "있" for t in tokens[index + 1 : index + 3]):
        return None
    mood_from = next(i for i in range(index + 1, len(tokens)) if tokens[i].form == "있") + 1
    return _KoPredicate("allergy", index, frozenset(), frozenset(), mood_from)


def _ko_value_spans(tokens: list[Morpheme], predicate: _KoPredicate) -> tuple[list[tuple[int, int]], bool]:
    """Index ranges of the value noun phrases (several when coordinated: "Node.js랑 C++을"), and
    whether a negating adverb (안/못) stands before the verb."""
    span = _ko_value_span(tokens, predicate)
    if span is None:
        return [], False
    first, last, negated = span
    spans = [(first, last)]
    if predicate.attribute in MULTI_VALUE_ATTRIBUTES:
        while first >= 2 and tokens[first - 1].tag == "JC" and tokens[first - 2].tag in _NOUNISH:
            last = first - 2
            first = _ko_phrase_start(tokens, last)
            spans.insert(0, (first, last))
    return spans, negated


def _ko_value_span(tokens: list[Morpheme], predicate: _KoPredicate) -> tuple[int, int, bool] | None:
    position = predicate.head - 1
    negated = False
    # Adverbs between the object and the verb ("Vim을 주로 써요"); 안/못 negate it.
    while position >= 0 and tokens[position].tag == "MAG" and position >= predicate.head - 3:
        negated = negated or tokens[position].form in {"안", "못"}
        position -= 1
    if predicate.attribute == "allergy":
        # "땅콩 알레르기" or "땅콩에 알레르기"
        if position >= 0 and tokens[position].tag == "JKB" and tokens[position].form == "에":
            position -= 1
        last = position
    else:
        if position < 0 or tokens[position].tag not in predicate.particle_tags:
            return None
        if tokens[position].form not in predicate.particle_forms:
            return None
        last = position - 1
    if last < 0 or tokens[last].tag not in _NOUNISH:
        return None
    first = _ko_phrase_start(tokens, last)
    while first <= last and tokens[first].tag in {"NNB", "XSN", "SW", "SO"}:
        first += 1
    if first > last:
        return None
    return first, last, negated


def _ko_phrase_start(tokens: list[Morpheme], last: int) -> int:
    """Walk back over the noun phrase ending at `last`: the whole word, plus earlier words that are
    nouns only ("서울 강남구", "VS Code", "한국 음식"), stopping at time adverbs ("요즘", "지금")."""
    first = last
    words = 1
    while first > 0:
        previous = tokens[first - 1]
        if previous.end == tokens[first].start:
            if previous.tag not in _NOUNISH:
                break
            first -= 1
            continue
        word_start = first - 1
        while word_start > 0 and tokens[word_start - 1].end == tokens[word_start].start:
            word_start -= 1
        word = tokens[word_start:first]
        text = "".join(t.form for t in word)
        if words >= 4 or text in _KO_STOP_NOUNS or not all(t.tag in _NOUNISH for t in word):
            break
        if any(t.form in _KO_TITLES for t in word):
            break
        first = word_start
        words += 1
    return first


def _ko_mood(tokens: list[Morpheme], start: int) -> set[str]:
    """Tense and mood of the predicate whose stem ends before `start`: past, negated, want, future,
    conditional. Scans its endings and auxiliaries ("살고 있어요", "쓰지 않아요") and stops at the end
    of the predicate."""
    flags: set[str] = set()
    index = start
    while index < len(tokens):
        tok = tokens[index]
        nxt = tokens[index + 1] if index + 1 < len(tokens) else None
        if tok.tag == "EP" and tok.form in {"었", "았", "였"}:
            flags.add("past")
        elif tok.tag == "VX" and tok.form == "싶":
            flags.add("want")
        elif tok.tag == "VX" and tok.form in {"않", "못하", "말"}:
            flags.add("negated")
        elif tok.tag == "ETM":
            if tok.form in {"ᆯ", "을", "ㄹ"} and nxt is not None and nxt.form in {"거", "것", "예정", "계획", "생각"}:
                flags.add("future")
            break
        elif tok.tag == "EC":
            if tok.form in {"면", "으면", "려고", "으려고", "려면", "으려면", "거나"}:
                flags.add("conditional")
            if nxt is not None and nxt.tag == "VX":
                index += 1
                continue
            break
        elif tok.tag == "EF" or tok.tag.startswith("S") or tok.tag.startswith("J"):
            break
        index += 1
    return flags


def _ko_is_named(value: str, value_tokens: Sequence[Morpheme]) -> bool:
    key = normalise_text_key(value)
    if any(t.tag in _PROPER for t in value_tokens):
        return True
    return key in TECHNOLOGIES or key in PLACES or key in ORGANISATIONS


def _ko_subject(
    tokens: list[Morpheme], before: int, speaker: Speaker, context: ExtractionContext, attribute: str
) -> str | None:
    """Who the predicate is about: the nearest topic/subject marker before the value decides it; a
    sentence without one is about the speaker (Korean drops the first person)."""
    index = before - 1
    while index >= 0:
        tok = tokens[index]
        is_marker = (tok.tag == "JX" and tok.form in _KO_TOPIC_FORMS) or tok.tag == "JKS"
        if not is_marker:
            index -= 1
            continue
        if index == 0 or tokens[index - 1].tag.startswith("J") or tokens[index - 1].tag.startswith("E"):
            index -= 1  # "서울에서는": a topic on an adverbial, not the subject
            continue
        return _ko_classify_subject(tokens, index, speaker, context, attribute)
    return speaker.subject


def _ko_classify_subject(
    tokens: list[Morpheme], marker: int, speaker: Speaker, context: ExtractionContext, attribute: str
) -> str | None:
    phrase: list[Morpheme] = []
    index = marker - 1
    while index >= 0 and (tokens[index].tag in _NOUNISH or tokens[index].tag in {"NP", "JKG", "MM"}):
        phrase.insert(0, tokens[index])
        index -= 1
    heads = [t for t in phrase if t.form not in _KO_TITLES and t.tag not in {"JKG", "MM", "NNB", "XSN"}]
    if not heads:
        return None
    head = heads[-1]
    names = [t for t in phrase if t.tag in _PROPER]
    if names:
        name = " ".join(t.form for t in names)
        if context.is_user(name):
            return USER_SUBJECT
        context.people.setdefault(normalise_text_key(name), name)
        context.add_entity(name, "person", 3)
        return name
    if head.tag == "NP":
        if head.form in _KO_USER_PRONOUNS:
            return speaker.subject
        if head.form in _KO_WE_PRONOUNS and attribute == "lives_in":
            return speaker.subject
        return None
    if head.form in _KO_USER_NOUNS:
        return USER_SUBJECT
    if head.form in KO_RELATION_NOUNS:
        return head.form
    return None  # "우리 팀은 R을 써요": a team, not a person


def _korean_name_fact(sentence: str, tokens: list[Morpheme], speaker: Speaker, context: ExtractionContext) -> None:
    for index, tok in enumerate(tokens[:-2]):
        if tok.form != "이름" or tokens[index + 1].tag != "JX":
            continue
        first = index + 2
        last = first
        while last + 1 < len(tokens) and tokens[last + 1].tag in _NOUNISH:
            last += 1
        if tokens[first].tag not in _PROPER and tokens[first].tag != "NNG":
            continue
        end = tokens[last + 1] if last + 1 < len(tokens) else None
        if end is not None and end.tag not in {"VCP", "EF"}:
            continue
        owner: str | None = speaker.subject
        if index >= 2 and tokens[index - 1].tag == "JKG":
            owner = _ko_classify_subject(tokens, index - 1, speaker, context, "name")
        if owner is not None:
            name = sentence[tokens[first].start : tokens[last].end]
            context.add_fact(owner, "name", name)
            context.add_entity(name, "person", 3)


# A name found in a sentence, with its type guess and the confidence of that guess.
_TypedName = tuple[str, EntityType, int]


def _korean_entities(sentence: str, tokens: list[Morpheme], context: ExtractionContext) -> list[str]:
    """Record the sentence's entities; returns their keys in order of appearance (for co-occurrence)."""
    keys: list[str] = []
    mentions = [*_proper_noun_mentions(sentence, tokens, context), *_project_mentions(sentence, tokens)]
    for name, entity_type, confidence in mentions:
        key = context.add_entity(name, entity_type, confidence)
        if key is not None and key not in keys:
            keys.append(key)
    return keys


def _proper_noun_mentions(sentence: str, tokens: list[Morpheme], context: ExtractionContext) -> list[_TypedName]:
    """Runs of proper nouns and Latin words ("VS Code", "C++"), typed by the word that follows them
    (프로젝트, a title such as 씨) or else by the gazetteers."""
    mentions: list[_TypedName] = []
    index = 0
    while index < len(tokens):
        tok = tokens[index]
        if tok.tag not in _PROPER:
            index += 1
            continue
        last = _proper_run_end(sentence, tokens, index)
        name = sentence[tok.start : tokens[last].end]
        following = tokens[last + 1] if last + 1 < len(tokens) else None
        index = last + 1
        if not _ko_entity_name_ok(name, tok):
            continue
        if following is not None and following.form == "프로젝트":
            mentions.append((name, "project", 2))
        elif following is not None and following.form in _KO_TITLES:
            mentions.append((name, "person", 2))
        else:
            mentions.append((name, *guess_type(name, context)))
    return mentions


def _proper_run_end(sentence: str, tokens: list[Morpheme], first: int) -> int:
    """Index of the last token of the name starting at `first`: touching proper nouns, numbers and
    symbols, and Latin words one space apart; trailing symbols other than "++" and "#" are dropped."""
    last = first
    while last + 1 < len(tokens):
        nxt = tokens[last + 1]
        touching = nxt.end > nxt.start and nxt.start == tokens[last].end
        spaced_latin = nxt.tag == "SL" and tokens[last].tag == "SL" and sentence[tokens[last].end : nxt.start] == " "
        if not ((touching and nxt.tag in _PROPER | {"SN", "SW", "SO"}) or spaced_latin):
            break
        last += 1
    while last > first and tokens[last].tag in {"SW", "SO"} and tokens[last].form not in {"++", "#"}:
        last -= 1
    return last


def _project_mentions(sentence: str, tokens: list[Morpheme]) -> list[_TypedName]:
    """The word before 프로젝트 ("온비서 프로젝트") names a project even when Kiwi does not see a proper noun."""
    mentions: list[_TypedName] = []
    for index, tok in enumerate(tokens):
        if tok.form != "프로젝트" or index == 0:
            continue
        last = index - 1
        if tokens[last].tag not in _NOUNISH:
            continue
        first = last
        while first > 0 and tokens[first - 1].end == tokens[first].start and tokens[first - 1].tag in _NOUNISH:
            first -= 1
        name = sentence[tokens[first].start : tokens[last].end]
        if name not in _KO_STOP_NOUNS and name not in {"이", "그", "저", "새", "이번", "다음"}:
            mentions.append((name, "project", 2))
    return mentions


def _ko_entity_name_ok(name: str, first: Morpheme) -> bool:
    key = normalise_text_key(name)
    if not key:
        return False
    if first.tag == "SL":
        # Latin words inside Korean text: names are capitalised or known; "meeting" is not.
        return is_capitalised(name) or key in TECH_LOWERCASE_OK or key in TECHNOLOGIES
    if HANGUL.search(name) and len(name) < 2:
        return False
    return key not in _KO_STOP_NOUNS
