"""The pure parts of the window's rows (edge_window_rows.py): the shortlist and when it settles a search."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.stores.vector.adapter_support import BranchHit
from services.common.stores.vector.edge_window_rows import SCORE_MARGIN, Shortlist, nearest, unit


def test_the_shortlist_is_the_nearest_rows_and_the_threshold_the_best_left_out() -> None:
    matrix = np.eye(4, dtype=np.float32)
    query = unit([0.9, 0.5, 0.1, 0.0])
    assert query is not None
    shortlist = nearest(["a", "b", "c", "d"], matrix, query, 2)
    assert sorted(shortlist.ids) == ["a", "b"]
    assert shortlist.threshold == pytest.approx(float(query[2]))  # the best of "c" and "d"
    everything = nearest(["a", "b", "c", "d"], matrix, query, 4)
    assert sorted(everything.ids) == ["a", "b", "c", "d"] and everything.threshold is None


def test_a_shortlist_settles_only_with_enough_hits_clear_of_the_threshold() -> None:
    shortlist = Shortlist(["a", "b", "c"], threshold=0.5)
    clear = [BranchHit("a", 0.9), BranchHit("b", 0.5 + 2 * SCORE_MARGIN)]
    assert shortlist.settles(clear, 2)
    assert not shortlist.settles(clear[:1], 2)  # too few passed the filter
    assert not shortlist.settles([BranchHit("a", 0.9), BranchHit("b", 0.5)], 2)  # a tie at the cut
    assert Shortlist(["a"], threshold=None).settles([], 5)  # every row was shortlisted


def test_a_zero_or_broken_vector_has_no_direction() -> None:
    assert unit([0.0, 0.0]) is None
    assert unit([float("nan"), 1.0]) is None
