"""Token counting with the recall API's tokenizer (tiktoken's `o200k_base`), offline.

tiktoken downloads its BPE file on first use unless it is already on disk; the client never lets it.
`O200kCounter.load()` reads the file from a path you give, `TIERMEM_O200K_FILE`, or tiktoken's own
cache (`TIKTOKEN_CACHE_DIR`), checks its sha256, and fails with a clear error when there is none. The
server reads the same file from litellm's wheel; `pip install tiermem-client[tokens]` brings tiktoken.

The file is not shipped in this package: it is 3.6 MB (thirty times the client), OpenAI publishes it
without a license of its own, and it is useless without tiktoken anyway. `load_counter()` is what a
fresh install uses: the exact counter when tiktoken and the file are there, else `ApproximateCounter`,
a stated over-estimate (see its docstring) that keeps working memory and context budgets safe.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import Path
from typing import Any, Protocol

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# tiktoken names its cached copy after the sha1 of the download URL.
O200K_CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
# As tiktoken_ext.openai_public defines it (its constructor would download the file).
O200K_PATTERN = "|".join(
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


class TokenizerUnavailable(RuntimeError):
    """tiktoken or the o200k_base file is not on this machine (nothing is downloaded)."""


class TokenCounter(Protocol):
    """What working memory needs of a tokenizer."""

    def count_tokens(self, text: str) -> int: ...


def _find_o200k_file(path: str | Path | None) -> Path:
    candidates = [Path(path)] if path is not None else []
    if not candidates and os.environ.get("TIERMEM_O200K_FILE"):
        candidates.append(Path(os.environ["TIERMEM_O200K_FILE"]))
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if not candidates and os.environ.get(variable):
            candidates.append(Path(os.environ[variable]) / O200K_CACHE_NAME)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise TokenizerUnavailable(
        "no o200k_base BPE file on this machine: pass its path, or set TIERMEM_O200K_FILE or TIKTOKEN_CACHE_DIR"
    )


class O200kCounter:
    """Counts tokens exactly as the recall API does."""

    exact = True

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    @classmethod
    def load(cls, path: str | Path | None = None) -> O200kCounter:
        """The counter over the o200k_base file at `path`, `TIERMEM_O200K_FILE` or tiktoken's cache;
        `TokenizerUnavailable` when tiktoken or the file is missing (see `load_counter` for a fallback)."""
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError as exc:
            raise TokenizerUnavailable("tiktoken is not installed: pip install 'tiermem-client[tokens]'") from exc
        bpe_file = _find_o200k_file(path)
        try:
            ranks = load_tiktoken_bpe(str(bpe_file), expected_hash=O200K_SHA256)
        except ValueError as exc:
            raise TokenizerUnavailable(f"{bpe_file} is not the o200k_base file (sha256 mismatch)") from exc
        encoding = tiktoken.Encoding(
            name="o200k_base", pat_str=O200K_PATTERN, mergeable_ranks=ranks, special_tokens=O200K_SPECIAL_TOKENS
        )
        return cls(encoding)

    def count_tokens(self, text: str) -> int:
        # Special-token text in user content is ordinary text (never a control token), as on the server.
        return len(self._encoding.encode(text, disallowed_special=()))


# Pieces roughly as o200k pre-splits text: letter runs, digit runs, whitespace, punctuation runs.
_PIECES = re.compile(r"[^\W\d_]+|\d+|\s+|[^\w\s]+|_+")


class ApproximateTokensWarning(UserWarning):
    """Token counts are estimated (`ApproximateCounter`): tiktoken or the o200k_base file is missing."""


class ApproximateCounter:
    """An over-estimate of o200k_base counts, for machines without tiktoken or its file.

    The rule: an ASCII word (or run of underscores) of n characters counts (n + 1) / 4 tokens and a
    run of digits one per 3 digits, both rounded up; each ASCII punctuation mark counts one; each other
    character (Hangul, kana, CJK, Cyrillic, accented letters ...) one, and two outside the Basic
    Multilingual Plane (emoji); a run of whitespace one, except a single space or tab, which is free.
    On English and Korean prose this counts about 1.5 times the real tokens, so a budget that fits
    here fits on the server; it can fall short only on text dense with short ASCII words and symbols
    (source code, tables), by ~15 % at most on the corpus `tests/client/test_token_fallback.py`
    measures.
    """

    exact = False

    def count_tokens(self, text: str) -> int:
        return sum(_piece_tokens(piece.group()) for piece in _PIECES.finditer(text))


def _piece_tokens(piece: str) -> int:
    if piece.isspace():
        return 0 if piece in (" ", "\t") else 1
    if piece[0].isdigit():
        return math.ceil(len(piece) / 3)
    if piece.isascii():
        return math.ceil((len(piece) + 1) / 4) if piece[0].isalpha() or piece[0] == "_" else len(piece)
    return sum(1 if ord(char) <= 0xFFFF else 2 for char in piece)


def load_counter(path: str | Path | None = None) -> TokenCounter:
    """The exact o200k_base counter when tiktoken and the file are on this machine, else
    `ApproximateCounter` (with an `ApproximateTokensWarning` saying why). Never downloads anything."""
    try:
        return O200kCounter.load(path)
    except TokenizerUnavailable as exc:
        warnings.warn(f"counting tokens approximately (over-estimating): {exc}", ApproximateTokensWarning, stacklevel=2)
        return ApproximateCounter()
