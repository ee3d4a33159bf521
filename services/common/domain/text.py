"""Text utilities that are safe for Korean, emoji and combining marks.

Lengths are counted in code points (never bytes: Hangul is 3 bytes in UTF-8), and cuts never split a
code point and avoid splitting a grapheme cluster: combining marks, emoji modifiers, variation
selectors, zero-width-joiner sequences, regional-indicator flag pairs and conjoining Hangul jamo stay
with their base character.

Token counting uses OpenAI's `o200k_base` BPE (the GPT-4o family's tokenizer) read from the copy that
ships inside the litellm wheel, so it works offline; tiktoken would otherwise download it at run time.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import re
import threading
import unicodedata
from pathlib import Path
from typing import Any

# ---- grapheme-cluster-aware cutting ---------------------------------------------------------------

_ZWJ = "\u200d"


def _is_extend(ch: str) -> bool:
    """True for characters that attach to the previous one (no cluster boundary before them)."""
    cp = ord(ch)
    if ch == _ZWJ or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:  # ZWJ, variation selectors
        return True
    if 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:  # emoji skin tones, emoji tag sequences
        return True
    return unicodedata.category(ch) in ("Mn", "Me", "Mc")  # combining and spacing marks


_PICTOGRAPHIC_RANGES = (
    (0x1F000, 0x1FAFF),
    (0x2600, 0x27BF),
    (0x2300, 0x23FF),
    (0x2190, 0x21FF),
    (0x2B00, 0x2BFF),
    (0x2934, 0x2935),
    (0x3030, 0x3030),
    (0x303D, 0x303D),
    (0x3297, 0x3297),
    (0x3299, 0x3299),
    (0x00A9, 0x00A9),
    (0x00AE, 0x00AE),
    (0x203C, 0x203C),
    (0x2049, 0x2049),
    (0x2122, 0x2122),
    (0x2139, 0x2139),
)


def _is_extended_pictographic(ch: str) -> bool:
    """Approximately Unicode's Extended_Pictographic (emoji and pictographs), without a property table."""
    cp = ord(ch)
    if 0x1F3FB <= cp <= 0x1F3FF or 0x1F1E6 <= cp <= 0x1F1FF:
        return False  # skin-tone modifiers and regional indicators have their own rules
    return any(low <= cp <= high for low, high in _PICTOGRAPHIC_RANGES)


def _is_control(ch: str) -> bool:
    if ch in (_ZWJ, "\u200c") or 0xE0020 <= ord(ch) <= 0xE007F:
        return False
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cf")


def _hangul_kind(ch: str) -> str:
    """Hangul syllable type for the conjoining rules: L, V, T, LV, LVT, or '' for anything else."""
    cp = ord(ch)
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def is_cluster_boundary(text: str, index: int) -> bool:
    """Whether cutting `text` before `index` keeps grapheme clusters whole (a practical subset of UAX #29)."""
    if index <= 0 or index >= len(text):
        return True
    prev, cur = text[index - 1], text[index]
    if prev == "\r" and cur == "\n":
        return False
    if _is_control(prev) or _is_control(cur):
        return True  # GB4/GB5: nothing attaches to a line break or control character
    if _is_extend(cur):
        return False
    if prev == _ZWJ and _is_extended_pictographic(cur):
        # GB11: an emoji ZWJ sequence (👩‍❤️‍👨) stays whole when the ZWJ follows an emoji (plus extenders).
        i = index - 2
        while i >= 0 and _is_extend(text[i]):
            i -= 1
        if i >= 0 and _is_extended_pictographic(text[i]):
            return False
    before, after = _hangul_kind(prev), _hangul_kind(cur)
    if before and after:
        if before == "L" and after in ("L", "V", "LV", "LVT"):
            return False
        if before in ("LV", "V") and after in ("V", "T"):
            return False
        if before in ("LVT", "T") and after == "T":
            return False
    if _is_regional_indicator(prev) and _is_regional_indicator(cur):
        run = 0
        i = index - 1
        while i >= 0 and _is_regional_indicator(text[i]):
            run += 1
            i -= 1
        return run % 2 == 0  # flags are pairs: only cut between pairs
    return True


def truncate_codepoints(text: str, max_codepoints: int) -> str:
    """The longest prefix of at most `max_codepoints` code points that ends on a cluster boundary.

    When a single cluster is longer than the limit (pathological runs of combining marks), the cut
    falls back to the code-point limit rather than returning nothing.
    """
    if max_codepoints <= 0:
        return ""
    if len(text) <= max_codepoints:
        return text
    cut = max_codepoints
    while cut > 0 and not is_cluster_boundary(text, cut):
        cut -= 1
    return text[: cut if cut > 0 else max_codepoints]


def keep_tail_codepoints(text: str, max_codepoints: int) -> str:
    """The longest suffix of at most `max_codepoints` code points that starts on a cluster boundary."""
    if max_codepoints <= 0:
        return ""
    if len(text) <= max_codepoints:
        return text
    start = len(text) - max_codepoints
    cut = start
    while cut < len(text) and not is_cluster_boundary(text, cut):
        cut += 1
    return text[cut if cut < len(text) else start :]


def truncate_with_ellipsis(text: str, max_codepoints: int, ellipsis: str = "…") -> str:
    """Cut to at most `max_codepoints` code points (ellipsis included), preferring a word boundary."""
    if len(text) <= max_codepoints:
        return text
    if max_codepoints <= len(ellipsis):
        return truncate_codepoints(text, max_codepoints)
    head = truncate_codepoints(text, max_codepoints - len(ellipsis))
    # Prefer ending at a space when one is near the end (no half words), else keep the hard cut.
    space = head.rfind(" ")
    if space >= max(1, len(head) - 30):
        head = head[:space]
    return head.rstrip() + ellipsis


# ---- sentences ----------------------------------------------------------------------------------

# Abbreviations whose trailing period does not end a sentence (compared casefolded, without the dot).
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "inc", "ltd", "co", "corp"}
    | {"no", "approx", "dept"}
)
_OPENERS = "\"'(“‘["
_CLOSERS = "\"'”’)]}」』》〉"
# A terminator run followed by optional closing quotes/brackets, then whitespace or the end.
_BOUNDARY = re.compile(rf"([.!?。！？…‼⁇⁈⁉]+[{re.escape(_CLOSERS)}]*)(?=\s|$)")
# Letters separated by dots: "e.g", "i.e", "U.S", "D.G.I.A" (the final dot is the terminator's).
_DOTTED_ACRONYM = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}")
_INITIAL = re.compile(r"[A-Z]")
_NEXT_IS_INITIAL = re.compile(r"\s+[A-Z]\.(?=\s|$)")


def _period_continues_sentence(candidate: str, following: str) -> bool:
    """Whether the single period ending `candidate` belongs to a list number, an abbreviation, a
    dotted acronym or an initial; `following` is the rest of the line."""
    if re.fullmatch(r"\s*\d{1,3}\.", candidate):
        return True  # list numbering "1. First item"
    words = candidate[:-1].split()
    if not words:
        return False
    word = words[-1].lstrip(_OPENERS)
    if word.casefold() in _ABBREVIATIONS or _DOTTED_ACRONYM.fullmatch(word):
        return True
    if not _INITIAL.fullmatch(word):
        return False
    # "J. K. Rowling", "by J. K. Rowling": an initial starts or continues a name. "I use R. My friend
    # uses Python" ends a sentence: a lone capital after a lowercase word is a name, not an initial.
    previous = words[-2] if len(words) > 1 else ""
    return not previous or previous[:1].isupper() or _NEXT_IS_INITIAL.match(following) is not None


def split_sentences(text: str) -> list[str]:
    """Split English or Korean text into sentences (stripped, non-empty), in order.

    Boundaries: line breaks, and terminal punctuation (. ! ? … and the full-width 。！？) followed by
    whitespace or the end — which covers Korean endings like "했어요." and "합니다." A period after
    a common abbreviation ("Dr.", "etc."), a dotted acronym ("e.g.", "D.G.I.A."), an initial
    ("J. K. Rowling") or a list number ("1."), and periods inside numbers ("3.5") and names
    ("Node.js") do not split. Korean sentences without punctuation on one line stay together (there is
    no reliable boundary). This one splitter serves the fact write policy, extraction, summaries and
    erasure redaction alike.
    """
    sentences: list[str] = []
    for line in text.splitlines():
        start = 0
        for match in _BOUNDARY.finditer(line):
            end = match.end()
            candidate = line[start:end]
            if match.group(1) == "." and _period_continues_sentence(candidate, line[end:]):
                continue
            if candidate.strip():
                sentences.append(candidate.strip())
            start = end
        rest = line[start:].strip()
        if rest:
            sentences.append(rest)
    # Full-width terminators need no following space in CJK text ("좋아요。다음"); split those too.
    out: list[str] = []
    for sentence in sentences:
        out.extend(part for part in re.split(r"(?<=[。！？])(?=\S)", sentence) if part.strip())
    return [s.strip() for s in out]


# ---- trivial messages ---------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


# Words that carry nothing to remember on their own: greetings, thanks, acknowledgements, stock
# assistant phrases. A message is trivial only when *every* word is one of these (after emoji and
# punctuation are removed), so any content word makes it non-trivial.
_TRIVIAL_WORDS_RAW = frozenset(
    _words(
        """
    ok okay okey okk k kk oki okie cool great nice good fine sure yes yeah yea yep yup ya yas no nope nah
    thanks thank thx thnx tks ty tysm tyvm you u ya so much very a lot lots many really
    hi hello hey hiya heya yo howdy bye goodbye byebye cya see later soon again morning afternoon evening
    night gn gm nite cheers awesome perfect excellent amazing wonderful alright right all got it understood
    noted np problem welcome anytime glad happy to help helped lol lmao rofl wow oh ah ahh hmm hm uh um
    i im m re s ll ve d t am is are was that this thats sounds will do does did done and the for me my too
    have a an day nice how can what whats up anything else there today of course sir maam bro dude
    """
    )
) | frozenset(
    _words(
        """
    안녕 안녕하세요 안녕하십니까 안뇽 하이 바이 잘가 잘가요 잘자 잘자요 또 봐 봐요 뵐게요 다음에 다음에요
    고마워 고마워요 고맙다 고맙습니다 고마웠어 감사 감사해 감사해요 감사합니다 감사했습니다 땡큐 ㄱㅅ ㄳ
    ㅇㅋ ㅇㅇ ㅇㅋㅇㅋ 오케이 오키 넵 넹 네 네네 예 응 웅 어 그래 그래요 좋아 좋아요 좋네요 좋습니다 좋다
    굿 최고 알겠어 알겠어요 알겠습니다 알았어 알았어요 확인 확인했습니다 확인했어요 수고 수고하세요 수고했어
    수고하셨습니다 천만에요 별말씀을요 반가워 반가워요 반갑습니다 정말 진짜 너무 많이 완전 넘 무엇을 뭘
    도와드릴까요 도와드릴게요 도와드릴 어떻게 좋은 하루 되세요 보내세요 오늘도 그럼 이만
    """
    )
)


def _normalise_word(text: str) -> str:
    # NFKC also maps compatibility jamo (ㅋ U+314B) to conjoining jamo (U+110F): compare like with like.
    return unicodedata.normalize("NFKC", text).casefold()


_TRIVIAL_WORDS = frozenset(_normalise_word(word) for word in _TRIVIAL_WORDS_RAW)
_LAUGHTER = re.compile(_normalise_word(r"^(?:[ㅋㅎㅠㅜ]+|(?:ha)+h?|(?:he)+h?|(?:hi)+|l+o+l+|xd+)$"))


def is_trivial_message(text: str) -> bool:
    """True for greetings, thanks, acknowledgements, laughter and emoji-only messages
    ("ok", "thanks!", "ㅇㅋ", "고마워", "👍", "안녕하세요! 무엇을 도와드릴까요?"), in English and Korean."""
    normalised = _normalise_word(text)
    words = re.sub(r"[^\w]+|_", " ", normalised).split()
    return all(word in _TRIVIAL_WORDS or _LAUGHTER.match(word) for word in words)


# ---- language -----------------------------------------------------------------------------------


def is_hangul(ch: str) -> bool:
    cp = ord(ch)
    return (
        0xAC00 <= cp <= 0xD7A3  # syllables
        or 0x1100 <= cp <= 0x11FF  # jamo
        or 0x3130 <= cp <= 0x318F  # compatibility jamo (ㅋ, ㅇ)
        or 0xA960 <= cp <= 0xA97F
        or 0xD7B0 <= cp <= 0xD7FF
    )


def hangul_share(text: str) -> float:
    """Share of Hangul among the letters of `text` (0.0 when there are no letters)."""
    letters = 0
    hangul = 0
    for ch in text:
        if ch.isalpha():
            letters += 1
            if is_hangul(ch):
                hangul += 1
    return hangul / letters if letters else 0.0


def detect_language(text: str, locale: str | None = None) -> str:
    """'ko' or 'en' from the text (Hangul share of letters ≥ 0.25 → 'ko'), unless `locale` is given:
    then its primary subtag wins ('ko-KR' → 'ko', 'en-US' → 'en', 'ja' → 'ja').

    The threshold is low because one Hangul syllable carries what two or three Latin letters do, and
    Korean technical talk is full of English product names.
    """
    if locale:
        primary = re.split(r"[-_]", locale.strip(), maxsplit=1)[0].lower()
        if primary:
            return primary
    return "ko" if hangul_share(text) >= 0.25 else "en"


# ---- tokens -------------------------------------------------------------------------------------

# The encodings shipped in litellm's wheel (file name = sha1 of the URL tiktoken would download).
_BUNDLED_ENCODINGS: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "fb374d419588a4632f3f557e76b4b70aebbca790",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
# Split patterns and special tokens as tiktoken_ext.openai_public defines them (calling its
# constructors would trigger a download, so they are restated here; a test checks they agree).
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECIAL_TOKENS: dict[str, dict[str, int]] = {
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
}
_PATTERNS = {"o200k_base": _O200K_PATTERN, "cl100k_base": _CL100K_PATTERN}


class TokenizerUnavailable(RuntimeError):
    """The bundled BPE file is missing or corrupt."""


def bundled_encoding_path(encoding: str) -> Path:
    """Where litellm's wheel keeps the BPE ranks of `encoding` (found without importing litellm)."""
    if encoding not in _BUNDLED_ENCODINGS:
        raise TokenizerUnavailable(f"unknown encoding {encoding!r}; bundled: {sorted(_BUNDLED_ENCODINGS)}")
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable("litellm is not installed; its wheel carries the offline BPE files")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "litellm_core_utils" / "tokenizers" / _BUNDLED_ENCODINGS[encoding][0]


_encodings: dict[str, Any] = {}
_encodings_lock = threading.Lock()


def _load_encoding(encoding: str) -> Any:
    with _encodings_lock:
        if encoding in _encodings:
            return _encodings[encoding]
        import tiktoken

        path = bundled_encoding_path(encoding)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TokenizerUnavailable(f"cannot read the {encoding} BPE file at {path}: {exc}") from exc
        expected = _BUNDLED_ENCODINGS[encoding][1]
        if hashlib.sha256(data).hexdigest() != expected:
            raise TokenizerUnavailable(f"the {encoding} BPE file at {path} does not match its sha256 {expected}")
        ranks: dict[bytes, int] = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        enc = tiktoken.Encoding(
            name=encoding,
            pat_str=_PATTERNS[encoding],
            mergeable_ranks=ranks,
            special_tokens=_SPECIAL_TOKENS[encoding],
        )
        _encodings[encoding] = enc
        return enc


_CACHED_COUNTS = 4_096
_CACHED_COUNT_CHARS = 2_000


class TokenCounter:
    """Counts and budgets LLM tokens with a real BPE tokenizer, offline (default `o200k_base`)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding_name = encoding
        self._encoding = _load_encoding(encoding)
        self._counted = functools.lru_cache(maxsize=_CACHED_COUNTS)(self.count_tokens)

    def encode(self, text: str) -> list[int]:
        # Special-token text in user content is ordinary text here (never a control token).
        return list(self._encoding.encode(text, disallowed_special=()))

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def count_tokens_cached(self, text: str) -> int:
        """`count_tokens`, kept for a bounded number of short texts: a memory's line in the Memory
        Context section is counted again on every turn that injects it, and BPE over text it last saw
        turns ago runs cache-cold (~1.7 µs a token after the query embedding, measured)."""
        return self._counted(text) if len(text) <= _CACHED_COUNT_CHARS else self.count_tokens(text)

    def truncate_to_tokens(self, text: str, budget: int) -> str:
        """The longest prefix of `text` (cut on a cluster boundary) that has at most `budget` tokens."""
        if budget <= 0:
            return ""
        tokens = self.encode(text)
        if len(tokens) <= budget:
            return text
        # Decoding a token prefix can end inside a multi-byte character; drop the partial bytes, then
        # step back to a cluster boundary and re-check (BPE merges can differ at the new end).
        prefix = self._encoding.decode_bytes(tokens[:budget]).decode("utf-8", errors="ignore")
        cut = len(prefix)
        while cut > 0 and (not is_cluster_boundary(text, cut) or self.count_tokens(text[:cut]) > budget):
            cut -= 1
        return text[:cut]
