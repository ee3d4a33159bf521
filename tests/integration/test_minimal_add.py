"""Adding memory with only a user id and messages, through every interface of a real `tiermem up`
process tree (nats-server, FalkorDB, every service, the recall API on a loopback port): HTTP single,
HTTP batch, a CLI file (`tiermem ingest --wait` and `tiermem sessions add`) and MCP `memory_add`. Each
add is found by search; the same add again is a duplicate (the server derives the ids from the owner
and the content, the same way as the light client); `status_url` answers 200 as given; `ingest --wait`
exits 0 once everything is consolidated and 1 on a dead letter."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tiermem_client.adding import minimal_session

from services.cli.servers.net import free_port
from tests.integration.test_stack import TIERMEM, Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SETTLED = {"consolidated", "processed", "dead_lettered"}


@pytest.fixture(scope="module")
def tiermem_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("minimal-add") / "data", free_port())
    try:
        running.start()
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def http(tiermem_up: Stack) -> Iterator[httpx.Client]:
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{tiermem_up.http_port}", headers=headers, timeout=60) as client:
        yield client


def turns(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(texts)]


def settled(http: httpx.Client, status_url: str, timeout_s: float = 120) -> dict[str, Any]:
    """Follow `status_url` exactly as the server returned it (no parameters added) until it settles."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = http.get(status_url)
        assert response.status_code == 200, f"{status_url}: {response.status_code} {response.text}"
        body: dict[str, Any] = response.json()
        if body["state"] in SETTLED or time.monotonic() > deadline:
            assert body["state"] in SETTLED, body
            return body
        time.sleep(0.3)


def found(http: httpx.Client, user_id: str, query: str) -> list[str]:
    response = http.post("/v1/memories/search", json={"user_id": user_id, "query": query, "kinds": ["episode"]})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def cli(tiermem_up: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TIERMEM, *args],
        env={**os.environ, "TIERMEM_DATA_DIR": str(tiermem_up.data_dir), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


HANA = turns("I adopted a grey cat called Mochi last week.", "Congratulations on adopting Mochi!")


def test_http_single_minimal_add_is_found_and_a_retry_or_the_clients_add_is_a_duplicate(http: httpx.Client) -> None:
    accepted = http.post("/v1/sessions", json={"user_id": "hana", "messages": HANA})
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert body["duplicate"] is False and body["status_url"] == f"/v1/events/{body['event_id']}?user_id=hana"
    status = settled(http, body["status_url"])
    assert status["state"] == "consolidated", status
    assert found(http, "hana", "grey cat Mochi adopted") == [status["episode_id"]]

    again = http.post("/v1/sessions", json={"user_id": "hana", "messages": HANA})
    assert again.status_code == 202 and again.json() == {**body, "duplicate": True}
    # The light client completes the same turns into the same event: its add is a duplicate too.
    from_client = http.post("/v1/sessions", json=minimal_session(HANA, user_id="hana"))
    assert from_client.status_code == 202 and from_client.json()["event_id"] == body["event_id"]
    assert from_client.json()["duplicate"] is True


def test_a_bad_minimal_add_names_the_field(http: httpx.Client) -> None:
    missing = http.post("/v1/sessions", json={"user_id": "hana"})
    assert missing.status_code == 422 and [e["field"] for e in missing.json()["errors"]] == ["messages"]
    wrong_role = http.post("/v1/sessions", json={"user_id": "hana", "messages": [{"role": "robot", "content": "x"}]})
    assert wrong_role.status_code == 422 and wrong_role.json()["errors"][0]["field"] == "messages.0.role"
    no_user = http.post("/v1/sessions", json={"messages": HANA})
    assert no_user.status_code == 422 and no_user.json()["errors"][0]["field"] == "user_id"


def test_http_batch_of_minimal_adds_is_found_and_a_retry_is_duplicates(http: httpx.Client) -> None:
    sessions = [
        {"user_id": "joon", "messages": turns("I am training for the Jeju marathon in October.", "Good luck!")},
        {"user_id": "joon", "messages": turns("My sister Yuna is a violinist in Vienna.", "How lovely.")},
    ]
    response = http.post("/v1/sessions:batch", json={"sessions": sessions})
    assert response.status_code == 207, response.text
    result = response.json()
    assert (result["accepted"], result["duplicates"], result["rejected"]) == (2, 0, 0)
    episodes = [settled(http, item["status_url"])["episode_id"] for item in result["items"]]
    assert found(http, "joon", "Jeju marathon training")[0] == episodes[0]
    assert found(http, "joon", "sister Yuna violinist Vienna")[0] == episodes[1]
    again = http.post("/v1/sessions:batch", json={"sessions": sessions}).json()
    assert (again["accepted"], again["duplicates"]) == (0, 2)
    assert [item["event_id"] for item in again["items"]] == [item["event_id"] for item in result["items"]]


def test_a_cli_file_of_minimal_records_ingested_with_wait_is_found(
    tiermem_up: Stack, http: httpx.Client, tmp_path: Path
) -> None:
    records = tmp_path / "sora.jsonl"
    record = {"user_id": "sora", "messages": turns("I switched our CI from Jenkins to Buildkite.", "Noted.")}
    records.write_text(json.dumps(record) + "\n", encoding="utf-8")
    ingested = cli(tiermem_up, "ingest", str(records), "--wait")
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    assert "published 1, duplicate 0, rejected 0" in ingested.stdout
    assert "consolidated 1" in ingested.stdout and "dead-lettered 0" in ingested.stdout
    assert found(http, "sora", "CI Jenkins Buildkite")
    again = cli(tiermem_up, "ingest", str(records), "--wait")
    assert again.returncode == 0 and "published 0, duplicate 1, rejected 0" in again.stdout


def test_sessions_add_prints_event_ids_that_events_status_follows(
    tiermem_up: Stack, http: httpx.Client, tmp_path: Path
) -> None:
    records = tmp_path / "taro.jsonl"
    said = turns("My dentist appointment moved to Friday at 3pm.", "Got it.")
    record = {"user_id": "taro", "messages": said}
    records.write_text(json.dumps(record) + "\n", encoding="utf-8")
    added = cli(tiermem_up, "sessions", "add", str(records))
    assert added.returncode == 0, added.stdout + added.stderr
    printed = json.loads(added.stdout)
    assert printed["accepted"] == 1 and printed["events"][0]["user_id"] == "taro"
    event_id = printed["events"][0]["event_id"]
    assert event_id == minimal_session(said, user_id="taro")["event_id"]
    status = cli(tiermem_up, "events", "status", event_id, "-u", "taro")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["event_id"] == event_id
    foreign = cli(tiermem_up, "events", "status", event_id, "-u", "hana")
    assert foreign.returncode == 1 and "404" in foreign.stderr
    again = cli(tiermem_up, "sessions", "add", str(records))
    assert json.loads(again.stdout)["duplicates"] == 1


def test_ingest_wait_exits_1_on_a_dead_letter(tiermem_up: Stack, tmp_path: Path) -> None:
    # The producer's limits allow a message the running summarizer's default limits refuse: the
    # summarizer dead-letters the session (poison), and --wait must say so and fail.
    records = tmp_path / "long.jsonl"
    said = turns("word " * 8_000)  # 40 000 characters, over the default 32 000
    record = {"user_id": "kenji", "messages": said}
    records.write_text(json.dumps(record) + "\n", encoding="utf-8")
    ingested = cli(tiermem_up, "ingest", str(records), "--wait", TIERMEM_LIMITS__MAX_MESSAGE_CHARS="100000")
    assert ingested.returncode == 1, ingested.stdout + ingested.stderr
    event_id = minimal_session(said, user_id="kenji")["event_id"]
    assert f"dead-lettered {event_id}" in ingested.stdout and "size limits" in ingested.stdout
    assert "dead-lettered 1" in ingested.stdout


async def test_mcp_memory_add_with_typed_turns_is_found_and_a_retry_is_a_duplicate(
    tiermem_up: Stack, http: httpx.Client
) -> None:
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    client_http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0)
    )
    mina = turns("I am allergic to peanuts, please remember that.", "I will keep that in mind.")
    url = f"http://127.0.0.1:{tiermem_up.http_port}/mcp"
    async with client_http, Client(streamable_http_client(url, http_client=client_http)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        items = tools["memory_add"].input_schema["properties"]["messages"]["items"]
        assert items.get("$ref") or items.get("properties"), "the turns are typed, not free-form objects"
        added = await client.call_tool("memory_add", {"user_id": "mina", "messages": mina})
        assert not added.is_error and added.structured_content is not None, added.content
        assert added.structured_content["duplicate"] is False
        status = settled(http, added.structured_content["status_url"])
        assert status["state"] == "consolidated"
        searched = await client.call_tool("memory_search", {"user_id": "mina", "query": "peanut allergy"})
        assert searched.structured_content is not None
        assert status["episode_id"] in [item["id"] for item in searched.structured_content["items"]]
        again = await client.call_tool("memory_add", {"user_id": "mina", "messages": mina})
        assert again.structured_content is not None
        assert again.structured_content["event_id"] == added.structured_content["event_id"]
        assert again.structured_content["duplicate"] is True
        wrong = await client.call_tool(
            "memory_add", {"user_id": "mina", "messages": [{"role": "robot", "content": "x"}]}
        )
        assert wrong.is_error
