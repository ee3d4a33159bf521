"""The logging set-up (issue 15): JSON lines with the current span's ids, and unknown
TIERMEM_LOG_LEVEL / TIERMEM_LOG_FORMAT values fall back with a warning instead of stopping."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from services.common.runtime.logs import configure_logging, configure_logging_leniently
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
