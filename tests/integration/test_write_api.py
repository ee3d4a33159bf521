"""Memory in and out over HTTP against the real pipeline: real nats-server (JetStream), FalkorDB,
Qdrant Edge, the episodic-summarizer, semantic-extractor and pruner services running in-process on
the same resources as the recall API. Nothing below the HTTP layer is faked."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from contracts import Subjects
from services.cli.main import app
from services.cli.prune import run_prune_now
from services.cli.stack import RunningServices, start_services
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings, VectorSettings
from services.common.stores.episodes import Episode, episode_payload
from services.common.stores.vector.port import EPISODES, SearchFilter, VectorRecord
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.pruner.handlers import DEFINITION as PRUNER
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import API_KEYS, serving
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event, stream_messages, wait_for

pytestmark = pytest.mark.integration

ACME_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "acme")
ALICE = Owner("acme", "alice")
NOW = datetime.now(UTC)
REPO_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class WriteStack:
    settings: RecallApiSettings
    resources: Resources
    running: RunningServices
    http: httpx.AsyncClient
    subjects: Subjects
    base_url: str

    async def post_session(self, event: Any, *, expect: int = 202) -> dict[str, Any]:
        response = await self.http.post("/v1/sessions", content=event.model_dump_json())
        assert response.status_code == expect, response.text
        body: dict[str, Any] = response.json()
        return body

    async def status(self, event_id: str, user_id: str = "alice") -> dict[str, Any]:
        response = await self.http.get(f"/v1/events/{event_id}", params={"user_id": user_id})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def wait_state(
        self, event_id: str, state: str, timeout_s: float = 90, user_id: str = "alice"
    ) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            found = await self.status(event_id, user_id)
            return found if found["state"] == state else None

        result: dict[str, Any] = await wait_for(reached, timeout_s=timeout_s, what=f"event {event_id} {state}")
        return result

    async def wait_fact(self, value: str) -> list[dict[str, Any]]:
        """The user's facts with this value, once semantic extraction has written one."""

        async def extracted() -> list[dict[str, Any]]:
            return [m for m in await self.memories(kind="fact") if m["value"] == value]

        found: list[dict[str, Any]] = await wait_for(extracted, timeout_s=90, what=f"a fact with value {value}")
        return found

    async def memories(self, **params: Any) -> list[dict[str, Any]]:
        params.setdefault("user_id", "alice")
        response = await self.http.get("/v1/memories", params={"limit": 500, **params})
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items


@pytest.fixture
async def write_stack(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[WriteStack]:
    settings = RecallApiSettings(
        data_dir=tmp_path,
        nats=nats_settings,
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=falkordb_graph.settings(),
        api_keys=API_KEYS,
    )
    resources = Resources(settings, _embedder=embedder, _keywords=keywords)
    running = await start_services(settings, [EPISODIC, SEMANTIC, PRUNER], resources=resources)
    app = create_app(settings, resources)
    try:
        async with serving(app, over_http=True) as base_url:
            assert base_url is not None
            headers = {"Authorization": f"Bearer {ACME_KEY}", "content-type": "application/json"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
                yield WriteStack(settings, resources, running, http, Subjects(nats_settings.subject_root), base_url)
    finally:
        await running.stop()


BUSAN = ["I moved to Busan last month, the sea view is great.", "Nice, enjoy living in Busan."]


async def test_a_session_posted_over_http_becomes_an_episode_and_facts_and_a_repost_changes_nothing(
    write_stack: WriteStack,
) -> None:
    event = session_event(session_id="s-busan", texts=BUSAN, ended_at=NOW - timedelta(hours=1))
    accepted = await write_stack.post_session(event)
    assert accepted["duplicate"] is False
    assert accepted["status_url"] == f"/v1/events/{event.event_id}?user_id=alice"
    status = await write_stack.wait_state(str(event.event_id), "consolidated")
    facts = await write_stack.wait_fact("Busan")
    assert [f["attribute"] for f in facts] == ["lives_in"]
    episodes = await write_stack.memories(kind="episode")
    assert [e["id"] for e in episodes] == [status["episode_id"]]

    before = await write_stack.memories()
    again = await write_stack.post_session(event)
    assert again["duplicate"] is True
    js = (await write_stack.resources.nats()).jetstream()
    subject = write_stack.subjects.session_completed("acme", "alice")
    assert len(await stream_messages(js, write_stack.subjects.session_stream, subject)) == 1
    assert await write_stack.memories() == before


async def test_bad_sessions_are_refused_with_the_field_and_the_reason(write_stack: WriteStack) -> None:
    http = write_stack.http
    too_many = session_event(texts=["hello there"] * 2)
    body = too_many.model_dump(mode="json")
    body["messages"] = body["messages"] * 1001  # 2002 messages: over the default 2000
    response = await http.post("/v1/sessions", json=body)
    assert response.status_code == 413, response.text
    assert "2002 messages" in response.json()["detail"] and response.json()["code"] == "too_large"

    broken = session_event().model_dump(mode="json")
    broken["ended_at"] = "yesterday"
    response = await http.post("/v1/sessions", json=broken)
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["ended_at"]

    other = session_event(tenant_id="globex").model_dump(mode="json")
    response = await http.post("/v1/sessions", json=other)
    assert response.status_code == 403 and "tenant" in response.json()["detail"]

    good = session_event(texts=BUSAN)
    batch = {"sessions": [good.model_dump(mode="json"), broken, {**other}, {k: v for k, v in body.items()}]}
    batch["sessions"][0].pop("tenant_id")  # the key decides the tenant
    response = await http.post("/v1/sessions:batch", json=batch)
    assert response.status_code == 207, response.text
    result = response.json()
    assert [i["status"] for i in result["items"]] == ["accepted", "rejected", "rejected", "rejected"]
    assert [i["error"]["code"] for i in result["items"][1:]] == ["invalid_session", "wrong_tenant", "too_large"]
    assert result["items"][1]["error"]["errors"][0]["field"] == "ended_at"
    assert (result["accepted"], result["rejected"]) == (1, 3)


async def test_forgetting_a_fact_removes_its_value_everywhere_and_reports_completion(write_stack: WriteStack) -> None:
    http = write_stack.http
    event = session_event(session_id="s-busan", texts=BUSAN, ended_at=NOW - timedelta(hours=1))
    await write_stack.post_session(event)
    episode_id = (await write_stack.wait_state(str(event.event_id), "consolidated"))["episode_id"]
    fact = (await write_stack.wait_fact("Busan"))[0]

    forget = await http.delete(f"/v1/memories/{fact['id']}", params={"user_id": "alice"})
    assert forget.status_code == 202, forget.text
    assert forget.json()["kind"] == "fact"
    done = await write_stack.wait_state(forget.json()["event_id"], "erasure_completed")
    assert done["removed"] and sum(done["removed"].values()) > 0

    search = await http.post("/v1/memories/search", json={"user_id": "alice", "query": "Busan where does she live"})
    assert "Busan" not in search.text
    expanded = await http.get(f"/v1/memories/{episode_id}", params={"user_id": "alice"})
    assert expanded.status_code in (200, 404) and "Busan" not in expanded.text
    assert "Busan" not in (await http.get("/v1/memories", params={"user_id": "alice"})).text
    assert "Busan" not in (await http.get("/v1/facts", params={"user_id": "alice"})).text
    graph = await http.post("/v1/graph/search", json={"user_id": "alice", "query": "Busan", "hops": 2})
    assert "Busan" not in graph.text
    auto = await http.post("/v1/recall/auto", json={"user_id": "alice", "message": "Where do I live, Busan?"})
    assert "Busan" not in auto.json()["section"]
    js = (await write_stack.resources.nats()).jetstream()
    raw = await stream_messages(
        js, write_stack.subjects.session_stream, write_stack.subjects.session_completed("acme", "alice")
    )
    assert all(b"Busan" not in message.data for message in raw)
    gone = await http.get(f"/v1/facts/{fact['id']}", params={"user_id": "alice"})
    assert gone.status_code == 404


async def test_a_correction_supersedes_the_old_value_and_only_the_new_one_is_injected(
    write_stack: WriteStack,
) -> None:
    http = write_stack.http
    saved = await http.post(
        "/v1/facts",
        json={"user_id": "alice", "text": "The user lives in Seoul.", "attribute": "lives_in", "value": "Seoul"},
    )
    assert saved.status_code == 200, saved.text
    old_id = saved.json()["fact_id"]
    note = {"user_id": "alice", "text": "The user prefers window seats."}
    first = await http.post("/v1/facts", json=note, headers={"Idempotency-Key": "seat-1"})
    retried = await http.post("/v1/facts", json=note, headers={"Idempotency-Key": "seat-1"})
    other = await http.post("/v1/facts", json=note, headers={"Idempotency-Key": "seat-2"})  # a new observation
    outcomes = [response.json()["outcome"] for response in (first, retried, other)]
    assert outcomes == ["created", "duplicate", "reinforced"]
    corrected = await http.post(
        f"/v1/facts/{old_id}/corrections",
        json={"user_id": "alice", "value": "Busan", "text": "The user lives in Busan."},
        headers={"Idempotency-Key": "fix-1"},
    )
    assert corrected.status_code == 200, corrected.text
    new_id = corrected.json()["fact_id"]
    assert new_id != old_id and corrected.json()["superseded"] == old_id

    history = (await http.get(f"/v1/facts/{new_id}/history", params={"user_id": "alice"})).json()["versions"]
    assert [(v["id"], v["status"]) for v in history] == [(old_id, "superseded"), (new_id, "confirmed")]
    assert history[0]["valid_to"] is not None and history[0]["superseded_by"] == new_id
    assert history[1]["user_stated"] is True and history[1]["valid_to"] is None
    assert (await http.get(f"/v1/facts/{old_id}/history", params={"user_id": "alice"})).json()["versions"] == history

    question = "Do I live in Seoul or in Busan these days?"
    auto = await http.post("/v1/recall/auto", json={"user_id": "alice", "message": question})
    section = auto.json()["section"]
    assert "Busan" in section and "Seoul" not in section, section
    recalled = (await http.get("/v1/facts", params={"user_id": "alice"})).json()["section"]
    assert "Busan" in recalled and "Seoul" not in recalled


async def _bulk_episodes(write_stack: WriteStack, owner: Owner, count: int, prefix: str) -> set[str]:
    """Episode points written straight into the index (listing reads points; embeddings don't matter)."""
    await write_stack.resources.episodes()  # opens the collections
    index = await write_stack.resources.vector_index()
    vector = await write_stack.resources.embedder().embed_query("listing")
    records = []
    for number in range(count):
        episode = Episode(
            episode_id=str(uuid.uuid4()),
            session_id=f"{prefix}-{number}",
            agent_id="agent-1",
            occurred_at=NOW - timedelta(days=1),
            summary=f"Episode {prefix} {number}.",
            stored_at_ts=NOW.timestamp(),
        )
        records.append(
            VectorRecord(id=episode.episode_id, dense=vector, sparse=_empty(), payload=episode_payload(episode))
        )
    for start in range(0, count, 200):
        await index.upsert(EPISODES, owner, records[start : start + 200])
    return {record.id for record in records}


def _empty() -> Any:
    from services.common.domain.sparse import SparseVector

    return SparseVector(indices=[], values=[])


async def test_listing_pages_through_a_thousand_memories_while_new_ones_arrive(write_stack: WriteStack) -> None:
    existing = await _bulk_episodes(write_stack, ALICE, 1000, "old")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"user_id": "alice", "kind": "episode", "limit": 97}
        if cursor:
            params["cursor"] = cursor
        response = await write_stack.http.get("/v1/memories", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        seen += [item["id"] for item in body["items"]]
        pages += 1
        await _bulk_episodes(write_stack, ALICE, 7, f"new{pages}")  # arrivals between pages
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)), "a memory was listed twice"
    assert existing <= set(seen), f"{len(existing - set(seen))} memories were skipped"
    bad = await write_stack.http.get("/v1/memories", params={"user_id": "alice", "cursor": "not-a-cursor"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"


async def test_an_imported_old_session_survives_prune_now_with_default_settings(write_stack: WriteStack) -> None:
    ended = NOW - timedelta(days=200)  # inside the 365-day TTL, past the 90-day never-recalled age
    event = session_event(session_id="s-old", texts=BUSAN, ended_at=ended)
    await write_stack.post_session(event)
    episode_id = (await write_stack.wait_state(str(event.event_id), "consolidated"))["episode_id"]
    report, where = await run_prune_now(write_stack.settings, timeout_s=60)
    assert where == "running pruner"
    assert report.removed.get("episodes_unrecalled", 0) == 0
    episodes = await write_stack.resources.episodes()
    assert [e.episode_id for e in await episodes.get(ALICE, [episode_id])] == [episode_id]

    # The rule still applies to what was stored long ago and never recalled.
    index = await write_stack.resources.vector_index()
    await index.set_payload(EPISODES, ALICE, [episode_id], {"stored_at_ts": (NOW - timedelta(days=120)).timestamp()})
    report, _ = await run_prune_now(write_stack.settings, timeout_s=60)
    assert report.removed.get("episodes_unrecalled") == 1
    assert await episodes.count(ALICE, SearchFilter(ids=[episode_id])) == 0


async def test_openapi_document_validates_and_declares_bearer_auth(write_stack: WriteStack) -> None:
    from openapi_spec_validator import validate

    document = (await write_stack.http.get("/openapi.json")).json()
    validate(document)
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["apiKey"]["description"],
    }
    for path, operations in document["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, operation in operations.items():
            assert operation.get("security") == [{"apiKey": []}], (method, path)
            for code in ("401", "422", "503"):
                assert code in operation["responses"], (method, path, code)
            request = operation.get("requestBody")
            if request is not None:
                content = request["content"]["application/json"]
                schema = content.get("schema", {})
                ref = schema.get("$ref", "")
                named = document["components"]["schemas"].get(ref.rsplit("/", 1)[-1], {})
                assert content.get("examples") or content.get("example") or named.get("examples"), (method, path)


async def test_status_of_unknown_or_foreign_events_is_404(write_stack: WriteStack) -> None:
    event = session_event(user_id="bob", texts=BUSAN)
    await write_stack.post_session(event)
    assert (await write_stack.http.get(f"/v1/events/{uuid.uuid4()}", params={"user_id": "alice"})).status_code == 404
    foreign = await write_stack.http.get(f"/v1/events/{event.event_id}", params={"user_id": "alice"})
    assert foreign.status_code == 404
    assert (await write_stack.status(str(event.event_id), "bob"))["kind"] == "session"


def _cli(write_stack: WriteStack, *args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--url", write_stack.base_url, "--api-key", ACME_KEY])
    return result


async def test_the_cli_adds_sessions_lists_reads_history_and_forgets_over_http(
    write_stack: WriteStack, tmp_path: Path
) -> None:
    records = tmp_path / "sessions.jsonl"
    good = session_event(session_id="s-cli", texts=BUSAN, ended_at=NOW - timedelta(hours=2))
    bad = good.model_dump(mode="json") | {"ended_at": "later"}
    records.write_text(good.model_dump_json() + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    added = await asyncio.to_thread(_cli, write_stack, "sessions", "add", str(records))
    assert added.exit_code == 1 and '"accepted": 1' in added.stdout, added.output
    assert f"{records}:2:" in added.stderr and "ended_at" in added.stderr
    again = await asyncio.to_thread(_cli, write_stack, "sessions", "add", str(records))
    assert '"duplicates": 1' in again.stdout

    fact = (await write_stack.wait_fact("Busan"))[0]
    listed = await asyncio.to_thread(_cli, write_stack, "memories", "list", "-u", "alice", "--kind", "fact", "--all")
    assert listed.exit_code == 0 and fact["id"] in listed.stdout
    history = await asyncio.to_thread(_cli, write_stack, "memories", "history", fact["id"], "-u", "alice")
    assert history.exit_code == 0 and '"lives_in"' in history.stdout
    foreign = await asyncio.to_thread(_cli, write_stack, "memories", "get", fact["id"], "-u", "bob")
    assert foreign.exit_code == 1 and "404" in foreign.stderr
    forgotten = await asyncio.to_thread(_cli, write_stack, "memories", "forget", fact["id"], "-u", "alice")
    assert forgotten.exit_code == 0 and '"kind": "fact"' in forgotten.stdout
    event_id = json.loads(forgotten.stdout)["event_id"]
    assert (await write_stack.wait_state(event_id, "erasure_completed"))["removed"]


async def test_tiermem_mcp_url_bridges_stdio_to_the_running_endpoint(write_stack: WriteStack) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    event = session_event(session_id="s-mcp", texts=BUSAN, ended_at=NOW - timedelta(hours=2))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "services.cli", "mcp", "--url", f"{write_stack.base_url}/mcp", "--api-key", ACME_KEY],
        env={**os.environ, "TIERMEM_DATA_DIR": str(write_stack.settings.data_dir)},
        cwd=REPO_ROOT,
    )
    async with Client(params, read_timeout_seconds=120) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"memory_add_sessions", "memory_list", "memory_forget", "memory_correct"} <= set(tools)
        assert tools["memory_forget"].annotations is not None and tools["memory_forget"].annotations.destructive_hint
        assert "user_id" in (tools["memory_list"].input_schema.get("required") or [])
        assert tools["memory_list"].output_schema is not None
        added = await client.call_tool("memory_add_sessions", {"sessions": [event.model_dump(mode="json")]})
        assert not added.is_error and added.structured_content is not None
        assert added.structured_content["accepted"] == 1
        await write_stack.wait_state(str(event.event_id), "consolidated")
        listed = await client.call_tool("memory_list", {"user_id": "alice", "kind": "episode"})
        assert not listed.is_error and listed.structured_content is not None
        assert [item["session_id"] for item in listed.structured_content["items"]] == ["s-mcp"]
        refused = await client.call_tool("memory_list", {"user_id": "../bob"})
        assert refused.is_error


async def test_erasing_a_user_reports_completion_at_the_returned_url(write_stack: WriteStack) -> None:
    event = session_event(user_id="carol", texts=BUSAN)
    await write_stack.post_session(event)
    await write_stack.wait_state(str(event.event_id), "consolidated", user_id="carol")
    response = await write_stack.http.delete("/v1/users/carol")
    assert response.status_code == 202
    url = response.json()["status_url"]

    async def completed() -> dict[str, Any] | None:
        found = await write_stack.http.get(url)  # as returned: the URL names the user
        assert found.status_code == 200, found.text
        body: dict[str, Any] = found.json()
        return body if body["state"] == "erasure_completed" else None

    done = await wait_for(completed, timeout_s=90, what="the user erasure to complete")
    assert done["kind"] == "erasure" and "episodes" in done["removed"]


async def test_a_session_with_nothing_worth_remembering_is_reported_processed(write_stack: WriteStack) -> None:
    event = session_event(session_id="s-trivial", texts=["ok", "👍", "고마워"])
    await write_stack.post_session(event)
    status = await write_stack.wait_state(str(event.event_id), "processed")
    assert status["episode_id"] is None and "worth" in status["reason"]
