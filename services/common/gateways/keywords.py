"""Keyword (sparse) encoding for hybrid search, English and Korean.

Text becomes a bag of terms; each term is hashed to a stable 31-bit index of a sparse vector. The
index applies IDF (Qdrant's `Modifier.IDF` on the sparse vector), so documents carry only a
saturated, length-normalised term frequency and queries carry 1 per distinct term:
score(query, doc) = Σ_{t ∈ query ∩ doc} idf(t) · w_doc(t).

Terms:
- non-Hangul word runs (English, numbers, other scripts): NFKC, casefold, a light stopword list and
  an "S-stemmer" (plural endings only: aggressive stemming would merge proper nouns);
- English stem terms beside them: every Latin word also gives its Snowball (Porter2) stem, marked with
  a leading "~" ("fixed" → "fixed" and "~fix"), so "who fixed the bug" meets "the fix is merged" and
  "which days do I run" meets "running tue thu sun". In a document the word's weight is split between
  its own term and its stem term (`stem_share` to the stem), so a word written the same way counts 1
  and one that only shares its stem 0.8. The surface term stays in the index: an erasure that asks it
  for "run" finds the texts that say "run", not every text with "running" (value_places.keyword_terms),
  and texts indexed before stem terms existed still match on it;
- Hangul: content morphemes from Kiwi (nouns, foreign words, roots, verb/adjective stems as
  "stem+다"), so "서울에서" yields "서울" like "서울" does;
- Hangul fallback: character bigrams of the nominal part of each word (from its start to the end of
  its last noun), marked with a leading "#". They catch proper nouns Kiwi segments differently in
  different contexts ("온비서" comes out as 오/VV + ㄴ + 비서) and compound nouns. Bigrams of
  particles and verb endings are never made, so "니다" / "에서" cannot make unrelated texts match.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

import snowballstemmer

from services.common.domain.sparse import SparseVector
from services.common.gateways import kiwi

BIGRAM_MARK = "#"
STEM_MARK = "~"
# Marks of the fallback terms: neither is a word of the text, and neither counts in its length.
FALLBACK_MARKS = (BIGRAM_MARK, STEM_MARK)

# Hangul syllables plus jamo ("ㅇㅋ", "ㅋㅋ" in chats; NFKC turns compatibility jamo into conjoining ones).
_HANGUL_RUN = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3131-\u318e]+")
_HANGUL_CHAR = re.compile(r"[\uac00-\ud7a3]")
# Word runs of anything else: letters and digits of any script except Hangul, no underscore.
_OTHER_WORD = re.compile(r"[^\W_\uac00-\ud7a3\u1100-\u11ff\u3131-\u318e]+")

# Kiwi tags whose morphemes carry content. Tags may carry a suffix ("VV-R", "VA-I").
_NOMINAL_TAGS = frozenset({"NNG", "NNP", "NR", "XR"})
_PREDICATE_TAGS = frozenset({"VV", "VA"})

_ENGLISH_STOPWORDS = frozenset(
    """
    a an and are as at be been being but by can could did do does doing done for from had has have
    having he her hers him his how i if in into is it its itself just me my no nor not of off on once
    only or our ours out over own s same she should so some such t than that the their theirs them then
    there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself ll re ve d m don doesn didn isn wasn
    aren weren wouldn shouldn couldn ok okay yes yeah hi hello thanks thank please
    """.split()  # noqa: SIM905 - a word list reads better as text
)
# Predicates so common in Korean that they carry no keyword evidence.
_KOREAN_STOPWORDS = frozenset(
    {"하다", "있다", "되다", "없다", "같다", "이다", "아니다", "않다", "보다", "주다", "싶다"}
    | {"어떻다", "그렇다", "이렇다", "저렇다", "아무렇다"}
)


def term_index(term: str) -> int:
    """Stable 31-bit index of a term (blake2b; Python's hash() is salted per process)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def _s_stem(word: str) -> str:
    """Harman's S-stemmer: strips plural endings only."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss", "is")):
        return word[:-1]
    return word


_LATIN_WORD = re.compile(r"[a-z]+")
# A Snowball stemmer keeps the word it works on in the instance: one per thread.
_stemmers = threading.local()


@functools.lru_cache(maxsize=65_536)
def english_stem(word: str) -> str:
    """The Snowball English (Porter2) stem of a lowercase Latin word."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = snowballstemmer.stemmer("english")
    stem: str = stemmer.stemWord(word)
    return stem


def _stem_terms(words: Sequence[str]) -> list[str]:
    return [STEM_MARK + english_stem(word) for word in words if _LATIN_WORD.fullmatch(word)]


class KeywordEncoder:
    """Text → sparse keyword vectors. Korean goes through the process's shared Kiwi (gateways.kiwi).

    Thread-safe: the encoder holds no mutable state and the shared Kiwi serialises its analyses, so
    the encoder can be shared by `asyncio.to_thread` callers.

    `k1`, `b`, `avg_doc_terms` are the BM25 term-frequency saturation and length normalisation of
    document weights; `bigram_weight` scales the Hangul bigram fallback terms in documents (they
    largely repeat what the morphemes already matched); `stem_share` is the part of an English word's
    document weight its stem term carries (the rest stays on the word's own term).
    """

    def __init__(
        self,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        avg_doc_terms: float = 40.0,
        bigram_weight: float = 0.5,
        stem_share: float = 0.8,
    ) -> None:
        if k1 < 0 or not 0.0 <= b <= 1.0 or avg_doc_terms <= 0:
            raise ValueError("need k1 >= 0, 0 <= b <= 1 and avg_doc_terms > 0")
        if not 0.0 < bigram_weight <= 1.0 or not 0.0 < stem_share < 1.0:
            raise ValueError("need 0 < bigram_weight <= 1 and 0 < stem_share < 1")
        self._k1 = k1
        self._b = b
        self._avg_doc_terms = avg_doc_terms
        self._bigram_weight = bigram_weight
        self._stem_share = stem_share

    def warm_up(self) -> None:
        """Load Kiwi now (seconds) instead of on the first Korean text."""
        kiwi.warm_up()

    def tokens(self, text: str) -> list[str]:
        """Terms of `text`, repeats kept (for BM25 baselines): non-Hangul words first, then the English
        stem terms (which start with '~'), then Korean morphemes, then Hangul bigram terms (which start
        with '#')."""
        if len(text) <= _CACHED_TEXT_CHARS:
            return list(_cached_terms(text))
        return _terms(text)

    def encode_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        """`encode_document` for each text (one call, so callers hand the whole batch to a thread)."""
        return [self.encode_document(text) for text in texts]

    def encode_document(self, text: str) -> SparseVector:
        """BM25-style document weights: tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len)); IDF is the index's."""
        terms = self.tokens(text)
        if not terms:
            return SparseVector(indices=[], values=[])
        # Length counts words and morphemes; bigram and stem terms are a fallback, not extra text.
        length = sum(not term.startswith(FALLBACK_MARKS) for term in terms)
        length_norm = self._k1 * (1.0 - self._b + self._b * length / self._avg_doc_terms)
        weights: dict[int, float] = {}
        for term, tf in Counter(terms).items():
            weight = tf * (self._k1 + 1.0) / (tf + length_norm)
            weight *= self._share(term)
            index = term_index(term)
            # A 31-bit hash collision between two terms of one text is rare; adding keeps both counted.
            weights[index] = weights.get(index, 0.0) + weight
        indices = sorted(weights)
        return SparseVector(indices=indices, values=[weights[i] for i in indices])

    def _share(self, term: str) -> float:
        """The part of a document term's weight it carries: an English word splits its weight between
        its own term and its stem term, so a word written the same way counts 1 and one that only
        shares its stem `stem_share`; a bigram counts `bigram_weight`; any other term 1."""
        if term.startswith(BIGRAM_MARK):
            return self._bigram_weight
        if term.startswith(STEM_MARK):
            return self._stem_share
        return 1.0 - self._stem_share if _LATIN_WORD.fullmatch(term) else 1.0

    def encode_query(self, text: str) -> SparseVector:
        """1 per distinct term: the index multiplies in IDF, the document side carries the frequency."""
        indices = sorted({term_index(term) for term in self.tokens(text)})
        return SparseVector(indices=indices, values=[1.0] * len(indices))


def _terms(text: str) -> list[str]:
    normalized = unicodedata.normalize("NFKC", text).casefold()
    words = [word for word in _OTHER_WORD.findall(normalized) if _keep_word(word)]
    terms = [_s_stem(word) for word in words]
    terms.extend(_stem_terms(words))
    if _HANGUL_CHAR.search(normalized):
        terms.extend(_korean_terms(normalized))
    return terms


# Every L0 turn tokenises the same texts again: the query for its keyword vector, then each candidate
# memory's abstract in the selection (l0_select), and the same memories come back turn after turn. Kiwi
# is the costly part for a Korean text, so the terms of short texts are kept, a bounded number of them;
# tuples, so no caller can alter a cached entry.
_CACHED_TEXT_CHARS = 2_000


@functools.lru_cache(maxsize=8_192)
def _cached_terms(text: str) -> tuple[str, ...]:
    return tuple(_terms(text))


def surface_terms(text: str) -> frozenset[str]:
    """The distinct terms of `text` without morphological analysis: its non-Hangul words as `tokens`
    has them, and every two-syllable window of each Hangul run (marked like the bigram terms; a
    one-syllable run as itself). Microseconds where `tokens` costs Kiwi ~0.25 ms per Korean text: for
    comparing two texts' wording (l0_select's redundancy check), where particles cost a bigram or
    two and a stem nothing. Kept for short texts, like `tokens` (the same memories come back)."""
    return _cached_surface_terms(text) if len(text) <= _CACHED_TEXT_CHARS else _surface_terms(text)


@functools.lru_cache(maxsize=8_192)
def _cached_surface_terms(text: str) -> frozenset[str]:
    return _surface_terms(text)


def _surface_terms(text: str) -> frozenset[str]:
    normalized = unicodedata.normalize("NFKC", text).casefold()
    terms = {_s_stem(word) for word in _OTHER_WORD.findall(normalized) if _keep_word(word)}
    for run in _HANGUL_RUN.findall(normalized):
        if len(run) == 1:
            terms.add(BIGRAM_MARK + run)
        terms.update(BIGRAM_MARK + run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(terms)


def _keep_word(word: str) -> bool:
    if word in _ENGLISH_STOPWORDS:
        return False
    # Single letters are noise; single digits are kept ("GPT-4", "3 kids").
    return len(word) > 1 or word.isdigit()


def _korean_terms(text: str) -> list[str]:
    analysed: list[Any] = kiwi.tokenize(text)
    runs = [(match.start(), match.end()) for match in _HANGUL_RUN.finditer(text)]
    terms: list[str] = []
    # Per Hangul run (index into `runs`): where its last nominal morpheme ends.
    nominal_end: dict[int, int] = {}
    run_index = 0
    for token in analysed:
        form: str = token.form
        start: int = token.start
        tag: str = token.tag.split("-", 1)[0]
        while run_index < len(runs) and runs[run_index][1] <= start:
            run_index += 1
        in_run = run_index < len(runs) and runs[run_index][0] <= start
        if not _HANGUL_CHAR.search(form):
            continue  # numbers, Latin words and symbols come from the non-Hangul path
        if tag in _NOMINAL_TAGS:
            terms.append(form)
            if in_run:
                nominal_end[run_index] = max(nominal_end.get(run_index, 0), start + token.len)
        elif tag in _PREDICATE_TAGS:
            predicate = form + "다"
            if predicate not in _KOREAN_STOPWORDS:
                terms.append(predicate)
    morphemes = set(terms)
    for index, end in nominal_end.items():
        span = text[runs[index][0] : end]
        if len(span) < 2 or (len(span) == 2 and span in morphemes):
            continue  # a 2-syllable noun is already a term; its only bigram would repeat it
        terms.extend(BIGRAM_MARK + span[i : i + 2] for i in range(len(span) - 1))
    return terms
