"""Answer-level LoCoMo evaluation (`tiermem eval locomo --answer-model MODEL`): after the retrieval
run, each selected question is answered twice by the model, with the memory tiermem injects and
without any, and both answers are judged against the gold answer; the with-memory answer is also
judged for reflection (did it use an injected item). Prompts, rubrics and the J protocol they follow:
`answer_prompts.py`; scoring and the report section: `answer_report.py`.

The memory is what a user's agent gets: L0 `recall/auto` with the question as the message (its
`## Memory Context` section, unchanged), optionally followed by the L1 `memory_search` top-k
episodes. It is asked again here, on the same stores, after the retrieval metrics were taken.

Every model call goes through the project's LLM gateway (litellm, bounded retries on rate limits,
server errors, timeouts and output that does not validate; per-purpose tokens and cost). Calls are
limited to `concurrency` in flight. An answer call that fails for good marks that answer `failed`; a
judge call that fails or never gives a valid label marks it `unjudged`; both are counted, neither
stops the run. A
request the provider refuses (bad key, unknown model: every later call would fail the same way)
stops the answer stage and the section says why; the retrieval report stands.

When L0 injects nothing, the with-memory prompt is the without-memory prompt: it is asked once and
the result counts for both conditions (and the reflection is `no_memory`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from tiermem_lab.evaluation.answer_prompts import (
    GeneratedAnswer,
    JudgeVerdict,
    ReflectionVerdict,
    answer_messages,
    judge_messages,
    reflection_messages,
)
from tiermem_lab.evaluation.answer_report import (
    AnswerOutcome,
    JudgedAnswer,
    Reflection,
    RoleUsage,
    build_answers_section,
)
from tiermem_lab.evaluation.locomo import ADVERSARIAL, LocomoQuestion, LocomoSample

if TYPE_CHECKING:
    from rich.progress import Progress

    from services.common.gateways.llm import LlmConfig, LlmGateway
    from tiermem_lab.evaluation.harness import EvalStack

T = TypeVar("T", bound=BaseModel)

DEFAULT_CONCURRENCY = 4
ANSWER_MAX_TOKENS = 200
JUDGE_MAX_TOKENS = 300
L1_HEADING = "## Related episodes (search)"


class AnswerSetupError(ValueError):
    """The answer model cannot be used as configured (unknown provider, missing credentials)."""


class AnswerStageAborted(Exception):
    """The provider refused a request: every later call would be refused too."""


@dataclass(frozen=True)
class TokenPrice:
    """USD per token, prompt and completion (overrides litellm's cost map)."""

    input_per_token: float
    output_per_token: float

    @classmethod
    def per_million(cls, text: str) -> TokenPrice:
        """ "0.15,0.60" (USD per million prompt and completion tokens)."""
        parts = [part.strip() for part in text.split(",")]
        try:
            values = [float(part) for part in parts]
        except ValueError:
            values = []
        if len(values) != 2 or min(values) < 0:
            raise AnswerSetupError(
                f"a price is two non-negative numbers IN,OUT in USD per million tokens, not {text!r}"
            )
        return cls(values[0] / 1e6, values[1] / 1e6)


@dataclass(frozen=True)
class AnswerEvalConfig:
    answer_model: str
    judge_model: str | None = None  # None: the answer model judges (the papers used one model for both)
    api_base: str | None = None  # the answer model's; the judge's too when it is the same model
    price: TokenPrice | None = None  # the answer model's; the judge's too when it is the same model
    limit: int | None = None  # questions answered in all (spread over categories), None: every one asked
    concurrency: int = DEFAULT_CONCURRENCY
    l1_k: int = 0  # also show the L1 top-k episodes after the L0 section (0: L0 only, as agents get it)
    timeout_s: float = 60.0
    max_attempts: int = 3

    @property
    def judged_by(self) -> str:
        return self.judge_model or self.answer_model

    def llm_config(self, role: str) -> LlmConfig:
        from services.common.gateways.llm import LlmConfig

        same = role == "answer" or self.judged_by == self.answer_model
        price = self.price if same else None
        return LlmConfig(
            model=self.answer_model if role == "answer" else self.judged_by,
            api_base=self.api_base if same else None,
            timeout_s=self.timeout_s,
            max_attempts=self.max_attempts,
            temperature=0.0,
            max_tokens=ANSWER_MAX_TOKENS if role == "answer" else JUDGE_MAX_TOKENS,
            input_cost_per_token=price.input_per_token if price else None,
            output_cost_per_token=price.output_per_token if price else None,
        )


def check_models(config: AnswerEvalConfig) -> None:
    """Fail before the (long) retrieval run when a model's provider is unknown or its key is missing."""
    from services.common.gateways.llm import import_litellm

    litellm = import_litellm()
    for role in ("answer", "judge"):
        llm = config.llm_config(role)
        try:
            litellm.get_llm_provider(llm.model, api_base=llm.api_base)
        except Exception as exc:
            raise AnswerSetupError(
                f"{role} model {llm.model!r}: litellm does not know its provider; name it as provider/model, "
                "e.g. openai/gpt-4o-mini"
            ) from exc
        missing = litellm.validate_environment(model=llm.model, api_base=llm.api_base).get("missing_keys") or []
        if missing:
            raise AnswerSetupError(f"{role} model {llm.model!r} needs {', '.join(missing)} in the environment")


def cost_source(llm: LlmConfig) -> str:
    """Where the reported cost comes from: the price given, litellm's cost map, or nowhere (0)."""
    if llm.input_cost_per_token is not None or llm.output_cost_per_token is not None:
        return "price given with --answer-price"
    from services.common.gateways.llm import import_litellm

    try:
        import_litellm().get_model_info(llm.model)
    except Exception:
        return "unknown: not in litellm's cost map, counted as 0; give --answer-price"
    return "litellm cost map"


def spread_over_categories(questions: Sequence[tuple[LocomoSample, LocomoQuestion]], limit: int | None) -> list[int]:
    """Indexes of `limit` questions taken round-robin over categories (each in file order), so a cheap
    run still covers every category; all of them, in order, without a limit."""
    if limit is None or limit >= len(questions):
        return list(range(len(questions)))
    by_category: dict[int, list[int]] = defaultdict(list)
    for index, (_, question) in enumerate(questions):
        by_category[question.category].append(index)
    queues = [by_category[c] for c in sorted(by_category)]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < limit:
        for queue in queues:
            if depth < len(queue) and len(chosen) < limit:
                chosen.append(queue[depth])
        depth += 1
    return sorted(chosen)


@dataclass(frozen=True)
class ShownMemory:
    """The memory text the with-memory answer got, and its item lines (numbered for the reflection rubric)."""

    text: str
    items: tuple[str, ...]


async def recall_memory(stack: EvalStack, user_id: str, question: str, l1_k: int) -> ShownMemory:
    """L0's section as injected, then (with `l1_k`) the L1 episodes it does not already hold."""
    from services.recall_api.retrieval.memory_section import render_item

    auto = await stack.recall.auto(user_id, question)
    text = auto.section
    items = [line for line in auto.section.splitlines() if line.startswith("- ")]
    if l1_k > 0:
        found = await stack.recall.search(user_id, question, limit=l1_k)
        shown = {item.id for item in auto.items}
        extra = [
            render_item(item.abstract, (item.occurred_at or "")[:10] or None)
            for item in found.items
            if item.id not in shown
        ]
        if extra:
            text = "\n\n".join(part for part in (text, "\n".join([L1_HEADING, "```memory", *extra, "```"])) if part)
            items.extend(extra)
    return ShownMemory(text, tuple(items))


class AnswerRunner:
    """The model calls of the answer stage, bounded in flight, with failures turned into labels."""

    def __init__(self, config: AnswerEvalConfig, answerer: LlmGateway, judge: LlmGateway) -> None:
        self.config = config
        self.answerer = answerer
        self.judge = judge
        self._in_flight = asyncio.Semaphore(max(1, config.concurrency))
        self.aborted: str | None = None

    async def _call(self, gateway: LlmGateway, messages: list[dict[str, str]], schema: type[T], purpose: str) -> T:
        from services.common.gateways.llm import LlmRequestRejected

        async with self._in_flight:
            if self.aborted is not None:
                raise AnswerStageAborted(self.aborted)
            try:
                return (await gateway.complete_json(messages, schema, purpose=purpose)).value
            except LlmRequestRejected as exc:
                self.aborted = self.aborted or f"{purpose}: the provider refused the request: {exc.reason}"
                raise AnswerStageAborted(self.aborted) from exc

    async def answer_and_judge(
        self, sample: LocomoSample, question: LocomoQuestion, memory: str | None, condition: str
    ) -> JudgedAnswer:
        from services.common.gateways.llm import LlmError

        speakers = (sample.speaker_a, sample.speaker_b)
        try:
            generated = await self._call(
                self.answerer,
                answer_messages(question.question, memory, speakers),
                GeneratedAnswer,
                f"eval_answer_{condition}",
            )
        except LlmError as exc:
            return JudgedAnswer(answer=None, label="failed", note=exc.reason)
        messages = judge_messages(
            question.question, question.answer, generated.answer, adversarial=question.category == ADVERSARIAL
        )
        try:
            verdict = await self._call(self.judge, messages, JudgeVerdict, f"eval_judge_{condition}")
        except LlmError as exc:
            return JudgedAnswer(answer=generated.answer, label="unjudged", note=exc.reason)
        return JudgedAnswer(
            answer=generated.answer, label="correct" if verdict.label == "CORRECT" else "wrong", note=verdict.reason
        )

    async def reflect(
        self, question: LocomoQuestion, memory: ShownMemory, answered: JudgedAnswer
    ) -> tuple[Reflection, tuple[int, ...], str]:
        from services.common.gateways.llm import LlmError

        if not memory.items:
            return "no_memory", (), ""
        if answered.answer is None:
            return "failed", (), "no answer to judge"
        messages = reflection_messages(memory.items, question.question, answered.answer)
        try:
            verdict = await self._call(self.judge, messages, ReflectionVerdict, "eval_reflection")
        except LlmError as exc:
            return "unjudged", (), exc.reason
        used = tuple(sorted({n for n in verdict.used_items if 1 <= n <= len(memory.items)}))
        return ("used" if verdict.uses_memory else "not_used"), used, verdict.reason

    async def evaluate(self, stack: EvalStack, sample: LocomoSample, question: LocomoQuestion) -> AnswerOutcome:
        memory = await recall_memory(stack, sample.user_id, question.question, self.config.l1_k)
        if memory.text:
            with_memory, without_memory = await asyncio.gather(
                self.answer_and_judge(sample, question, memory.text, "with_memory"),
                self.answer_and_judge(sample, question, None, "without_memory"),
            )
        else:
            # Nothing injected: the with-memory prompt is the without-memory prompt; ask it once.
            without_memory = await self.answer_and_judge(sample, question, None, "without_memory")
            with_memory = without_memory
        reflection, used, note = await self.reflect(question, memory, with_memory)
        return AnswerOutcome(
            sample_id=sample.sample_id,
            number=question.number,
            category=question.category,
            question=question.question,
            gold=question.answer,
            injected=len(memory.items),
            with_memory=with_memory,
            without_memory=without_memory,
            reflection=reflection,
            used_items=used,
            reflection_note=note,
        )


def _progress_step(progress: Progress | None, total: int) -> Callable[[], None]:
    if progress is None:
        return lambda: None
    task = progress.add_task("answering and judging", total=total)
    return lambda: progress.advance(task)


async def _run_all(
    runner: AnswerRunner,
    stack: EvalStack,
    chosen: Sequence[tuple[LocomoSample, LocomoQuestion]],
    advance: Callable[[], None],
) -> list[AnswerOutcome]:
    """Every chosen question, `concurrency` at a time; stops early (keeping what finished) when aborted."""
    outcomes: list[AnswerOutcome] = []
    in_progress = asyncio.Semaphore(max(1, runner.config.concurrency))

    async def one(sample: LocomoSample, question: LocomoQuestion) -> None:
        async with in_progress:
            if runner.aborted is not None:
                return
            try:
                outcomes.append(await runner.evaluate(stack, sample, question))
            except AnswerStageAborted:
                return
            advance()

    await asyncio.gather(*(one(sample, question) for sample, question in chosen))
    order = {(sample.sample_id, question.number): i for i, (sample, question) in enumerate(chosen)}
    return sorted(outcomes, key=lambda o: order[(o.sample_id, o.number)])


async def run_answer_eval(
    stack: EvalStack,
    samples: Sequence[LocomoSample],
    config: AnswerEvalConfig,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Answer, judge and score; returns the report's `answers` section (`answer_report.build_answers_section`)."""
    from services.common.gateways.llm import LlmGateway

    questions = [(sample, question) for sample in samples for question in sample.questions]
    chosen = [questions[i] for i in spread_over_categories(questions, config.limit)]
    answer_llm, judge_llm = config.llm_config("answer"), config.llm_config("judge")
    answerer, judge = LlmGateway(answer_llm), LlmGateway(judge_llm)
    runner = AnswerRunner(config, answerer, judge)
    try:
        outcomes = await _run_all(runner, stack, chosen, _progress_step(progress, len(chosen)))
    finally:
        await answerer.aclose()
    usage = {
        "answer": RoleUsage(str(answer_llm.model), answerer.usage.snapshot(), cost_source(answer_llm)),
        "judge": RoleUsage(str(judge_llm.model), judge.usage.snapshot(), cost_source(judge_llm)),
    }
    memory = "L0 recall/auto section" + (f" + L1 memory_search top {config.l1_k} episodes" if config.l1_k else "")
    meta = {
        "answer_model": config.answer_model,
        "judge_model": config.judged_by,
        "memory": memory,
        "limit": config.limit,
        "questions_available": len(questions),
        "concurrency": config.concurrency,
        "protocol": "J: Mem0 paper LLM-as-a-judge (CORRECT/WRONG, categories 1-4); see answer_prompts.py",
        "aborted": runner.aborted,
    }
    return build_answers_section(outcomes, usage, meta=meta)
