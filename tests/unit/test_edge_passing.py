"""Passing sets (edge_passing.py), pure logic: which conditions a set can serve, how a later moving
bound is checked, and which writes drop which sets. Edge's side is in
tests/integration/test_edge_passing.py."""

from __future__ import annotations

from services.common.stores.vector.adapter_support import Conditions
from services.common.stores.vector.edge_passing import MovingRange, PassingSet, PassingSets, split_conditions


def _conditions(*ranges: tuple[str, float | None, float | None], ids: list[str] | None = None) -> Conditions:
    return Conditions(
        equals=[("tenant_id", "t"), ("user_id", "u")], any_of=[("channel", ["group"])], ranges=list(ranges), ids=ids
    )


def test_a_moving_lower_bound_shares_the_signature_and_other_conditions_do_not() -> None:
    now = split_conditions(_conditions(("expires_at_ts", 100.0, None)))
    later = split_conditions(_conditions(("expires_at_ts", 160.0, None)))
    assert now is not None and later is not None
    assert now[0] == later[0]
    assert now[1] == MovingRange("expires_at_ts", 100.0, None) and later[1] == MovingRange("expires_at_ts", 160.0, None)
    bounded = split_conditions(_conditions(("expires_at_ts", 100.0, 500.0)))
    other_channel = split_conditions(
        Conditions(equals=[("tenant_id", "t"), ("user_id", "u")], any_of=[("channel", ["private"])])
    )
    static = split_conditions(_conditions(("occurred_at_ts", None, 50.0)))
    assert bounded is not None and other_channel is not None and static is not None
    assert len({now[0], bounded[0], other_channel[0], static[0]}) == 4
    assert static[1] is None  # an upper bound alone does not move: it is part of the signature
    # Not served by a set: an id list, or two moving bounds.
    assert split_conditions(_conditions(ids=["a"])) is None
    assert split_conditions(_conditions(("expires_at_ts", 1.0, None), ("occurred_at_ts", 2.0, None))) is None


def test_a_later_bound_is_checked_on_the_values_below_the_horizon() -> None:
    taken = PassingSet(
        ids=frozenset({"far", "soon"}), since=100.0, until=700.0, soon={"soon": 300.0}, fields=frozenset({"channel"})
    )
    assert taken.serves(MovingRange("expires_at_ts", 100.0, None))
    assert taken.serves(MovingRange("expires_at_ts", 699.0, None))
    assert not taken.serves(MovingRange("expires_at_ts", 700.0, None))  # past the horizon: taken again
    assert not taken.serves(MovingRange("expires_at_ts", 99.0, None))  # before the set's own bound
    at = MovingRange("expires_at_ts", 300.0, None)
    assert taken.passes("far", at) and taken.passes("soon", at)
    after = MovingRange("expires_at_ts", 300.5, None)
    assert taken.passes("far", after) and not taken.passes("soon", after)
    assert not taken.passes("never-taken", at)


def test_a_payload_write_drops_only_the_sets_reading_its_fields_and_few_are_kept() -> None:
    sets = PassingSets()
    by_channel = PassingSet(frozenset({"a"}), 0.0, 1.0, {}, frozenset({"channel", "expires_at_ts"}))
    by_status = PassingSet(frozenset({"b"}), 0.0, 1.0, {}, frozenset({"status"}))
    sets.put("channel", by_channel)
    sets.put("status", by_status)
    sets.drop_fields(["recall_count", "last_recalled_at"])
    assert sets.get("channel") is by_channel and sets.get("status") is by_status
    sets.drop_fields(["channel"])
    assert sets.get("channel") is None and sets.get("status") is by_status
    for number in range(20):
        sets.put(number, by_status)
    assert sets.get("status") is None and sets.get(19) is by_status and sets.get(0) is None
