"""Session metadata filters given in a query string (`?metadata=KEY:VALUE`, repeatable), checked
against the same limits as the metadata a session carries, so a bad one is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError

from contracts.events import MetadataKey, MetadataValue
from services.recall_api.http.guard import FieldError

_KEY: TypeAdapter[str] = TypeAdapter(MetadataKey)
_VALUE: TypeAdapter[str] = TypeAdapter(MetadataValue)


def metadata_pairs(items: Sequence[str]) -> dict[str, str]:
    """KEY:VALUE items as a mapping (the value may itself contain ':'); raises `FieldError` on an
    item without a ':', a key outside 1-64 of A-Z a-z 0-9 _ -, a value over 256 characters, or a key
    given twice with different values (no memory could match both)."""
    pairs: dict[str, str] = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon:
            raise FieldError("metadata", f"metadata filter {item!r} must read KEY:VALUE, e.g. project:atlas")
        try:
            key, value = _KEY.validate_python(key), _VALUE.validate_python(value)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise FieldError("metadata", f"metadata filter {item!r}: {reason}") from exc
        if pairs.get(key, value) != value:
            raise FieldError("metadata", f"metadata key {key!r} is given twice with different values")
        pairs[key] = value
    return pairs
