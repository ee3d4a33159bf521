"""`tiermem ingest`: validate sessions from files (whole SessionCompleted records, or only `user_id` and
`messages`, completed by `contracts.session_form` with the tenant given), publish the valid ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from contracts import SessionCompleted, SizeLimits, Subjects
from contracts.session_form import SessionForm
from contracts.session_input import SessionRejected, complete_session, parse_form
from services.common.domain.ids import session_message_id
from services.common.runtime.broker import build_broker, connect_broker
from services.common.runtime.publishing import EventPublisher, PublishResult
from services.common.runtime.settings import TierMemSettings


@dataclass(frozen=True)
class Rejected:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class LoadResult:
    valid: list[tuple[Path, int, SessionCompleted]] = field(default_factory=list)
    forms: list[SessionForm] = field(default_factory=list)
    """What each valid record said, as written (parallel to `valid`): what `tiermem sessions add` sends."""
    rejected: list[Rejected] = field(default_factory=list)


def _records(path: Path, text: str) -> Iterator[tuple[int, Any] | tuple[int, Exception]]:
    """(line, parsed value) for each record of a .json (object or list) or .jsonl file; a parse
    error is yielded in place of the value."""
    if path.suffix == ".jsonl":
        for number, raw_line in enumerate(text.splitlines(), start=1):
            if not raw_line.strip():
                continue
            try:
                yield number, json.loads(raw_line)
            except json.JSONDecodeError as exc:
                yield number, ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})")
        return
    decoder = json.JSONDecoder()
    stripped_at = len(text) - len(text.lstrip())
    if not text[stripped_at:].startswith("["):
        try:
            yield text.count("\n", 0, stripped_at) + 1, json.loads(text)
        except json.JSONDecodeError as exc:
            yield exc.lineno, ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})")
        return
    position = stripped_at + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text):
            yield text.count("\n", 0, position) + 1, ValueError("invalid JSON: the list is not closed with ']'")
            return
        if text[position] == "]":
            return
        record_line = text.count("\n", 0, position) + 1
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            yield exc.lineno, ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})")
            return
        yield record_line, value


def load_sessions(paths: list[Path], limits: SizeLimits, tenant_id: str | None = None) -> LoadResult:
    """Every record of `paths`, completed (a record naming no tenant gets `tenant_id`) and checked."""
    result = LoadResult()
    for path in paths:
        if path.suffix not in (".json", ".jsonl"):
            result.rejected.append(Rejected(path, 0, "not a .json or .jsonl file"))
            continue
        try:
            raw = path.read_bytes()
        except OSError as exc:
            result.rejected.append(Rejected(path, 0, f"cannot read: {exc.strerror}"))
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            result.rejected.append(Rejected(path, line, f"invalid UTF-8 at byte {exc.start}: {exc.reason}"))
            continue
        for line, value in _records(path, text):
            if isinstance(value, Exception):
                result.rejected.append(Rejected(path, line, str(value)))
                continue
            try:
                form = parse_form(value)
                event = complete_session(form, limits, tenant_id)
            except SessionRejected as exc:
                result.rejected.append(Rejected(path, line, exc.reason))
                continue
            result.valid.append((path, line, event))
            result.forms.append(form)
    return result


@dataclass
class PublishCounts:
    published: int = 0
    duplicate: int = 0


@retry(
    retry=retry_if_exception_type((NatsError, TimeoutError, OSError)),
    wait=wait_exponential(multiplier=0.2, max=2.0),
    stop=stop_after_delay(20.0),
    reraise=True,
)
async def _publish_with_retry(publisher: EventPublisher, subjects: Subjects, event: SessionCompleted) -> PublishResult:
    """A publish that failed while the client fails over to another server (or the server restarts)
    is retried for a bounded time: safe, the message id is the owner and event id (`session_message_id`),
    so the stream stores it once."""
    return await publisher.publish(
        event,
        subjects.session_completed(event.tenant_id, event.user_id),
        msg_id=session_message_id(event),
        stream=subjects.session_stream,
    )


async def publish_sessions(
    settings: TierMemSettings, events: list[SessionCompleted], progress: Any = None
) -> PublishCounts:
    subjects = Subjects(settings.nats.subject_root)
    broker = build_broker(settings, "ingest", bounded=True)
    counts = PublishCounts()
    await connect_broker(broker, settings.nats)
    try:
        publisher = EventPublisher(broker)
        for event in events:
            result = await _publish_with_retry(publisher, subjects, event)
            if result.duplicate:
                counts.duplicate += 1
            else:
                counts.published += 1
            if progress is not None:
                progress()
    finally:
        await broker.stop()
    return counts
