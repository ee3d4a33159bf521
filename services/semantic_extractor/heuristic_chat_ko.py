"""Korean chat for the heuristic extractor (issue 50): pets and people a kind noun introduces ("우리
강아지 보리", "딸 하은이"), ages ("세 살 됐어", "열 살이야"), decisions ("헤론은 스벨트로 결정했어요"),
switches ("슬랙에서 팀즈로 옮겨요") and the particles chat drops ("네이버 다녀요", "매운 거 좋아해",
"오이는 싫어").

All of it reads Kiwi's morphemes: the stem of a verb, the particle before it, the noun run before the
particle. Mood is checked as for the other Korean rules (`ko_mood`): a negated, wished-for or
conditional statement asserts nothing. The first person is dropped in Korean, so a clause without a
named subject is the speaker's.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.domain.facts import USER_SUBJECT, normalise_subject, normalise_text_key
from services.semantic_extractor.fact_text import korean_direction, korean_topic
from services.semantic_extractor.gazetteers import (
    GENERIC_NAMES,
    KO_PETS,
    KO_PLACE_NAME,
    KO_RELATION_NOUNS,
    ORGANISATION_SUFFIXES,
    ORGANISATIONS,
    PLACES,
    TECHNOLOGIES,
    TIME_WORDS,
    is_school_name,
)
from services.semantic_extractor.heuristic_chat_en import PET_CONFIDENCE, ChatState, decision_edges, speaker_node
from services.semantic_extractor.heuristic_context import ExtractionContext, Speaker, record_fact
from services.semantic_extractor.heuristic_ko import ko_mood, ko_subject
from services.semantic_extractor.heuristic_ko_entities import KO_STOP_NOUNS, PROPER
from services.semantic_extractor.heuristic_ko_facts import age_before
from services.semantic_extractor.korean_morphology import Morpheme

_POSSESSIVES = frozenset({"우리", "저희", "내", "제", "나의", "저의"})
_NOT_ASSERTED = frozenset({"negated", "want", "conditional", "adnominal", "future"})
_NAME_TAGS = frozenset({"NNP", "NNG"})
_SUBJECT_PARTICLES = frozenset({"JKS", "JX"})
_NOUN_RUN = frozenset({"NNP", "NNG", "SL", "SN", "NR", "SH"})
_DECIDING = {"정하": "VV", "고르": "VV", "결정": "NNG", "선택": "NNG", "확정": "NNG"}
_SWITCHING = {"바꾸": "VV", "옮기": "VV", "갈아타": "VV", "넘어가": "VV", "이전": "NNG", "전환": "NNG", "교체": "NNG"}
_TO = frozenset({"로", "으로"})
_DEGREE_ADVERBS = frozenset({"MAG"})
_WONDERING_FORMS = frozenset(
    {"고민", "생각", "계획", "예정", "모르", "까", "ᆯ까", "을까", "ㄹ지", "ᆯ지", "을지", "지도", "려고"}
)


def korean_introductions(
    tokens: Sequence[Morpheme], speaker: Speaker, context: ExtractionContext, state: ChatState
) -> None:
    """Pets and people a kind noun introduces; run before the other Korean rules so they see them."""
    _introductions(tokens, speaker, context, state)


def korean_chat_sentence(
    sentence: str, tokens: Sequence[Morpheme], speaker: Speaker, context: ExtractionContext, state: ChatState
) -> None:
    """Ages, decisions, switches and particle-less facts of one Korean chat sentence."""
    for index, tok in enumerate(tokens):
        if tok.form == "살" and tok.tag == "NNB":
            _age(tokens, index, speaker, context, state)
        elif _DECIDING.get(tok.form) == tok.tag and _stem_end(tokens, index) is not None:
            _decision(sentence, tokens, index, speaker, context)
        elif _SWITCHING.get(tok.form) == tok.tag and _stem_end(tokens, index) is not None:
            _switch(sentence, tokens, index, speaker, context)
        elif tok.form == "다니" and tok.tag == "VV":
            _workplace_without_particle(tokens, index, speaker, context)
        elif tok.form == "쓰" and tok.tag == "VV":
            _tool_without_particle(tokens, index, speaker, context)
        elif (tok.tag == "VV" and tok.form in {"좋아하", "싫어하"}) or (tok.tag == "VA" and tok.form == "싫"):
            _liking_without_particle(sentence, tokens, index, speaker, context)


def _stem_end(tokens: Sequence[Morpheme], index: int) -> int | None:
    """Where the predicate's endings start: after a verb stem, or after 하 following a noun stem."""
    if tokens[index].tag == "VV":
        return index + 1
    nxt = tokens[index + 1] if index + 1 < len(tokens) else None
    if nxt is not None and nxt.form == "하" and nxt.tag in {"XSV", "VV"}:
        return index + 2
    return None


def _asserted(tokens: Sequence[Morpheme], index: int) -> bool:
    end = _stem_end(tokens, index)
    if end is None:
        return False
    if index > 0 and tokens[index - 1].form in {"안", "못"} and tokens[index - 1].tag == "MAG":
        return False
    return not ko_mood(list(tokens), end) & _NOT_ASSERTED and not _wondering(tokens, end)


def _wondering(tokens: Sequence[Morpheme], end: int) -> bool:
    """ "갈아탈지도 몰라요", "바꿀까 고민 중이에요", "옮길 생각이에요": a possibility weighed, nothing done."""
    for tok in tokens[end:]:
        if tok.tag == "SF":
            return False
        if tok.form in _WONDERING_FORMS or (tok.tag == "EC" and tok.form.endswith(("ㄹ까", "을까", "ᆯ까", "지도"))):
            return True
    return False


# ---- Pets and people introduced by a kind noun ----------------------------------------------------------


def _introductions(tokens: Sequence[Morpheme], speaker: Speaker, context: ExtractionContext, state: ChatState) -> None:
    for index, tok in enumerate(tokens[:-1]):
        name = tokens[index + 1]
        possessed = index > 0 and tokens[index - 1].form in _POSSESSIVES
        if tok.tag != "NNG" or name.tag not in _NAME_TAGS or name.start == tok.end:
            continue
        if not _name_ok(name) or (len(name.form) == 1 and not possessed):
            continue  # a one-syllable name ("우리 강아지 콩이") only in the slot a possessive opens
        marked = index + 2 < len(tokens) and tokens[index + 2].tag in _SUBJECT_PARTICLES | {"XSN"}
        if name.tag == "NNG" and not (possessed or marked):
            continue  # "강아지 사료": a noun modifying another, not a name
        if tok.form in KO_PETS:
            _pet(name.form, tok.form, speaker, context, state, owned=possessed or index == 0)
        elif tok.form in KO_RELATION_NOUNS and name.tag == "NNP":
            context.people.setdefault(normalise_text_key(name.form), name.form)
            context.add_entity(name.form, "person", 3)
            state.referent = name.form


def _owner(subject: str) -> str:
    return "사용자" if normalise_subject(subject) == USER_SUBJECT else subject


def _name_ok(tok: Morpheme) -> bool:
    key = normalise_text_key(tok.form)
    return (
        tok.form not in KO_STOP_NOUNS
        and key not in TIME_WORDS
        and key not in GENERIC_NAMES
        and tok.form not in KO_PETS
        and key not in PLACES
        and key not in ORGANISATIONS
        and key not in TECHNOLOGIES
    )


def _pet(name: str, kind: str, speaker: Speaker, context: ExtractionContext, state: ChatState, *, owned: bool) -> None:
    context.people.pop(normalise_text_key(name), None)
    context.add_entity(name, "pet", PET_CONFIDENCE)
    state.referent = name
    if not owned or speaker.subject is None:
        return
    context.add_fact(speaker.subject, "has_pet", kind, text=f"{_owner(speaker.subject)}의 {kind} 이름은 {name}이다.")
    source = speaker_node(speaker, context)
    if source is not None:
        context.add_relation(source, "owns", name)


# ---- Ages -------------------------------------------------------------------------------------------------


def _age(tokens: Sequence[Morpheme], unit: int, speaker: Speaker, context: ExtractionContext, state: ChatState) -> None:
    """ "보리 세 살 됐어", "나비가 열 살이야", "하은이 일곱 살 돼요": the number before 살, becoming (되) or
    being (copula) it; about a pet or person named earlier in the sentence, else the speaker."""
    years = age_before(tokens, unit)
    nxt = tokens[unit + 1] if unit + 1 < len(tokens) else None
    if years is None or nxt is None or not (nxt.form == "되" or nxt.tag == "VCP"):
        return
    mood = ko_mood(list(tokens), unit + 2)
    if mood & _NOT_ASSERTED or ("past" in mood and nxt.tag == "VCP"):  # "열 살이었어": no longer
        return
    subject = _named_before(tokens, unit, context) or speaker.subject
    if subject is not None:
        context.add_fact(subject, "age", str(years))


def _named_before(tokens: Sequence[Morpheme], end: int, context: ExtractionContext) -> str | None:
    """The last pet or person of this conversation named before `end`."""
    for tok in reversed(tokens[:end]):
        known = context.entities.get(normalise_text_key(tok.form))
        if known is not None and known[0].type in ("pet", "person") and not context.is_user(tok.form):
            return known[0].name
    return None


# ---- Decisions and switches ------------------------------------------------------------------------------


def _value_before_particle(
    sentence: str, tokens: Sequence[Morpheme], verb: int, particles: frozenset[str]
) -> tuple[str, int] | None:
    """The noun run right before the nearest `particles` before the verb ("스벨트로 결정", "팀즈로 옮겨")."""
    index = verb - 1
    while index >= 0 and not (tokens[index].tag.startswith("J") and tokens[index].form in particles):
        if tokens[index].tag.startswith(("V", "E")):
            return None
        index -= 1
    last = index - 1
    if last < 0 or tokens[last].tag not in _NOUN_RUN:
        return None
    first = last
    # The particle's own word, then earlier words only while they are bare names or numbers ("깃헙 액션으로",
    # "포스트그레스 16으로"); a common noun ends it ("팀 배포 깃랩으로" → "깃랩", "뷰 대신 리액트로" → "리액트").
    while first > 0 and tokens[first - 1].tag in _NOUN_RUN and tokens[first - 1].end == tokens[first].start:
        first -= 1
    while first > 0 and tokens[first - 1].end < tokens[first].start:
        word_start = first - 1
        while word_start > 0 and tokens[word_start - 1].end == tokens[word_start].start:
            word_start -= 1
        word = tokens[word_start:first]
        if not all(t.tag in PROPER | {"SN"} for t in word) or any(_generic(t.form) for t in word):
            break  # "CI 깃헙 액션으로": what is switched, not part of the new tool's name
        first = word_start
    return sentence[tokens[first].start : tokens[last].end].strip(), first


def _generic(form: str) -> bool:
    return normalise_text_key(form) in GENERIC_NAMES


def _is_named(value: str, tokens: Sequence[Morpheme]) -> bool:
    key = normalise_text_key(value)
    return any(t.tag in PROPER for t in tokens) or key in TECHNOLOGIES or key in ORGANISATIONS


def _decision(
    sentence: str, tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    found = _value_before_particle(sentence, tokens, index, _TO | {"을", "를"})
    if found is None or not _asserted(tokens, index) or speaker.subject is None:
        return
    choice, first = found
    value_tokens = [t for t in tokens[first:index] if t.tag in _NOUN_RUN]
    if not _is_named(choice, value_tokens):
        return
    target = _topic_name(tokens, first, context)
    context.add_entity(choice, "technology" if normalise_text_key(choice) in TECHNOLOGIES else "other", 1)
    if target is not None:
        context.add_entity(target, "project", 2)
    where = f"{target}에 " if target else ""
    text = f"{korean_topic(_owner(speaker.subject))} {where}{korean_direction(choice)} 결정했다."
    context.add_fact(speaker.subject, "chose", choice, text=text)
    decision_edges(choice, target, speaker, context)


def _topic_name(tokens: Sequence[Morpheme], before: int, context: ExtractionContext) -> str | None:
    """The named thing a topic marker sets up before the value ("헤론은", "아틀라스 DB는"): what a decision
    is for. People are not: "준호는 … 정했어요" is who decided."""
    for index in range(before - 1, 0, -1):
        tok = tokens[index]
        if tok.tag == "JX" and tok.form in {"은", "는", "ᆫ"}:
            names: list[Morpheme] = []
            probe = index - 1
            while probe >= 0 and tokens[probe].tag in _NOUN_RUN:
                names.insert(0, tokens[probe])
                probe -= 1
            proper = [t.form for t in names if t.tag in PROPER and normalise_text_key(t.form) not in GENERIC_NAMES]
            return proper[0] if proper and normalise_text_key(proper[0]) not in context.people else None
    return None


def _switch(
    sentence: str, tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    found = _value_before_particle(sentence, tokens, index, _TO)
    if found is None or not _asserted(tokens, index) or speaker.subject is None:
        return
    target, first = found
    value_tokens = [t for t in tokens[first:index] if t.tag in _NOUN_RUN]
    if any(normalise_text_key(t.form) in PLACES or KO_PLACE_NAME.fullmatch(t.form) for t in value_tokens):
        return  # "부산 지사로 옮겨": a move of place, not of tool
    if any(t.form == "이사" for t in tokens):
        return
    from_source = any(t.form == "에서" and t.tag == "JKB" for t in tokens[:first])
    if not (_is_named(target, value_tokens) or from_source):
        return
    if "past" in ko_mood(list(tokens), _stem_end(tokens, index) or index + 1):
        return  # "디스코드로 옮겼어요": done; what is used now is the uses rules' business
    context.add_entity(target, "technology" if normalise_text_key(target) in TECHNOLOGIES else "other", 1)
    source = speaker_node(speaker, context)
    if source is not None:
        context.add_relation(source, "switching_to", target)


# ---- Particles chat drops -----------------------------------------------------------------------------------


def _workplace_without_particle(
    tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    """ "네이버 다녀요": an organisation right before 다니다, its 에 dropped."""
    if index == 0 or not _asserted(tokens, index):
        return
    place = tokens[index - 1]
    key = normalise_text_key(place.form)
    if place.tag not in PROPER and key not in ORGANISATIONS:
        return
    if key in PLACES or is_school_name(place.form):
        return
    if key not in ORGANISATIONS and not ORGANISATION_SUFFIXES.search(place.form):
        return
    subject = ko_subject(list(tokens), index - 1, speaker, context, "employer")
    if subject is not None:
        record_fact(subject, "employer", place.form, context)


def _tool_without_particle(
    tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    """ "요즘 노션 써요": a known technology right before 쓰다, its 을/를 dropped."""
    if index == 0 or not _asserted(tokens, index):
        return
    tool = tokens[index - 1]
    if tool.end != tokens[index].start and normalise_text_key(tool.form) in TECHNOLOGIES:
        subject = ko_subject(list(tokens), index - 1, speaker, context, "uses_tool")
        if subject is not None:
            record_fact(subject, "uses_tool", tool.form, context)


def _liking_without_particle(
    sentence: str, tokens: Sequence[Morpheme], index: int, speaker: Speaker, context: ExtractionContext
) -> None:
    """ "매운 거 진짜 좋아해" (object particle dropped), "오이는 싫어" (a psych adjective: the marked noun is
    what is liked or disliked, the speaker the one who feels it)."""
    tok = tokens[index]
    if not _asserted_adjective(tokens, index):
        return
    probe = index - 1
    while probe >= 0 and tokens[probe].tag in _DEGREE_ADVERBS:
        probe -= 1
    if probe < 0:
        return
    marked = tokens[probe].tag in _SUBJECT_PARTICLES and tokens[probe].form in {"은", "는", "이", "가", "도"}
    if tok.tag == "VV" and marked:
        return  # "유나는 좋아해": the topic is who likes, and the object is elsewhere
    last = probe - 1 if marked else probe
    if last < 0 or tokens[last].tag not in _NOUN_RUN | {"NNB"}:
        return
    first = last
    if tokens[last].tag == "NNB" and last >= 2 and tokens[last - 1].tag == "ETM":
        first = last - 2  # "매운 거": the adjective and its noun
    value = sentence[tokens[first].start : tokens[last].end].strip()
    if not value or value in KO_STOP_NOUNS or normalise_text_key(value) in context.people:
        return
    if speaker.subject is not None:
        attribute = "likes" if tok.form == "좋아하" else "dislikes"
        record_fact(speaker.subject, attribute, value, context)


def _asserted_adjective(tokens: Sequence[Morpheme], index: int) -> bool:
    if index > 0 and tokens[index - 1].form in {"안", "못"}:
        return False
    return not ko_mood(list(tokens), index + 1) & _NOT_ASSERTED
