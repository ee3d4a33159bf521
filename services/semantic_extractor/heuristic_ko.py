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
    KO_PETS,
    KO_RELATION_NOUNS,
    ORGANISATIONS,
    PLACES,
    TECHNOLOGIES,
    TIME_WORDS,
    is_school_name,
)
from services.semantic_extractor.heuristic_context import (
    MULTI_VALUE_ATTRIBUTES,
    ExtractionContext,
    Speaker,
    cooccurrence,
    record_fact,
)
from services.semantic_extractor.heuristic_ko_entities import (
    KO_STOP_NOUNS,
    KO_TITLES,
    NOUNISH,
    PROPER,
    korean_entities,
)
from services.semantic_extractor.korean_morphology import Morpheme, korean_morphemes

_KO_USER_PRONOUNS = frozenset({"저", "나", "내", "제"})
_KO_WE_PRONOUNS = frozenset({"우리", "저희"})
_KO_USER_NOUNS = frozenset({"사용자", "유저", "본인"})
# Nouns used as adverbs between a value and its verb: "부산에서 혼자 살아요".
_ADVERBIAL_NOUNS = frozenset({"혼자", "같이", "함께", "따로", "직접", "가끔", "자주", "계속"})
# Topics that can act on their own ("우리 팀은 R을 써요" is the team's habit); any other common-noun topic
# only sets the scene ("메모는 옵시디언을 써요": for notes, the speaker uses Obsidian).
_KO_AGENT_NOUNS = frozenset(
    {
        "팀",
        "회사",
        "조직",
        "부서",
        "가족",
        "학교",
        "정부",
        "사람",
        "사람들",
        "다들",
        "모두",
        "애들",
        "고객",
        "회사들",
        "본사",
    }
)
_KO_SELF_TOPICS = frozenset({"이름", "직업", "나이", "고향", "취미", "전공"})
_KO_TOPIC_FORMS = frozenset({"는", "은", "ᆫ"})
_KO_DIET = re.compile(
    r"(?P<val>페스코\s*채식|채식주의자|채식주의|비건|페스코|베지테리언|채식)\s*(?:이에요|예요|입니다|이야|야|이다|다|해요|합니다|해|중이에요|을\s*해요|을\s*합니다|을\s*하고|이고|이며|고\b|며\b)"
)
_KO_DIET_VALUES = {
    "채식주의": "채식주의자",
    "채식": "채식주의자",
    "베지테리언": "채식주의자",
    "페스코 채식": "페스코",
    "페스코채식": "페스코",
}


@dataclass(frozen=True, slots=True)
class _KoPredicate:
    attribute: str
    head: int  # index of the token the value's particle attaches to
    particle_forms: frozenset[str]
    particle_tags: frozenset[str]
    mood_from: int  # first token after the predicate stem
    past_ok: bool = False
    proper_value: bool = False
    value_kind: str | None = None


# Interrogative final endings ("지원하나요", "할까요", "가니"); "죠" is left out: "그렇죠" asserts.
_KO_QUESTION_ENDINGS = frozenset({"나요", "까요", "ᆯ까요", "을까요", "니", "냐", "나", "ᆯ까", "을까"})


def is_korean_question(sentence: str, tokens: Sequence[Morpheme]) -> bool:
    """A question asserts nothing: a question mark, or an interrogative final ending ("지원하나요")."""
    if sentence.rstrip().endswith("?"):
        return True
    finals = [tok for tok in tokens if tok.tag == "EF"]
    return bool(finals) and finals[-1].form in _KO_QUESTION_ENDINGS


def named_as(sentence: str, tokens: Sequence[Morpheme], first: int) -> str | None:
    """The name in "아틀라스라는 추천 엔진": a noun phrase introduced by "X(이)라는" is X. Read from the
    text, because Kiwi splits "라는" several ways (이/VCP 라는/ETM, 라/JKQ 는/ETM)."""
    words = sentence[: tokens[first].start].split()
    if not words or sentence[tokens[first].start - 1 : tokens[first].start] != " ":
        return None
    named = re.fullmatch(r"(?P<name>.+?)(?:이)?라는", words[-1])
    return named.group("name") if named is not None else None


def korean_sentence(
    sentence: str, speaker: Speaker, context: ExtractionContext, tokens: list[Morpheme] | None = None
) -> None:
    tokens = korean_morphemes(sentence) if tokens is None else tokens
    keys = korean_entities(sentence, tokens, context)
    cooccurrence(keys, context)
    if is_korean_question(sentence, tokens):
        return
    for predicate in _korean_predicates(tokens):
        spans, negated_before = _ko_value_spans(tokens, predicate)
        if not spans:
            continue
        mood = _ko_mood(tokens, predicate.mood_from)
        if negated_before or mood & {"negated", "want", "future", "conditional", "adnominal"}:
            continue
        if "past" in mood and not predicate.past_ok:
            continue
        if transient_reason(sentence, attribute=predicate.attribute) is not None:
            continue
        subject = _ko_subject(tokens, spans[0][0], speaker, context, predicate.attribute)
        if subject is None:
            continue
        _record_values(sentence, tokens, predicate, spans, subject, context)
    _korean_name_fact(sentence, tokens, speaker, context)
    _korean_diet_facts(sentence, tokens, speaker, context)


def _record_values(
    sentence: str,
    tokens: list[Morpheme],
    predicate: _KoPredicate,
    spans: list[tuple[int, int]],
    subject: str,
    context: ExtractionContext,
) -> None:
    for first, last in spans:
        value_tokens = tokens[first : last + 1]
        named = named_as(sentence, tokens, first)
        value = named or sentence[value_tokens[0].start : value_tokens[-1].end].strip()
        if predicate.attribute == "works_on":
            value = re.sub(r"\s*(?:프로젝트|project)$", "", value, flags=re.IGNORECASE).strip()
        if predicate.attribute == "employer":
            value = without_department(value)
        if not value or value in KO_STOP_NOUNS:
            continue
        if predicate.proper_value and not named and not _ko_is_named(value, value_tokens):
            continue
        attribute = predicate.attribute
        if predicate.value_kind == "pet" and value not in KO_PETS:
            continue
        if predicate.value_kind == "school_or_employer" and is_school_name(value):
            attribute = "school"
        record_fact(subject, attribute, value, context)


def without_department(workplace: str) -> str:
    """ "컬리 검색팀" → "컬리": the employer is the organisation, not the team inside it."""
    trimmed = re.sub(r"\s+\S*(?:팀|부서|본부|센터|사업부)$", "", workplace)
    return trimmed or workplace


def _korean_diet_facts(sentence: str, tokens: list[Morpheme], speaker: Speaker, context: ExtractionContext) -> None:
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
    value_kind: str | None = None


_PREDICATE_PATTERNS: tuple[_PredicatePattern, ...] = (
    _PredicatePattern("lives_in", frozenset({"살"}), "verb", _IN, _JKB, proper_value=True),
    _PredicatePattern("lives_in", frozenset({"거주"}), "noun+하", _IN, _JKB, proper_value=True),
    _PredicatePattern("lives_in", frozenset({"이사"}), "noun", _TO, _JKB, past_ok=True, proper_value=True),
    _PredicatePattern("employer", frozenset({"일", "근무"}), "noun+하", frozenset({"에서"}), _JKB, proper_value=True),
    _PredicatePattern(
        "employer", frozenset({"다니"}), "verb", _AT, _JKB, proper_value=True, value_kind="school_or_employer"
    ),
    _PredicatePattern("school", frozenset({"입학", "재학"}), "noun+하", _AT, _JKB, past_ok=True, proper_value=True),
    _PredicatePattern("birthplace", frozenset({"태어나"}), "verb", _IN, _JKB, past_ok=True, proper_value=True),
    _PredicatePattern("has_pet", frozenset({"키우"}), "verb", _OBJECT, _JKO, value_kind="pet"),
    # "Vim을 써요", and "파이썬도 써요" / "R만 써요" (the object particle replaced by 도/만).
    _PredicatePattern("uses_tool", frozenset({"쓰"}), "verb", _OBJECT | {"도", "만"}, _JKO | {"JX"}, proper_value=True),
    _PredicatePattern("works_on", frozenset({"만들"}), "verb", _OBJECT, _JKO, proper_value=True),
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
    # "사시고": Kiwi reads the honorific of 살다 as 사/VV + 시/EP.
    honorific = nxt is not None and (nxt.form == "시" or (nxt.tag in {"EF", "EC"} and nxt.form.startswith("세")))
    form = "살" if tok.form == "사" and tok.tag == "VV" and honorific else tok.form
    for pattern in _PREDICATE_PATTERNS:
        if form not in pattern.forms:
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
            value_kind=pattern.value_kind,
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
        while (
            first >= 2
            and (tokens[first - 1].tag == "JC" or tokens[first - 1].form == ",")
            and tokens[first - 2].tag in NOUNISH
        ):
            last = first - 2
            first = _ko_phrase_start(tokens, last)
            spans.insert(0, (first, last))
    return spans, negated


def _ko_value_span(tokens: list[Morpheme], predicate: _KoPredicate) -> tuple[int, int, bool] | None:
    position = predicate.head - 1
    negated = False
    # Adverbs between the object and the verb ("Vim을 주로 써요"); 안/못 negate it.
    while (
        position >= 0
        and (tokens[position].tag == "MAG" or tokens[position].form in _ADVERBIAL_NOUNS)
        and (position >= predicate.head - 3)
    ):
        negated = negated or tokens[position].form in {"안", "못"}
        position -= 1
    # A count between the object and the verb: "강아지를 두 마리 키워요", "고양이를 2마리".
    if position >= 1 and tokens[position].tag == "NNB" and tokens[position - 1].tag in {"MM", "SN", "NR"}:
        position -= 2
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
    if last >= 2 and tokens[last].tag == "NNB" and tokens[last - 1].tag in {"MM", "SN", "NR"}:
        last -= 2  # "햄스터 두 마리를": the count is not the value
    if last < 0 or tokens[last].tag not in NOUNISH:
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
            if previous.tag not in NOUNISH:
                break
            first -= 1
            continue
        word_start = first - 1
        while word_start > 0 and tokens[word_start - 1].end == tokens[word_start].start:
            word_start -= 1
        word = tokens[word_start:first]
        text = "".join(t.form for t in word)
        if words >= 4 or text in KO_STOP_NOUNS or not all(t.tag in NOUNISH for t in word):
            break
        if any(t.form in KO_TITLES for t in word):
            break
        first = word_start
        words += 1
    adjective = first >= 2 and tokens[first - 1].tag == "ETM" and tokens[first - 2].tag == "VA"
    if adjective and tokens[first - 1].end < tokens[first].start:
        first -= 2  # "매운 음식": an adjective is part of what is liked
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
            elif nxt is not None and nxt.tag in {"NNG", "NNP"}:
                flags.add("adnominal")  # "대시보드를 좋아하는 사람이 없어요": describes someone, asserts nothing
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
    if any(t.tag in PROPER for t in value_tokens):
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
        if tokens[index - 1].form in KO_STOP_NOUNS or tokens[index - 1].form in TIME_WORDS:
            index -= 1  # "요즘은", "오늘은": a time set as the topic, not who the sentence is about
            continue
        return _ko_classify_subject(tokens, index, speaker, context, attribute)
    return speaker.subject


def _ko_classify_subject(
    tokens: list[Morpheme], marker: int, speaker: Speaker, context: ExtractionContext, attribute: str
) -> str | None:
    phrase: list[Morpheme] = []
    index = marker - 1
    while index >= 0 and (tokens[index].tag in NOUNISH or tokens[index].tag in {"NP", "JKG", "MM"}):
        phrase.insert(0, tokens[index])
        index -= 1
    heads = [t for t in phrase if t.form not in KO_TITLES and t.tag not in {"JKG", "MM", "NNB", "XSN"}]
    titles = [t for t in phrase if t.form in KO_TITLES and t.form in KO_RELATION_NOUNS]
    if titles and not any(t.tag in {"NNG", "NNP", "SL"} for t in heads):
        return titles[-1].form  # "저희 팀장님은": a title is the person it names
    if not heads:
        return None
    head = heads[-1]
    compound = "".join(t.form for t in phrase[phrase.index(head) - 1 : phrase.index(head) + 1])
    if phrase.index(head) > 0 and compound in KO_RELATION_NOUNS:
        return compound  # "여자/친구" → "여자친구"
    names = [t for t in phrase if t.tag in PROPER]
    if names and head.form in KO_RELATION_NOUNS and head.tag not in PROPER:
        # "준호 누나는": Junho's sister, and Junho is a person.
        owner = " ".join(t.form for t in names)
        context.people.setdefault(normalise_text_key(owner), owner)
        context.add_entity(owner, "person", 3)
        return f"{owner} {head.form}"
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
    if head.form in _KO_SELF_TOPICS and any(t.tag == "NP" and t.form in _KO_USER_PRONOUNS for t in phrase):
        return speaker.subject  # "제 이름은 … 고 매니저예요": the rest of the sentence is about the speaker
    if head.form in KO_RELATION_NOUNS:
        return head.form
    marker_form = tokens[marker].form
    if (
        head.tag == "NNG"
        and marker_form in _KO_TOPIC_FORMS
        and head.form not in _KO_AGENT_NOUNS
        and not head.form.endswith("팀")
        and not any(t.tag == "NP" and t.form in _KO_WE_PRONOUNS for t in phrase)
        and attribute in {"uses_tool", "uses_language", "prefers", "likes", "dislikes"}
    ):
        return speaker.subject  # "메모는 옵시디언을 써요": a scene-setting topic, the speaker still acts
    return None  # "우리 팀은 R을 써요": a team, not a person


def _korean_name_fact(sentence: str, tokens: list[Morpheme], speaker: Speaker, context: ExtractionContext) -> None:
    for index, tok in enumerate(tokens[:-2]):
        if tok.form != "이름" or tokens[index + 1].tag != "JX":
            continue
        first = index + 2
        last = first
        while last + 1 < len(tokens) and tokens[last + 1].tag in NOUNISH:
            last += 1
        if tokens[first].tag not in PROPER and tokens[first].tag != "NNG":
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


# The pieces `heuristic_ko_facts` shares with the verb patterns: one notion of a noun, of mood and of subject.
ko_mood = _ko_mood
ko_subject = _ko_subject
