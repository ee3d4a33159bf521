"""Splitting English and Korean text into sentences, as the server does.

The same algorithm as the server's `services/common/domain/sentences.py`, restated because the client
installs without the server: a rule the client finds (procedures.py) and the rule the server's extractor
finds in the same words must land on the same sentence, and so on the same topic. A test runs both on
the same texts and fails when they differ.
"""

from __future__ import annotations

import re

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
