"""The budget of wrong API keys per client address (services/recall_api/http/throttle.py), on a clock the
test moves: a burst, then a steady rate, with Retry-After telling when the next try is allowed, keys
that worked from a client still served, and tables that never grow past their bound."""

from __future__ import annotations

from services.recall_api.http.throttle import FailureThrottle

GUESS = "wrong-key-0123456789abcdefghij"
KEY = "Kq7uV2xP9sLm4Tz8RbN3wYc6-local"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_wrong_keys_then_one_per_refill() -> None:
    clock = Clock()
    throttle = FailureThrottle(per_minute=6, burst=3, max_clients=100, clock=clock)
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1", GUESS) is None
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1", GUESS) == 10, "one failure back every 10 s at 6 a minute"
    assert throttle.retry_after("10.0.0.2", GUESS) is None, "another client has its own budget"
    clock.now += 4
    assert throttle.retry_after("10.0.0.1", GUESS) == 6
    clock.now += 6
    assert throttle.retry_after("10.0.0.1", GUESS) is None
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1", GUESS) == 10


def test_a_client_that_stops_failing_gets_its_whole_burst_back_and_is_forgotten() -> None:
    clock = Clock()
    throttle = FailureThrottle(per_minute=60, burst=2, max_clients=100, clock=clock)
    throttle.failed("10.0.0.1")
    throttle.failed("10.0.0.1")
    clock.now += 2
    assert throttle.retry_after("10.0.0.1", GUESS) is None
    assert not throttle._buckets, "a refilled bucket is not kept"


def test_the_table_of_clients_is_bounded() -> None:
    throttle = FailureThrottle(per_minute=1, burst=1, max_clients=3, clock=Clock())
    for number in range(10):
        throttle.failed(f"10.0.0.{number}")
    assert len(throttle._buckets) == 3
    assert throttle.retry_after("10.0.0.9", GUESS) is not None and throttle.retry_after("10.0.0.0", GUESS) is None


def test_a_key_that_worked_from_a_client_is_served_while_its_budget_is_spent() -> None:
    """An agent behind the same address as someone guessing keys keeps working; a key never seen
    working from there waits like any guess (the throttle cannot tell it from one)."""
    throttle = FailureThrottle(per_minute=1, burst=2, max_clients=100, clock=Clock())
    throttle.succeeded("10.0.0.1", KEY)
    throttle.failed("10.0.0.1")
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1", KEY) is None
    assert throttle.retry_after("10.0.0.1", GUESS) is not None
    assert throttle.retry_after("10.0.0.1", "another-right-key-never-used-here") is not None
    for number in range(200):
        throttle.succeeded(f"10.0.1.{number}", KEY)
    assert len(throttle._worked) == 100, "the keys that worked are a bounded table too"
