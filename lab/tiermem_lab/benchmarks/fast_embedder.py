"""A fast deterministic embedder for seeding benchmarks (never for answers): embedding a million texts
with the real model is impossible on 2 cores (~20-110 ms a text), so seeding uses vectors made from
the text's words (the sum of one fixed pseudo-random unit vector per word, normalised). Texts that
share words get similar vectors, so searches still find something; the vectors are NOT semantic and
every report that uses this embedder says so. Queries timed for latency use the real model."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)

FAST_EMBEDDER_NOTE = "seeded with a fast deterministic word-hash embedder (not semantic); queries use the real model"


class HashEmbedder:
    """`Embedder` with word-hash vectors of `dim` dimensions (384 matches multilingual-e5-small)."""

    def __init__(self, dim: int = 384) -> None:
        self._dim = dim
        self._words: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}

    @property
    def model_name(self) -> str:
        return f"word-hash-{self._dim} (benchmark seeding only)"

    @property
    def dim(self) -> int:
        return self._dim

    def _word(self, word: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        vector = self._words.get(word)
        if vector is None:
            seed = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "big")
            vector = np.random.default_rng(seed).standard_normal(self._dim).astype(np.float32)
            if len(self._words) < 200_000:  # the vocabulary of synthetic text is small; stay bounded anyway
                self._words[word] = vector
        return vector

    def vector(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        words = _WORD.findall(text.casefold()) or [""]
        total: np.ndarray[Any, np.dtype[np.float32]] = np.zeros(self._dim, dtype=np.float32)
        for word in words:
            total += self._word(word)
        norm = float(np.linalg.norm(total))
        return total / np.float32(norm) if norm > 0 else total

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(text).tolist() for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self.vector(text).tolist()
        return vector
