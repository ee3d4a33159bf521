"""Validation of incoming sessions, shared by every way in (`tiermem ingest`, `tiermem sessions add`, the
recall API's `POST /v1/sessions` and its batch, MCP): the same form (a whole SessionCompleted, or only
`user_id` and `messages`, completed by `contracts.session_form`), the same size limits and the same
messages."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from contracts.events import SessionCompleted
from contracts.limits import SizeLimitExceeded, SizeLimits, check_session_size
from contracts.session_form import SessionForm

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


def _rejected(exc: ValidationError) -> SessionRejected:
    first = exc.errors(include_input=False, include_url=False)[0]
    return SessionRejected(".".join(str(part) for part in first["loc"]), describe_validation_error(exc))


def complete_session(form: SessionForm, limits: SizeLimits, tenant_id: str | None = None) -> SessionCompleted:
    """The SessionCompleted `form` stands for (what it leaves out filled in, the tenant `tenant_id` when
    it names none), checked against `limits`; raises SessionRejected with the field and the reason."""
    try:
        event = form.complete(tenant_id)
    except ValidationError as exc:
        raise _rejected(exc) from exc
    try:
        check_session_size(event, limits)
    except SizeLimitExceeded as exc:
        raise SessionRejected("messages", f"too large: {exc}", too_large=True) from exc
    return event


def parse_form(value: Any) -> SessionForm:
    """The session form in `value` (a parsed JSON value); raises SessionRejected with the field and the
    reason otherwise."""
    try:
        return SessionForm.model_validate(value)
    except ValidationError as exc:
        raise _rejected(exc) from exc


def parse_session(value: Any, limits: SizeLimits, tenant_id: str | None = None) -> SessionCompleted:
    """The session in `value` (a parsed JSON value: a whole SessionCompleted, or a short form that
    `complete_session` fills in), checked against `limits`; raises SessionRejected with the field and
    the reason otherwise."""
    return complete_session(parse_form(value), limits, tenant_id)
