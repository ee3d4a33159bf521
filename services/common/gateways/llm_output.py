"""JSON output of a model: code fences stripped, validated against a pydantic schema, and the
schema stated in the system message the same way for every caller."""

from __future__ import annotations

import contextlib
import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from services.common.gateways.llm_retry import InvalidOutput

T = TypeVar("T", bound=BaseModel)


# ---- JSON output parsing ------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def strip_code_fences(content: str) -> str:
    """Remove a surrounding ```json … ``` fence, which many models add despite JSON mode."""
    match = _FENCE.match(content)
    return match.group(1).strip() if match else content.strip()


def parse_json_output(content: str | None, schema: type[T]) -> T:
    """Validate model content against `schema`; raises InvalidOutput with a short, useful reason."""
    if content is None or not content.strip():
        raise InvalidOutput("the response has no content")
    text = strip_code_fences(content)
    try:
        return schema.model_validate_json(text)
    except ValidationError as first_error:
        # Some models wrap the object in prose ("Here is the JSON: {...}"); try the outermost braces.
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end and (start > 0 or end < len(text) - 1):
            with contextlib.suppress(ValidationError):
                return schema.model_validate_json(text[start : end + 1])
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in first_error.errors()[:5]
        )
        head = " ".join(text.split())[:160]
        raise InvalidOutput(
            f"{schema.__name__} validation failed ({first_error.error_count()} error(s): {problems}); "
            f"content starts {head!r}"
        ) from None


def schema_instruction(schema: type[BaseModel]) -> str:
    return (
        "Reply with exactly one JSON object and nothing else (no prose, no code fences). "
        "It must validate against this JSON Schema:\n"
        + json.dumps(schema.model_json_schema(), ensure_ascii=False, separators=(",", ":"))
    )


def with_schema_instruction(messages: list[dict[str, str]], schema: type[BaseModel]) -> list[dict[str, str]]:
    instruction = schema_instruction(schema)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content', '')}\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out
