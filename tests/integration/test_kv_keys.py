"""Listing a key-value bucket's live keys against a real nats-server, including the moment nats-py's
watch gets wrong: the broker's consumer info already shows nothing pending while the snapshot's
messages are still on their way. Listing then must still find every key, or a user's erasure leaves
her buffered turns behind."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import api as js_api

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.settings import NatsSettings
from services.common.stores.kv_keys import live_keys
from services.common.stores.open_sessions import OpenSessionRecord, OpenSessionStore, SessionKey

pytestmark = pytest.mark.integration

CAROL, DAVID = Owner("acme", "carol"), Owner("acme", "david")


def _store(settings: NatsSettings, client: NatsClient) -> OpenSessionStore:
    return OpenSessionStore(client.jetstream(), Subjects(settings.subject_root))


async def _open(store: OpenSessionStore, owner: Owner, session_id: str) -> None:
    now = datetime.now(UTC)
    record = OpenSessionRecord(agent_id="agent", channel="private", scope="personal", opened_at=now, last_turn_at=now)
    await store.swap(owner, session_id, lambda _stored: record)


@pytest.fixture
def info_ahead_of_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer info a watch asks for says nothing is pending before any message has arrived,
    as the broker answers when it counted the snapshot delivered before writing it out."""
    original = JetStreamContext.PushSubscription.consumer_info

    async def nothing_pending(self: JetStreamContext.PushSubscription) -> js_api.ConsumerInfo:
        info = await original(self)
        self._sub._received = 0  # answered before the first message was read off the connection
        return dataclasses.replace(info, num_pending=0)

    monkeypatch.setattr(JetStreamContext.PushSubscription, "consumer_info", nothing_pending)


@pytest.mark.usefixtures("info_ahead_of_delivery")
async def test_erasure_finds_the_session_when_the_broker_reports_nothing_pending_early(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    store = _store(nats_settings, nats_client)
    await _open(store, CAROL, "ferns")
    await _open(store, DAVID, "boat")
    assert await store.keys(CAROL) == [SessionKey(CAROL, "ferns")]
    assert await store.erase_user(CAROL) == 1
    assert await store.get(CAROL, "ferns") is None
    assert await store.keys() == [SessionKey(DAVID, "boat")]  # another user's session is untouched


async def test_listing_leaves_out_removed_keys_and_ends_on_an_empty_pattern(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    store = _store(nats_settings, nats_client)
    assert await store.keys() == []  # the bucket holds nothing yet
    for index in range(300):  # more than the watch's queue holds at once
        await _open(store, CAROL, f"s{index:03d}")
    await _open(store, DAVID, "boat")
    kv = await nats_client.jetstream().key_value(store.bucket)
    await kv.delete("acme.carol.s000")
    await kv.purge("acme.carol.s001")
    listed = await live_keys(nats_client.jetstream(), kv, store.bucket, "acme.carol.*")
    assert listed == [f"acme.carol.s{index:03d}" for index in range(2, 300)]
    assert await store.keys(Owner("acme", "erin")) == []  # a pattern nothing was ever written under
    assert await store.erase_user(DAVID) == 1
    assert await store.keys(DAVID) == []  # only its purge marker is left under the pattern
