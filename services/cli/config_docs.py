"""docs/configuration.md, written from the pydantic settings models so the page cannot drift from
the code: every field of the shared `TierMemSettings` (with its nested models) and the fields each
service adds, as the environment variable that sets it, its type, default and description."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from services.common.runtime.settings import TierMemSettings

ENV_PREFIX = "TIERMEM_"
NESTING = "__"
DEFAULT_PATH = Path("docs/configuration.md")

_INTRO = """\
# Configuration

<!-- Generated from the settings models by `tiermem schemas config-docs`; do not edit by hand.
     tests/unit/test_config_docs.py fails when this file and the models disagree. -->

Every tiermem process reads its settings with pydantic-settings. An environment variable is the
field's name in capitals with the prefix `TIERMEM_`; a field of a nested model joins the two names
with `__` (`TIERMEM_NATS__URL`). Lists and maps are given as JSON
(`TIERMEM_API_KEYS='{"key": "tenant"}'`). An empty variable counts as unset.

Highest first, a value comes from: explicit arguments in code, the environment, and the stack file
`<data dir>/stack.json` that a running `tiermem up` writes (its server addresses and credentials,
so other commands find the embedded stack with no configuration). An explicit `TIERMEM_API_KEYS`
replaces the development key of the stack file rather than adding to it.

The tables below list every setting. "unset" means the field is optional and off by default.
"""

_CONSTRAINTS: tuple[tuple[type[Any], str, str], ...] = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type_name(annotation: Any) -> str:
    """A short reader-facing name of a field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in args)
    if origin in (typing.Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        return " \\| ".join(_type_name(arg) for arg in present)
    if origin is not None:
        inner = ", ".join(_type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type):
        return "path" if issubclass(annotation, Path) else annotation.__name__
    return str(annotation)


def _bounds(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for kind, attribute, symbol in _CONSTRAINTS:
            if isinstance(meta, kind):
                parts.append(f"{symbol} {getattr(meta, attribute)}")
    return ", ".join(parts)


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, Path | str):
        return f"`{value}`"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _meaning(variable: str, field: FieldInfo) -> str:
    # Some descriptions start with their own variable name (for readers of the code); the table has it.
    text = (field.description or "").removeprefix(f"{variable}: ")
    return _cell(text[:1].upper() + text[1:])


def _row(variable: str, field: FieldInfo) -> str:
    kind = _type_name(field.annotation)
    bounds = _bounds(field)
    if bounds:
        kind = f"{kind} ({bounds})"
    return f"| `{variable}` | {kind} | {_default_text(field)} | {_meaning(variable, field)} |"


def _table(prefix: str, fields: dict[str, FieldInfo]) -> Iterator[str]:
    yield "| variable | type | default | meaning |"
    yield "|---|---|---|---|"
    for name, field in fields.items():
        yield _row(f"{prefix}{name.upper()}", field)


def _shared_section() -> Iterator[str]:
    fields = TierMemSettings.model_fields
    plain = {name: field for name, field in fields.items() if not _is_model(field.annotation)}
    nested = {name: field for name, field in fields.items() if _is_model(field.annotation)}
    yield "## Every process"
    yield ""
    yield "Read by every service, `tiermem up` and the operator commands."
    yield ""
    yield from _table(ENV_PREFIX, plain)
    for name, field in nested.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        prefix = f"{ENV_PREFIX}{name.upper()}{NESTING}"
        yield ""
        yield f"### `{prefix}*`"
        yield ""
        if model.__doc__:
            yield _cell(model.__doc__)
            yield ""
        yield from _table(prefix, dict(model.model_fields))


def service_settings() -> list[tuple[str, type[TierMemSettings]]]:
    from services.cli.stack import all_services
    from services.recall_api.settings import RecallApiSettings

    consumers = [(definition.name, definition.settings_type) for definition in all_services()]
    return [("recall-api", RecallApiSettings), *consumers]


def _service_section(name: str, settings_type: type[TierMemSettings]) -> Iterator[str]:
    shared = TierMemSettings.model_fields
    own = {field: info for field, info in settings_type.model_fields.items() if field not in shared}
    yield f"## {name}"
    yield ""
    if not own:
        yield "Only the settings every process reads."
        return
    yield f"Read by `tiermem serve {name}` and by `tiermem up`, on top of the settings every process reads."
    yield ""
    yield from _table(ENV_PREFIX, own)


def configuration_markdown() -> str:
    lines = [_INTRO, *_shared_section()]
    for name, settings_type in service_settings():
        lines.append("")
        lines.extend(_service_section(name, settings_type))
    return "\n".join(lines) + "\n"


def write_config_docs(path: Path = DEFAULT_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(configuration_markdown(), encoding="utf-8")
    return path


def main() -> None:
    print(f"wrote {write_config_docs()}")


if __name__ == "__main__":
    main()
