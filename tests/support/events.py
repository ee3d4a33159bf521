"""Builders for test events and JetStream read-back helpers."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from contracts import SessionCompleted, Subjects
from services.common.runtime.provisioning import ConsumerSpec


def session_consumer(subjects: Subjects, durable: str) -> ConsumerSpec:
    """A durable consumer of every SessionCompleted, as a test's own service would declare it."""
    return ConsumerSpec(
        durable=durable,
        stream=subjects.session_stream,
        filter_subjects=(subjects.all_session_completed(),),
        description=f"test consumer {durable}",
    )


def session_event(
    *,
    tenant_id: str = "acme",
    user_id: str = "alice",
    session_id: str | None = None,
    texts: list[str] | None = None,
    channel: str = "private",
    scope: str = "personal",
    ended_at: datetime | None = None,
    locale: str | None = None,
    event_id: uuid.UUID | None = None,
) -> SessionCompleted:
    ended = ended_at or datetime(2026, 5, 2, 10, 0, tzinfo=UTC)
    texts = texts or [
        "We decided to ship the DGIA billing service in Go by June 30.",
        "Noted. I will prepare the migration plan for the DGIA billing service.",
    ]
    roles = ["user", "assistant"]
    return SessionCompleted.model_validate(
        {
            "event_id": str(event_id or uuid.uuid4()),
            "tenant_id": tenant_id,
            "user_id": user_id,
            "agent_id": "agent-1",
            "session_id": session_id or f"s-{uuid.uuid4().hex[:8]}",
            "channel": channel,
            "scope": scope,
            "started_at": (ended - timedelta(minutes=10)).isoformat(),
            "ended_at": ended.isoformat(),
            "locale": locale,
            "messages": [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)],
        }
    )


async def stream_messages(js: JetStreamContext, stream: str, subject_filter: str | None = None) -> list[Any]:
    """Every message currently stored in `stream` (optionally only one subject filter)."""
    info = await js.stream_info(stream)
    found: list[Any] = []
    if info.state.messages == 0:
        return found
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(stream, seq)
        except NotFoundError:
            continue
        if subject_filter is None or _matches(subject_filter, msg.subject or ""):
            found.append(msg)
    return found


def _matches(pattern: str, subject: str) -> bool:
    p_parts, s_parts = pattern.split("."), subject.split(".")
    for index, token in enumerate(p_parts):
        if token == ">":
            return len(s_parts) > index
        if index >= len(s_parts) or (token != "*" and token != s_parts[index]):
            return False
    return len(p_parts) == len(s_parts)


def decoded(messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.data) for m in messages]


async def wait_for(
    probe: Callable[[], Awaitable[Any]], *, timeout_s: float = 30.0, interval_s: float = 0.05, what: str = "condition"
) -> Any:
    """Poll `probe` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")
