"""Throttling of wrong API keys, per client address: a `/v1` or MCP request with a wrong Bearer key
and a wrong key on the memory browser's login form spend the same budget.

Each client address has a token bucket of `burst` failures that refills at `per_minute`. Only wrong
keys spend it; a request with no key at all is no guess and spends nothing. A client whose bucket is
empty is answered 429 with `Retry-After`, and its key is not checked: were it checked, a guess that
hit would be answered 200 and the throttle would slow no guessing. Successful clients are not
throttled even then: a key that already worked from this address is recognised (by a digest, not by
checking it against the configured keys) and served, so an attacker burning the budget of an
address it shares with an agent (a NAT, a proxy) does not lock the agent out. Only a key never seen
working from that address waits.

Memory is bounded: at most `max_clients` buckets and as many (address, key digest) pairs are kept,
the least recently used dropped first. Dropping a bucket forgets that client's failures (an
attacker needs as many addresses as the table holds to make use of it, and has a larger budget from
that many addresses anyway); dropping a pair only means that key waits like a new one.

The client is the connection's peer address (`scope["client"]`). Behind a reverse proxy or an
ingress that is the proxy's address, shared by every client, unless uvicorn is told to trust the
proxy's `X-Forwarded-For` (`FORWARDED_ALLOW_IPS=<proxy addresses>` in the recall API's
environment); without it, one client's wrong keys make every new client behind that proxy wait."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Scope

from services.common.domain.lru import LruCache


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class FailureThrottle:
    def __init__(
        self,
        *,
        per_minute: float,
        burst: int,
        max_clients: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate_per_s = per_minute / 60.0
        self._burst = float(burst)
        self._clock = clock
        self._buckets: LruCache[str, _Bucket] = LruCache(max_clients)
        self._worked: LruCache[tuple[str, bytes], bool] = LruCache(max_clients)

    def retry_after(self, client: str, key: str) -> int | None:
        """Whole seconds until `client` may present `key`, or None when it may now (its budget is
        not spent, or this key has worked from this client before)."""
        bucket = self._refilled(client)
        if bucket is None or bucket.tokens >= 1.0 or (client, _digest(key)) in self._worked:
            return None
        return max(1, math.ceil((1.0 - bucket.tokens) / self._rate_per_s))

    def failed(self, client: str) -> None:
        """Spend one failure of `client`'s budget."""
        bucket = self._refilled(client)
        if bucket is None:
            bucket = _Bucket(tokens=self._burst, updated=self._clock())
        bucket.tokens = max(0.0, bucket.tokens - 1.0)
        self._buckets.put(client, bucket)

    def succeeded(self, client: str, key: str) -> None:
        """`key` worked from `client`: it is served from there even while the budget is spent."""
        self._worked.put((client, _digest(key)), True)

    def _refilled(self, client: str) -> _Bucket | None:
        bucket = self._buckets.get(client)
        if bucket is None:
            return None
        now = self._clock()
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate_per_s)
        bucket.updated = now
        if bucket.tokens >= self._burst:
            self._buckets.pop(client)  # as good as new: nothing to remember
            return None
        return bucket


def client_address(scope: Scope) -> str:
    """The peer address of the connection (the forwarded client's, when uvicorn trusts the proxy)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
