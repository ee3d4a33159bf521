"""`--meta KEY=VALUE` (repeatable) of the CLI's read commands: the session metadata filter of the HTTP
API, checked here against the same limits, so a malformed pair is a usage error that names it before
any request is sent."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from contracts.events import METADATA_MAX_KEYS, MetadataKey, MetadataValue

_KEY: TypeAdapter[str] = TypeAdapter(MetadataKey)
_VALUE: TypeAdapter[str] = TypeAdapter(MetadataValue)
# A key is made of A-Z a-z 0-9 _ - only, so the first '=' or ':' always ends it; ':' is the HTTP query's
# separator (`?metadata=KEY:VALUE`) and works here too.
_SEPARATORS = ("=", ":")
_HINT = "'--meta'"


def _split(item: str) -> tuple[str, str]:
    cuts = [index for index in (item.find(separator) for separator in _SEPARATORS) if index >= 0]
    if not cuts:
        raise typer.BadParameter(f"{item!r} must read KEY=VALUE, e.g. --meta project=atlas", param_hint=_HINT)
    cut = min(cuts)
    return item[:cut], item[cut + 1 :]


def _check(item: str, key: str, value: str) -> tuple[str, str]:
    try:
        key = _KEY.validate_python(key)
    except ValidationError as exc:
        raise typer.BadParameter(f"{item!r}: a key is 1-64 characters of A-Z a-z 0-9 _ -", param_hint=_HINT) from exc
    try:
        value = _VALUE.validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        too_long = error["type"] == "string_too_long"
        reason = f"must be at most {error['ctx']['max_length']} characters" if too_long else error["msg"]
        raise typer.BadParameter(f"{item!r}: the value {reason}", param_hint=_HINT) from exc
    return key, value


def metadata_filter(items: list[str] | None) -> dict[str, str]:
    """The `--meta` items as a mapping; a usage error (exit 2) for an item without '=', a key outside
    1-64 of A-Z a-z 0-9 _ -, a value over 256 characters, more than 16 keys, or a key given twice
    with different values (no memory could match both)."""
    pairs: dict[str, str] = {}
    for item in items or []:
        key, value = _check(item, *_split(item))
        if pairs.get(key, value) != value:
            raise typer.BadParameter(f"the key {key!r} is given twice with different values", param_hint=_HINT)
        pairs[key] = value
    if len(pairs) > METADATA_MAX_KEYS:
        raise typer.BadParameter(f"at most {METADATA_MAX_KEYS} keys, got {len(pairs)}", param_hint=_HINT)
    return pairs


MetaOption = Annotated[
    list[str] | None,
    typer.Option(
        "--meta",
        metavar="KEY=VALUE",
        help="Only memories whose session carried this metadata; repeat for several (all must match).",
    ),
]
