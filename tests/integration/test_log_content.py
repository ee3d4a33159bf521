"""Memory and model text in logs only on request (issue 15): a model answer that fails validation
is dead-lettered with a reason quoting it; the WARNING the consumer logs (captured as JSON, through
the real pipeline: nats-server, FalkorDB, Qdrant Edge, litellm's HTTP path to the LLM stub) shows
the reason redacted unless `TIERMEM_LOG_CONTENT` is on. The dead-letter record keeps it either way."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from contracts import DeadLetterRecord, Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import start_services
from services.common.runtime.broker import connect_nats
from services.common.runtime.logs import configure_logging
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import session_event
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]

MODEL_ANSWER = "Sure! The user's locker code is 4921 and she keeps it under the blue vase."


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield io.StringIO()
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


async def _dead_letters(settings: TierMemSettings) -> list[DeadLetterRecord]:
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "test-dlq-reader", bounded=True)
    try:
        js = client.jetstream()
        subscription = await js.pull_subscribe(subjects.all_dead_letters(), stream=subjects.dead_letter_stream)
        messages = await subscription.fetch(10, timeout=5)
        return [DeadLetterRecord.model_validate_json(message.data) for message in messages]
    finally:
        await client.close()


@pytest.mark.parametrize("log_content", [False, True], ids=["redacted", "opted-in"])
async def test_a_dead_letter_quoting_model_output_logs_it_only_when_opted_in(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer, captured: io.StringIO, log_content: bool
) -> None:
    llm = LlmSettings(model=STUB_MODEL, api_base=llm_stub.api_base, api_key=SecretStr(STUB_API_KEY), max_attempts=1)
    settings = stack_settings.model_copy(update={"llm": llm})
    configure_logging("INFO", "json", stream=captured, log_content=log_content)
    llm_stub.push_chat_content(MODEL_ANSWER)  # not the JSON object the summary schema asks for
    running = await start_services(settings, [EPISODIC])
    try:
        await publish(settings, session_event(texts=["Remember my locker code, please."]))
        await wait_until_idle(settings, [EPISODIC], timeout_s=120)
    finally:
        await running.stop()

    (record,) = await _dead_letters(settings)
    assert "locker code is 4921" in record.reason, "the dead-letter record keeps the reason for the operator"
    lines: list[dict[str, Any]] = [json.loads(line) for line in captured.getvalue().splitlines()]
    (warning,) = [line for line in lines if line["message"].startswith("dead-lettered ")]
    assert warning["level"] == "WARNING" and warning.get("trace_id"), "the line joins the session's trace"
    if log_content:
        assert "locker code is 4921" in warning["message"]
    else:
        assert "<redacted " in warning["message"] and "full text in the dead-letter record" in warning["message"]
        leaks = [line["message"] for line in lines if "4921" in line["message"] or "blue vase" in line["message"]]
        assert leaks == [], "no model output in any log line"
