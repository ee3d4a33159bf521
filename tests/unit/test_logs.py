"""The logging set-up (issue 15): JSON lines with the current span's ids, unknown
TIERMEM_LOG_LEVEL / TIERMEM_LOG_FORMAT values fall back with a warning instead of stopping, and
arguments marked sensitive (memory and model text) are redacted unless TIERMEM_LOG_CONTENT is on."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from services.common.domain.sensitive import sensitive
from services.common.runtime.logs import configure_logging, configure_logging_from_env, configure_logging_leniently
from services.common.runtime.telemetry import tracer_provider


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_the_span_ids(restore_root: None) -> None:
    buffer = io.StringIO()
    configure_logging("INFO", "json", stream=buffer)
    configure_logging("INFO", "json", stream=buffer)  # idempotent: one handler, lines not doubled
    log = logging.getLogger("tiermem.test")
    log.info("outside")
    with tracer_provider().get_tracer("test").start_as_current_span("work") as span:
        log.warning("inside %s", "a span")
        context = span.get_span_context()
    outside, inside = (json.loads(line) for line in buffer.getvalue().splitlines())
    assert "trace_id" not in outside and outside["level"] == "INFO"
    assert inside["message"] == "inside a span"
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")


def test_unknown_level_and_format_fall_back_with_a_warning(
    restore_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging_leniently("loud", "xml")
    assert logging.getLogger().level == logging.WARNING
    err = capsys.readouterr().err
    assert "TIERMEM_LOG_LEVEL='LOUD' is not a level" in err and "TIERMEM_LOG_FORMAT='xml'" in err
    configure_logging_leniently("debug", "JSON")
    assert logging.getLogger().level == logging.DEBUG


@pytest.mark.parametrize("log_content", [False, True])
def test_sensitive_arguments_show_only_when_content_logging_is_on(restore_root: None, log_content: bool) -> None:
    buffer = io.StringIO()
    configure_logging("INFO", "json", stream=buffer, log_content=log_content)
    log = logging.getLogger("tiermem.test")
    log.warning("dead-lettered seq=%s: %s", 7, sensitive("model said: my PIN is 4921", kept_in="the record"))
    log.warning("mapping %(reason)r", {"reason": sensitive("my PIN is 4921")})
    first, second = (json.loads(line)["message"] for line in buffer.getvalue().splitlines())
    if log_content:
        assert (first, second) == ("dead-lettered seq=7: model said: my PIN is 4921", "mapping 'my PIN is 4921'")
    else:
        assert (
            first
            == "dead-lettered seq=7: <redacted 26 chars; full text in the record; TIERMEM_LOG_CONTENT=true logs it>"
        )
        assert "4921" not in second and "<redacted 14 chars" in second


def test_a_foreign_handler_sees_the_redaction(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        logging.getLogger("tiermem.test").warning("reason: %s", sensitive("my PIN is 4921"))
    assert "4921" not in caplog.text and "<redacted 14 chars" in caplog.text


@pytest.mark.parametrize(("value", "shown"), [("true", True), ("1", True), ("", False), ("false", False)])
def test_log_content_from_the_environment(
    restore_root: None, monkeypatch: pytest.MonkeyPatch, value: str, shown: bool
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a CLI process: nobody else configured the root logger
    monkeypatch.setenv("TIERMEM_LOG_CONTENT", value)
    monkeypatch.setenv("TIERMEM_LOG_FORMAT", "json")
    configure_logging_from_env()
    (handler,) = root.handlers
    record = logging.LogRecord("tiermem.test", logging.WARNING, __file__, 1, "%s", (sensitive("PIN 4921"),), None)
    assert handler.filter(record)
    assert ("4921" in handler.format(record)) is shown
