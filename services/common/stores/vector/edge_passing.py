"""Which of a power user's window points pass a search's conditions, kept between their turns: the
dense branch then answers from the window's rows in memory with no Edge request after the vector.

With the rows (edge_window_vectors.py) a power user's dense branch still asked Edge to apply the
search's filter to the rows' shortlist: ~0.45-0.6 ms in place of 2.6 ms after the vector, measured
(one owner with 50k points among 100k; the request's caches are cold by then, ~0.1 ms warm). Edge
still decides which points pass, once, ahead of time: one scroll of the window's points under the
search's conditions (ids only, ~8 ms for 5,000, run while the query embeds: edge_power.py `load_passing`), kept
until the owner's next write that may change the answer. After the vector the shortlist's ids are
looked up in the set, with no filter semantics rewritten in Python.

The moving bound: L0 asks for memories not yet expired, `expires_at_ts >= now`, a range whose lower
bound moves with every turn. A set is taken at a lower bound `since` and serves later bounds up to
`since + horizon`: of its points, those whose value of the range's field is below `since + horizon`
come with their value (a second scroll, over that narrow range with the field's payload: few points;
reading the field for all 5,000 cost ~33 ms), so each later bound is checked exactly. A lower bound
before `since` or past the horizon, or other conditions, take another scroll.

Freshness: the sets are dropped with the window's rows (edge_window_vectors.py: a new window, a
delete, an eviction), at every upserted chunk of the owner as it is applied, and at a payload write
setting a field they filter on (`drop_fields`; a recall count sets none). A search looks its set up
again after the vector: a write while the query embedded dropped it, and Edge answers that search.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from services.common.stores.vector.adapter_support import Conditions

# How far past `since` a set's moving bound may go before the set is taken again.
DEFAULT_HORIZON_SECONDS = 600.0
_MAX_SETS_PER_WINDOW = 8


@dataclass(frozen=True, slots=True)
class MovingRange:
    """The conditions' one range with a lower bound: lower <= field < upper (upper None: unbounded)."""

    field: str
    lower: float
    upper: float | None


def split_conditions(conditions: Conditions) -> tuple[Hashable, MovingRange | None] | None:
    """The conditions as (what a set is kept for, the range whose lower bound moves); None when a set
    cannot serve them (an id list, or more than one range with a lower bound)."""
    if conditions.ids is not None:
        return None
    moving = [(key, lower, upper) for key, lower, upper in conditions.ranges if lower is not None]
    if len(moving) > 1:
        return None
    fixed = tuple(sorted((key, lower, upper) for key, lower, upper in conditions.ranges if lower is None))
    signature = (
        tuple(sorted((key, repr(value)) for key, value in conditions.equals)),
        tuple(sorted((key, tuple(values)) for key, values in conditions.any_of)),
        fixed,
        None if not moving else (moving[0][0], moving[0][2]),
    )
    if not moving:
        return signature, None
    key, lower, upper = moving[0]
    assert lower is not None
    return signature, MovingRange(key, lower, upper)


@dataclass(frozen=True, slots=True)
class PassingSet:
    """The window's points passing the conditions at lower bound `since` (all of them when there is no
    moving range), and of those, the range field's value of each below `since + horizon`."""

    ids: frozenset[str]
    since: float
    until: float  # later bounds are served while < until
    soon: dict[str, float]  # id -> value of the moving range's field, for values < until
    fields: frozenset[str]  # the payload fields the conditions read

    def serves(self, moving: MovingRange | None) -> bool:
        return moving is None or self.since <= moving.lower < self.until

    def passes(self, point_id: str, moving: MovingRange | None) -> bool:
        if point_id not in self.ids:
            return False
        if moving is None:
            return True
        value = self.soon.get(point_id)
        return value is None or value >= moving.lower


class PassingSets:
    """A window's passing sets by conditions, the most recently used `_MAX_SETS_PER_WINDOW` kept."""

    def __init__(self) -> None:
        self._sets: OrderedDict[Hashable, PassingSet] = OrderedDict()

    def get(self, signature: Hashable) -> PassingSet | None:
        found = self._sets.get(signature)
        if found is not None:
            self._sets.move_to_end(signature)
        return found

    def put(self, signature: Hashable, passing: PassingSet) -> None:
        self._sets[signature] = passing
        self._sets.move_to_end(signature)
        while len(self._sets) > _MAX_SETS_PER_WINDOW:
            self._sets.popitem(last=False)

    def drop_fields(self, fields: Iterable[str]) -> None:
        written = set(fields)
        for signature in [s for s, passing in self._sets.items() if passing.fields & written]:
            del self._sets[signature]
