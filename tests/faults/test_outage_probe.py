"""The outage probe: every HTTP route (/v1, health, /ui) and every MCP tool of a running recall API is
polled while nats-server is killed (SIGKILL) and brought back, then while redis-server (FalkorDB) is.

No answer may be a 500 (nor a dropped connection or a crashed tool call); a failure is a 503 in the
error shape (an HTML error page under /ui, a tool error naming the reason over MCP); and once the
server is back every probe answers what it answered before the outage. The routes and tools come
from the app and the MCP server themselves (tests/faults/probes.py), so a new one is probed too.

The stack is the real one, in-process as `tiermem serve` runs it: the summarizer, extractor and
pruner consume from the same nats-server while the API answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from services.cli.servers.falkordb_server import FalkorDBServer
from services.cli.servers.nats_server import NatsServer
from services.cli.servers.net import free_port
from services.cli.stack import start_services
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.runtime.settings import GraphSettings, NatsSettings, VectorSettings
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.pruner.handlers import DEFINITION as PRUNER
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.faults.probes import OPEN_SESSION, SEED_USER, Outcome, Probe, Seed, http_probes, login, mcp_probes
from tests.integration.test_recall_api import API_KEYS, serving
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ACME_KEY = next(key for key, tenant in API_KEYS.items() if tenant == "acme")
REQUEST_TIMEOUT_S = 30.0  # longer than any store or broker timeout: a request this slow is a hang
OUTAGE_ROUNDS = 2
RECOVERY_TIMEOUT_S = 60.0
MCP_CRASH = "Error executing tool {name}"  # the SDK's text for an unexpected exception, no reason
UNAVAILABLE_WORDS = ("not reachable", "did not answer", "could not publish", "retry")


async def test_no_endpoint_or_tool_answers_500_while_nats_or_falkordb_is_down(
    tmp_path: Path, own_nats: NatsServer, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> None:
    falkordb = FalkorDBServer(tmp_path / "falkordb", free_port(), secrets.token_urlsafe(16))
    falkordb.start()
    try:
        async with _stack(tmp_path, own_nats, falkordb, embedder, keywords) as (probes, started):
            baseline = await _round(probes)
            broken = {
                n: o for n, o in baseline.items() if o.status >= 500 or (o.status == 0 and not n.startswith("mcp "))
            }
            assert not broken, f"failures with every server up: {broken}"
            servers: list[tuple[str, NatsServer | FalkorDBServer]] = [
                ("nats-server", own_nats),
                ("redis-server", falkordb),
            ]
            for name, server in servers:
                _kill(server)
                seen = [await _round(probes) for _ in range(OUTAGE_ROUNDS)]
                server.start()
                problems = [p for answers in seen for p in _problems(answers, baseline)]
                assert not problems, f"while {name} was down: {problems}"
                assert any(o.status == 503 for answers in seen for o in answers.values()), (
                    f"no probe noticed that {name} was down: the probe would pass without a fix"
                )
                await _recovered(probes, baseline, name)
        assert time.monotonic() - started < 150, "the probe must stay bounded"
    finally:
        falkordb.stop()


def _kill(server: NatsServer | FalkorDBServer) -> None:
    """SIGKILL, as a crash; `stop` then only reaps it, so `start` can run it again on its data."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    server.stop()


async def _round(probes: Sequence[Probe]) -> dict[str, Outcome]:
    """Every probe once, concurrently; a probe slower than REQUEST_TIMEOUT_S counts as a hang."""

    async def one(probe: Probe) -> Outcome:
        try:
            return await asyncio.wait_for(probe.send(), REQUEST_TIMEOUT_S)
        except TimeoutError:
            return Outcome(0, f"no answer within {REQUEST_TIMEOUT_S} s")

    answers = await asyncio.gather(*(one(probe) for probe in probes))
    return {probe.name: answer for probe, answer in zip(probes, answers, strict=True)}


def _problems(answers: dict[str, Outcome], baseline: dict[str, Outcome]) -> list[str]:
    """What is wrong with a round's answers during an outage: anything but the normal answer or a
    proper unavailability answer."""
    problems = []
    for name, outcome in answers.items():
        normal = baseline[name]
        if name.startswith("mcp "):
            tool = name.removeprefix("mcp ")
            crashed = outcome.status == 500 or outcome.text.strip() == MCP_CRASH.format(name=tool)
            unexplained = outcome.status == 1 and outcome.text != normal.text and not _names_unavailability(outcome)
            if crashed or unexplained:
                problems.append(f"{name}: {outcome}")
        elif outcome.status == normal.status:
            continue
        elif outcome.status != 503 or not _proper_503(name, outcome):
            problems.append(f"{name}: {outcome.status} {outcome.text}")
    return problems


def _names_unavailability(outcome: Outcome) -> bool:
    return any(words in outcome.text for words in UNAVAILABLE_WORDS)


def _proper_503(name: str, outcome: Outcome) -> bool:
    path = name.split(" ", 1)[1]
    if path.startswith("/ui") and path.endswith(".json"):
        return '"error":' in outcome.text  # the page's status poll: what it knows, and why not more
    if path.startswith("/ui"):
        return "Traceback" not in outcome.text and "<html" in outcome.text.lower()
    if name == "GET /readyz":
        return '"not ready"' in outcome.text  # its own documented shape: the checks that failed
    return outcome.is_error_shape and '"unavailable"' in outcome.text


async def _recovered(probes: Sequence[Probe], baseline: dict[str, Outcome], server: str) -> None:
    async def same_as_before() -> bool:
        answers = await _round(probes)
        return all(answers[name].status == baseline[name].status for name in answers)

    await wait_for(
        same_as_before,
        timeout_s=RECOVERY_TIMEOUT_S,
        interval_s=0.5,
        what=f"every endpoint and tool to answer as before once {server} was back",
    )


def _settings(tmp_path: Path, nats: NatsServer, falkordb: FalkorDBServer) -> RecallApiSettings:
    return RecallApiSettings(
        data_dir=tmp_path / "data",
        nats=NatsSettings(url=nats.url, token=nats.token, subject_root="probe", connect_timeout_s=1),  # type: ignore[arg-type]
        vector=VectorSettings(backend="edge", path=tmp_path / "edge"),
        graph=GraphSettings(
            backend="falkordb",
            host=falkordb.host,
            port=falkordb.port,
            password=falkordb.password,  # type: ignore[arg-type]
            graph_name="probe",
        ),
        api_keys=API_KEYS,
    )


@contextlib.asynccontextmanager
async def _stack(
    tmp_path: Path, nats: NatsServer, falkordb: FalkorDBServer, embedder: LocalE5Embedder, keywords: KeywordEncoder
) -> AsyncIterator[tuple[list[Probe], float]]:
    """The stack on these servers, seeded, with a probe for every route and tool, and when it started."""
    started = time.monotonic()
    settings = _settings(tmp_path, nats, falkordb)
    resources = Resources(settings, _embedder=embedder, _keywords=keywords)
    running = await start_services(settings, [EPISODIC, SEMANTIC, PRUNER], resources=resources)
    app = create_app(settings, resources)
    try:
        async with serving(app, over_http=True) as base_url:
            assert base_url is not None
            headers = {"Authorization": f"Bearer {ACME_KEY}"}
            timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
            async with (
                httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout) as http,
                httpx.AsyncClient(base_url=base_url, timeout=timeout) as browser,
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as mcp_http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=mcp_http)) as mcp,
            ):
                seed = await _seed(http)
                await login(browser, ACME_KEY)
                yield [*http_probes(app, http, browser, seed), *await mcp_probes(mcp, seed)], started
    finally:
        await running.stop()


async def _seed(http: httpx.AsyncClient) -> Seed:
    """One session consolidated into an episode and a fact, for the probes to read."""
    event = session_event(
        user_id=SEED_USER, texts=["I moved to Busan last month, the sea view is great.", "Nice, enjoy Busan."]
    )
    session = event.model_dump(mode="json")
    accepted = await http.post("/v1/sessions", json=session)
    assert accepted.status_code == 202, accepted.text

    async def consolidated() -> str | None:
        status = (await http.get(f"/v1/events/{event.event_id}", params={"user_id": SEED_USER})).json()
        return status.get("episode_id") if status.get("state") == "consolidated" else None

    async def a_fact() -> str | None:
        listed = await http.get("/v1/memories", params={"user_id": SEED_USER, "kind": "fact"})
        items = listed.json()["items"]
        return items[0]["id"] if items else None

    opened = await http.post(
        f"/v1/users/{SEED_USER}/sessions/{OPEN_SESSION}/messages",
        json={"messages": [{"role": "user", "content": "I am still unpacking boxes in Busan."}]},
    )
    assert opened.status_code == 202, opened.text
    episode_id = await wait_for(consolidated, timeout_s=90, what="the seed session to be consolidated")
    fact_id = await wait_for(a_fact, timeout_s=90, what="a fact from the seed session")
    return Seed(session, ACME_KEY, str(event.event_id), episode_id, fact_id)
