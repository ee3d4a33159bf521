"""The client installs into a fresh virtualenv without the server stack and talks to a real recall API
from there. Offline: pip reads only the machine's local package index (file://), never the network."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import ALICE, API_KEYS, RecallStack, build_stack
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ACME_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "acme")
SERVER_PACKAGES = ("services", "contracts", "fastapi", "uvicorn", "nats", "litellm", "qdrant_edge", "falkordb")

# Runs inside the fresh virtualenv: only tiermem_client and its two dependencies are there.
PROBE = """
import importlib.util, json, sys, uuid
from datetime import datetime, timezone
from tiermem_client import TiermemClient, SessionCompleted, NotFoundError
base_url, api_key, event_id, *server_packages = sys.argv[1:]
present = [name for name in server_packages if importlib.util.find_spec(name) is not None]
now = datetime.now(timezone.utc).isoformat()
session = SessionCompleted.model_validate({
    "event_id": event_id, "tenant_id": "acme", "user_id": "alice", "agent_id": "agent-1",
    "session_id": "s-venv", "channel": "private", "started_at": now, "ended_at": now,
    "messages": [{"role": "user", "content": "I keep bees on the roof."}],
})
with TiermemClient(base_url, api_key) as client:
    accepted = client.add_session(session)
    facts = client.facts("alice")
    try:
        client.fact("alice", str(uuid.uuid4()))
        missing = "found"
    except NotFoundError as exc:
        missing = exc.code
print(json.dumps({"present": present, "event_id": accepted.event_id, "status_url": accepted.status_url,
                  "facts": [item.abstract for item in facts.items], "missing": missing}))
"""


@pytest.fixture
async def stack(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True) as running:
        yield running


def test_the_fresh_virtualenv_holds_the_client_and_none_of_the_server(client_venv: Path) -> None:
    listed = subprocess.run(
        [str(client_venv), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert {"tiermem-client", "httpx", "pydantic"} <= names
    assert not names & {"tiermem", "fastapi", "uvicorn", "nats-py", "litellm", "qdrant-edge-py", "falkordb", "torch"}


async def test_the_installed_client_adds_a_session_and_reads_facts_from_a_real_recall_api(
    client_venv: Path, stack: RecallStack
) -> None:
    await stack.fact(ALICE, "The user keeps bees.", attribute="hobby", value="beekeeping")
    event_id = str(uuid.uuid4())
    probe = await asyncio.create_subprocess_exec(
        str(client_venv),
        "-c",
        PROBE,
        str(stack.base_url),
        ACME_KEY,
        event_id,
        *SERVER_PACKAGES,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=client_venv.parents[2],  # not the repository: `-c` puts the working directory on sys.path
        env={"PATH": "/usr/bin:/bin"},  # no PYTHONPATH or TIERMEM_* from the test run
    )
    out, err = await asyncio.wait_for(probe.communicate(), timeout=120)
    assert probe.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["present"] == [], "server packages must not be importable next to the client"
    assert result["event_id"] == event_id and result["status_url"] == f"/v1/events/{event_id}?user_id=alice"
    assert result["facts"] == ["The user keeps bees."]
    assert result["missing"] == "not_found"
