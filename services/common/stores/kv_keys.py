"""The keys of a JetStream key-value bucket: listed so that none is missed, and removed without
leaving a marker behind.

nats-py's watch ends its first snapshot with a "no more entries" marker, which it sends when the
consumer info it asks for right after subscribing shows nothing pending and the subscription has
received nothing yet. A message the server already counts as delivered, but has not yet written to
the connection, counts as neither: the watch then ends empty although the bucket holds keys. A
listing that misses a key is an erasure that misses a user's data, so here the snapshot ends at the
entry the server sent with nothing pending after it, and a marker (or a pause) ends it only when the
stream holds no message under the pattern after the last entry received: a key purged while the
snapshot was being sent is then not waited for.

A delete or purge through the bucket's API leaves a marker on the key for good. In a bucket whose
keys come and go (one per session), markers pile up with every key ever written, and every listing
reads them all; `drop_entries` removes a key's entries, marker included, by purging its subject."""

from __future__ import annotations

import time
from dataclasses import dataclass

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

QUIET_S = 1.0
"""How long the snapshot may pause before the stream is asked whether anything is left to come."""
SNAPSHOT_WAIT_S = 10.0
"""How long to wait for an entry the stream says is still to come before giving up with the broker's
timeout error (a listing cut short must fail, never return a partial answer)."""


@dataclass(frozen=True, slots=True)
class KeyListing:
    """The keys under a pattern: `live` hold a value (in the bucket's order); `removed` maps each key
    whose latest entry is a delete or purge marker to that marker's revision."""

    live: list[str]
    removed: dict[str, int]


async def list_keys(js: JetStreamContext, kv: KeyValue, bucket: str, pattern: str) -> KeyListing:
    """Every key under `pattern` (a key filter: tokens, `*`, `>`), live or removed. The bucket keeps one
    revision per key (history 1, as every bucket here), so each message under the pattern is one the
    snapshot sends."""
    watcher = await kv.watch(pattern, meta_only=True)
    live: dict[str, None] = {}
    removed: dict[str, int] = {}
    last = 0  # the stream sequence of the last entry received
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    try:
        while True:
            try:
                entry = await watcher.updates(QUIET_S)  # type: ignore[no-untyped-call]  # unannotated in nats-py
            except NatsTimeoutError:
                entry = None  # a pause: asked below like nats-py's marker
            if entry is None:
                # The marker or a pause: the listing is whole when nothing under the pattern comes after
                # the last entry received (a key purged while the snapshot was sent never arrives).
                if not await _holds_any(js, bucket, pattern, after=last):
                    return KeyListing(list(live), removed)
                if time.monotonic() > deadline:
                    raise NatsTimeoutError
                continue
            last = entry.revision
            if entry.operation in (KV_DEL, KV_PURGE):
                live.pop(entry.key, None)
                removed[entry.key] = entry.revision
            else:
                removed.pop(entry.key, None)
                live[entry.key] = None
            if entry.delta == 0:  # the server had nothing more to send when it sent this one
                return KeyListing(list(live), removed)
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated


async def live_keys(js: JetStreamContext, kv: KeyValue, bucket: str, pattern: str) -> list[str]:
    """Every key under `pattern` whose latest entry is a value, not a delete or purge marker."""
    return (await list_keys(js, kv, bucket, pattern)).live


async def drop_entries(js: JetStreamContext, bucket: str, key: str, *, upto_revision: int | None = None) -> None:
    """Remove the key's entries outright, no marker left (only those at or below `upto_revision` when
    given, so a write made since stays: a compare-and-delete)."""
    subject = f"$KV.{bucket}.{key}"
    if upto_revision is None:
        await js.purge_stream(f"KV_{bucket}", subject=subject)
    else:
        await js.purge_stream(f"KV_{bucket}", subject=subject, seq=upto_revision + 1)  # purges below `seq`


async def _holds_any(js: JetStreamContext, bucket: str, pattern: str, *, after: int) -> bool:
    """Whether the bucket holds a message under `pattern` after stream sequence `after`."""
    try:
        await js.get_msg(f"KV_{bucket}", seq=after + 1, subject=f"$KV.{bucket}.{pattern}", next=True)
    except NotFoundError:
        return False
    return True
