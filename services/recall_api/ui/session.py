"""Browser sessions of the memory browser: the API key is presented once on a login form and never
stored in the browser. The cookie holds a signed token naming a digest of the key; every request
looks the digest up in the same key → tenant map as `/v1`, so removing a key from the configuration
ends its browser sessions too. Writes carry a per-session CSRF token (and the cookie is
SameSite=Strict, so another site's form never sends it).

A cookie is whatever the client sends: a token is matched against its exact shape (ASCII hex and
digits only) before anything else reads it, so no cookie can make checking it fail; a bad one is no
session, and the browser is sent to the login form.

Logging out ends the session on the server, not only in the browser: each token names a random
session id, and a token is a session only while its id is in this process's table of live sessions.
Logout removes it, so a copy of the cookie replayed afterwards is refused. The table is per process,
which is exactly as far as a token reaches: the signing secret is made per process too, so a token
never verifies in another worker or replica (a restart, or a request routed to another replica,
asks for the login again; several replicas need session affinity for /ui). Were the secret ever
shared between processes, this table would have to move to a shared store with it."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

COOKIE_NAME = "tiermem_ui"
SESSION_MAX_AGE_S = 12 * 3600
# Live sessions one process keeps; past this the oldest is logged out (the safe failure), so the
# table's memory is bounded whatever the number of logins.
MAX_LIVE_SESSIONS = 10_000
_VERSION = "v1"
# version . key digest . session id . issued (unix seconds) . signature
_TOKEN = re.compile(r"v1\.([0-9a-f]{32})\.([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class BrowserSession:
    """Who the browser acts for (the tenant of the key it logged in with) and its CSRF token."""

    tenant_id: str
    csrf_token: str


@dataclass(frozen=True, slots=True)
class _Token:
    digest: str
    session_id: str
    issued: int


def _key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


class SessionSigner:
    """Issues, checks and revokes session tokens. The signing secret lives in this process only: a
    restart of the recall API logs every browser out, which is the safe failure."""

    def __init__(
        self,
        secret: bytes | None = None,
        max_age_s: int = SESSION_MAX_AGE_S,
        max_live_sessions: int = MAX_LIVE_SESSIONS,
    ) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.max_age_s = max_age_s
        self._max_live = max_live_sessions
        self._live: OrderedDict[str, int] = OrderedDict()  # session id -> issued, oldest first

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode("utf-8"), hashlib.sha256).hexdigest()

    def issue(self, key: str, now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        session_id = secrets.token_hex(16)
        self._forget_expired(issued)
        self._live[session_id] = issued
        while len(self._live) > self._max_live:
            self._live.popitem(last=False)
        payload = f"{_VERSION}.{_key_digest(key)}.{session_id}.{issued}"
        return f"{payload}.{self._sign(payload)}"

    def _signed(self, token: str | None) -> _Token | None:
        """The parts of a token of the exact shape that was signed here."""
        match = _TOKEN.fullmatch(token) if token else None
        if match is None:
            return None
        digest, session_id, issued, signature = match.groups()
        if not hmac.compare_digest(self._sign(f"{_VERSION}.{digest}.{session_id}.{issued}"), signature):
            return None
        return _Token(digest=digest, session_id=session_id, issued=int(issued))

    def check(self, token: str | None, api_keys: Mapping[str, str], now: float | None = None) -> BrowserSession | None:
        """The session of a valid, unexpired, live token whose key is still configured; None otherwise."""
        signed = self._signed(token)
        if signed is None or signed.session_id not in self._live:
            return None
        current = now if now is not None else time.time()
        if not 0 <= current - signed.issued <= self.max_age_s:
            return None
        tenant = _tenant_of_digest(api_keys, signed.digest)
        if tenant is None:
            return None
        return BrowserSession(tenant_id=tenant, csrf_token=self._sign(f"csrf.{signed.session_id}"))

    def revoke(self, token: str | None) -> None:
        """End the token's session here: the same cookie is no session afterwards (logout)."""
        signed = self._signed(token)
        if signed is not None:
            self._live.pop(signed.session_id, None)

    def _forget_expired(self, now: int) -> None:
        while self._live:
            oldest_id, issued = next(iter(self._live.items()))
            if now - issued <= self.max_age_s:
                return
            del self._live[oldest_id]


def _tenant_of_digest(api_keys: Mapping[str, str], digest: str) -> str | None:
    """Like `tenant_for_key`: every key is compared, without stopping early."""
    tenant: str | None = None
    for key, key_tenant in api_keys.items():
        if hmac.compare_digest(_key_digest(key), digest) and tenant is None:
            tenant = key_tenant
    return tenant


def csrf_matches(session: BrowserSession, presented: str | None) -> bool:
    if presented is None or not presented.isascii():
        return False
    return hmac.compare_digest(session.csrf_token, presented)
