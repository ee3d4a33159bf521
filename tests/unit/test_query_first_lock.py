"""The embedder's scheduling: a query waiting for the model goes before every waiting passage batch, so
a live turn never waits behind a whole session's passages (only behind the batch in progress)."""

from __future__ import annotations

import threading

from services.common.gateways.embedding import QueryFirstLock


def _waiter(
    lock: QueryFirstLock, name: str, *, priority: bool, order: list[str], queued: threading.Event
) -> threading.Thread:
    def run() -> None:
        queued.set()
        with lock.holding(priority=priority):
            order.append(name)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def test_a_waiting_query_goes_before_waiting_passages() -> None:
    lock = QueryFirstLock()
    order: list[str] = []
    release = threading.Event()
    holding = threading.Event()

    def passage_in_progress() -> None:
        with lock.holding(priority=False):
            holding.set()
            assert release.wait(10)
            order.append("passage-in-progress")

    first = threading.Thread(target=passage_in_progress)
    first.start()
    assert holding.wait(10)
    threads = []
    for index in range(3):
        queued = threading.Event()
        threads.append(_waiter(lock, f"passage-{index}", priority=False, order=order, queued=queued))
        assert queued.wait(10)
    queued = threading.Event()
    threads.append(_waiter(lock, "query", priority=True, order=order, queued=queued))
    assert queued.wait(10)
    # The query must be counted as waiting before the holder lets go; the condition shows it.
    with lock._condition:
        assert lock._condition.wait_for(lambda: lock._priority_waiting == 1, timeout=10)
    release.set()
    for thread in [first, *threads]:
        thread.join(10)
        assert not thread.is_alive()
    assert order[0] == "passage-in-progress"
    assert order[1] == "query", order
    assert sorted(order[2:]) == ["passage-0", "passage-1", "passage-2"]


def test_without_queries_every_waiter_is_served() -> None:
    lock = QueryFirstLock()
    order: list[str] = []
    threads = []
    for index in range(5):
        queued = threading.Event()
        threads.append(_waiter(lock, f"passage-{index}", priority=index % 2 == 0, order=order, queued=queued))
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert sorted(order) == [f"passage-{i}" for i in range(5)]
