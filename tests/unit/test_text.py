"""Code-point-safe text utilities, sentences, language, trivial messages and the offline tokenizer."""

from __future__ import annotations

import pytest
import regex  # type: ignore[import-untyped]  # tiktoken's dependency; an independent UAX #29
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.domain.graphemes import (
    is_cluster_boundary,
    keep_tail_codepoints,
    truncate_codepoints,
    truncate_with_ellipsis,
)
from services.common.domain.language import detect_language, hangul_share
from services.common.domain.sentences import split_sentences
from services.common.domain.tokens import TokenCounter, bundled_encoding_path
from services.common.domain.trivial import has_nothing_to_remember, is_trivial_message

# Characters that make cutting hard: Hangul syllables and conjoining jamo, combining accents, emoji
# with skin tones / ZWJ / variation selectors, flags (regional-indicator pairs), CRLF.
TRICKY = [
    "가",
    "한",
    "\u1100",
    "\u1161",
    "\u11a8",
    "e",
    "\u0301",
    "\u0308",
    "👍",
    "\U0001f3fd",
    "\u200d",
    "👩",
    "\ufe0f",
    "❤",
    "🇰",
    "🇷",
    "\r",
    "\n",
    " ",
    ".",
    "A",
]
tricky_text = st.text(alphabet=st.sampled_from(TRICKY), max_size=120)
any_text = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(TRICKY)),
    max_size=300,
)


def clusters(text: str) -> list[str]:
    """Extended grapheme clusters per the `regex` module (an independent UAX #29 implementation)."""
    return list(regex.findall(r"\X", text))


# ---- truncation ---------------------------------------------------------------------------------


def test_truncate_keeps_short_text_and_cuts_long_text() -> None:
    assert truncate_codepoints("hello", 10) == "hello"
    assert truncate_codepoints("hello", 3) == "hel"
    assert truncate_codepoints("hello", 0) == ""
    assert truncate_codepoints("안녕하세요", 2) == "안녕"  # code points, not bytes


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("ae\u0301", 2, "a"),  # e + combining acute stay together
        ("a\u1100\u1161\u11a8b", 2, "a"),  # conjoining jamo ᄀ+ᅡ+ᆨ are one syllable
        ("a\u1100\u1161\u11a8b", 4, "a\u1100\u1161\u11a8"),
        ("x👍\U0001f3fd", 2, "x"),  # emoji + skin tone
        ("x👩\u200d❤\ufe0f", 3, "x"),  # ZWJ sequence
        ("a\u200db", 2, "a\u200d"),  # a ZWJ before a letter joins nothing
        ("a🇰🇷🇺🇸", 4, "a🇰🇷"),  # flags are pairs
        ("a🇰🇷🇺🇸", 3, "a🇰🇷"),
        ("a\r\nb", 2, "a"),
    ],
)
def test_truncate_never_splits_a_cluster(text: str, limit: int, expected: str) -> None:
    assert truncate_codepoints(text, limit) == expected


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("aक्ष", 3, "a"),  # a Devanagari conjunct (consonant, virama, consonant) is one cluster
        ("a\u0600\u0661", 2, "a"),  # an Arabic number sign goes with the digit after it (prepend)
    ],
)
def test_truncate_follows_full_uax29_beyond_emoji_and_hangul(text: str, limit: int, expected: str) -> None:
    assert truncate_codepoints(text, limit) == expected
    assert not is_cluster_boundary(text, len(text) - 1)


def test_truncate_falls_back_to_code_points_for_a_giant_cluster() -> None:
    text = "e" + "\u0301" * 50
    assert truncate_codepoints(text, 10) == text[:10]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abc", 5, "abc"),
        ("abcdef", 3, "def"),
        ("ae\u0301x", 2, "x"),  # the tail must not start with a combining mark
        ("🇰🇷🇺🇸", 3, "🇺🇸"),
        ("그거 어떻게 됐어?", 6, "떻게 됐어?"),
    ],
)
def test_keep_tail(text: str, limit: int, expected: str) -> None:
    assert keep_tail_codepoints(text, limit) == expected


def test_truncate_with_ellipsis_prefers_word_boundary() -> None:
    text = "The deployment moved to Kubernetes with Helm charts last week"
    out = truncate_with_ellipsis(text, 30)
    assert len(out) <= 30
    assert out.endswith("…")
    assert text.startswith(out[:-1])
    assert out == "The deployment moved to…"


@given(any_text, st.integers(min_value=0, max_value=320))
@settings(max_examples=300, deadline=None, database=None)
def test_truncate_is_a_bounded_cluster_safe_prefix(text: str, limit: int) -> None:
    out = truncate_codepoints(text, limit)
    assert text.startswith(out)
    assert len(out) <= limit
    out.encode("utf-8")
    if len(out) < len(text):
        has_boundary = any(is_cluster_boundary(text, k) for k in range(1, limit + 1))
        if has_boundary:
            assert is_cluster_boundary(text, len(out))
            # The longest such prefix: nothing between the cut and the limit is a boundary.
            assert not any(is_cluster_boundary(text, k) for k in range(len(out) + 1, limit + 1))


@given(tricky_text, st.integers(min_value=1, max_value=130))
@settings(max_examples=1000, deadline=None, database=None)
def test_truncate_agrees_with_uax29_clusters(text: str, limit: int) -> None:
    # On these characters our boundary rules match UAX #29 wherever we cut: the result is whole clusters.
    out = truncate_codepoints(text, limit)
    parts = clusters(text)
    whole = [sum(len(p) for p in parts[:k]) for k in range(len(parts) + 1)]
    if any(0 < w <= limit for w in whole) or len(text) <= limit:
        assert len(out) in whole


@given(any_text, st.integers(min_value=0, max_value=320))
@settings(max_examples=200, deadline=None, database=None)
def test_keep_tail_is_a_bounded_suffix(text: str, limit: int) -> None:
    out = keep_tail_codepoints(text, limit)
    assert text.endswith(out)
    assert len(out) <= limit


# ---- sentences ----------------------------------------------------------------------------------


def test_split_english_sentences() -> None:
    text = "Hi Dr. Kim. I decided to use Go 1.22 for the API! Is that ok? J. K. Rowling wrote it."
    assert split_sentences(text) == [
        "Hi Dr. Kim.",
        "I decided to use Go 1.22 for the API!",
        "Is that ok?",
        "J. K. Rowling wrote it.",
    ]


def test_split_korean_sentences() -> None:
    text = "온비서 프로젝트는 다음 주에 배포하기로 결정했어요. 마감은 금요일입니다! 괜찮을까요? 네\n좋아요。다음에 봐요"
    assert split_sentences(text) == [
        "온비서 프로젝트는 다음 주에 배포하기로 결정했어요.",
        "마감은 금요일입니다!",
        "괜찮을까요?",
        "네",
        "좋아요。",
        "다음에 봐요",
    ]


def test_split_sentences_handles_lists_quotes_and_blank_lines() -> None:
    text = '1. First item here\n\n2. Second item. She said "done." Then left'
    assert split_sentences(text) == ["1. First item here", "2. Second item.", 'She said "done."', "Then left"]
    assert split_sentences("   ") == []


def test_split_sentences_keeps_abbreviations_acronyms_and_initials_but_not_a_lone_letter_value() -> None:
    # One splitter serves the fact write policy and erasure: the union of their abbreviations.
    assert split_sentences("D.G.I.A. is great. I use R.") == ["D.G.I.A. is great.", "I use R."]
    assert split_sentences("I work in the sales dept. of Acme Corp. now.") == [
        "I work in the sales dept. of Acme Corp. now."
    ]
    assert split_sentences("The book is by J. K. Rowling. I loved it.") == [
        "The book is by J. K. Rowling.",
        "I loved it.",
    ]
    # "R." after a lowercase word is a value ending its sentence, not an initial.
    assert split_sentences("I use R. My friend uses Python.") == ["I use R.", "My friend uses Python."]
    assert split_sentences('He said "Wow." Then he left.') == ['He said "Wow."', "Then he left."]


# ---- language -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "locale", "expected"),
    [
        ("Kubernetes 배포 방식은 Helm으로 결정했어요", None, "ko"),
        ("그거 어떻게 됐어?", None, "ko"),
        ("We decided to deploy with Helm", None, "en"),
        ("", None, "en"),
        ("12345 👍", None, "en"),
        ("We decided to deploy with Helm", "ko-KR", "ko"),
        ("배포했어요", "en-US", "en"),
        ("こんにちは", "ja", "ja"),
    ],
)
def test_detect_language(text: str, locale: str | None, expected: str) -> None:
    assert detect_language(text, locale) == expected


def test_hangul_share_counts_letters_only() -> None:
    assert hangul_share("가나 ab") == 0.5
    assert hangul_share("!!! 123") == 0.0


# ---- trivial messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "ok",
        "OK!",
        "Thanks 👍",
        "thank you so much!!",
        "👍",
        "",
        "ㅇㅋ",
        "고마워",
        "감사합니다~",
        "안녕하세요!",
        "ㅋㅋㅋㅋ",
        "ＯＫ",
    ],
)
def test_trivial_messages(text: str) -> None:
    assert is_trivial_message(text)


@pytest.mark.parametrize(
    "text",
    ["ok, deploy it on Friday", "I prefer Go", "다음 주에 배포하기로 했어요", "42", "thanks, my email is a@b.c"],
)
def test_non_trivial_messages(text: str) -> None:
    assert not is_trivial_message(text)


@pytest.mark.parametrize(
    "text",
    [
        "안녕하세요! 무엇을 도와드릴까요?",  # the assistant's stock greeting: nothing to remember or search
        "You're welcome! Anything else?",
        "glad to help",
        "좋은 하루 되세요",
        "넵넵",
        "감사합니다요",
        "makes sense, thank you",
    ],
)
def test_courtesy_and_stock_assistant_phrases_are_trivial(text: str) -> None:
    assert is_trivial_message(text)


@pytest.mark.parametrize(
    "text",
    ["what did I do", "How was it?", "what do I have today", "Is it done?", "What's that?", "어떻게 됐어?"],
)
def test_questions_made_of_small_words_are_not_trivial(text: str) -> None:
    # L0 must search them (a pronoun follow-up is resolved by the previous turns): one rule for every caller.
    assert not is_trivial_message(text)


# ---- tokens -------------------------------------------------------------------------------------

SAMPLES = [
    "Hello world! The deployment moved to Kubernetes.",
    "온비서 프로젝트는 김철수 팀장이 맡기로 결정했어요. 배포는 금요일까지!",
    "emoji 👩\u200d❤\ufe0f and flags 🇰🇷, code `x = 3.14`, <|endoftext|> in user text",
]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_bundled_bpe_matches_tiktoken_reference(counter: TokenCounter, monkeypatch: pytest.MonkeyPatch) -> None:
    # tiktoken itself, pointed at the same bundled file as its cache, must tokenize identically: our
    # restated split pattern and special tokens are the real o200k_base.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(bundled_encoding_path("o200k_base").parent))
    reference = tiktoken.get_encoding("o200k_base")
    for text in SAMPLES:
        assert counter.encode(text) == reference.encode(text, disallowed_special=())


def test_count_tokens(counter: TokenCounter) -> None:
    assert counter.count_tokens("") == 0
    assert counter.count_tokens("hello") == 1
    assert counter.count_tokens(SAMPLES[1]) > 10


def test_truncate_to_tokens(counter: TokenCounter) -> None:
    text = SAMPLES[1]
    assert counter.truncate_to_tokens(text, 10_000) == text
    assert counter.truncate_to_tokens(text, 0) == ""
    cut = counter.truncate_to_tokens(text, 5)
    assert cut
    assert text.startswith(cut)
    assert counter.count_tokens(cut) <= 5
    assert counter.count_tokens(counter.truncate_to_tokens(text, 6)) <= 6


@given(any_text, st.integers(min_value=0, max_value=40))
@settings(max_examples=100, deadline=None, database=None)
def test_truncate_to_tokens_property(text: str, budget: int) -> None:
    counter = TokenCounter()
    out = counter.truncate_to_tokens(text, budget)
    assert text.startswith(out)
    assert counter.count_tokens(out) <= budget
    if counter.count_tokens(text) <= budget:
        assert out == text


def test_punctuation_alone_is_trivial_and_a_longer_sentence_of_small_words_is_searched() -> None:
    assert is_trivial_message("?") and is_trivial_message("??") and is_trivial_message("…!")
    assert not is_trivial_message("I have a lot to do today")
    assert not is_trivial_message("is there anything else I can do for you today")


def test_small_talk_questions_are_searched_by_l0_but_give_the_summary_nothing() -> None:
    for text in ("What's it done for you?", "How was it?", "What's up?", "Is there anything I can do to help?"):
        assert has_nothing_to_remember(text), text
    assert not is_trivial_message("How was it?") and not is_trivial_message("what did I do")
    assert not has_nothing_to_remember("Gonna continue my edu and check out career options")
    assert has_nothing_to_remember("Thanks, glad to help!") and has_nothing_to_remember("👍")
