"""One trace per session across every hop (issue 15): a session ingested through the real
pipeline (real nats-server, FalkorDB, Qdrant Edge, litellm's HTTP path to the local LLM stub)
leaves one connected trace covering every consumer, with GenAI token/cost attributes on the LLM
spans and no memory text, tenant id or user id in any span name or attribute (subjects appear as
templates unless `record_owner_ids` is on); its JSON logs carry the same trace id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import SecretStr

from services.cli.consolidation import wait_until_idle
from services.cli.stack import start_services
from services.common.runtime.logs import configure_logging
from services.common.runtime.resources import Resources
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.common.runtime.telemetry import tracer_provider
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import session_event
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]

TEXTS = [
    "We decided to build the DGIA billing service in Go. I live in Seoul.",
    "Understood: the DGIA billing service will be written in Go.",
]
SUMMARY = "Alice decided to build the DGIA billing service in Go."
TENANT, USER = "acme", "alice"
SESSION_SPAN = "session.completed.v1.{tenant}.{user} create"  # the subject's template, not its owner
FACT_TEXT = "The user lives in Seoul."
_EXPORTER = InMemorySpanExporter()
_ATTACHED: list[bool] = []


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's global tracer provider (the one the root installs) with an in-memory exporter."""
    if not _ATTACHED:
        tracer_provider().add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _ATTACHED.append(True)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _with_llm(settings: TierMemSettings, stub: LlmStubServer) -> TierMemSettings:
    llm = LlmSettings(
        model=STUB_MODEL,
        api_base=stub.api_base,
        api_key=SecretStr(STUB_API_KEY),
        timeout_s=10,
        max_attempts=1,
        input_cost_per_token=0.000001,
        output_cost_per_token=0.000002,
    )
    return settings.model_copy(update={"llm": llm})


def _script_llm(stub: LlmStubServer) -> None:
    stub.push_chat_json({"summary": SUMMARY, "entity_names": ["DGIA"]}, prompt_tokens=120, completion_tokens=30)
    stub.push_chat_json(
        {
            "entities": [{"name": "DGIA", "type": "project"}, {"name": "Go", "type": "technology"}],
            "relations": [{"source": "DGIA", "type": "uses", "target": "Go"}],
            "facts": [{"subject": "user", "attribute": "lives_in", "value": "Seoul", "text": FACT_TEXT}],
        },
        prompt_tokens=200,
        completion_tokens=50,
    )


def _attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def _attribute_texts(span: ReadableSpan) -> list[str]:
    values = list((span.attributes or {}).values())
    for event in span.events:
        values.extend((event.attributes or {}).values())
    return [str(value) for value in values]


def _span_texts(span: ReadableSpan) -> list[str]:
    """Everything a tracing backend receives about a span in text: its name, its events' names,
    the attributes' keys and values and the status description."""
    texts = [span.name, *(event.name for event in span.events), *(span.attributes or {}).keys()]
    texts += _attribute_texts(span)
    if span.status.description:
        texts.append(span.status.description)
    return texts


async def test_one_session_is_one_trace_with_llm_usage_and_no_text(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer, spans: InMemorySpanExporter
) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    _script_llm(llm_stub)
    running = await start_services(settings, [EPISODIC, SEMANTIC, DEDUP])
    try:
        await publish(settings, session_event(texts=TEXTS))
        await wait_until_idle(settings, [EPISODIC, SEMANTIC, DEDUP], timeout_s=120)
    finally:
        await running.stop()
    finished = spans.get_finished_spans()
    (root,) = [span for span in finished if span.name.endswith(SESSION_SPAN)]
    trace_id = root.context.trace_id
    in_trace = [span for span in finished if span.context.trace_id == trace_id]

    handled = {_attrs(span)["messaging.consumer.group.name"] for span in in_trace if span.name.startswith("handle ")}
    assert handled == {"episodic-summarizer", "semantic-extractor", "dedup"}, "every consumer, in the session's trace"
    stray = [span.name for span in finished if span.name.startswith(("handle ", "chat ")) and span not in in_trace]
    assert stray == [], "no handler or LLM span of this session outside its trace"
    ids = {span.context.span_id for span in in_trace}
    orphans = [
        span.name for span in in_trace if span is not root and (span.parent is None or span.parent.span_id not in ids)
    ]
    assert orphans == [], "the trace is connected: every span's parent is in it"
    assert any(span.name.endswith(" vector") for span in in_trace), "vector store calls are spans"
    assert any(span.name.endswith(" graph") for span in in_trace), "graph calls are spans"
    assert any(span.name.startswith("embeddings ") for span in in_trace), "embedding batches are spans"

    usage = {_attrs(span)["tiermem.llm.purpose"]: _attrs(span) for span in in_trace if span.name.startswith("chat ")}
    assert set(usage) == {"episode_summary", "semantic_extraction"}
    summary = usage["episode_summary"]
    assert summary["gen_ai.operation.name"] == "chat"
    assert summary["gen_ai.request.model"] == STUB_MODEL
    assert (summary["gen_ai.usage.input_tokens"], summary["gen_ai.usage.output_tokens"]) == (120, 30)
    assert summary["tiermem.llm.cost_usd"] == pytest.approx(120 * 0.000001 + 30 * 0.000002)
    extraction = usage["semantic_extraction"]
    assert (extraction["gen_ai.usage.input_tokens"], extraction["gen_ai.usage.output_tokens"]) == (200, 50)
    assert extraction["tiermem.llm.cost_usd"] == pytest.approx(200 * 0.000001 + 50 * 0.000002)

    assert {_attrs(span).get("messaging.destination.name") for span in in_trace} >= {
        f"{settings.nats.subject_root}.session.completed.v1.{{tenant}}.{{user}}",
        f"{settings.nats.subject_root}.episode.created.v1.{{tenant}}.{{user}}",
        f"{settings.nats.subject_root}.entity.upserted.v1.{{tenant}}.{{user}}",
    }, "the publish spans name each hop's subject as its template"
    secrets = ["Seoul", "billing service", "written in Go", SUMMARY, FACT_TEXT, TENANT, USER]
    leaks = [(span.name, text) for span in finished for text in _span_texts(span) if any(s in text for s in secrets)]
    assert leaks == [], "no memory or prompt text and no tenant or user id in any span name or attribute"


async def test_owner_ids_stay_in_nats_spans_only_when_opted_in(
    stack_settings: TierMemSettings, spans: InMemorySpanExporter
) -> None:
    telemetry = stack_settings.telemetry.model_copy(update={"record_owner_ids": True})
    settings = stack_settings.model_copy(update={"telemetry": telemetry})
    running = await start_services(settings, [EPISODIC])  # no LLM configured: the offline summary
    try:
        await publish(settings, session_event(texts=TEXTS))
        await wait_until_idle(settings, [EPISODIC], timeout_s=120)
    finally:
        await running.stop()
    subject = f"{settings.nats.subject_root}.session.completed.v1.{TENANT}.{USER}"
    names = {span.name for span in spans.get_finished_spans()}
    assert {f"{subject} create", f"{subject} publish", f"{subject} process"} <= names
    produced = {_attrs(span).get("messaging.destination.name") for span in spans.get_finished_spans()}
    assert f"{settings.nats.subject_root}.episode.created.v1.{TENANT}.{USER}" in produced


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """tiermem's JSON log handler at INFO into a buffer; the root logger is restored after."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    buffer = io.StringIO()
    configure_logging("INFO", "json", stream=buffer)
    yield buffer
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


async def test_logs_of_one_ingest_are_json_with_the_session_trace_id(
    stack_settings: TierMemSettings,
    llm_stub: LlmStubServer,
    spans: InMemorySpanExporter,
    json_logs: io.StringIO,
) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    _script_llm(llm_stub)
    running = await start_services(settings, [EPISODIC, SEMANTIC, DEDUP])
    try:
        await publish(settings, session_event(texts=TEXTS))
        await wait_until_idle(settings, [EPISODIC, SEMANTIC, DEDUP], timeout_s=120)
    finally:
        await running.stop()
    (root,) = [span for span in spans.get_finished_spans() if span.name.endswith(SESSION_SPAN)]
    session_trace = format(root.context.trace_id, "032x")

    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]  # every line parses
    assert lines, "an ingest at INFO logs something"
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    handled = [line for line in lines if " handled stream seq=" in line["message"]]
    assert {line["message"].split(" ", 1)[0] for line in handled} == {
        "episodic-summarizer",
        "semantic-extractor",
        "dedup",
    }
    assert all(line.get("trace_id") == session_trace for line in handled), "each consumer's lines join the trace"
    loud = [line for line in lines if line["level"] in ("WARNING", "ERROR", "CRITICAL")]
    assert not [line for line in loud if "alice" in line["message"] or "Seoul" in line["message"]]


async def test_recall_api_requests_are_server_spans_joining_the_callers_trace(
    stack_settings: TierMemSettings, spans: InMemorySpanExporter
) -> None:
    settings = RecallApiSettings(**stack_settings.model_dump())
    app = create_app(settings, Resources(settings))
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://recall.test") as http:
        assert (await http.get("/healthz", headers=headers)).status_code == 200
        assert (await http.get("/v1/no/such/route/acme/alice")).status_code in (401, 404)
    finished = spans.get_finished_spans()
    server = {span.name: span for span in finished if span.kind == SpanKind.SERVER}
    # One server span per request, HttpTelemetry's: FastAPI's own instrumentation (a second server span
    # and operation spans, switched on by the tracer provider) is off.
    assert len([span for span in finished if span.kind == SpanKind.SERVER]) == 2
    assert not [span.name for span in finished if span.name.startswith("fastapi.")]
    health = server["GET /healthz"]
    assert format(health.context.trace_id, "032x") == caller_trace, "the caller's traceparent is the parent"
    assert _attrs(health)["http.route"] == "/healthz" and _attrs(health)["http.response.status_code"] == 200
    unmatched = server["GET unmatched"]
    assert "alice" not in str(_attrs(unmatched)), "no raw path (it carries ids) in the span"
    assert unmatched.parent is None, "without a traceparent the request starts a trace of its own"
    assert format(unmatched.context.trace_id, "032x") != caller_trace
