"""Token counting with the recall API's tokenizer (tiktoken's `o200k_base`), offline.

tiktoken downloads its BPE file on first use unless it is already on disk; the client never lets it.
`O200kCounter.load()` reads the file from a path you give, `TIERMEM_O200K_FILE`, or tiktoken's own
cache (`TIKTOKEN_CACHE_DIR`), checks its sha256, and fails with a clear error when there is none. The
server reads the same file from litellm's wheel; `pip install tiermem-client[tokens]` brings tiktoken.
"""

from __future__ import annotations

import os
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

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    @classmethod
    def load(cls, path: str | Path | None = None) -> O200kCounter:
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
