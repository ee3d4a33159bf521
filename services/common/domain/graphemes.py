"""Cutting text without breaking what a reader sees as one character.

Lengths are counted in code points (never bytes: Hangul is 3 bytes in UTF-8), and a cut falls between
extended grapheme clusters (Unicode UAX #29) as the `regex` module's `\\X` finds them: combining marks,
emoji modifiers, variation selectors, zero-width-joiner sequences, regional-indicator flag pairs and
conjoining Hangul jamo stay with their base character.
"""

from __future__ import annotations

from collections.abc import Iterator

import regex  # type: ignore[import-untyped]  # a dependency of ours and tiktoken's; it ships no type hints

_CLUSTER = regex.compile(r"\X")


def _line_start(text: str, index: int) -> int:
    """Where the line holding `index` starts. UAX #29 always breaks after a line feed (GB4/GB5), so the
    clusters found from there are the clusters of the whole text: no need to scan from the beginning."""
    return text.rfind("\n", 0, index) + 1


def _cluster_ends(text: str, start: int) -> Iterator[int]:
    """The end of every cluster from `start` (a cluster boundary) on, in order."""
    for match in _CLUSTER.finditer(text, pos=start):
        yield match.end()


def is_cluster_boundary(text: str, index: int) -> bool:
    """Whether cutting `text` before `index` keeps grapheme clusters whole."""
    if index <= 0 or index >= len(text):
        return True
    start = _line_start(text, index)
    if start == index:
        return True
    for end in _cluster_ends(text, start):
        if end >= index:
            return end == index
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
    cut = 0
    for end in _cluster_ends(text, 0):
        if end > max_codepoints:
            break
        cut = end
    return text[: cut if cut > 0 else max_codepoints]


def keep_tail_codepoints(text: str, max_codepoints: int) -> str:
    """The longest suffix of at most `max_codepoints` code points that starts on a cluster boundary."""
    if max_codepoints <= 0:
        return ""
    if len(text) <= max_codepoints:
        return text
    start = len(text) - max_codepoints
    line_start = _line_start(text, start)
    cut = start if line_start == start else next(end for end in _cluster_ends(text, line_start) if end >= start)
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
