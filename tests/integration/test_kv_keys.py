"""A key-value bucket's keys against a real nats-server.

Listing, including the moment nats-py's watch gets wrong: the broker's consumer info already shows
nothing pending while the snapshot's messages are still on their way. Listing then must still find
every key, or a user's erasure leaves her buffered turns behind.

Removing: a removed session record leaves no marker in the bucket (markers would pile up with every
session ever opened, and the idle closer reads them all every sweep), and a removal never takes a
record written after the one it was asked to remove."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.kv import KeyValue

from contracts import SizeLimits, Subjects
from services.common.domain.owner import Owner
from services.common.domain.value_text import make_needle
from services.common.runtime.provisioning import provision
from services.common.runtime.settings import NatsSettings
from services.common.stores import value_places
from services.common.stores.kv_keys import SNAPSHOT_WAIT_S, drop_entries, list_keys, live_keys
from services.common.stores.open_sessions import OpenSessionRecord, OpenSessionStore, SessionKey
from services.common.stores.value_places import PlaceStores
from services.recall_api.write.turn_schemas import TurnIn, TurnsRequest
from services.recall_api.write.turns_in import OpenSessions

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


async def _messages(client: NatsClient, store: OpenSessionStore) -> int:
    """Messages the bucket's stream holds, markers included."""
    return int((await client.jetstream().stream_info(f"KV_{store.bucket}")).state.messages)


async def test_removed_records_leave_no_marker_and_the_closer_drops_old_ones(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    async def nats() -> NatsClient:
        return nats_client

    await provision(nats_client.jetstream(), nats_settings)  # the session stream the closer publishes to
    subjects = Subjects(nats_settings.subject_root)
    sessions = OpenSessions(nats, subjects, SizeLimits(), idle_s=3600, sweep_s=0.1, closed_keep_s=0.05)
    store = await sessions.store()
    await store.open()
    kv = await nats_client.jetstream().key_value(store.bucket)
    await _open(store, DAVID, "old")
    await kv.delete("acme.david.old")  # a marker, as removals left before
    for session_id in ("ferns", "basil"):
        await sessions.append(CAROL, session_id, TurnsRequest(messages=[TurnIn(role="user", content="Water them.")]))
    assert await sessions.end(CAROL, "ferns") is not None
    await _open(store, DAVID, "boat")
    assert await _messages(nats_client, store) == 4  # david's marker and boat, carol's ferns and basil

    await asyncio.sleep(0.1)  # ferns' closed record is past closed_keep_s
    assert await sessions.sweep() == 0
    assert await sessions.read(CAROL, "ferns") is None and await sessions.read(CAROL, "basil") is not None
    assert await _messages(nats_client, store) == 2  # basil and boat: no marker of ferns, david's old one dropped
    assert await store.erase_user(CAROL) == 1
    assert await _messages(nats_client, store) == 1  # boat alone
    assert await store.keys() == [SessionKey(DAVID, "boat")]


async def test_a_removal_keeps_a_record_written_after_the_one_it_removes(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    store = _store(nats_settings, nats_client)
    await _open(store, CAROL, "ferns")
    read = await store.get(CAROL, "ferns")
    assert read is not None
    now = datetime.now(UTC)
    newer = read.record.model_copy(update={"last_turn_at": now})
    written = await store.replace(SessionKey(CAROL, "ferns"), read, newer)
    await store.remove(SessionKey(CAROL, "ferns"), read)  # asked at the older revision
    kept = await store.get(CAROL, "ferns")
    assert kept is not None and kept.revision == written.revision
    await store.remove(SessionKey(CAROL, "ferns"), written)
    assert await store.get(CAROL, "ferns") is None

    js = nats_client.jetstream()
    kv = await js.key_value(store.bucket)
    await kv.delete("acme.carol.ferns")  # a marker, as removals left before
    listing = await list_keys(js, kv, store.bucket, "acme.carol.*")
    assert listing.live == [] and list(listing.removed) == ["acme.carol.ferns"]
    await _open(store, CAROL, "ferns")  # the id opened again after the marker
    await drop_entries(js, store.bucket, "acme.carol.ferns", upto_revision=listing.removed["acme.carol.ferns"])
    assert await store.keys(CAROL) == [SessionKey(CAROL, "ferns")]


async def test_an_erasure_record_gone_since_the_listing_is_not_an_error(
    nats_settings: NatsSettings, nats_client: NatsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Erasure progress records expire: one listed and gone before it is read is skipped, and the
    audit still finds the others."""
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    stores = PlaceStores(subjects, js, index=None, graph=None, keywords=None, scan_limit=10)  # type: ignore[arg-type]
    kv = await js.create_key_value(js_api.KeyValueConfig(bucket=stores.progress_bucket))
    await kv.put("acme.carol.r1", json.dumps({"needles": ["water the ferns"]}).encode("utf-8"))
    listed = live_keys

    async def listed_then_expired(*args: object) -> list[str]:
        return ["acme.carol.r0", *await listed(*args)]  # type: ignore[arg-type]

    monkeypatch.setattr(value_places, "live_keys", listed_then_expired)
    needle = make_needle("ferns")
    assert needle is not None
    assert await value_places.find_in_erasure_progress(stores, CAROL, [needle]) == ["acme.carol.r1"]


async def test_a_key_purged_while_the_listing_is_sent_is_not_waited_for(
    nats_settings: NatsSettings, nats_client: NatsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's last entry counted as pending when the one before it was sent, then the key was
    purged (an erasure, the closer): it never arrives, and the listing ends without it, at once."""
    store = _store(nats_settings, nats_client)
    for session_id in ("ferns", "basil", "mint"):
        await _open(store, CAROL, session_id)
    await drop_entries(nats_client.jetstream(), store.bucket, "acme.carol.mint")
    original_watch = KeyValue.watch

    async def watch_sent_before_the_purge(self: KeyValue, *args: Any, **kwargs: Any) -> Any:
        watcher = await original_watch(self, *args, **kwargs)
        original_updates = watcher.updates

        async def updates(*args: Any) -> Any:
            entry = await original_updates(*args)  # type: ignore[no-untyped-call]  # unannotated in nats-py
            if entry is not None and entry.key == "acme.carol.basil":
                return dataclasses.replace(entry, delta=1)  # mint was still to come when basil was sent
            return entry

        monkeypatch.setattr(watcher, "updates", updates)
        return watcher

    monkeypatch.setattr(KeyValue, "watch", watch_sent_before_the_purge)
    started = time.monotonic()
    assert await store.keys(CAROL) == [SessionKey(CAROL, "ferns"), SessionKey(CAROL, "basil")]
    assert time.monotonic() - started < SNAPSHOT_WAIT_S
