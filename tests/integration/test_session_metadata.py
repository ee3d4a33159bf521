"""Session metadata through a real `tiermem up` process tree: string key/values on a session reach
its episode and facts, and a metadata filter narrows L1 search, the memory list and L0 to the
sessions that carried it, on every interface (HTTP, MCP, the CLI, the light client); search and L0
items show it. Two sessions of one user: {"project": "atlas"} and {"project": "bori"}. Compression by
the pruner (real services on a controlled clock) keeps it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent
from tiermem_client import TiermemClient

from services.cli.servers.net import free_port
from services.common.domain.owner import Owner
from services.pruner.prune import run_prune_pass
from services.recall_api.schemas import SearchRequest
from tests.integration.test_forgetting import CHIT_CHAT, START, Clock, Forgetting
from tests.integration.test_forgetting import forgetting as forgetting  # the fixture: real services, own clock
from tests.integration.test_minimal_add import cli, settled, turns
from tests.integration.test_stack import TIERMEM, Stack
from tests.support.events import session_event
from tests.support.message_ids import message_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER = "mina"
ATLAS = turns("I use PostgreSQL for the billing ledger of the atlas project.", "PostgreSQL, noted.")
BORI = turns("I use Kubernetes for the deploy pipeline of the bori project.", "Kubernetes, noted.")
QUERY = "which tools do I use: PostgreSQL, Kubernetes, billing, deploy pipeline"
MESSAGE = "Remind me what I use PostgreSQL and Kubernetes for?"


@pytest.fixture(scope="module")
def tiermem_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("session-metadata") / "data", free_port())
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


def listed(http: httpx.Client, *metadata: str, kind: str = "all") -> list[dict[str, Any]]:
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("user_id", USER),
        ("kind", kind),
        *(("metadata", m) for m in metadata),
    ]
    response = http.get("/v1/memories", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@pytest.fixture(scope="module")
def episodes(http: httpx.Client) -> dict[str, str]:
    """project → the episode id of its session, once both sessions' facts are stored too."""
    found: dict[str, str] = {}
    for project, said in (("atlas", ATLAS), ("bori", BORI)):
        accepted = http.post("/v1/sessions", json={"user_id": USER, "messages": said, "metadata": {"project": project}})
        assert accepted.status_code == 202, accepted.text
        status = settled(http, accepted.json()["status_url"])
        assert status["state"] == "consolidated", status
        found[project] = status["episode_id"]
    deadline = time.monotonic() + 120
    while not fact_projects(http) >= {"atlas", "bori"}:
        assert time.monotonic() < deadline, listed(http, kind="fact")
        time.sleep(0.5)
    return found


def carried(http: httpx.Client, project: str) -> set[str]:
    """Ids of the memories whose sessions carried only `project` (read from the unfiltered list)."""
    return {item["id"] for item in listed(http) if item["metadata"] == {"project": [project]}}


def fact_projects(http: httpx.Client) -> set[str]:
    return {project for fact in listed(http, kind="fact") for project in fact["metadata"].get("project", [])}


def test_episodes_and_facts_carry_their_sessions_metadata(http: httpx.Client, episodes: dict[str, str]) -> None:
    by_id = {item["id"]: item for item in listed(http)}
    for project, episode_id in episodes.items():
        assert by_id[episode_id]["metadata"] == {"project": [project]}
        expanded = http.get(f"/v1/memories/{episode_id}", params={"user_id": USER})
        assert expanded.status_code == 200 and expanded.json()["provenance"]["metadata"] == {"project": project}
    facts = listed(http, kind="fact")
    assert {tuple(f["metadata"]["project"]) for f in facts} == {("atlas",), ("bori",)}, facts


def test_a_metadata_filter_narrows_the_memory_list(http: httpx.Client, episodes: dict[str, str]) -> None:
    everything = listed(http)
    atlas = listed(http, "project:atlas")
    assert {item["id"] for item in everything} > {item["id"] for item in atlas}
    assert atlas and all(item["metadata"] == {"project": ["atlas"]} for item in atlas)
    assert episodes["atlas"] in {item["id"] for item in atlas}
    assert {item["kind"] for item in atlas} == {"episode", "fact"}
    assert listed(http, "project:atlas", "team:none") == []


def test_a_metadata_filter_narrows_search(http: httpx.Client, episodes: dict[str, str]) -> None:
    query = {"user_id": USER, "query": "which tools do I use: PostgreSQL, Kubernetes, billing, deploy pipeline"}
    unfiltered = http.post("/v1/memories/search", json=query)
    assert unfiltered.status_code == 200, unfiltered.text
    assert {episodes["atlas"], episodes["bori"]} <= {item["id"] for item in unfiltered.json()["items"]}
    narrowed = http.post("/v1/memories/search", json={**query, "metadata": {"project": "atlas"}})
    assert narrowed.status_code == 200, narrowed.text
    items = narrowed.json()["items"]
    atlas_ids = carried(http, "atlas")
    assert episodes["atlas"] in {item["id"] for item in items}
    assert items and {item["id"] for item in items} <= atlas_ids, items
    assert episodes["bori"] not in {item["id"] for item in items}


def test_a_metadata_filter_narrows_l0(http: httpx.Client, episodes: dict[str, str]) -> None:
    request = {"user_id": USER, "message": "Remind me what I use PostgreSQL and Kubernetes for?", "max_entries": 10}
    unfiltered = http.post("/v1/recall/auto", json=request)
    assert unfiltered.status_code == 200, unfiltered.text
    assert "Kubernetes" in unfiltered.json()["section"]
    narrowed = http.post("/v1/recall/auto", json={**request, "metadata": {"project": "atlas"}})
    assert narrowed.status_code == 200, narrowed.text
    body = narrowed.json()
    atlas_ids = carried(http, "atlas")
    assert body["injected"] >= 1 and {item["id"] for item in body["items"]} <= atlas_ids, body
    assert "Kubernetes" not in body["section"] and "PostgreSQL" in body["section"]


def test_bad_metadata_is_a_422_naming_the_field(http: httpx.Client) -> None:
    dotted = http.post("/v1/sessions", json={"user_id": USER, "messages": ATLAS, "metadata": {"a.b": "x"}})
    assert dotted.status_code == 422 and dotted.json()["errors"][0]["field"].startswith("metadata"), dotted.text
    too_many = {f"k{i}": "v" for i in range(17)}
    crowded = http.post("/v1/sessions", json={"user_id": USER, "messages": ATLAS, "metadata": too_many})
    assert crowded.status_code == 422 and crowded.json()["errors"][0]["field"] == "metadata", crowded.text
    long_value = http.post("/v1/sessions", json={"user_id": USER, "messages": ATLAS, "metadata": {"k": "v" * 257}})
    assert long_value.status_code == 422 and long_value.json()["errors"][0]["field"].startswith("metadata")
    no_colon = http.get("/v1/memories", params={"user_id": USER, "metadata": "project"})
    assert no_colon.status_code == 422 and no_colon.json()["errors"][0]["field"] == "metadata", no_colon.text
    search = http.post("/v1/memories/search", json={"user_id": USER, "query": "x", "metadata": {"a.b": "x"}})
    assert search.status_code == 422 and search.json()["errors"][0]["field"].startswith("metadata"), search.text


def test_the_browser_shows_the_metadata_of_episodes_and_facts(
    tiermem_up: Stack, http: httpx.Client, episodes: dict[str, str]
) -> None:
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    fact = next(f for f in listed(http, kind="fact") if f["metadata"] == {"project": ["atlas"]})
    base_url = f"http://127.0.0.1:{tiermem_up.http_port}"
    with httpx.Client(base_url=base_url, timeout=60, follow_redirects=True) as ui:
        assert ui.post("/ui/login", data={"api_key": key}).status_code == 200
        episode_page = ui.get(f"/ui/u/{USER}/episodes/{episodes['atlas']}")
        fact_page = ui.get(f"/ui/u/{USER}/facts/{fact['id']}")
    assert episode_page.status_code == 200 and fact_page.status_code == 200
    shown = re.search(r'<dd id="episode-metadata">(.*?)</dd>', episode_page.text)
    assert shown is not None and shown.group(1) == "<code>project</code> atlas"
    shown = re.search(r'<dd id="fact-metadata">(.*?)</dd>', fact_page.text)
    assert shown is not None and shown.group(1) == "<code>project</code> atlas"


def known_metadata(http: httpx.Client) -> dict[str, dict[str, list[str]]]:
    """Memory id → its session metadata, as the unfiltered memory list shows it."""
    return {item["id"]: item["metadata"] for item in listed(http)}


def test_search_and_l0_items_show_their_sessions_metadata(http: httpx.Client, episodes: dict[str, str]) -> None:
    expected = known_metadata(http)
    searched = http.post("/v1/memories/search", json={"user_id": USER, "query": QUERY})
    assert searched.status_code == 200, searched.text
    items = searched.json()["items"]
    by_id = {item["id"]: item for item in items}
    for project, episode_id in episodes.items():
        assert by_id[episode_id]["metadata"] == {"project": [project]}
    assert all(item["metadata"] == expected[item["id"]] for item in items), items
    assert any(item["kind"] == "fact" and item["metadata"] for item in items), items
    auto = http.post("/v1/recall/auto", json={"user_id": USER, "message": MESSAGE, "max_entries": 10})
    assert auto.status_code == 200, auto.text
    injected = auto.json()["items"]
    assert injected and all(item["metadata"] == expected[item["id"]] for item in injected), injected
    assert all(item["metadata"] for item in injected), injected  # every memory of this user came with a project


def test_the_client_filters_on_metadata_and_reads_it(
    tiermem_up: Stack, http: httpx.Client, episodes: dict[str, str]
) -> None:
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    with TiermemClient(f"http://127.0.0.1:{tiermem_up.http_port}", key) as client:
        searched = client.search(QUERY, user_id=USER, metadata={"project": "atlas"})
        page = client.list_memories(USER, metadata={"project": "bori"})
    assert episodes["atlas"] in {item.id for item in searched.items}
    assert searched.items and all(item.metadata == {"project": ["atlas"]} for item in searched.items)
    assert episodes["bori"] in {item.id for item in page.items}
    assert all(item.metadata == {"project": ["bori"]} for item in page.items)


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error and result.structured_content is not None, result.content
    content: dict[str, Any] = result.structured_content
    return content


def _tool_text(result: CallToolResult) -> str:
    return " ".join(part.text for part in result.content if isinstance(part, TextContent))


async def test_mcp_read_tools_filter_on_metadata_and_return_it(
    tiermem_up: Stack, http: httpx.Client, episodes: dict[str, str]
) -> None:
    atlas_ids = carried(http, "atlas")
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    client_http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0)
    )
    url = f"http://127.0.0.1:{tiermem_up.http_port}/mcp"
    atlas = {"project": "atlas"}
    async with client_http, Client(streamable_http_client(url, http_client=client_http)) as client:
        searched = _structured(
            await client.call_tool("memory_search", {"user_id": USER, "query": QUERY, "metadata": atlas})
        )
        found = {item["id"] for item in searched["items"]}
        assert episodes["atlas"] in found and found <= atlas_ids, searched
        assert all(item["metadata"] == {"project": ["atlas"]} for item in searched["items"])
        context = _structured(
            await client.call_tool(
                "memory_context", {"user_id": USER, "message": MESSAGE, "max_entries": 10, "metadata": atlas}
            )
        )
        assert context["injected"] >= 1 and {item["id"] for item in context["items"]} <= atlas_ids, context
        assert "PostgreSQL" in context["section"] and "Kubernetes" not in context["section"]
        page = _structured(await client.call_tool("memory_list", {"user_id": USER, "metadata": atlas}))
        assert {item["id"] for item in page["items"]} == {item["id"] for item in listed(http, "project:atlas")}
        assert page["items"] and all(item["metadata"] == {"project": ["atlas"]} for item in page["items"])
        bad = await client.call_tool("memory_search", {"user_id": USER, "query": QUERY, "metadata": {"a.b": "x"}})
        assert bad.is_error and "metadata" in _tool_text(bad) and "pydantic" not in _tool_text(bad), bad.content


async def test_mcp_memory_add_keeps_the_metadata_it_is_given(tiermem_up: Stack, http: httpx.Client) -> None:
    user = "noa"  # another user: mina's memories stay the two sessions the other tests count
    key = (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
    client_http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0)
    )
    said = turns("I use Redis for the session cache of the cora project.", "Redis, noted.")
    url = f"http://127.0.0.1:{tiermem_up.http_port}/mcp"
    async with client_http, Client(streamable_http_client(url, http_client=client_http)) as client:
        added = _structured(
            await client.call_tool("memory_add", {"user_id": user, "messages": said, "metadata": {"project": "cora"}})
        )
    status = settled(http, added["status_url"])
    assert status["state"] == "consolidated", status
    assert status["episode_id"] in episodes_of(http, user, "project:cora")
    assert status["episode_id"] not in episodes_of(http, user, "project:atlas")


def episodes_of(http: httpx.Client, user: str, metadata: str) -> set[str]:
    page = http.get("/v1/memories", params={"user_id": user, "kind": "episode", "metadata": metadata})
    assert page.status_code == 200, page.text
    return {item["id"] for item in page.json()["items"]}


def test_cli_read_commands_take_meta_and_print_it(
    tiermem_up: Stack, http: httpx.Client, episodes: dict[str, str]
) -> None:
    atlas_ids = carried(http, "atlas")
    searched = cli(tiermem_up, "recall", "search", QUERY, "-u", USER, "--meta", "project=atlas")
    assert searched.returncode == 0, searched.stdout + searched.stderr
    items = json.loads(searched.stdout)["items"]
    assert episodes["atlas"] in {item["id"] for item in items} and {item["id"] for item in items} <= atlas_ids
    assert all(item["metadata"] == {"project": ["atlas"]} for item in items), items
    page = cli(tiermem_up, "memories", "list", "-u", USER, "--all", "--meta", "project=bori", "--meta", "project:bori")
    assert page.returncode == 0, page.stdout + page.stderr
    shown = json.loads(page.stdout)["items"]
    assert {item["id"] for item in shown} == {item["id"] for item in listed(http, "project:bori")}
    assert shown and all(item["metadata"] == {"project": ["bori"]} for item in shown), shown
    auto = cli(tiermem_up, "recall", "auto", MESSAGE, "-u", USER, "--meta", "project=atlas")
    assert auto.returncode == 0, auto.stdout + auto.stderr
    assert "PostgreSQL" in auto.stdout and "Kubernetes" not in auto.stdout, auto.stdout


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        ("project", "must read KEY=VALUE"),
        ("a.b=x", "1-64 characters of A-Z a-z 0-9 _ -"),
        ("k=" + "v" * 257, "at most 256 characters"),
        ("=atlas", "1-64 characters of A-Z a-z 0-9 _ -"),
    ],
)
def test_a_malformed_meta_pair_is_a_usage_error_that_names_it(tmp_path: Path, pair: str, reason: str) -> None:
    # No stack runs on this data dir: the pair is refused before any request is made.
    env = {**os.environ, "TIERMEM_DATA_DIR": str(tmp_path), "COLUMNS": "400"}
    for command in (["recall", "search", "x"], ["recall", "auto", "x"], ["memories", "list"]):
        refused = subprocess.run(
            [*TIERMEM, *command, "-u", USER, "--meta", pair], env=env, capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = " ".join(refused.stderr.split())
        assert "'--meta'" in said and reason in said, refused.stderr


async def test_the_pruner_compresses_episodes_into_summaries_that_keep_their_metadata(forgetting: Forgetting) -> None:
    owner = Owner("acme", "alice")
    projects = {"octopus": "atlas", "catan": "atlas", "bread": "bori"}
    publisher = next(iter(forgetting.running.contexts.values())).publisher
    for topic, project in projects.items():
        event = session_event(
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            session_id=topic,
            texts=CHIT_CHAT[topic],
            ended_at=START - timedelta(minutes=5),
        ).model_copy(update={"metadata": {"project": project}})
        subject = forgetting.subjects.session_completed(owner.tenant_id, owner.user_id)
        await publisher.publish(event, subject, message_id(event), forgetting.subjects.session_stream)
    sources = {e.session_id: e for e in await forgetting.wait_episodes(owner, 3)}
    assert {topic: dict(e.metadata) for topic, e in sources.items()} == {t: {"project": p} for t, p in projects.items()}

    report = await run_prune_pass(forgetting.resources, forgetting.pruner, Clock(START).advance(95))
    assert (report.episodes_compressed, report.summaries_written) == (3, 2)
    summaries = {tuple(sorted(e.source_session_ids)): e for e in await (await forgetting.episodes()).scroll(owner)}
    assert set(summaries) == {("catan", "octopus"), ("bread",)}
    assert dict(summaries[("catan", "octopus")].metadata) == {"project": "atlas"}
    assert dict(summaries[("bread",)].metadata) == {"project": "bori"}

    # A filtered search still finds what was compressed, and only under its own metadata.
    for project, question, summary in (
        ("atlas", "Who did I play Catan with?", summaries[("catan", "octopus")]),
        ("bori", "When did I bake banana bread?", summaries[("bread",)]),
    ):
        request = SearchRequest(user_id=owner.user_id, query=question, limit=5, metadata={"project": project})
        items = (await forgetting.recall.search(owner.tenant_id, request)).items
        assert [item.id for item in items] == [summary.episode_id], items
        assert items[0].metadata == {"project": [project]}
