"""Korean facts told by constructions rather than by a verb and its particle: the copula ("간호사예요",
"마닐라 출신이에요", "스물여덟 살이고"), a role taken on ("개발자로 일해요" with its "네이버에서"), a language
spoken ("영어를 할 줄 알아요"), marriage ("결혼했어요") and the tool a thing is made with ("Go로 개발해요").
Mood and subject are decided exactly as for the verb patterns (`heuristic_ko`): negated, wished-for,
conditional and past statements assert nothing about now.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.domain.facts import normalise_text_key
from services.semantic_extractor.gazetteers import (
    GENERIC_NAMES,
    KO_LANGUAGES,
    KO_OCCUPATION_HEADS,
    KO_PLACE_NAME,
    ORGANISATION_SUFFIXES,
    ORGANISATIONS,
    PLACES,
    PROGRAMMING_LANGUAGES,
    TECHNOLOGIES,
    is_school_name,
)
from services.semantic_extractor.heuristic_context import ExtractionContext, Speaker, record_fact
from services.semantic_extractor.heuristic_ko import ko_mood, ko_subject, without_department
from services.semantic_extractor.heuristic_ko_entities import NOUNISH
from services.semantic_extractor.korean_morphology import Morpheme

_NOT_NOW = frozenset({"negated", "want", "future", "conditional", "past", "adnominal"})
# Taking up work: "일하다"/"근무하다" at a workplace (에서) now; "입사하다"/"취직하다" at one (에), said in the past.
_ROLE_NOUNS = {
    "일": ("에서", False),
    "근무": ("에서", False),
    "입사": ("에", True),
    "취직": ("에", True),
    "합류": ("에", True),
}
_PROPER = frozenset({"NNP", "SL", "SH"})
_CLAUSE_END = frozenset({"EC", "EF", "SF", "SP", "ETM"})
_STATUS_NOUNS = {"미혼": "미혼", "기혼": "기혼", "싱글": "미혼", "유부남": "기혼", "유부녀": "기혼"}
_MAKING = frozenset({"개발", "코딩", "프로그래밍", "분석", "작업", "만들", "구현", "짜"})
_NATIVE_TENS = {
    "열": 10,
    "스물": 20,
    "스무": 20,
    "서른": 30,
    "마흔": 40,
    "쉰": 50,
    "예순": 60,
    "일흔": 70,
    "여든": 80,
    "아흔": 90,
}
_NATIVE_UNITS = {
    "하나": 1, "한": 1, "둘": 2, "두": 2, "셋": 3, "세": 3, "넷": 4, "네": 4, "다섯": 5, "여섯": 6, "일곱": 7,
    "여덟": 8, "아홉": 9,
}  # fmt: skip


def korean_construction_facts(
    sentence: str, tokens: Sequence[Morpheme], speaker: Speaker, context: ExtractionContext
) -> None:
    for index, tok in enumerate(tokens):
        if tok.tag == "VCP":
            _copula_facts(sentence, tokens, index, speaker, context)
        elif tok.form in _ROLE_NOUNS and tok.tag == "NNG":
            _role_facts(sentence, tokens, index, speaker, context)
        elif tok.form in KO_LANGUAGES:
            _language_fact(tokens, index, speaker, context)
        elif tok.form == "결혼" and _followed_by_ha(tokens, index):
            mood = ko_mood(list(tokens), index + 2)
            if "past" in mood and not mood & {"negated", "want", "conditional"} and not _negated_before(tokens, index):
                _record(tokens, index, "relationship_status", "기혼", speaker, context)
        elif tok.tag in _PROPER and normalise_text_key(tok.form) in TECHNOLOGIES:
            _instrument_fact(tokens, index, speaker, context)


def _record(
    tokens: Sequence[Morpheme], before: int, attribute: str, value: str, speaker: Speaker, context: ExtractionContext
) -> None:
    subject = ko_subject(list(tokens), before, speaker, context, attribute)
    if subject is not None and value:
        record_fact(subject, attribute, value, context)


def _followed_by_ha(tokens: Sequence[Morpheme], index: int) -> bool:
    return index + 1 < len(tokens) and tokens[index + 1].form == "하" and tokens[index + 1].tag in {"XSV", "VV"}


def _negated_before(tokens: Sequence[Morpheme], index: int) -> bool:
    return any(t.tag == "MAG" and t.form in {"안", "못"} for t in tokens[max(0, index - 2) : index])


def _words_before(sentence: str, tokens: Sequence[Morpheme], end: int) -> list[list[Morpheme]]:
    """The noun words (space-separated runs of noun tokens) that end just before token `end`, nearest last."""
    words: list[list[Morpheme]] = []
    index = end - 1
    while index >= 0 and tokens[index].tag in NOUNISH:
        word = [tokens[index]]
        while index > 0 and tokens[index - 1].end == tokens[index].start and tokens[index - 1].tag in NOUNISH:
            index -= 1
            word.insert(0, tokens[index])
        if words and (word[0].tag == "NNB" or any(t.tag in {"NR", "SN"} for t in word)):
            break  # "십 년째 소아과 간호사": a duration or a count is not part of the noun phrase
        words.insert(0, word)
        index -= 1
        if index < 0 or tokens[index].end == word[0].start or len(words) >= 4:
            break  # the previous token touches this word: it is not a separate noun word
    return words


def _text(sentence: str, word: Sequence[Morpheme]) -> str:
    return sentence[word[0].start : word[-1].end]


def _is_named_word(sentence: str, word: Sequence[Morpheme]) -> bool:
    text = _text(sentence, word)
    key = normalise_text_key(text)
    if any(t.tag in _PROPER for t in word) or key in ORGANISATIONS or key in PLACES:
        return True
    suffix = ORGANISATION_SUFFIXES.search(text)
    return suffix is not None and suffix.start() > 0  # "성모병원" names a hospital; "병원" alone does not


def _is_workplace_word(sentence: str, word: Sequence[Morpheme]) -> bool:
    """A word naming where a job is held: a known organisation, school or place, or a name with an
    organisation suffix ("성모병원"); "UX 디자이너", "프로덕트 매니저" are job titles, not workplaces."""
    text = _text(sentence, word)
    key = normalise_text_key(text)
    if key in ORGANISATIONS or key in PLACES or is_school_name(text):
        return True
    suffix = ORGANISATION_SUFFIXES.search(text)
    return suffix is not None and suffix.start() > 0


def _copula_facts(
    sentence: str, tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    """ "N이에요": a job, an origin (출신), an age (살) or a marital status, by the head noun."""
    if ko_mood(list(tokens), index + 1) & _NOT_NOW:
        return
    words = _words_before(sentence, tokens, index)
    if not words:
        return
    head = _text(sentence, words[-1])
    first = words[0][0]
    start = tokens.index(first)
    if head == "출신" and len(words) >= 2 and _is_named_word(sentence, words[-2]):
        _record(tokens, start, "birthplace", _text(sentence, words[-2]), speaker, context)
    elif words[-1][-1].form in {"살", "세"}:
        age = _age(_number_before(tokens, tokens.index(words[-1][-1])))
        if age is not None:
            _record(tokens, start, "age", str(age), speaker, context)
    elif head in _STATUS_NOUNS:
        _record(tokens, start, "relationship_status", _STATUS_NOUNS[head], speaker, context)
    elif _is_occupation(head):
        _occupation(sentence, tokens, words, speaker, context)


def _is_occupation(form: str) -> bool:
    return any(form == job or (len(form) > len(job) and form.endswith(job)) for job in KO_OCCUPATION_HEADS)


def _occupation(
    sentence: str, tokens: Sequence[Morpheme], words: list[list[Morpheme]], speaker: Speaker, context: ExtractionContext
) -> None:
    """The job is the trailing common-noun words ("백엔드 개발자"); a named word before it is where the
    job is held ("카이스트 박사과정 학생": a school for a student, else an employer)."""
    job_words: list[list[Morpheme]] = []
    for word in reversed(words):
        if _is_workplace_word(sentence, word):
            break
        job_words.insert(0, word)
    if not job_words:
        return
    start = tokens.index(words[0][0])
    job = sentence[job_words[0][0].start : job_words[-1][-1].end]
    _record(tokens, start, "job_title", job, speaker, context)
    named = words[: len(words) - len(job_words)]
    if named:
        place = _text(sentence, named[-1])
        if normalise_text_key(place) in PLACES or KO_PLACE_NAME.fullmatch(place):
            return
        student = any(t.form in {"학생", "대학원생", "박사과정", "석사과정"} for word in job_words for t in word)
        attribute = "school" if student or is_school_name(place) else "employer"
        _record(tokens, start, attribute, place, speaker, context)
    owner_project = _project_before(sentence, tokens, start)
    if owner_project is not None:
        _record(tokens, start, "works_on", owner_project, speaker, context)


def _project_before(sentence: str, tokens: Sequence[Morpheme], start: int) -> str | None:
    """ "헬릭스 프로젝트의 테크 리드": the role is held on the project named before 프로젝트의."""
    if start < 2 or tokens[start - 1].tag != "JKG" or tokens[start - 2].form != "프로젝트":
        return None
    words = sentence[: tokens[start - 2].start].split()
    return words[-1] if words else None


def _role_facts(
    sentence: str, tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    """ "개발자로 일해요" (a job) and "네이버에서 … 일해요" / "토스에서 … 일을 해요" (an employer), the
    workplace standing anywhere earlier in the clause."""
    after = index + 1
    if after < len(tokens) and tokens[after].form in {"을", "를"}:
        after += 1
    if after >= len(tokens) or tokens[after].form != "하":
        return
    workplace_particle, past_ok = _ROLE_NOUNS[tokens[index].form]
    mood = ko_mood(list(tokens), after + 1)
    if mood & (_NOT_NOW - {"past"} if past_ok else _NOT_NOW) or _negated_before(tokens, index):
        return
    if index >= 1 and tokens[index - 1].tag == "JKB" and tokens[index - 1].form in {"로", "으로"}:
        words = _words_before(sentence, tokens, index - 1)
        if words and _is_occupation(words[-1][-1].form):
            _occupation(sentence, tokens, words, speaker, context)
    position = index - 1
    while position >= 1 and tokens[position].tag not in _CLAUSE_END:
        if tokens[position].tag == "JKB" and tokens[position].form == workplace_particle:
            words = _words_before(sentence, tokens, position)
            if (
                words
                and _is_named_word(sentence, words[-1])
                and normalise_text_key(_text(sentence, words[-1])) not in GENERIC_NAMES
            ):
                workplace = _text(sentence, words[-1])
                key = normalise_text_key(workplace)
                if key not in PLACES and not KO_PLACE_NAME.fullmatch(workplace):
                    _record(tokens, position, "employer", without_department(workplace), speaker, context)
            return
        position -= 1


def _language_fact(tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext) -> None:
    """ "영어를 (유창하게) 해요", "한국어와 영어를 할 줄 알아요": speaking a language."""
    position = index + 1
    while position < len(tokens) and tokens[position].tag in {"JC", "JKO", "JX", "NNP", "NNG"}:
        if tokens[position].tag.startswith("N") and tokens[position].form not in KO_LANGUAGES:
            return
        position += 1
    for probe in range(position, min(position + 6, len(tokens))):
        tok = tokens[probe]
        if tok.tag == "VV" and tok.form in {"하", "구사"}:
            mood = ko_mood(list(tokens), probe + 1)
            if mood & _NOT_NOW or _negated_before(tokens, probe):
                return
            _record(tokens, index, "speaks_language", tokens[index].form, speaker, context)
            return
        if tok.tag in {"EF", "SF"} or (tok.tag == "MAG" and tok.form in {"안", "못"}):
            return


def _instrument_fact(tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext) -> None:
    """ "Go로 개발해요", "플러터로 … 앱을 만들고 있어요": the technology a thing is made with."""
    if index + 1 >= len(tokens) or tokens[index + 1].form not in {"로", "으로"}:
        return
    for probe in range(index + 2, min(index + 14, len(tokens))):
        tok = tokens[probe]
        if tok.tag in {"EF", "SF"} or (tok.tag == "EC" and tok.form not in {"고", "어", "아"}):
            return
        if tok.form in _MAKING and tok.tag in {"NNG", "VV"}:
            verb_end = probe + 2 if tok.tag == "NNG" else probe + 1
            if ko_mood(list(tokens), verb_end) & _NOT_NOW or _negated_before(tokens, probe):
                return
            key = normalise_text_key(tokens[index].form)
            attribute = "uses_language" if key in PROGRAMMING_LANGUAGES else "uses_tool"
            _record(tokens, index, attribute, tokens[index].form, speaker, context)
            return


def _number_before(tokens: Sequence[Morpheme], unit: int) -> list[Morpheme]:
    """The number tokens right before a unit noun: "서른/NR 네/MM 살", "34/SN 살"."""
    start = unit
    while start > 0 and tokens[start - 1].tag in {"NR", "SN", "MM"} and unit - start < 3:
        start -= 1
    return list(tokens[start:unit])


def _age(word: Sequence[Morpheme]) -> int | None:
    """ "스물여덟" → 28, "34" → 34."""
    forms = [t.form for t in word if t.tag in {"NR", "SN", "MM", "NNG", "NNP"}]
    if len(forms) == 1 and forms[0].isdigit():
        return int(forms[0])
    total = 0
    for form in forms:
        if form in _NATIVE_TENS:
            total += _NATIVE_TENS[form]
        elif form in _NATIVE_UNITS:
            total += _NATIVE_UNITS[form]
        else:
            return None
    return total or None


def age_before(tokens: Sequence[Morpheme], unit: int) -> int | None:
    """The age written before the unit noun 살 at `unit` ("세 살" → 3, "열두 살" → 12), if any."""
    word = _number_before(tokens, unit)
    return _age(word) if word else None
