"""Validation of incoming SessionCompleted records, shared by every way in (`tiermem ingest`, the
recall API's `POST /v1/sessions`): the same schema, the same size limits and the same messages."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from contracts.events import SessionCompleted
from contracts.limits import SizeLimitExceeded, SizeLimits, check_session_size

_MAX_PROBLEMS = 10
_MAX_REASON_CHARS = 300


class SessionRejected(ValueError):
    """A record is not a valid SessionCompleted, or is larger than the limits. `field` is the
    dotted path of the first offending field ('' for the whole record); `reason` says why."""

    def __init__(self, field: str, reason: str, *, too_large: bool = False) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason
        self.too_large = too_large


def describe_validation_error(exc: ValidationError) -> str:
    """Every problem as 'path: message', never echoing the input (it may be huge or unencodable)."""
    problems = [
        f"{'.'.join(str(part) for part in error['loc']) or '<root>'}: {error['msg'][:_MAX_REASON_CHARS]}"
        for error in exc.errors(include_input=False, include_url=False)[:_MAX_PROBLEMS]
    ]
    more = exc.error_count() - len(problems)
    return "invalid payload: " + "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


def parse_session(value: Any, limits: SizeLimits) -> SessionCompleted:
    """The SessionCompleted in `value` (a parsed JSON value), checked against `limits`; raises
    SessionRejected with the field and the reason otherwise."""
    try:
        event = SessionCompleted.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        raise SessionRejected(field, describe_validation_error(exc)) from exc
    try:
        check_session_size(event, limits)
    except SizeLimitExceeded as exc:
        raise SessionRejected("messages", f"too large: {exc}", too_large=True) from exc
    return event
