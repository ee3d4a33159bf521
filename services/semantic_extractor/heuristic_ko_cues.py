"""Type cues for Korean names no gazetteer knows, from the words around them: "동료 프리야가" (a person),
"아틀라스라는 추천 엔진" (a project), "멜버른에서 살아요" / "마닐라 출신" (a place), "토스에서 일해요" (an
organisation), "젠킨스를 써요" (a technology)."""

from __future__ import annotations

from collections.abc import Sequence

from services.semantic_extractor.gazetteers import KO_RELATION_NOUNS
from services.semantic_extractor.korean_morphology import Morpheme
from services.semantic_extractor.schema import EntityType

_NAMED_KIND: dict[str, EntityType] = {
    **dict.fromkeys(
        ("프로젝트", "앱", "어플", "엔진", "서비스", "툴", "도구", "게임", "플랫폼", "사이트", "봇", "라이브러리"),
        "project",
    ),
    **dict.fromkeys(("프로그램",), "project"),
    **dict.fromkeys(
        ("회사", "스타트업", "카페", "가게", "식당", "병원", "학교", "학원", "밴드", "기업", "단체"), "organisation"
    ),
    **dict.fromkeys(("도시", "동네", "마을", "나라", "섬", "지역"), "place"),
    **dict.fromkeys(("친구", "사람", "분", "동료", "가수", "배우", "작가", "선수"), "person"),
}  # fmt: skip
_PLACE_VERBS = frozenset({"살", "거주", "이사", "여행", "가", "오", "태어나", "이민", "유학", "출장", "놀러", "다녀오"})
_PLACE_NOUNS_AFTER = frozenset({"출신", "사무실", "지사", "여행", "날씨", "출장", "공항", "시내", "근처", "지역"})
_WORKPLACE_VERBS = frozenset({"일", "근무", "인턴", "다니", "입사", "취직", "재직"})
_TOOL_VERBS = frozenset({"쓰", "사용", "설치", "도입"})
_PERSON_VERBS = frozenset(
    {
        "일",
        "근무",
        "살",
        "말하",
        "그러",
        "얘기",
        "이야기",
        "다니",
        "이사",
        "결혼",
        "태어나",
        "전화",
        "연락",
        "만나",
        "입사",
    }
)


def korean_type_cue(sentence: str, tokens: Sequence[Morpheme], first: int, last: int) -> EntityType | None:
    """The type the surrounding words give the name spanning tokens first..last, or None."""
    if first > 0 and tokens[first - 1].end < tokens[first].start:
        previous = tokens[first - 1].form
        if previous in KO_RELATION_NOUNS:
            return "person"  # "동료 프리야가"
        if previous in _NAMED_KIND:
            return _NAMED_KIND[previous]  # "저희 스타트업 페른베는"
    after = list(tokens[last + 1 : last + 8])
    if not after:
        return None
    if after[0].form in _PLACE_NOUNS_AFTER:
        return "place"
    named = _named_kind(after)
    if named is not None:
        return named
    if not after[0].tag.startswith("J"):
        return None
    particle = after[0].form
    if after[0].tag in {"JKS", "JX"} and any(t.form in _PERSON_VERBS and t.tag in {"VV", "NNG"} for t in after[1:]):
        return "person"  # "마커스가 어디서 일한다고", "프리야가 그러더라고요": only a person does that
    verb = next((t.form for t in after[1:] if t.tag in {"VV", "NNG"}), None)
    if verb is None:
        return None
    if particle in {"에", "에서", "로", "으로"} and verb in _PLACE_VERBS:
        return "place"
    if particle in {"에", "에서"} and verb in _WORKPLACE_VERBS:
        return "organisation"
    if particle in {"을", "를"} and verb in _TOOL_VERBS:
        return "technology"
    return None


def _named_kind(after: Sequence[Morpheme]) -> EntityType | None:
    """ "X(이)라는 추천 엔진 프로젝트": the head noun of the phrase X introduces says what X is. Kiwi
    reads "라는" as 이/VCP + 라는/ETM or as 라/JKQ + 는/ETM."""
    index = 0
    while index < len(after) and after[index].tag in {"VCP", "JKQ", "ETM"}:
        index += 1
    if index == 0 or after[index - 1].tag != "ETM" or not any(t.form.startswith("라") for t in after[:index]):
        return None
    head: str | None = None
    for tok in after[index:]:
        if not tok.tag.startswith("N"):
            break
        head = tok.form
    return _NAMED_KIND.get(head) if head is not None else None
