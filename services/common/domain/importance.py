"""Importance of a memory in [0, 1], scored once when it is written (DESIGN.md §3).

Ranking weighs it against relevance and recency, and the pruner keeps important memories longer and
forgets unimportant ones first. In LLM mode the summarising or extracting call returns it in the same
answer (`coerce_importance` reads what the model wrote); offline, and whenever the model left it out or
wrote something unusable, `text_importance` scores the text with the heuristic below.

The heuristic (English and Korean), per sentence:

- a sentence starts from `NEUTRAL` (0.2): ordinary content is neither kept nor dropped by importance;
- each kind of cue present raises it by noisy-OR (`1 - (1 - score)(1 - weight)`), so two cues count more
  than one, nothing exceeds 1 and the order of the cues does not matter:

  | cue | weight | examples |
  |---|---|---|
  | explicit "remember this" | 0.9 | "remember that…", "don't forget", "keep in mind", "기억해", "잊지 마", "명심" |
  | health, allergies, safety | 0.7 | "allergic", "medication", "diabetic", "알레르기", "복용", "당뇨" |
  | decisions | 0.6 | "we decided", "let's go with", "agreed", "결정했", "하기로", "정했" |
  | errors and failures | 0.55 | "error", "failed", "crashed", "outage", "오류", "에러", "실패", "장애" |
  | preferences | 0.5 | "I prefer", "I love", "I hate", "favorite", "좋아해", "싫어", "선호" |
  | commitments and deadlines | 0.5 | "I will", "promise", "deadline", "by Friday", "약속", "마감", "까지" |
  | personal facts | 0.35 | "my name is", "I live in", "I work at", "제 이름", "살아요", "다녀요" |
  | dates and numbers | 0.25 | a digit, a month or weekday name, "tomorrow", "내일", "다음 주" |

- a greeting, thanks, acknowledgement or laughter ("hi!", "thanks", "ㅋㅋ", "고마워요") scores `TRIVIAL`
  (0.05), and small talk without any cue ("how are you?", "nice weather", "잘 지내?") is capped at
  `SMALL_TALK` (0.1).

A text of several sentences (a session, a summary) is as important as its most important sentence, plus
`EXTRA_SIGNAL` (0.05) for every further sentence that scores at least `SIGNAL` (0.5), capped at 1: one
decision in a long chat makes the chat worth keeping; chit-chat around it does not dilute it.

`DEFAULT_IMPORTANCE` (0.5) is what a memory written before importance existed reads as: neither
promoted nor demoted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from services.common.domain.sentences import split_sentences
from services.common.domain.trivial import has_nothing_to_remember

DEFAULT_IMPORTANCE = 0.5
"""The importance of a memory stored before importance was scored (and of anything unscored)."""

NEUTRAL = 0.2
TRIVIAL = 0.05
SMALL_TALK = 0.1
SIGNAL = 0.5
EXTRA_SIGNAL = 0.05
API_SAVE_FLOOR = 0.7
"""Floor of a fact saved explicitly through the API (`memory_save`): saving is itself a "remember this"."""


@dataclass(frozen=True, slots=True)
class Cue:
    """One kind of evidence that a sentence matters, and how much it adds (noisy-OR weight)."""

    name: str
    weight: float
    pattern: re.Pattern[str]


def _cue(name: str, weight: float, english: str, korean: str) -> Cue:
    # English on word boundaries, case-insensitive; Korean as substrings (particles and endings attach).
    return Cue(name, weight, re.compile(rf"(?:\b(?:{english})\b)|(?:{korean})", re.IGNORECASE))


_MONTHS = "jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
_MONTHS += "oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|next (?:week|month|year)"

CUES: tuple[Cue, ...] = (
    _cue(
        "remember",
        0.9,
        r"remember (?:this|that|to)|don'?t forget|do not forget|keep in mind|make a note|note that|"
        r"for future reference|important",
        r"기억해|기억해\s*줘|기억해\s*주|기억하세요|잊지\s*마|잊지\s*말|명심|메모해|중요해|중요한",
    ),
    _cue(
        "health",
        0.7,
        r"allerg(?:y|ies|ic)|medication|medicine|prescri\w*|diabet\w*|asthma|epilep\w*|pregnan\w*|"
        r"intoleran\w*|gluten|peanuts?|shellfish|vegan|vegetarian|blood type|surgery|diagnos\w*|doctor",
        r"알레르기|알러지|복용|당뇨|천식|임신|수술|진단|처방|채식|글루텐|땅콩|혈액형|병원",
    ),
    _cue(
        "decision",
        0.6,
        r"decided|decide to|decision|we(?:'ll| will) go with|let'?s go with|let'?s use|chose|choose|agreed|"
        r"settled on|going with|switch(?:ed)? to|picked",
        r"결정|하기로|쓰기로|정했|정하자|선택했|합의|로 가자|바꾸기로",
    ),
    _cue(
        "error",
        0.55,
        r"errors?|failed|failures?|fails|crash(?:ed|es)?|bugs?|exceptions?|broke(?:n)?|outage|incident|"
        r"timed? ?out|regression|rollback|traceback",
        r"오류|에러|실패|장애|버그|예외|크래시|다운됐|안 ?돼|안 ?되|롤백|터졌",
    ),
    _cue(
        "preference",
        0.5,
        r"prefer\w*|i (?:really )?(?:like|love|hate|enjoy|dislike|can'?t stand)|favou?rite|"
        r"i'?d rather|don'?t like|do not like|not a fan",
        r"좋아해|좋아하|싫어|선호|즐겨|별로야|최애|취향",
    ),
    _cue(
        "commitment",
        0.5,
        r"i(?:'ll| will)|we(?:'ll| will)|promise[ds]?|deadline|due (?:on|by)|by (?:monday|tuesday|wednesday|"
        r"thursday|friday|saturday|sunday|tomorrow|next week|the end of)|must|have to|need to|todo|to-do",
        r"약속|마감|까지|할게|하겠|해야|예정|기한",
    ),
    _cue(
        "personal",
        0.35,
        r"my name is|i(?:'m| am) (?:a|an) \w+|i live|i work|i moved|my (?:wife|husband|son|daughter|partner|"
        r"mom|dad|mother|father|job|birthday)|born in",
        r"제 이름|내 이름|살아요|살고 있|살아|다녀요|다니고|이사|일해요|일하고|생일|아내|남편|아들|딸",
    ),
    _cue(
        "date_number",
        0.25,
        rf"{_MONTHS}|{_DAYS}|\d+(?:[.,:/-]\d+)*(?:st|nd|rd|th|am|pm|k|%)?",
        r"\d|내일|모레|다음 ?주|다음 ?달|내년|월요일|화요일|수요일|목요일|금요일|토요일|일요일|[0-9]+시",
    ),
)

_SMALL_TALK = re.compile(
    r"(?:how are you|how'?s it going|what'?s up|nice weather|good (?:morning|night|evening|afternoon)|"
    r"have a (?:nice|good|great) (?:day|one|weekend)|see you|talk (?:to you )?later|bye|lol|haha|"
    r"잘 ?지내|날씨 ?좋|좋은 ?아침|안녕|반가워|수고|잘 ?자|또 ?봐|ㅋ|ㅎ)",
    re.IGNORECASE,
)


def matched_cues(sentence: str) -> list[Cue]:
    """The cues found in `sentence` (each kind once)."""
    return [cue for cue in CUES if cue.pattern.search(sentence)]


def sentence_importance(sentence: str) -> float:
    """Importance of one sentence (see the module docstring)."""
    text = " ".join(sentence.split())
    if not text:
        return 0.0
    if has_nothing_to_remember(text):
        return TRIVIAL
    cues = matched_cues(text)
    if not cues:
        return SMALL_TALK if _SMALL_TALK.search(text) else NEUTRAL
    remaining = 1.0 - NEUTRAL
    for cue in cues:
        remaining *= 1.0 - cue.weight
    return round(1.0 - remaining, 4)


def combine(scores: Iterable[float]) -> float:
    """Importance of a text from its sentences' scores: the best one, plus `EXTRA_SIGNAL` for every further
    sentence at or above `SIGNAL`, capped at 1; 0 for no sentence."""
    ordered = sorted(scores, reverse=True)
    if not ordered:
        return 0.0
    extra = sum(EXTRA_SIGNAL for score in ordered[1:] if score >= SIGNAL)
    return round(min(1.0, ordered[0] + extra), 4)


def text_importance(text: str) -> float:
    """Importance of a text (a session, a summary, a fact's sentence) in [0, 1]; pure and deterministic."""
    sentences = [s for line in text.splitlines() for s in split_sentences(line)]
    return combine(sentence_importance(s) for s in sentences)


def messages_importance(contents: Iterable[str]) -> float:
    """Importance of a conversation from the contents of its turns (each turn split into sentences)."""
    return combine(sentence_importance(s) for content in contents for s in split_sentences(content))


def coerce_importance(value: object) -> float | None:
    """What a model wrote as importance, as a number in [0, 1], or None when it is unusable (then the
    caller scores the text instead). Accepts a number in [0, 1], a 1–10 rating as in Generative Agents
    (divided by 10), a numeric string, or "low"/"medium"/"high"; anything else (missing, NaN, negative,
    above 10, a bool, prose) is None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        word = value.strip().casefold()
        named = {"low": 0.2, "medium": 0.5, "high": 0.9, "낮음": 0.2, "보통": 0.5, "높음": 0.9}
        if word in named:
            return named[word]
        try:
            value = float(word)
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    if value <= 1:
        return float(value)
    if value <= 10:
        return float(value) / 10.0
    return None


def clamp_importance(value: float | None) -> float:
    """`value` clamped to [0, 1]; None and NaN read as `DEFAULT_IMPORTANCE`."""
    if value is None or not math.isfinite(value):
        return DEFAULT_IMPORTANCE
    return min(1.0, max(0.0, float(value)))
