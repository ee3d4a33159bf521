"""Tombstones of erasures whose cut was fixed when they were accepted (issue 48, item 3), against a
real nats-server: a later erasure's higher cut is never lowered by an earlier one that runs late, an
erasure settles only its own tombstone, and a settled tombstone is not reopened by a repeated mark."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.settings import NatsSettings
from services.common.stores.tombstones import TombstoneStore

pytestmark = pytest.mark.integration

DORA = Owner("acme", "dora")
AT = datetime(2026, 5, 2, tzinfo=UTC)


def _store(nats_settings: NatsSettings, nats_client: NatsClient) -> TombstoneStore:
    return TombstoneStore(nats_client.jetstream(), Subjects(nats_settings.subject_root))


async def test_an_earlier_erasure_never_lowers_or_settles_a_later_ones_tombstone(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    store = _store(nats_settings, nats_client)
    await store.mark_accepted(DORA, "e1", 5, AT)
    await store.mark_accepted(DORA, "e2", 7, AT)  # accepted later: sessions 6 and 7 are its data
    await store.mark_accepted(DORA, "e1", 5, AT)  # the pruner starts on e1 afterwards
    current = await store.get(DORA)
    assert current is not None and (current.erasure_id, current.session_cut, current.state) == ("e2", 7, "erasing")

    await store.settle(DORA, current.model_copy(update={"erasure_id": "e1", "session_cut": 5}))
    current = await store.get(DORA)
    assert current is not None and (current.erasure_id, current.state) == ("e2", "erasing"), "e2 still runs"

    await store.settle(DORA, current)
    await store.mark_accepted(DORA, "e2", 7, AT)  # a redelivery of e2 after it settled
    current = await store.get(DORA)
    assert current is not None and (current.erasure_id, current.session_cut, current.state) == ("e2", 7, "erased")


async def test_of_two_erasures_with_one_cut_the_last_marked_settles(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    store = _store(nats_settings, nats_client)
    await store.mark_accepted(DORA, "e1", 5, AT)
    await store.mark_accepted(DORA, "e2", 5, AT)
    current = await store.get(DORA)
    assert current is not None and current.erasure_id == "e2"
    # A new erasure after a settled one takes the tombstone again.
    await store.settle(DORA, current)
    await store.mark_accepted(DORA, "e3", 9, AT)
    current = await store.get(DORA)
    assert current is not None and (current.erasure_id, current.session_cut, current.state) == ("e3", 9, "erasing")


async def test_concurrent_marks_keep_the_highest_cut(nats_settings: NatsSettings, nats_client: NatsClient) -> None:
    stores = [_store(nats_settings, nats_client) for _ in range(8)]
    await asyncio.gather(*(store.mark_accepted(DORA, f"e{cut}", cut, AT) for cut, store in enumerate(stores)))
    current = await stores[0].get(DORA)
    assert current is not None and (current.erasure_id, current.session_cut) == ("e7", 7)
