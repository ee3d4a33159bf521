"""The budget of wrong API keys per client address (services/recall_api/throttle.py), on a clock the
test moves: a burst, then a steady rate, with Retry-After telling when the next try is allowed, and a
table of clients that never grows past its bound."""

from __future__ import annotations

from services.recall_api.throttle import FailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_wrong_keys_then_one_per_refill() -> None:
    clock = Clock()
    throttle = FailureThrottle(per_minute=6, burst=3, max_clients=100, clock=clock)
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1") is None
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 10, "one failure back every 10 s at 6 a minute"
    assert throttle.retry_after("10.0.0.2") is None, "another client has its own budget"
    clock.now += 4
    assert throttle.retry_after("10.0.0.1") == 6
    clock.now += 6
    assert throttle.retry_after("10.0.0.1") is None
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 10


def test_a_client_that_stops_failing_gets_its_whole_burst_back_and_is_forgotten() -> None:
    clock = Clock()
    throttle = FailureThrottle(per_minute=60, burst=2, max_clients=100, clock=clock)
    throttle.failed("10.0.0.1")
    throttle.failed("10.0.0.1")
    clock.now += 2
    assert throttle.retry_after("10.0.0.1") is None
    assert not throttle._buckets, "a refilled bucket is not kept"


def test_the_table_of_clients_is_bounded() -> None:
    throttle = FailureThrottle(per_minute=1, burst=1, max_clients=3, clock=Clock())
    for number in range(10):
        throttle.failed(f"10.0.0.{number}")
    assert len(throttle._buckets) == 3
    assert throttle.retry_after("10.0.0.9") is not None and throttle.retry_after("10.0.0.0") is None
