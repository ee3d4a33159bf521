"""Trivial messages: acknowledgements, thanks, greetings, laughter and emoji, in English and Korean.

Two callers want two different questions answered, over the same word lists:

- `is_trivial_message` (L0): is there nothing to search memory for? A message is trivial when it is
  empty or only emoji, punctuation and symbols; or when it has at most six words, every one an
  acknowledgement word ("ok", "thanks", "ㅇㅋ", "고마워", laughter, "넵넵", "감사합니다요") or a courtesy
  word ("glad", "help", "anything", "무엇을"), and either one of them is an acknowledgement or the message
  asks nothing (no question mark, no leading question word). So the assistant's "안녕하세요! 무엇을
  도와드릴까요?" is trivial, while "what did I do" and "How was it?" are questions memory can answer, and a
  longer sentence of small words ("I have a lot to do today") is searched.
- `has_nothing_to_remember` (the summarizer: no episode of a session made only of these, no summary
  sentence from them; importance scores them low): every word is an acknowledgement or courtesy word,
  questions included, since small talk such as "What's it done for you?" or "How was it?" states nothing.
"""

from __future__ import annotations

import re
import unicodedata


def _words(text: str) -> list[str]:
    return text.split()


# Words that acknowledge, thank, greet or agree: a message of only these is trivial. Compared as a
# sequence of words, so "ok thanks" and "네 감사합니다" match.
_ACKNOWLEDGEMENTS = frozenset(
    _words(
        """
    ok okay okey okie okk k kk oki alright allright right fine sure yes yeah yep yup ya yea yas no nope nah
    thanks thank thx thnx tks ty tysm tyvm cheers cool nice great awesome perfect excellent amazing
    wonderful good gotcha understood noted hi hello hey hiya heya yo howdy bye goodbye byebye cya nite
    lol lmao rofl haha hahaha hehe wow hmm hm uh um ah ahh oh np welcome anytime morning night evening
    afternoon gn gm agree nvm bro dude sir maam
    ㅇㅋ ㅇㅇ ㄱㅅ ㄳ ㅇㅋㅇㅋ ㄴㄴ ㅎㅇ ㅂㅂ ㅂㅇ 오케이 오키 오키오키 넵 넹 네 네네 넴 예 응 웅 어 엉 그래 그래요
    좋아 좋아요 좋네 좋네요 좋습니다 좋다 알겠어 알겠어요 알겠습니다 알았어 알았어요 알겠다 고마워 고마워요
    고맙습니다 고맙다 고마웠어 감사 감사해요 감사합니다 감사해 감사했습니다 땡큐 아니 아니요 아뇨 안녕
    안녕하세요 안녕하십니까 안뇽 안녕히 가세요 계세요 잘가 잘가요 잘자 잘자요 하이 바이 수고 수고했어
    수고하셨습니다 수고하세요 굿 굳 최고 대박 완벽해 완벽해요 맞아 맞아요 맞습니다 그렇구나 그렇군요 아하 오 와
    헐 음 흠 많이 정말 진짜 너무 잘 확인 확인했어요 확인했습니다 천만에요 별말씀을요 반가워 반가워요 반갑습니다
    ㅠ ㅜ 감사합니당 고맙당 좋당
    """
    )
)
# Words of courtesy and small talk that are trivial beside an acknowledgement or in a message that asks
# nothing ("glad to help", "have a nice day", "좋은 하루 되세요"), but are also the words of a real
# question ("what did I do?", "어떻게 됐어?").
_COURTESY = frozenset(
    _words(
        """
    you it so much very a lot will do see the too all and that s makes sense i got sounds never mind please
    im m re ll ve d t am is are was this thats me my for to of have an day how can what whats up anything
    else there today course again later soon lots many really glad happy help helped problem does did done u
    또 봐 봐요 뵐게요 다음에 다음에요 무엇을 뭘 도와드릴까요 도와드릴게요 도와드릴 어떻게 좋은 하루 되세요 보내세요
    오늘도 그럼 이만 넘 완전
    """
    )
)
_QUESTION_WORDS = frozenset(_words("how what whats can is are was does did 무엇을 뭘 어떻게"))


def _nfkc(text: str) -> str:
    # Messages are compared after NFKC and casefolding, which also turns compatibility jamo ("ㅇㅋ")
    # into conjoining jamo; the word lists go through the same normalisation so they still match.
    return unicodedata.normalize("NFKC", text).casefold()


_ACKNOWLEDGEMENT_WORDS = frozenset(_nfkc(word) for word in _ACKNOWLEDGEMENTS)
_COURTESY_WORDS = frozenset(_nfkc(word) for word in _COURTESY)
_QUESTION = frozenset(_nfkc(word) for word in _QUESTION_WORDS)
# Laughter and crying made of repeated jamo or syllables ("ㅋㅋㅋ", "ㅎㅎ", "ㅠㅠ", "하하하", "크크", "lol").
# After NFKC the jamo ㅋ ㅎ ㅠ ㅜ ㄷ are the conjoining U+110F U+1112 U+1172 U+116E U+1103 (written as
# escapes: normalising the pattern itself would compose "ㅎㅠ" into the syllable "휴").
_JAMO_LAUGHTER = "\u110f\u1112\u1172\u116e\u1103"
_LAUGHTER = re.compile(rf"^(?:[{_JAMO_LAUGHTER}]+|(?:하|히|호|크|키|흐)+|(?:ha|he|hi|ho)+h?|l+o+l+|x+d+)$")
_WORD = re.compile(r"[^\W_]+")
# Polite / casual Korean endings that do not change an acknowledgement ("감사합니다요", "고마워용").
_KO_SOFT_SUFFIX = re.compile("(?:요|용|여|염|욤|당|다|\u1112+|\u110f+|~+)$")


_MAX_TRIVIAL_WORDS = 6  # a longer message of small words says something worth searching for


def is_trivial_message(text: str) -> bool:
    """True for messages with nothing to search memory for (L0 skips them): empty, only emoji or
    punctuation, or a few acknowledgement / thanks / greeting / laughter words in English or Korean
    ("ok", "thanks!", "ㅇㅋ", "고마워", "네 감사합니다", "ㅋㅋㅋ", "👍", "안녕하세요! 무엇을 도와드릴까요?")."""
    words = _WORD.findall(_nfkc(text))
    if not words:
        return True
    if len(words) > _MAX_TRIVIAL_WORDS or not _only_small_words(words):
        return False
    return any(_is_acknowledgement(word) for word in words) or not _asks(text, words)


def has_nothing_to_remember(text: str) -> bool:
    """True for messages that state nothing to keep in a summary: empty, only emoji or punctuation, or
    only acknowledgement and courtesy words, small-talk questions included ("How was it?")."""
    return _only_small_words(_WORD.findall(_nfkc(text)))


def _only_small_words(words: list[str]) -> bool:
    return all(_is_acknowledgement(word) or word in _COURTESY_WORDS for word in words)


def _asks(text: str, words: list[str]) -> bool:
    """A question: it ends with a question mark or starts with a question word ("what did I do")."""
    return text.rstrip().endswith(("?", "？")) or (bool(words) and words[0] in _QUESTION)


def _is_acknowledgement(word: str) -> bool:
    if word in _ACKNOWLEDGEMENT_WORDS or _LAUGHTER.match(word):
        return True
    half = len(word) // 2
    if half and len(word) % 2 == 0 and word[:half] == word[half:] and word[:half] in _ACKNOWLEDGEMENT_WORDS:
        return True  # "넵넵", "okok"
    stripped = _KO_SOFT_SUFFIX.sub("", word)
    return bool(stripped) and stripped != word and _is_acknowledgement(stripped)
