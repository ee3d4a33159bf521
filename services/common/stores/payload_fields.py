"""Typed reads of stored point payload fields, shared by the store modules that own a point layout."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


class MalformedPoint(ValueError):
    """A stored point lacks a field it cannot be read without."""


def read_time(payload: Mapping[str, Any], name: str) -> datetime | None:
    text = payload.get(name)
    if isinstance(text, str) and text:
        value = datetime.fromisoformat(text)
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    seconds = payload.get(f"{name}_ts")
    if isinstance(seconds, int | float):
        return datetime.fromtimestamp(seconds, UTC)
    return None


def read_str(payload: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = payload.get(name)
    if value is None:
        if default is None:
            raise MalformedPoint(f"no {name}")
        return default
    return str(value)


def read_int(payload: Mapping[str, Any], name: str) -> int | None:
    value = payload.get(name)
    return None if value is None else int(value)


def read_metadata(payload: Mapping[str, Any]) -> dict[str, str]:
    """The session metadata of a point; points written before metadata existed read it as empty."""
    found = payload.get("metadata")
    if not isinstance(found, Mapping):
        return {}
    return {str(key): str(value) for key, value in found.items() if isinstance(value, str)}


_METADATA_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def metadata_match(metadata: Mapping[str, str]) -> dict[str, str]:
    """`SearchFilter.match` entries for "this session metadata key has this value", on episodes,
    passages (a dict payload) and facts (key → list of values) alike. Keys are checked again here:
    a dot would make the key a deeper payload path."""
    for key in metadata:
        if _METADATA_KEY.fullmatch(key) is None:
            raise ValueError(f"metadata key {key!r} must be 1-64 of A-Z a-z 0-9 _ -")
    return {f"metadata.{key}": value for key, value in sorted(metadata.items())}
