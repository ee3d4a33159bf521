"""LLM gateway: the one place that talks to a language model, through litellm.

Calls ask for a JSON object, validate it against a pydantic schema, and retry (bounded by attempts
and a total time budget) on rate limits, server errors, timeouts, connection errors and output that
does not validate. JetStream redelivery is the outer retry, so the inner loop stays short; a final
failure raises an `LlmError` whose `reason` the consumer puts into its dead letter.

litellm is imported lazily (importing it takes seconds and, unless `LITELLM_LOCAL_MODEL_COST_MAP` is
set, downloads a cost map), and only inside this module and `embedding.py` through `import_litellm`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
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

_litellm_lock = threading.Lock()
_litellm_module: Any = None


def import_litellm() -> Any:
    """Import litellm once, with the bundled cost map (no download) and its chatter switched off."""
    global _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            # Without this litellm fetches its model cost map over the network at import time.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            _litellm_module = litellm
        return _litellm_module


async def drain_litellm_background_tasks(timeout_s: float = 5.0) -> None:
    """Let litellm's background logging worker finish what it queued on the running event loop, then
    stop it. Call before the loop closes (service shutdown, end of a test) so no coroutine is left
    un-awaited. A no-op when litellm was never imported."""
    if _litellm_module is None:
        return
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

    # The worker may be bound to an earlier loop; then there is nothing of ours to wait for.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(GLOBAL_LOGGING_WORKER.flush(), timeout_s)
    with contextlib.suppress(Exception):
        await GLOBAL_LOGGING_WORKER.stop()


# ---- configuration, results, errors ---------------------------------------------------------------


class LlmConfig(BaseModel):
    """How to reach the model and how hard to try. `model=None` means offline mode (no LLM)."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(default=None, description="litellm model name, e.g. 'openai/gpt-4o-mini'.")
    api_base: str | None = Field(default=None, description="Provider base URL (OpenAI-compatible servers).")
    api_key: SecretStr | None = Field(default=None, description="Provider API key.")
    timeout_s: float = Field(default=60.0, gt=0, description="Timeout of one attempt.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts per call, the first included.")
    backoff_initial_s: float = Field(default=1.0, ge=0, description="Wait before the first retry (then doubled).")
    backoff_max_s: float = Field(default=20.0, ge=0, description="Longest wait between attempts.")
    total_budget_s: float = Field(
        default=180.0, gt=0, description="No attempt starts after this long; attempts are cut to what is left."
    )
    temperature: float = Field(default=0.0, ge=0)
    max_tokens: int = Field(default=1024, ge=1, description="Most completion tokens per call.")
    json_mode: bool = Field(default=True, description="Send response_format={'type': 'json_object'}.")
    input_cost_per_token: float | None = Field(
        default=None,
        ge=0,
        description="USD per prompt token; when set (or the output cost is) it wins over litellm's map.",
    )
    output_cost_per_token: float | None = Field(default=None, ge=0, description="USD per completion token.")
    progress_interval_s: float = Field(
        default=5.0, gt=0, description="How often on_progress is awaited while a call or a backoff is pending."
    )

    @property
    def offline(self) -> bool:
        return self.model is None


@dataclass(frozen=True)
class LlmResult(Generic[T]):
    """A validated model answer and what it cost. Tokens and cost add up every attempt that got a response."""

    value: T
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    attempts: int
    latency_s: float


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


# ---- usage accounting ---------------------------------------------------------------------------


@dataclass
class PurposeUsage:
    """Counters of one purpose (e.g. 'episode_summary')."""

    calls: int = 0
    failures: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class UsageRecorder:
    """In-memory per-purpose counters of calls, attempts, tokens and cost (for metrics and tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_purpose: dict[str, PurposeUsage] = {}

    def record(
        self,
        purpose: str,
        *,
        ok: bool,
        attempts: int,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
    ) -> None:
        with self._lock:
            usage = self._by_purpose.setdefault(purpose, PurposeUsage())
            usage.calls += 1
            usage.failures += 0 if ok else 1
            usage.attempts += attempts
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += completion_tokens
            usage.cost_usd += cost_usd

    def get(self, purpose: str) -> PurposeUsage:
        """A copy of the counters of one purpose (zeros when never used)."""
        with self._lock:
            return replace(self._by_purpose.get(purpose, PurposeUsage()))

    def snapshot(self) -> dict[str, PurposeUsage]:
        with self._lock:
            return {purpose: replace(usage) for purpose, usage in self._by_purpose.items()}

    def total(self) -> PurposeUsage:
        total = PurposeUsage()
        for usage in self.snapshot().values():
            total.calls += usage.calls
            total.failures += usage.failures
            total.attempts += usage.attempts
            total.prompt_tokens += usage.prompt_tokens
            total.completion_tokens += usage.completion_tokens
            total.cost_usd += usage.cost_usd
        return total


# ---- retry policy (shared with the embedding gateway) -------------------------------------------


class _InvalidOutput(Exception):
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
    if isinstance(exc, _InvalidOutput | TimeoutError):
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
    if isinstance(exc, _InvalidOutput):
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
        if isinstance(exc, _InvalidOutput):
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


# ---- JSON output parsing ------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def strip_code_fences(content: str) -> str:
    """Remove a surrounding ```json … ``` fence, which many models add despite JSON mode."""
    match = _FENCE.match(content)
    return match.group(1).strip() if match else content.strip()


def parse_json_output(content: str | None, schema: type[T]) -> T:
    """Validate model content against `schema`; raises _InvalidOutput with a short, useful reason."""
    if content is None or not content.strip():
        raise _InvalidOutput("the response has no content")
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
        raise _InvalidOutput(
            f"{schema.__name__} validation failed ({first_error.error_count()} error(s): {problems}); "
            f"content starts {head!r}"
        ) from None


def schema_instruction(schema: type[BaseModel]) -> str:
    return (
        "Reply with exactly one JSON object and nothing else (no prose, no code fences). "
        "It must validate against this JSON Schema:\n"
        + json.dumps(schema.model_json_schema(), ensure_ascii=False, separators=(",", ":"))
    )


def _with_schema_instruction(messages: list[dict[str, str]], schema: type[BaseModel]) -> list[dict[str, str]]:
    instruction = schema_instruction(schema)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content', '')}\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out


# ---- the gateway --------------------------------------------------------------------------------


def _usage_numbers(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None) or 0
    completion = getattr(usage, "completion_tokens", None) or 0
    return int(prompt), int(completion)


def _content_of(response: Any) -> str | None:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


class LlmGateway:
    """Validated JSON completions through litellm, with bounded retries and usage accounting."""

    def __init__(self, config: LlmConfig, usage: UsageRecorder | None = None) -> None:
        self._config = config
        self.usage = usage if usage is not None else UsageRecorder()

    @property
    def config(self) -> LlmConfig:
        return self._config

    @property
    def offline(self) -> bool:
        """True when no model is configured: callers take their heuristic (extractive) path."""
        return self._config.offline

    @property
    def online(self) -> bool:
        return not self._config.offline

    async def aclose(self) -> None:
        """Flush litellm's background work on this event loop (call at shutdown)."""
        await drain_litellm_background_tasks()

    def _policy(self) -> RetryPolicy:
        c = self._config
        return RetryPolicy(
            max_attempts=c.max_attempts,
            backoff_initial_s=c.backoff_initial_s,
            backoff_max_s=c.backoff_max_s,
            total_budget_s=c.total_budget_s,
            timeout_s=c.timeout_s,
            progress_interval_s=c.progress_interval_s,
        )

    def cost_of(self, response: Any, prompt_tokens: int, completion_tokens: int) -> float:
        """Configured per-token prices when given, else litellm's cost map, else 0.0 (unknown model)."""
        c = self._config
        if c.input_cost_per_token is not None or c.output_cost_per_token is not None:
            input_cost = prompt_tokens * (c.input_cost_per_token or 0.0)
            return input_cost + completion_tokens * (c.output_cost_per_token or 0.0)
        litellm = import_litellm()
        try:
            return float(litellm.completion_cost(completion_response=response))
        except Exception:
            # Unknown models (self-hosted, stubs) have no cost-map entry; cost tracking must never fail a call.
            return 0.0

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        on_progress: ProgressCallback | None = None,
        purpose: str,
        include_schema: bool = True,
    ) -> LlmResult[T]:
        """Ask for a JSON object, validate it as `schema`, retry transient failures and invalid output.

        `include_schema` adds the schema's JSON Schema to the system message so every caller states
        the output format the same way. Raises LlmNotConfigured, LlmOutputInvalid, LlmUnavailable or
        LlmRequestRejected; each carries a `reason` fit for a dead-letter record.
        """
        c = self._config
        if c.model is None:
            raise LlmNotConfigured(f"{purpose}: no LLM model is configured (offline mode)")
        model = c.model
        litellm = import_litellm()
        prompt = _with_schema_instruction(messages, schema) if include_schema else messages
        tally = AttemptTally()
        started = time.monotonic()

        async def attempt(timeout_s: float) -> tuple[T, str]:
            kwargs: dict[str, Any] = {
                "model": model,
                "messages": prompt,
                "timeout": timeout_s,
                "temperature": c.temperature,
                "max_tokens": c.max_tokens,
                # Retries are ours (bounded by the budget); the OpenAI client must not add its own.
                "max_retries": 0,
                "num_retries": 0,
                "drop_params": True,
            }
            if c.json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            if c.api_base:
                kwargs["api_base"] = c.api_base
            if c.api_key is not None:
                kwargs["api_key"] = c.api_key.get_secret_value()
            response = await litellm.acompletion(**kwargs)
            prompt_tokens, completion_tokens = _usage_numbers(response)
            tally.prompt_tokens += prompt_tokens
            tally.completion_tokens += completion_tokens
            tally.cost_usd += self.cost_of(response, prompt_tokens, completion_tokens)
            value = parse_json_output(_content_of(response), schema)
            return value, str(getattr(response, "model", None) or model)

        try:
            (value, answered_by), attempts = await call_with_retries(
                self._policy(), attempt, on_progress=on_progress, what=purpose, tally=tally
            )
        except BaseException:
            self.usage.record(
                purpose,
                ok=False,
                attempts=tally.count,
                prompt_tokens=tally.prompt_tokens,
                completion_tokens=tally.completion_tokens,
                cost_usd=tally.cost_usd,
            )
            raise
        self.usage.record(
            purpose,
            ok=True,
            attempts=attempts,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            cost_usd=tally.cost_usd,
        )
        return LlmResult(
            value=value,
            model=answered_by,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            cost_usd=tally.cost_usd,
            attempts=attempts,
            latency_s=time.monotonic() - started,
        )


def build_llm_gateway(config: BaseModel, usage: UsageRecorder | None = None) -> LlmGateway:
    """A gateway from an `LlmConfig` or any settings model with the same field names (e.g. LlmSettings);
    fields the settings do not have keep LlmConfig's defaults."""
    llm_config = config if isinstance(config, LlmConfig) else LlmConfig.model_validate(config.model_dump())
    return LlmGateway(llm_config, usage)
