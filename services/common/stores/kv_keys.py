"""The keys of a JetStream key-value bucket: listed so that none is missed, and removed without
leaving a marker behind.

nats-py's watch ends its first snapshot with a "no more entries" marker, which it sends when the
consumer info it asks for right after subscribing shows nothing pending and the subscription has
received nothing yet. A message the server already counts as delivered, but has not yet written to
the connection, counts as neither: the watch then ends empty although the bucket holds keys. A
listing that misses a key is an erasure that misses a user's data, so here the snapshot ends at the
entry the server sent with nothing pending after it, and an early marker is believed only when the
bucket holds no message under the pattern at all.

A delete or purge through the bucket's API leaves a marker on the key for good. In a bucket whose
keys come and go (one per session), markers pile up with every key ever written, and every listing
reads them all; `drop_entries` removes a key's entries, marker included, by purging its subject."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

SNAPSHOT_WAIT_S = 10.0
"""How long to wait for the next entry of the snapshot before giving up with the broker's timeout
error (a listing cut short must fail, never return a partial answer)."""


@dataclass(frozen=True, slots=True)
class KeyListing:
    """The keys under a pattern: `live` hold a value (in the bucket's order); `removed` maps each key
    whose latest entry is a delete or purge marker to that marker's revision."""

    live: list[str]
    removed: dict[str, int]


async def list_keys(js: JetStreamContext, kv: KeyValue, bucket: str, pattern: str) -> KeyListing:
    """Every key under `pattern` (a key filter: tokens, `*`, `>`), live or removed."""
    watcher = await kv.watch(pattern, meta_only=True)
    live: dict[str, None] = {}
    removed: dict[str, int] = {}
    seen = False
    try:
        while True:
            entry = await watcher.updates(SNAPSHOT_WAIT_S)  # type: ignore[no-untyped-call]  # unannotated in nats-py
            if entry is None:
                # The marker: trusted only when nothing under the pattern exists, else the
                # snapshot's entries are still on their way.
                if not seen and not await _holds_any(js, bucket, pattern):
                    return KeyListing([], {})
                continue
            seen = True
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


async def _holds_any(js: JetStreamContext, bucket: str, pattern: str) -> bool:
    try:
        await js.get_msg(f"KV_{bucket}", seq=1, subject=f"$KV.{bucket}.{pattern}", next=True)
    except NotFoundError:
        return False
    return True
