"""Errors raised by the client: one class per thing a caller may want to handle differently."""

from __future__ import annotations

from collections.abc import Sequence

from tiermem_client.models import ErrorDetail, EventStatus


class TiermemError(Exception):
    """Anything the recall API refused or could not do."""


class TransportError(TiermemError):
    """The recall API could not be reached (connection refused, timeout) even after the retries."""


class ApiError(TiermemError):
    """The recall API answered with an error. `code` is the server's stable machine-readable code."""

    def __init__(self, status: int, code: str, detail: str, errors: Sequence[ErrorDetail] = ()) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = list(errors)
        fields = ", ".join(f"{e.field or '(body)'}: {e.reason}" for e in self.errors)
        super().__init__(f"{status} {code}: {detail}" + (f" ({fields})" if fields else ""))


class AuthenticationError(ApiError):
    """401: the API key is missing or unknown."""


class NotFoundError(ApiError):
    """404: no such item for this tenant and user."""


class InvalidRequestError(ApiError):
    """400/403/409/413/422: the request is wrong; `errors` names each field and the reason."""


class UnavailableError(ApiError):
    """429/503 (or another 5xx) that persisted through every retry: try again later."""


class DeadLettered(TiermemError):
    """`wait`: the pipeline gave up on the event and put it on the dead-letter stream (`status.reason`
    says why). Nothing was stored from it; fix the cause and add it again, or replay the dead letter."""

    def __init__(self, status: EventStatus) -> None:
        self.status = status
        super().__init__(f"event {status.event_id} was dead-lettered: {status.reason or 'no reason given'}")


class WaitTimeout(TiermemError, TimeoutError):
    """`wait`: the event was still not finished when the timeout ran out (`status` is the last seen)."""

    def __init__(self, status: EventStatus, timeout: float) -> None:
        self.status = status
        super().__init__(f"event {status.event_id} is still {status.state} after {timeout:g}s")


def error_for(status: int, code: str, detail: str, errors: Sequence[ErrorDetail]) -> ApiError:
    if status == 401:
        return AuthenticationError(status, code, detail, errors)
    if status == 404:
        return NotFoundError(status, code, detail, errors)
    if status in (429,) or status >= 500:
        return UnavailableError(status, code, detail, errors)
    return InvalidRequestError(status, code, detail, errors)
