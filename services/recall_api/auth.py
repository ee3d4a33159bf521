"""API key → tenant. Keys are compared in constant time, and every configured key is compared on
every request, so timing reveals neither a key's prefix nor which key matched."""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from contracts.events import ID_PATTERN

_ID = re.compile(ID_PATTERN)
_SCHEME = "bearer"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the tenant (from the API key) and, optionally, a user and channel the
    caller pinned for the whole connection (MCP headers or stdio settings)."""

    tenant_id: str
    user_id: str | None = None
    channel: str | None = None


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.casefold() != _SCHEME or not token.strip():
        return None
    return token.strip()


def tenant_for_key(api_keys: Mapping[str, str], presented: str | None) -> str | None:
    """The tenant of `presented`, or None. Compares against every key without stopping early."""
    if presented is None:
        return None
    presented_bytes = presented.encode("utf-8")
    tenant: str | None = None
    for key, key_tenant in api_keys.items():
        if hmac.compare_digest(key.encode("utf-8"), presented_bytes) and tenant is None:
            tenant = key_tenant
    return tenant


# Words of the placeholders that example configs, charts and docs ship ("set-me", "changeme", ...):
# a key containing one was copied from an example, not generated, and must never open the API.
PLACEHOLDER_MARKERS = ("setme", "changeme", "replaceme", "placeholder", "example", "yourkey", "yourapikey", "dummy")
_MIN_DISTINCT_CHARACTERS = 8


def is_placeholder_key(key: str) -> bool:
    """A key copied from an example (a placeholder word in it) or too uniform to be random."""
    folded = re.sub(r"[^a-z0-9]", "", key.casefold())
    return any(marker in folded for marker in PLACEHOLDER_MARKERS) or len(set(key)) < _MIN_DISTINCT_CHARACTERS


def check_api_keys(api_keys: Mapping[str, str]) -> None:
    """Fail at start-up on unusable configuration, not at the first request."""
    for key, tenant in api_keys.items():
        if len(key) < 16:
            raise ValueError("every API key must be at least 16 characters long")
        if is_placeholder_key(key):
            raise ValueError(
                f"API key of tenant {tenant!r} is a placeholder (e.g. 'set-me') or not random: generate one, "
                "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if not _ID.fullmatch(tenant):
            raise ValueError(f"tenant id {tenant!r} of an API key must be 1-128 characters of [A-Za-z0-9_-]")


def valid_id(value: str) -> bool:
    return bool(_ID.fullmatch(value))
