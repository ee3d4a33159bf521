"""LLM gateway: the one place that talks to a language model, through litellm.

Calls ask for a JSON object, validate it against a pydantic schema, and retry (bounded by attempts
and a total time budget) on rate limits, server errors, timeouts, connection errors and output that
does not validate. JetStream redelivery is the outer retry, so the inner loop stays short; a final
failure raises an `LlmError` whose `reason` the consumer puts into its dead letter.

litellm is imported lazily (importing it takes seconds and, unless `LITELLM_LOCAL_MODEL_COST_MAP` is
set, downloads a cost map), and only inside this module and `embedding_litellm.py` through `import_litellm`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from services.common.gateways.instruments import LLM_CALLS, LLM_COST_USD, LLM_SECONDS, LLM_TOKENS
from services.common.gateways.llm_output import parse_json_output as parse_json_output
from services.common.gateways.llm_output import schema_instruction as schema_instruction
from services.common.gateways.llm_output import strip_code_fences as strip_code_fences
from services.common.gateways.llm_output import with_schema_instruction
from services.common.gateways.llm_retry import AttemptTally as AttemptTally
from services.common.gateways.llm_retry import InvalidOutput as InvalidOutput
from services.common.gateways.llm_retry import LlmError as LlmError
from services.common.gateways.llm_retry import LlmNotConfigured as LlmNotConfigured
from services.common.gateways.llm_retry import LlmOutputInvalid as LlmOutputInvalid
from services.common.gateways.llm_retry import LlmRequestRejected as LlmRequestRejected
from services.common.gateways.llm_retry import LlmUnavailable as LlmUnavailable
from services.common.gateways.llm_retry import ProgressCallback as ProgressCallback
from services.common.gateways.llm_retry import RetryPolicy as RetryPolicy
from services.common.gateways.llm_retry import call_with_retries as call_with_retries
from services.common.gateways.llm_retry import classify_exception as classify_exception

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")

_tracer = trace.get_tracer(__name__)


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

    def _completion_kwargs(self, model: str, prompt: list[dict[str, str]], timeout_s: float) -> dict[str, Any]:
        c = self._config
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
        return kwargs

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

        One client span per call (all attempts), with the GenAI semantic-convention attributes, the
        cost and the purpose; never the prompt or the answer (they are memory text).
        """
        model = self._config.model or "none"
        # The exception is not recorded: its message may quote the model's output (memory text).
        with _tracer.start_as_current_span(
            f"chat {model}", kind=SpanKind.CLIENT, record_exception=False, set_status_on_exception=False
        ) as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": model.split("/", 1)[0] if "/" in model else "litellm",
                    "gen_ai.request.model": model,
                    "tiermem.llm.purpose": purpose,
                }
            )
            try:
                result = await self._complete_json(
                    messages, schema, on_progress=on_progress, purpose=purpose, include_schema=include_schema
                )
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR))
                LLM_CALLS.labels(purpose=purpose, outcome=type(exc).__name__).inc()
                raise
            _count_usage(purpose, result)
            span.set_attributes(
                {
                    "gen_ai.response.model": result.model,
                    "gen_ai.usage.input_tokens": result.prompt_tokens,
                    "gen_ai.usage.output_tokens": result.completion_tokens,
                    "tiermem.llm.cost_usd": result.cost_usd,
                    "tiermem.llm.attempts": result.attempts,
                }
            )
            return result

    async def _complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        on_progress: ProgressCallback | None,
        purpose: str,
        include_schema: bool,
    ) -> LlmResult[T]:
        model = self._config.model
        if model is None:
            raise LlmNotConfigured(f"{purpose}: no LLM model is configured (offline mode)")
        litellm = import_litellm()
        prompt = with_schema_instruction(messages, schema) if include_schema else messages
        tally = AttemptTally()
        started = time.monotonic()

        async def attempt(timeout_s: float) -> tuple[T, str]:
            response = await litellm.acompletion(**self._completion_kwargs(model, prompt, timeout_s))
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


def _count_usage(purpose: str, result: LlmResult[Any]) -> None:
    LLM_CALLS.labels(purpose=purpose, outcome="ok").inc()
    LLM_TOKENS.labels(purpose=purpose, model=result.model, direction="input").inc(result.prompt_tokens)
    LLM_TOKENS.labels(purpose=purpose, model=result.model, direction="output").inc(result.completion_tokens)
    LLM_COST_USD.labels(purpose=purpose, model=result.model).inc(max(result.cost_usd, 0.0))
    LLM_SECONDS.labels(purpose=purpose).observe(result.latency_s)


def build_llm_gateway(config: BaseModel, usage: UsageRecorder | None = None) -> LlmGateway:
    """A gateway from an `LlmConfig` or any settings model with the same field names (e.g. LlmSettings);
    fields the settings do not have keep LlmConfig's defaults."""
    llm_config = config if isinstance(config, LlmConfig) else LlmConfig.model_validate(config.model_dump())
    return LlmGateway(llm_config, usage)
