"""What both clients share below the calls: where to connect, how a response becomes a result or a
typed error, and the retry policy (429, 502, 503, 504 and connection failures are retried with capped
exponential backoff, honouring `Retry-After`; everything else fails at once)."""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from tiermem_client.calls import Call
from tiermem_client.errors import TiermemError, error_for
from tiermem_client.models import ErrorDetail

DEFAULT_URL = "http://127.0.0.1:8080"
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a call the server could not take right now."""

    attempts: int = 4
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504})

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempts count from 1)."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.max_backoff_s)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        ceiling = min(self.initial_backoff_s * 2.0 ** (attempt - 1), self.max_backoff_s)
        return ceiling * (0.5 + random.random() / 2)  # jitter so many clients do not retry in step


def settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The URL and key: the arguments, else `TIERMEM_RECALL_URL` and `TIERMEM_API_KEY` (the CLI's names)."""
    url = base_url or os.environ.get("TIERMEM_RECALL_URL")
    if not url and os.environ.get("TIERMEM_URL"):
        warnings.warn(
            "TIERMEM_URL is deprecated: set TIERMEM_RECALL_URL (the name the tiermem CLI reads)",
            DeprecationWarning,
            stacklevel=3,
        )
        url = os.environ["TIERMEM_URL"]
    key = api_key or os.environ.get("TIERMEM_API_KEY")
    if not key:
        raise TiermemError("no API key: pass api_key= or set TIERMEM_API_KEY")
    return url or DEFAULT_URL, key


def headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", "Accept": "application/json"}


def request(http_client: httpx.Client | httpx.AsyncClient, call: Call[R]) -> httpx.Request:
    return http_client.build_request(
        call.method, call.path, params=call.params or None, content=call.body, headers=call.headers or None
    )


def result(call: Call[R], response: httpx.Response) -> R:
    if response.is_success:
        try:
            return call.result.model_validate_json(response.content)
        except ValidationError as exc:
            raise TiermemError(
                f"{call.method} {call.path}: unexpected response shape ({exc.error_count()} errors)"
            ) from exc
    try:
        payload = response.json()
        detail = str(payload.get("detail", response.reason_phrase))
        code = str(payload.get("code", "http_error"))
        errors = [ErrorDetail.model_validate(item) for item in payload.get("errors") or []]
    except (ValueError, AttributeError, ValidationError):
        detail, code, errors = response.reason_phrase or "error", "http_error", []
    raise error_for(response.status_code, code, detail, errors)


def retryable(policy: RetryPolicy, response: httpx.Response, attempt: int) -> bool:
    return response.status_code in policy.retry_statuses and attempt < policy.attempts
