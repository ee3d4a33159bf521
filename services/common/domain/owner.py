"""The isolation key every store call requires."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.events import is_subject_token


@dataclass(frozen=True, slots=True)
class Owner:
    """Tenant and user whose memory a store call touches. Stores accept no call without one, so no
    code path can forget the isolation filter."""

    tenant_id: str
    user_id: str

    def __post_init__(self) -> None:
        for field_name in ("tenant_id", "user_id"):
            value = getattr(self, field_name)
            if not is_subject_token(value):
                raise ValueError(f"{field_name} must be 1-128 characters of [A-Za-z0-9_-], got {value!r}")
