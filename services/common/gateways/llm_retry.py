"""Errors and the bounded retry loop of the model gateways (LLM and embedding): which failures are
transient, how long to wait (honouring Retry-After), progress ticks while waiting, and one typed
error with a dead-letter reason at the end."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")

ProgressCallback = Callable[[], Awaitable[None]]


class LlmError(Exception):
    """A model call failed for good (after the retries this gateway does). `reason` is for dead letters."""

    retryable_later: bool = True

    def __init__(self, reason: str, *, attempts: int = 0, status_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
        self.status_code = status_code


class LlmNotConfigured(LlmError):
    """No model is configured (offline mode); callers use their heuristic path instead."""

    retryable_later = False


class LlmOutputInvalid(LlmError):
    """The model kept answering with something that does not validate against the schema."""

    retryable_later = False


class LlmUnavailable(LlmError):
    """Rate limits, server errors, timeouts or connection errors outlasted the retry budget."""

    retryable_later = True


class LlmRequestRejected(LlmError):
    """The provider refused the request (4xx other than 429: bad request, auth, unknown model, ...)."""

    retryable_later = False


# ---- retry policy (shared with the embedding gateway) -------------------------------------------


class InvalidOutput(Exception):
    """One attempt returned content that is not valid JSON for the schema (retried)."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_initial_s: float
    backoff_max_s: float
    total_budget_s: float
    timeout_s: float
    progress_interval_s: float = 5.0


Verdict = Literal["retry", "reject", "raise"]

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


def classify_exception(exc: BaseException) -> Verdict:
    """'retry' for transient failures, 'reject' for provider refusals, 'raise' for our own bugs."""
    if isinstance(exc, InvalidOutput | TimeoutError):
        return "retry"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 600:
        return "retry" if status in _RETRYABLE_STATUS or status >= 500 else "reject"
    import openai  # litellm's exceptions all derive from openai's; imported lazily with litellm

    if isinstance(exc, openai.APIError):
        # Timeouts, connection errors and API errors without a status: transient as far as we can tell.
        return "retry"
    return "raise"


def _retry_after_s(exc: BaseException | None) -> float | None:
    """The server's Retry-After (seconds or HTTP date) carried by a 429/503, if any."""
    # litellm keeps the provider's headers on the exception; its `response` is often a bare stand-in.
    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
    except Exception:
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InvalidOutput):
        return f"invalid output: {exc}"
    status = getattr(exc, "status_code", None)
    text = " ".join(str(exc).split())
    if len(text) > 500:
        text = text[:500] + "…"
    return f"{type(exc).__name__}{f' (HTTP {status})' if isinstance(status, int) else ''}: {text}"


def _history(errors: list[str]) -> str:
    """'attempts 1-3: X; attempt 4: Y' — consecutive identical errors folded so reasons stay short."""
    parts: list[str] = []
    start = 0
    for i in range(1, len(errors) + 1):
        if i == len(errors) or errors[i] != errors[start]:
            label = f"attempt {start + 1}" if i - start == 1 else f"attempts {start + 1}-{i}"
            parts.append(f"{label}: {errors[start]}")
            start = i
    return "; ".join(parts)


async def _await_with_progress(
    awaitable: Awaitable[R], on_progress: ProgressCallback | None, interval_s: float, hard_timeout_s: float
) -> R:
    """Await `awaitable` as a task, awaiting `on_progress` every `interval_s` while it is pending."""
    task = asyncio.ensure_future(awaitable)
    deadline = time.monotonic() + hard_timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # Belt and braces: the HTTP client has its own timeout, but never wait forever.
                raise TimeoutError(f"call did not finish within {hard_timeout_s:.1f}s")
            done, _ = await asyncio.wait({task}, timeout=min(interval_s, remaining))
            if done:
                return task.result()
            if on_progress is not None and time.monotonic() < deadline:
                await on_progress()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _sleep_with_progress(seconds: float, on_progress: ProgressCallback | None, interval_s: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(interval_s, remaining))
        if on_progress is not None and deadline - time.monotonic() > 0:
            await on_progress()


@dataclass
class AttemptTally:
    """What the attempts of one call added up to (tokens and cost count attempts that got a response)."""

    count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)


async def call_with_retries(
    policy: RetryPolicy,
    attempt_call: Callable[[float], Awaitable[R]],
    *,
    on_progress: ProgressCallback | None,
    what: str,
    tally: AttemptTally | None = None,
) -> tuple[R, int]:
    """Run `attempt_call(timeout_s)` until it succeeds, a non-retryable error occurs, the attempts run
    out or the budget would be exceeded. Returns (result, attempts); raises an `LlmError`."""
    started = time.monotonic()
    attempts = tally if tally is not None else AttemptTally()

    def wait(retry_state: RetryCallState) -> float:
        base = wait_exponential_jitter(
            multiplier=policy.backoff_initial_s, max=policy.backoff_max_s, jitter=policy.backoff_initial_s
        )(retry_state)
        outcome = retry_state.outcome
        retry_after = _retry_after_s(outcome.exception() if outcome is not None else None)
        return min(max(base, retry_after or 0.0), policy.backoff_max_s)

    async def sleep(seconds: float) -> None:
        await _sleep_with_progress(seconds, on_progress, policy.progress_interval_s)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts) | stop_before_delay(policy.total_budget_s),
        wait=wait,
        retry=retry_if_exception(lambda exc: classify_exception(exc) == "retry"),
        sleep=sleep,
        reraise=True,
    )

    async def one_attempt() -> R:
        attempts.count += 1
        remaining = policy.total_budget_s - (time.monotonic() - started)
        timeout_s = max(0.05, min(policy.timeout_s, remaining))
        try:
            return await _await_with_progress(
                attempt_call(timeout_s), on_progress, policy.progress_interval_s, hard_timeout_s=timeout_s + 5.0
            )
        except Exception as exc:
            attempts.errors.append(_describe(exc))
            raise

    try:
        result: R = await retrying(one_attempt)
    except Exception as exc:
        verdict = classify_exception(exc)
        if verdict == "raise":
            raise
        history = _history(attempts.errors)
        n = attempts.count
        status = getattr(exc, "status_code", None)
        status = status if isinstance(status, int) else None
        if isinstance(exc, InvalidOutput):
            raise LlmOutputInvalid(
                f"{what}: model output failed validation after {n} attempt(s). History: {history}",
                attempts=n,
            ) from exc
        if verdict == "reject":
            raise LlmRequestRejected(
                f"{what}: provider rejected the request (not retried): {_describe(exc)}",
                attempts=n,
                status_code=status,
            ) from exc
        raise LlmUnavailable(
            f"{what}: model unavailable after {n} attempt(s) in {time.monotonic() - started:.1f}s. History: {history}",
            attempts=n,
            status_code=status,
        ) from exc
    return result, attempts.count
