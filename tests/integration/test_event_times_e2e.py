"""The instant window (contracts/times.py) end to end, on the real stack (nats-server, FalkorDB, Qdrant
Edge, the summarizer, extractor and pruner in-process behind the HTTP API): sessions at the window's
extreme edges are consolidated and readable, and every instant outside it is refused with a 422 that
names the field, on every way in (HTTP single and batch, MCP, `tiermem ingest`), before anything
reaches the stream."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.integration.test_write_api import ACME_KEY, BUSAN, REPO_ROOT, WriteStack
from tests.integration.test_write_api import write_stack as write_stack
from tests.support.events import session_event, stream_messages

pytestmark = pytest.mark.integration

TIERMEM = [sys.executable, "-m", "services.cli"]

# The window's edges, written with the most extreme offsets a timestamp can carry.
EXTREMES = [
    ("1970-01-01T00:00:00Z", "1970-01-01T00:30:00+00:30", "1970-01-01T00:10:00-00:00"),
    ("2199-12-31T23:00:00Z", "2199-12-31T23:59:59.999999Z", "2200-01-01T09:30:00+09:31"),
    ("1970-01-01T23:58:00+23:58", "2199-12-31T00:00:00-23:59", "2026-05-02T09:00:00+14:00"),
]

# (changes to a valid record, the field the refusal must name)
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"ended_at": "9999-12-31T23:59:59Z"}, "ended_at"),
    ({"started_at": "1969-12-31T23:59:59Z"}, "started_at"),
    ({"ended_at": "2199-12-31T23:00:00-05:00"}, "ended_at"),
    ({"ended_at": "2200-01-01T00:00:00Z"}, "ended_at"),
    ({"ended_at": "2026-05-01T00:00:00Z"}, "ended_at"),
    ({"messages": [{"role": "user", "content": "I moved to Busan.", "ts": "0001-01-01T00:00:00Z"}]}, "messages.0.ts"),
]


def _record(**changes: Any) -> dict[str, Any]:
    record = session_event(texts=BUSAN).model_dump(mode="json")
    record.update({"started_at": "2026-05-02T09:00:00Z", "ended_at": "2026-05-02T09:30:00Z", **changes})
    return record


def _extreme(started_at: str, ended_at: str, ts: str) -> dict[str, Any]:
    record = _record(session_id=f"s-{uuid.uuid4().hex[:8]}", started_at=started_at, ended_at=ended_at)
    record["messages"][0]["ts"] = ts
    return record


async def test_sessions_at_the_window_edges_are_consolidated_and_readable(write_stack: WriteStack) -> None:
    records = [_extreme(*times) for times in EXTREMES]
    for record in records:
        response = await write_stack.http.post("/v1/sessions", json=record)
        assert response.status_code == 202, response.text
    for record in records:
        await write_stack.wait_state(record["event_id"], "consolidated", timeout_s=120)
    episodes = await write_stack.memories(kind="episode")
    assert sorted(e["session_id"] for e in episodes) == sorted(r["session_id"] for r in records)
    for episode in episodes:
        expanded = await write_stack.http.get(f"/v1/memories/{episode['id']}", params={"user_id": "alice"})
        assert expanded.status_code == 200, expanded.text
    found = await write_stack.http.post("/v1/memories/search", json={"user_id": "alice", "query": "Busan"})
    assert found.status_code == 200 and found.json()["items"], found.text
    await write_stack.wait_fact("Busan")
    injected = await write_stack.http.post("/v1/recall/auto", json={"user_id": "alice", "message": "Where do I live?"})
    assert injected.status_code == 200, injected.text


async def test_instants_outside_the_window_are_refused_naming_the_field_on_every_way_in(
    write_stack: WriteStack, tmp_path: Path
) -> None:
    records = [_record(**changes) for changes, _field in REFUSED]
    fields = [field for _changes, field in REFUSED]
    for record, field in zip(records, fields, strict=True):
        response = await write_stack.http.post("/v1/sessions", json=record)
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["field"] == field, response.text

    batch = await write_stack.http.post("/v1/sessions:batch", json={"sessions": records})
    assert batch.status_code == 207, batch.text
    items = batch.json()["items"]
    assert [item["status"] for item in items] == ["rejected"] * len(records)
    assert [item["error"]["errors"][0]["field"] for item in items] == fields

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ACME_KEY}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{write_stack.base_url}/mcp", http_client=http)) as client:
        result = await client.call_tool("memory_add_sessions", {"sessions": records})
    # Every record refused: a tool error that names each record's field (test_l0_reasons has the shape).
    assert result.is_error, result.content
    text = " ".join(getattr(part, "text", "") for part in result.content)
    for index, field in enumerate(fields):
        assert f"sessions[{index}]: {field}: " in text, text

    path = tmp_path / "refused.jsonl"
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n", encoding="utf-8")
    env = {**os.environ, "TIERMEM_DATA_DIR": str(tmp_path / "nothing-running")}
    ingest = await asyncio.to_thread(
        subprocess.run,
        [*TIERMEM, "ingest", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert ingest.returncode == 1, ingest.stderr
    # One line per refused record: "rejected FILE:LINE: invalid payload: FIELD: reason".
    lines = [line.split(f"{path}:", 1)[1] for line in ingest.stderr.splitlines() if f"{path}:" in line]
    assert [line.split(":")[0] for line in lines] == [str(n) for n in range(1, len(records) + 1)], ingest.stderr
    for line, field in zip(lines, fields, strict=True):
        assert f" {field}: " in line and ("within" in line or "earlier" in line), line
    assert f"rejected {len(records)}" in ingest.stdout

    js = (await write_stack.resources.nats()).jetstream()
    subject = write_stack.subjects.session_completed("acme", "alice")
    assert await stream_messages(js, write_stack.subjects.session_stream, subject) == []
