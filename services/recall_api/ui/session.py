"""Browser sessions of the memory browser: the API key is presented once on a login form and never
stored in the browser. The cookie holds a signed token naming a digest of the key; every request
looks the digest up in the same key → tenant map as `/v1`, so removing a key from the configuration
ends its browser sessions too. Writes carry a per-session CSRF token (and the cookie is
SameSite=Strict, so another site's form never sends it)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

COOKIE_NAME = "tiermem_ui"
SESSION_MAX_AGE_S = 12 * 3600
_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class BrowserSession:
    """Who the browser acts for (the tenant of the key it logged in with) and its CSRF token."""

    tenant_id: str
    csrf_token: str


def _key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


class SessionSigner:
    """Issues and checks session tokens. The signing secret lives in this process only: a restart
    of the recall API logs every browser out, which is the safe failure."""

    def __init__(self, secret: bytes | None = None, max_age_s: int = SESSION_MAX_AGE_S) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.max_age_s = max_age_s

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self, key: str, now: float | None = None) -> str:
        issued = int(now if now is not None else time.time())
        payload = f"{_VERSION}.{_key_digest(key)}.{secrets.token_hex(16)}.{issued}"
        return f"{payload}.{self._sign(payload)}"

    def check(self, token: str | None, api_keys: Mapping[str, str], now: float | None = None) -> BrowserSession | None:
        """The session of a valid, unexpired token whose key is still configured; None otherwise."""
        if not token or len(token) > 300:
            return None
        parts = token.split(".")
        if len(parts) != 5 or parts[0] != _VERSION or not parts[3].isdigit():
            return None
        payload, signature = ".".join(parts[:4]), parts[4]
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        current = now if now is not None else time.time()
        if not 0 <= current - int(parts[3]) <= self.max_age_s:
            return None
        tenant = _tenant_of_digest(api_keys, parts[1])
        if tenant is None:
            return None
        return BrowserSession(tenant_id=tenant, csrf_token=self._sign(f"csrf.{parts[2]}"))


def _tenant_of_digest(api_keys: Mapping[str, str], digest: str) -> str | None:
    """Like `tenant_for_key`: every key is compared, without stopping early."""
    tenant: str | None = None
    for key, key_tenant in api_keys.items():
        if hmac.compare_digest(_key_digest(key), digest) and tenant is None:
            tenant = key_tenant
    return tenant


def csrf_matches(session: BrowserSession, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(session.csrf_token, presented)
