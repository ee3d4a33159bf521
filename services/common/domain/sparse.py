"""The sparse (keyword) vector shared by the keyword encoder and the vector stores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Hashed term ids and their weights (IDF is applied by the index)."""

    indices: list[int]
    values: list[float]
