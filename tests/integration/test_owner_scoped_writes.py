"""Issue 48, items 1 and 3, over the real stack (nats-server, FalkorDB, Qdrant Edge, the summarizer,
extractor and pruner in-process, the recall API over HTTP, `tiermem ingest` as a child process):

- one event id used by two tenants and by two users of one tenant is four sessions, each stored and
  found by its own owner only; a true retry by the same owner is still a duplicate;
- an erasure's cut is fixed when its 202 is answered: sessions posted right after it are kept,
  sessions posted before it are erased."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cli.stack import RunningServices, start_services
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings, VectorSettings
from services.common.stores.episodes import episode_id_for
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.pruner.handlers import DEFINITION as PRUNER
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import API_KEYS, serving
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event, wait_for

pytestmark = pytest.mark.integration

ACME_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "acme")
GLOBEX_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "globex")
NOW = datetime.now(UTC)
REPO_ROOT = str(Path(__file__).resolve().parents[2])
TEXTS = ["I moved to Busan last month, the sea view is great.", "Nice, enjoy living in Busan."]


@dataclass
class WriteStack:
    settings: RecallApiSettings
    http: httpx.AsyncClient
    base_url: str

    async def post_session(self, event: Any) -> dict[str, Any]:
        response = await self.http.post("/v1/sessions", content=event.model_dump_json())
        assert response.status_code == 202, response.text
        body: dict[str, Any] = response.json()
        return body

    async def memories(self, *, kind: str, user_id: str) -> list[dict[str, Any]]:
        response = await self.http.get("/v1/memories", params={"limit": 500, "kind": kind, "user_id": user_id})
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
    """The summarizer, extractor and pruner in-process on the recall API's resources, the API served
    over real HTTP (as `tiermem up` runs them)."""
    settings = RecallApiSettings(
        data_dir=tmp_path,
        nats=nats_settings,
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=falkordb_graph.settings(),
        api_keys=API_KEYS,
    )
    resources = Resources(settings, _embedder=embedder, _keywords=keywords)
    running: RunningServices = await start_services(settings, [EPISODIC, SEMANTIC, PRUNER], resources=resources)
    try:
        async with serving(create_app(settings, resources), over_http=True) as base_url:
            assert base_url is not None
            headers = {"Authorization": f"Bearer {ACME_KEY}", "content-type": "application/json"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
                yield WriteStack(settings, http, base_url)
    finally:
        await running.stop()


def _ingest(stack: WriteStack, path: Path) -> subprocess.CompletedProcess[str]:
    """`tiermem ingest FILE` as a user runs it, against the test's nats-server and subject root."""
    nats = stack.settings.nats
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(path.parent / "ingest-data"),
        "TIERMEM_NATS__URL": nats.url,
        "TIERMEM_NATS__SUBJECT_ROOT": nats.subject_root,
        "TIERMEM_NATS__TOKEN": nats.token.get_secret_value() if nats.token else "",
    }
    command = [sys.executable, "-m", "services.cli", "ingest", str(path)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


async def _status(http: httpx.AsyncClient, event_id: str, user_id: str) -> dict[str, Any] | None:
    response = await http.get(f"/v1/events/{event_id}", params={"user_id": user_id})
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _listed(http: httpx.AsyncClient, user_id: str, kind: str) -> list[dict[str, Any]]:
    response = await http.get("/v1/memories", params={"user_id": user_id, "kind": kind, "limit": 500})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _lister(http: httpx.AsyncClient, user_id: str, kind: str) -> Callable[[], Awaitable[list[dict[str, Any]]]]:
    return lambda: _listed(http, user_id, kind)


async def _consolidated(http: httpx.AsyncClient, event_id: str, user_id: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = await _status(http, event_id, user_id)
        return found if found is not None and found["state"] == "consolidated" else None

    result: dict[str, Any] = await wait_for(reached, timeout_s=120, what=f"{user_id}'s event {event_id} consolidated")
    return result


async def test_one_event_id_from_two_tenants_and_two_users_is_four_sessions(
    write_stack: WriteStack, tmp_path: Path
) -> None:
    event_id = uuid.uuid4()
    ended = NOW - timedelta(hours=1)
    alice = session_event(user_id="alice", session_id="s-shared", texts=TEXTS, ended_at=ended, event_id=event_id)
    bob = session_event(user_id="bob", session_id="s-shared", texts=TEXTS, ended_at=ended, event_id=event_id)
    carol = session_event(user_id="carol", session_id="s-shared", texts=TEXTS, ended_at=ended, event_id=event_id)
    globex = session_event(
        tenant_id="globex", user_id="alice", session_id="s-shared", texts=TEXTS, ended_at=ended, event_id=event_id
    )
    headers = {"Authorization": f"Bearer {GLOBEX_KEY}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=write_stack.base_url, headers=headers, timeout=60) as globex_http:
        # acme/alice over HTTP (single), acme/bob over HTTP (batch), globex/alice over HTTP, acme/carol by ingest.
        assert (await write_stack.post_session(alice))["duplicate"] is False
        batch = await write_stack.http.post("/v1/sessions:batch", json={"sessions": [bob.model_dump(mode="json")]})
        assert batch.status_code == 207, batch.text
        assert batch.json()["accepted"] == 1 and batch.json()["items"][0]["duplicate"] is False
        response = await globex_http.post("/v1/sessions", content=globex.model_dump_json())
        assert response.status_code == 202 and response.json()["duplicate"] is False, response.text
        records = tmp_path / "carol.jsonl"
        records.write_text(carol.model_dump_json() + "\n", encoding="utf-8")
        ingested = await asyncio.to_thread(_ingest, write_stack, records)
        assert ingested.returncode == 0 and "published 1, duplicate 0" in ingested.stdout, ingested.stderr

        owners = {
            Owner("acme", "alice"): write_stack.http,
            Owner("acme", "bob"): write_stack.http,
            Owner("acme", "carol"): write_stack.http,
            Owner("globex", "alice"): globex_http,
        }
        for owner, http in owners.items():
            status = await _consolidated(http, str(event_id), owner.user_id)
            assert status["episode_id"] == episode_id_for(owner, "s-shared"), owner
        assert len({episode_id_for(owner, "s-shared") for owner in owners}) == 4

        # Each owner's listing has its own episode, and facts were extracted for each (the derived
        # events of one owner's episode are not duplicates of another's either).
        for owner, http in owners.items():
            listed = await http.get("/v1/memories", params={"user_id": owner.user_id, "kind": "episode"})
            assert [item["id"] for item in listed.json()["items"]] == [episode_id_for(owner, "s-shared")]
            facts = await wait_for(_lister(http, owner.user_id, "fact"), timeout_s=90, what=f"{owner}'s facts")
            assert [fact["value"] for fact in facts] == ["Busan"], owner
        # An event id nobody of globex used is still unknown to globex.
        assert await _status(globex_http, str(event_id), "bob") is None

        # A true retry by the same owner is still a duplicate, over every path.
        assert (await write_stack.post_session(alice))["duplicate"] is True
        again = await write_stack.http.post("/v1/sessions:batch", json={"sessions": [bob.model_dump(mode="json")]})
        assert again.json()["duplicates"] == 1
        assert (await globex_http.post("/v1/sessions", content=globex.model_dump_json())).json()["duplicate"] is True
        reingested = await asyncio.to_thread(_ingest, write_stack, records)
        assert "published 0, duplicate 1" in reingested.stdout, reingested.stdout + reingested.stderr


async def _episode_sessions(stack: WriteStack, user_id: str) -> set[str]:
    listed = await stack.memories(kind="episode", user_id=user_id)
    return {item["session_id"] for item in listed}


@pytest.mark.parametrize("erasures", [1, 2], ids=["one-erasure", "two-erasures-back-to-back"])
async def test_sessions_posted_right_after_an_erasure_are_kept_and_earlier_ones_erased(
    write_stack: WriteStack, erasures: int
) -> None:
    user = "dora"
    ended = NOW - timedelta(hours=2)
    consolidated = session_event(user_id=user, session_id="s-before-1", texts=TEXTS, ended_at=ended)
    await write_stack.post_session(consolidated)
    await _consolidated(write_stack.http, str(consolidated.event_id), user)
    # Accepted before the erasure, and most likely not consolidated yet when the pruner runs.
    pending = session_event(user_id=user, session_id="s-before-2", texts=TEXTS, ended_at=ended)
    await write_stack.post_session(pending)

    requests = [await write_stack.http.delete(f"/v1/users/{user}") for _ in range(erasures)]
    assert [r.status_code for r in requests] == [202] * erasures, [r.text for r in requests]
    after = [
        session_event(user_id=user, session_id=f"s-after-{n}", texts=TEXTS, ended_at=NOW - timedelta(minutes=n))
        for n in range(3)
    ]
    # No pause: each is posted the moment the previous answer arrives.
    for event in after:
        assert (await write_stack.post_session(event))["duplicate"] is False

    async def erased() -> bool:
        found = [await _status(write_stack.http, r.json()["event_id"], user) for r in requests]
        return all(status is not None and status["state"] == "erasure_completed" for status in found)

    await wait_for(erased, timeout_s=120, what="the erasures to complete")
    for event in after:
        status = await _consolidated(write_stack.http, str(event.event_id), user)
        assert status["episode_id"] == episode_id_for(Owner("acme", user), event.session_id)
    assert await _episode_sessions(write_stack, user) == {event.session_id for event in after}
    for event in (consolidated, pending):
        assert await _status(write_stack.http, str(event.event_id), user) is None, "erased sessions are gone"
    # The kept sessions' facts are there too (the extractor ran after the erasure, not before it).
    facts = await wait_for(_lister(write_stack.http, user, "fact"), timeout_s=90, what="the kept sessions' facts")
    assert {fact["value"] for fact in facts} == {"Busan"}
