"""The advisory reader's poll loop: an empty poll is quiet whichever timeout nats-py raises for it,
and a real failure is logged with its type (some nats-py errors have no message)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats.errors
import pytest

from contracts import Subjects
from services.common.runtime.exhausted import ExhaustedWatcher


class Polls:
    """A pull subscription whose fetches raise the given errors in turn, then wait to be cancelled."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.drained = asyncio.Event()

    async def fetch(self, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109  (nats-py's signature)
        if self.errors:
            raise self.errors.pop(0)
        self.drained.set()
        await asyncio.Event().wait()
        return []


class NoNats:
    def jetstream(self) -> None:
        return None


async def read_until_drained(polls: Polls) -> None:
    watcher = ExhaustedWatcher(NoNats(), Subjects("t"), [], dead_letters=None, retry_delay_s=0)  # type: ignore[arg-type]
    task = asyncio.create_task(watcher._read(polls))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(polls.drained.wait(), timeout=5)
    finally:
        task.cancel()


async def test_an_empty_poll_is_quiet_whichever_timeout_it_raises(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        await read_until_drained(Polls(nats.errors.TimeoutError(), TimeoutError(), TimeoutError()))
    assert caplog.records == []


async def test_a_failed_poll_is_logged_with_its_type(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        await read_until_drained(Polls(nats.errors.ConnectionClosedError()))
    (record,) = caplog.records
    assert "ConnectionClosedError" in record.getMessage()
