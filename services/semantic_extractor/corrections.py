"""Corrections the user states in a session ("Actually, I live in Busan, not Seoul", "아니, 서울이
아니라 부산에 살아", "정정할게. 나는 부산에 살아") mark the facts they assert as the user's correction, which
the write policy confirms at once (`FactProvenance.user_correction`).

Only the user's own messages count: an assistant "correcting" the user states nothing the user said,
and a value the user merely mentions, without correcting anything, waits for a second observation like
any other. The value must be asserted in the correcting sentence (or follow an announcement such as
"Correction:" or "정정할게" in the same message), never be the one negated ("not Seoul", "서울이 아니라").
Deterministic and offline: it runs after either extraction path, so a correction never depends on a
model noticing it. Pure, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from services.common.domain.facts import FactCandidate, normalise_text_key
from services.common.domain.sentences import split_sentences

# A sentence that corrects: "Actually, …", "No, …", "I meant …", "… X, not Y", "not Y but X", "아니라".
_CORRECTING = re.compile(
    r"^\s*(?:actually|no|nope|oops)\b|\bactually\b|\bI\s+meant\b|\bI\s+mean,|,\s*not\s+\w|"
    r"\bnot\s+[^.!?]{1,40}?\s*,?\s*but\b|\brather\s+than\b|\bmis(?:spoke|typed|remembered)\b|"
    r"\bthat(?:'s|\s+is|\s+was)\s+(?:wrong|not\s+right|incorrect)\b|"
    r"^\s*아니[,.!\s]|^\s*아뇨|아니라|아니고|사실은|사실\s|잘못\s*(?:말|알|썼|적)|틀렸",
    re.IGNORECASE,
)
# An announcement that the rest of the message corrects: "Correction: …", "정정할게. …".
_ANNOUNCING = re.compile(r"\bcorrection\b|\bto\s+correct\b|\blet\s+me\s+correct\b|정정|수정할게|바로잡", re.IGNORECASE)
# The value named as the wrong one: "not (in|at|a|the) Seoul", "Seoul이 아니라".
_NEGATED_BEFORE = re.compile(r"\bnot\s+(?:(?:in|at|a|an|the|from|with|to|for|on)\s+)?$", re.IGNORECASE)
_NEGATED_AFTER = re.compile(r"^\s*(?:이|가|은|는|도)?\s*아니")
_HANGUL = re.compile(r"[가-힣]")


def _whole(folded: str, start: int, end: int) -> bool:
    """Whether folded[start:end] is a whole word ("Go" is not in "good"); a Korean value may carry a
    particle ("부산에")."""
    before = folded[start - 1] if start > 0 else " "
    after = folded[end] if end < len(folded) else " "
    particle = bool(_HANGUL.match(folded[end - 1]) and _HANGUL.match(after))
    return not before.isalnum() and (particle or not after.isalnum())


def _asserts(sentence: str, value: str) -> bool:
    """Whether the sentence names the value, as a whole word, other than as the wrong one."""
    folded = unicodedata.normalize("NFKC", sentence).casefold()
    start = folded.find(value)
    while start >= 0:
        end = start + len(value)
        negated = _NEGATED_BEFORE.search(folded[:start]) or _NEGATED_AFTER.match(folded[end:])
        if _whole(folded, start, end) and not negated:
            return True
        start = folded.find(value, start + 1)
    return False


def correcting_sentences(user_messages: Iterable[str]) -> list[str]:
    """The sentences in which the user corrects something: each correcting sentence, and every sentence
    after an announcement in the same message."""
    found: list[str] = []
    for message in user_messages:
        announced = False
        for sentence in split_sentences(message):
            announced = announced or bool(_ANNOUNCING.search(sentence))
            if announced or _CORRECTING.search(sentence):
                found.append(sentence)
    return found


def as_user_corrections(candidates: Sequence[FactCandidate], user_messages: Iterable[str]) -> list[FactCandidate]:
    """The candidates, each asserted in a sentence where the user corrects something marked as the
    user's correction (and every other candidate left unmarked, whatever a model said)."""
    sentences = correcting_sentences(user_messages)
    marked: list[FactCandidate] = []
    for candidate in candidates:
        value = normalise_text_key(candidate.value)
        corrected = bool(value) and any(_asserts(sentence, value) for sentence in sentences)
        provenance = candidate.provenance.model_copy(update={"user_correction": corrected})
        marked.append(candidate.model_copy(update={"provenance": provenance}))
    return marked
