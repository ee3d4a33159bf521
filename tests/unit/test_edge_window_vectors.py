"""The rows of a power user's dense window in memory (edge_window_vectors.py), pure numpy: what the
shortlist Edge then filters is the exact nearest set by cosine, through replacements and growth."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.stores.vector.edge_window_vectors import WindowRows, WindowVectors, unit


def _unit(vector: np.ndarray) -> np.ndarray:
    scaled = unit(vector)
    assert scaled is not None
    return scaled


def _random(rng: np.random.Generator, count: int, dim: int = 8) -> np.ndarray:
    return rng.normal(size=(count, dim)).astype(np.float32)


def test_the_shortlist_is_the_exact_nearest_set_by_cosine_whatever_the_lengths() -> None:
    rng = np.random.default_rng(1)
    vectors = _random(rng, 500) * rng.uniform(0.1, 10, size=(500, 1)).astype(np.float32)  # lengths differ
    rows = WindowRows(8)
    for number, vector in enumerate(vectors):
        rows.put(f"p{number}", vector)
    assert len(rows) == 500  # grown past the first capacity
    cosine = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)) @ _unit(vectors[0] + vectors[1])
    expected = {f"p{number}" for number in np.argsort(-cosine)[:20]}
    assert set(rows.nearest(_unit(vectors[0] + vectors[1]), 20)) == expected
    assert set(rows.nearest(_unit(vectors[0]), 600)) == {f"p{number}" for number in range(500)}


def test_a_rewritten_point_replaces_its_row_and_a_zero_vector_never_leads() -> None:
    rng = np.random.default_rng(2)
    rows = WindowRows(8)
    for number, vector in enumerate(_random(rng, 50)):
        rows.put(f"p{number}", vector)
    target = _random(rng, 1)[0]
    rows.put("p7", target)  # re-embedded: the same id, a new vector
    assert len(rows) == 50
    assert rows.nearest(_unit(target), 1) == ["p7"]
    rows.put("p7", np.zeros(8, dtype=np.float32))  # no direction: scores 0 from now on
    assert rows.nearest(_unit(target), 1) != ["p7"]
    rows.put("p8", [1.0, 2.0])  # another model's vector: not this window's
    assert len(rows) == 50


def test_a_point_that_left_the_window_leaves_the_rows_and_the_others_keep_their_vectors() -> None:
    rng = np.random.default_rng(3)
    vectors = _random(rng, 30)
    rows = WindowRows(8)
    for number, vector in enumerate(vectors):
        rows.put(f"p{number}", vector)
    for gone in ("p4", "p29", "p0", "p4", "never-there"):  # the middle, the last, the first, twice, unknown
        rows.discard(gone)
    assert len(rows) == 27
    kept = [number for number in range(30) if number not in (0, 4, 29)]
    assert set(rows.nearest(_unit(vectors[1]), 100)) == {f"p{number}" for number in kept}
    for number in kept:  # each row still holds its own point's vector
        assert rows.nearest(_unit(vectors[number]), 1) == [f"p{number}"]
    rows.put("p4", vectors[4])  # back in the window
    assert rows.nearest(_unit(vectors[4]), 1) == ["p4"] and len(rows) == 28


def test_windows_need_at_least_one_owner_with_rows() -> None:
    with pytest.raises(ValueError):
        WindowVectors(0)
