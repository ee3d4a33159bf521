"""The L0 query, pure: which messages are too trivial to search memory for (acknowledgements, thanks,
greetings, laughter in English and Korean), and the query text built from the current message and
the user's previous turns."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.domain.text import keep_tail_codepoints

# --------------------------------------------------------------------------------------------------
# Trivial messages

# Whole messages (after normalisation) that carry nothing to search for: acknowledgements, thanks,
# greetings, yes/no, laughter. Compared as a sequence of words, so "ok thanks" and "네 감사합니다" match.
_TRIVIAL_WORDS_EN = frozenset(
    {
        "ok",
        "okay",
        "okey",
        "okie",
        "k",
        "kk",
        "oki",
        "alright",
        "allright",
        "right",
        "fine",
        "sure",
        "yes",
        "yeah",
        "yep",
        "yup",
        "ya",
        "yea",
        "no",
        "nope",
        "nah",
        "thanks",
        "thank",
        "you",
        "thx",
        "ty",
        "tysm",
        "cheers",
        "cool",
        "nice",
        "great",
        "awesome",
        "perfect",
        "good",
        "got",
        "it",
        "gotcha",
        "understood",
        "noted",
        "hi",
        "hello",
        "hey",
        "yo",
        "bye",
        "goodbye",
        "cya",
        "lol",
        "lmao",
        "haha",
        "hahaha",
        "hehe",
        "wow",
        "hmm",
        "hm",
        "uh",
        "um",
        "ah",
        "oh",
        "so",
        "much",
        "very",
        "a",
        "lot",
        "np",
        "welcome",
        "sounds",
        "will",
        "do",
        "see",
        "morning",
        "night",
        "evening",
        "afternoon",
        "gn",
        "gm",
        "the",
        "too",
        "all",
        "and",
        "that",
        "s",
        "makes",
        "sense",
        "i",
        "agree",
        "nvm",
        "never",
        "mind",
        "please",
    }
)
_TRIVIAL_WORDS_KO = frozenset(
    {
        "ㅇㅋ",
        "ㅇㅇ",
        "ㄱㅅ",
        "ㄳ",
        "ㅇㅋㅇㅋ",
        "ㄴㄴ",
        "ㅎㅇ",
        "ㅂㅂ",
        "ㅂㅇ",
        "오케이",
        "오키",
        "오키오키",
        "넵",
        "넹",
        "네",
        "넴",
        "예",
        "응",
        "웅",
        "어",
        "엉",
        "그래",
        "그래요",
        "좋아",
        "좋아요",
        "좋네",
        "좋네요",
        "좋습니다",
        "알겠어",
        "알겠어요",
        "알겠습니다",
        "알았어",
        "알았어요",
        "알겠다",
        "고마워",
        "고마워요",
        "고맙습니다",
        "고맙다",
        "감사",
        "감사해요",
        "감사합니다",
        "감사해",
        "땡큐",
        "아니",
        "아니요",
        "아뇨",
        "안녕",
        "안녕하세요",
        "안녕히",
        "가세요",
        "계세요",
        "잘가",
        "수고",
        "수고했어",
        "수고하셨습니다",
        "수고하세요",
        "굿",
        "굳",
        "최고",
        "대박",
        "완벽해",
        "완벽해요",
        "맞아",
        "맞아요",
        "맞습니다",
        "그렇구나",
        "그렇군요",
        "아하",
        "오",
        "와",
        "헐",
        "음",
        "흠",
        "많이",
        "정말",
        "진짜",
        "너무",
        "잘",
        "확인",
        "확인했어요",
        "확인했습니다",
        "천만에요",
        "ㅠ",
        "ㅜ",
        "감사합니당",
        "고맙당",
        "좋당",
    }
)


def _nfkc(text: str) -> str:
    # Messages are compared after NFKC, which turns compatibility jamo ("ㅇㅋ") into conjoining jamo;
    # the word lists and patterns go through the same normalisation so they still match.
    return unicodedata.normalize("NFKC", text)


_TRIVIAL_WORDS = frozenset(_nfkc(word) for word in _TRIVIAL_WORDS_EN | _TRIVIAL_WORDS_KO)
# Laughter and crying made of repeated jamo or syllables ("ㅋㅋㅋ", "ㅎㅎ", "ㅠㅠ", "하하하", "크크").
# After NFKC the jamo ㅋ ㅎ ㅠ ㅜ ㄷ are the conjoining U+110F U+1112 U+1172 U+116E U+1103 (written as
# escapes: normalising the pattern itself would compose "ㅎㅠ" into the syllable "휴").
_JAMO_LAUGHTER = "\u110f\u1112\u1172\u116e\u1103"
_LAUGHTER = re.compile(rf"^(?:[{_JAMO_LAUGHTER}]+|(?:하|히|호|크|키|흐)+|(?:ha|he|hi|ho)+h?|lo+l|x+d+)$")
_WORD = re.compile(r"[\w]+", re.UNICODE)
# Polite / casual Korean endings that do not change an acknowledgement ("감사합니다요", "고마워용").
_KO_SOFT_SUFFIX = re.compile("(?:요|용|여|염|욤|당|다|\u1112+|\u110f+|~+)$")


def _is_symbolic(ch: str) -> bool:
    """Emoji, pictographs, punctuation, symbols, joiners, variation selectors and whitespace."""
    if ch.isspace():
        return True
    category = unicodedata.category(ch)
    return category[0] in ("P", "S", "Z", "C") or category in ("Mn", "Me", "Sk")


def is_trivial_message(text: str) -> bool:
    """True for messages with nothing worth searching memory for: empty, only emoji or punctuation,
    or only acknowledgement / thanks / greeting / laughter words in English or Korean
    ("ok", "thanks!", "ㅇㅋ", "고마워", "네 감사합니다", "ㅋㅋㅋ", "👍")."""
    normalised = unicodedata.normalize("NFKC", text).casefold().strip()
    if not normalised or all(_is_symbolic(ch) for ch in normalised):
        return True
    words = _WORD.findall(normalised)
    if not words:
        return True
    if len(words) > 6:
        return False
    return all(_is_trivial_word(word) for word in words)


def _is_trivial_word(word: str) -> bool:
    if word in _TRIVIAL_WORDS or _LAUGHTER.match(word):
        return True
    half = len(word) // 2
    if half and len(word) % 2 == 0 and word[:half] == word[half:] and word[:half] in _TRIVIAL_WORDS:
        return True  # "넵넵", "okok"
    stripped = _KO_SOFT_SUFFIX.sub("", word)
    return bool(stripped) and stripped != word and (stripped in _TRIVIAL_WORDS or _is_trivial_word(stripped))


# --------------------------------------------------------------------------------------------------
# The L0 query


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    content: str


def build_l0_query(
    message: str,
    recent_messages: Sequence[Turn],
    *,
    previous_user_turns: int = 2,
    max_codepoints: int = 300,
) -> str:
    """The current message plus at most `previous_user_turns` earlier user turns (oldest first,
    newest last), cut to `max_codepoints` code points keeping the newest end. Earlier turns are what
    resolve a pronoun follow-up ("그거 어떻게 됐어?"); trivial ones ("ok") add nothing and are skipped,
    as is a copy of the current message at the end of `recent_messages`."""
    current = message.strip()
    previous: list[str] = []
    history = list(recent_messages)
    if history and history[-1].role == "user" and history[-1].content.strip() == current:
        history = history[:-1]
    for turn in reversed(history):
        if len(previous) >= previous_user_turns:
            break
        if turn.role != "user":
            continue
        content = turn.content.strip()
        if content and not is_trivial_message(content):
            previous.append(content)
    parts = [*reversed(previous), current]
    joined = "\n".join(part for part in parts if part)
    return keep_tail_codepoints(joined, max_codepoints).strip()
