"""Korean entity mentions for the heuristic extractor: proper nouns from Kiwi's morphemes (with known
names re-joined), "X 프로젝트" projects, and types from gazetteers, titles ("민수 씨") and the words around
a name (`heuristic_ko_cues`). Also the word classes the Korean readers share.
"""

from __future__ import annotations

from services.common.domain.facts import normalise_text_key
from services.semantic_extractor.gazetteers import (
    GENERIC_NAMES,
    KO_LANGUAGES,
    KO_OCCUPATION_HEADS,
    KO_PETS,
    KO_RELATION_NOUNS,
    ORGANISATIONS,
    PLACES,
    TECH_LOWERCASE_OK,
    TECHNOLOGIES,
)
from services.semantic_extractor.heuristic_context import ExtractionContext, guess_type, is_capitalised
from services.semantic_extractor.heuristic_ko_cues import korean_type_cue
from services.semantic_extractor.korean_morphology import HANGUL, Morpheme
from services.semantic_extractor.schema import EntityType

NOUNISH = frozenset({"NNP", "NNG", "SL", "SN", "SH", "NR", "XSN", "XPN", "NNB", "SW", "SO"})
PROPER = frozenset({"NNP", "SL", "SH"})
KO_STOP_NOUNS = frozenset(
    {
        "요즘", "지금", "현재", "오늘", "이제", "항상", "주로", "보통", "정말", "진짜", "제일", "가장", "요새", "최근",
        "원래", "계속", "다시", "매일", "아직", "예전", "나중", "처음", "요번", "이번", "저번", "작년", "올해", "내년",
    }
)  # fmt: skip
KO_TITLES = frozenset(
    {"씨", "님", "팀장", "대리", "과장", "부장", "차장", "사장", "교수", "박사", "선생님", "선배", "후배", "군", "양"}
)


# A name found in a sentence, with its type guess and the confidence of that guess.
_TypedName = tuple[str, EntityType, int]


def korean_entities(sentence: str, tokens: list[Morpheme], context: ExtractionContext) -> list[str]:
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
        if tok.tag not in PROPER:
            index += 1
            continue
        last = _proper_run_end(sentence, tokens, index)
        name = sentence[tok.start : tokens[last].end]
        following = tokens[last + 1] if last + 1 < len(tokens) else None
        start = index
        index = last + 1
        if not _ko_entity_name_ok(name, tok) or _part_of_job_title(sentence, tokens, last):
            continue
        if following is not None and following.form == "프로젝트":
            if name not in KO_NOT_PROJECT_NAMES:
                mentions.append((name, "project", 2))
        elif following is not None and following.form in KO_TITLES and guess_type(name, context)[1] < 1:
            mentions.append((name, "person", 2))  # "민수 씨", "김 박사": a title follows a person's name
        else:
            guessed, confidence = guess_type(name, context)
            cue = korean_type_cue(sentence, tokens, start, last) if confidence < 1 else None
            if cue is None and confidence < 1 and " " in name and HANGUL.search(name):
                cue = "person"  # "빌 에반스": unknown proper nouns joined as one name are a full name
            mentions.append((name, cue, 1) if cue is not None else (name, guessed, confidence))
    return mentions


def _part_of_job_title(sentence: str, tokens: list[Morpheme], last: int) -> bool:
    """ "프로덕트 매니저", "UX 디자이너": a word right before an occupation noun is part of the job title."""
    nxt = tokens[last + 1] if last + 1 < len(tokens) else None
    if (
        nxt is None
        or sentence[tokens[last].end : nxt.start] != " "
        or normalise_text_key(sentence[tokens[last].start : tokens[last].end]) in ORGANISATIONS
    ):
        return False
    return any(nxt.form == job or (nxt.form.endswith(job) and len(nxt.form) > len(job)) for job in KO_OCCUPATION_HEADS)


def _proper_run_end(sentence: str, tokens: list[Morpheme], first: int) -> int:
    """Index of the last token of the name starting at `first`: touching proper nouns, numbers and
    symbols, and Latin words one space apart; trailing symbols other than "++" and "#" are dropped."""
    last = first
    while last + 1 < len(tokens):
        nxt = tokens[last + 1]
        touching = nxt.end > nxt.start and nxt.start == tokens[last].end
        spaced = sentence[tokens[last].end : nxt.start] == " "
        spaced_latin = nxt.tag == "SL" and tokens[last].tag == "SL" and spaced
        # "빌 에반스": two unknown proper nouns one space apart are one name ("서울 강남구" are two known ones).
        spaced_unknown = (
            spaced
            and nxt.tag == tokens[last].tag == "NNP"
            and not (_known_key(tokens[last].form) or _known_key(nxt.form))
        )
        if not ((touching and nxt.tag in PROPER | {"SN", "SW", "SO"}) or spaced_latin or spaced_unknown):
            break
        last += 1
    while last > first and tokens[last].tag in {"SW", "SO"} and tokens[last].form not in {"++", "#"}:
        last -= 1
    return last


def _known_key(form: str) -> bool:
    key = normalise_text_key(form)
    return key in TECHNOLOGIES or key in PLACES or key in ORGANISATIONS or key in KO_RELATION_NOUNS


def _project_mentions(sentence: str, tokens: list[Morpheme]) -> list[_TypedName]:
    """The word before 프로젝트 ("온비서 프로젝트") names a project even when Kiwi does not see a proper noun."""
    mentions: list[_TypedName] = []
    for index, tok in enumerate(tokens):
        if tok.form != "프로젝트" or index == 0:
            continue
        # The whole word before it, as written: Kiwi may split an unknown name ("헬릭/NNG 스/VV").
        words = sentence[: tok.start].split()
        if not words or sentence[tok.start - 1 : tok.start] != " ":
            continue
        name = words[-1]
        previous = tokens[index - 1]
        if previous.tag.startswith("J") or previous.tag.startswith("E") or previous.tag in {"VCP", "ETM"}:
            continue  # "제 프로젝트", "아틀라스라는 … 프로젝트": not the project's name
        if name in KO_STOP_NOUNS or name in KO_NOT_PROJECT_NAMES or normalise_text_key(name) in GENERIC_NAMES:
            continue
        mentions.append((name, "project", 2))
    return mentions


# Words that stand before 프로젝트 without naming it: kinds and owners of projects.
KO_NOT_PROJECT_NAMES = frozenset(
    {
        "이", "그", "저", "새", "이번", "다음", "사이드", "개인", "신규", "토이", "팀", "회사", "연구", "졸업", "공동",
        "내부", "외부", "대형", "소규모", "첫", "큰", "작은", "우리", "저희", "해당", "관련", "기존", "다른", "여러",
    }
)  # fmt: skip


def _ko_entity_name_ok(name: str, first: Morpheme) -> bool:
    key = normalise_text_key(name)
    if not key:
        return False
    if first.tag == "SL":
        # Latin words inside Korean text: names are capitalised or known; "meeting" is not; a lone
        # letter ("K드라마") is a prefix unless it is a known name ("R", "C").
        if len(key) == 1:
            return key in TECHNOLOGIES
        return is_capitalised(name) or key in TECH_LOWERCASE_OK or key in TECHNOLOGIES
    if HANGUL.search(name) and len(name) < 2:
        return False
    # Languages and animals are kinds, not particular things ("중국어를 해요", "햄스터를 키워요").
    return key not in KO_STOP_NOUNS and key not in KO_LANGUAGES and key not in KO_PETS
