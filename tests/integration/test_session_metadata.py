"""Session metadata through a real `tiermem up` process tree: string key/values on a session reach
its episode and facts, and a metadata filter narrows L1 search, the memory list and L0 to the
sessions that carried it. Two sessions of one user: {"project": "atlas"} and {"project": "bori"}."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.cli.servers.net import free_port
from tests.integration.test_minimal_add import settled, turns
from tests.integration.test_stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER = "mina"
ATLAS = turns("I use PostgreSQL for the billing ledger of the atlas project.", "PostgreSQL, noted.")
BORI = turns("I use Kubernetes for the deploy pipeline of the bori project.", "Kubernetes, noted.")


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
