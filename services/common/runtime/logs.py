"""Process-wide logging set-up: one handler on the root logger, plain text for a console or one
JSON object per line for a log pipeline (`TIERMEM_LOG_FORMAT=json`), at `TIERMEM_LOG_LEVEL`.

Memory, prompt and model text is logged only with `TIERMEM_LOG_CONTENT=true`: call sites mark such
arguments with `sensitive(...)` (domain/sensitive.py), which render as a redaction unless this
handler's `ContentFilter` is told to show them.

Every record carries the trace and span ids of the span it was logged in (a filter copies them at
the call, in the caller's context), so a log line of a handler joins its session's trace. The
stdlib is enough here (structlog is not a dependency): the records already have everything but
the ids."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal

from opentelemetry import trace

from services.common.domain.sensitive import CONTENT_SETTING, SensitiveText

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_MARK = "_tiermem_handler"


class TraceContextFilter(logging.Filter):
    """Adds `trace_id` and `span_id` (hex, "" outside a span) to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        record.trace_id = format(context.trace_id, "032x") if context.is_valid else ""
        record.span_id = format(context.span_id, "016x") if context.is_valid else ""
        return True


class ContentFilter(logging.Filter):
    """With content logging on, replaces `SensitiveText` arguments by their text (the record is
    shared, so every handler then shows it, as the operator asked); off, they keep rendering as
    redactions."""

    def __init__(self, show_content: bool) -> None:
        super().__init__()
        self.show_content = show_content

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.show_content or not record.args:
            return True
        if isinstance(record.args, Mapping):
            record.args = {key: _revealed(value) for key, value in record.args.items()}
        else:
            record.args = tuple(_revealed(value) for value in record.args)
        return True


def _revealed(value: object) -> object:
    return value.text if isinstance(value, SensitiveText) else value


def content_logging_from_env() -> bool:
    """`TIERMEM_LOG_CONTENT` as a boolean (pydantic's spellings of true: 1, true, yes, on)."""
    return os.environ.get(CONTENT_SETTING, "").strip().lower() in {"1", "true", "yes", "on"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, trace and span ids,
    and the exception's type and traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace_id = getattr(record, "trace_id", "")
        if trace_id:
            entry["trace_id"] = trace_id
            entry["span_id"] = getattr(record, "span_id", "")
        if record.exc_info:
            entry["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(
    level: str | int = "WARNING",
    log_format: LogFormat = "text",
    stream: IO[str] | None = None,
    *,
    log_content: bool = False,
) -> None:
    """Install (or replace) tiermem's handler on the root logger. Idempotent: a second call swaps
    the handler, so the last caller's level, format and content choice win and lines are never
    written twice. `log_content` shows the arguments marked sensitive (memory and model text)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(TraceContextFilter())
    handler.addFilter(ContentFilter(log_content))
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def configure_logging_from_env(verbose: bool = False) -> None:
    """The CLI's set-up, before any settings are loaded: `TIERMEM_LOG_LEVEL` (default WARNING;
    `--verbose` means INFO), `TIERMEM_LOG_FORMAT` (text or json) and `TIERMEM_LOG_CONTENT`
    (memory and model text in log lines; default off). Like `logging.basicConfig`,
    it leaves a root logger that someone else configured alone (pytest's capture, an embedding
    application)."""
    if any(not getattr(handler, _HANDLER_MARK, False) for handler in logging.getLogger().handlers):
        return
    level = "INFO" if verbose else os.environ.get("TIERMEM_LOG_LEVEL") or "WARNING"
    configure_logging_leniently(level, os.environ.get("TIERMEM_LOG_FORMAT") or "text", content_logging_from_env())


def configure_logging_leniently(level: str, log_format: str, log_content: bool = False) -> None:
    """`configure_logging` from settings values: a value it does not know falls back to the
    default with a warning instead of stopping the process."""
    level, log_format = level.upper(), log_format.lower()
    problems = []
    if level not in logging.getLevelNamesMapping():
        problems.append(f"TIERMEM_LOG_LEVEL={level!r} is not a level; using WARNING")
        level = "WARNING"
    if log_format not in ("text", "json"):
        problems.append(f"TIERMEM_LOG_FORMAT={log_format!r} is neither text nor json; using text")
        log_format = "text"
    configure_logging(level, "json" if log_format == "json" else "text", log_content=log_content)
    for problem in problems:
        logging.getLogger(__name__).warning(problem)
