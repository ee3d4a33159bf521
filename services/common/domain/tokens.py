"""Counting and budgeting LLM tokens offline.

Token counting uses OpenAI's `o200k_base` BPE (the GPT-4o family's tokenizer) read from the copy that
ships inside the litellm wheel, so it works offline; tiktoken would otherwise download it at run time.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any

from services.common.domain.graphemes import is_cluster_boundary

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
        turns ago runs cache-cold (its byte-pair merges are recomputed each time)."""
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
