"""Randomized leak test: two tenants with the same user names, memories written with a shared
vocabulary (so every query matches everybody's memories), then random requests on every endpoint
and MCP tool as random (tenant, user, channel). Every id, text marker and provenance entry in every
answer must belong to the requester: 0 cross-tenant and 0 cross-user results. Reads and writes by id
(fact, history, correction, forgetting, event status) on another owner's id answer exactly like an
id that does not exist."""

from __future__ import annotations

import contextlib
import json
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from contracts.events import Channel
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.common.stores.graph.repository import EntityInput, EpisodeRef, RelationInput
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import (
    ACME_KEY,
    GLOBEX_KEY,
    RecallStack,
    build_stack,
    days_ago,
    embedder,
    keywords,
)
from tests.support.events import session_event
from tiermem_lab.seeding import passage_id_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

SEED = 20260502
NOT_FOUND_BODY = {"detail": "memory not found", "code": "not_found", "errors": []}
HTTP_ACTIONS = ("auto", "search", "expand", "facts", "graph", "save")
HTTP_WRITE_ACTIONS = ("list", "fact_get", "history", "correct", "forget", "session", "event")
MCP_ACTIONS = ("mcp_search", "mcp_expand", "mcp_graph", "mcp_recall")
MCP_WRITE_ACTIONS = (
    "mcp_list",
    "mcp_get_fact",
    "mcp_history",
    "mcp_correct",
    "mcp_forget",
    "mcp_event",
    "mcp_sessions",
)
ALL_ACTIONS = (*HTTP_ACTIONS, *HTTP_WRITE_ACTIONS, *MCP_ACTIONS, *MCP_WRITE_ACTIONS)
KEYS = {"acme": ACME_KEY, "globex": GLOBEX_KEY}
USERS = ("alice", "bob", "carol")
TOPICS = (
    "DGIA billing migration to Go",
    "온비서 결제 모듈 재작성",
    "Kubernetes cluster upgrade",
    "vegetarian lunch options",
    "부산 여행 일정과 숙소",
    "Postgres index tuning",
)
PEOPLE = ("김민수", "Sarah Lee", "DGIA", "온비서")


def marker(owner: Owner) -> str:
    """A token only this owner's memories contain (and nobody's query ever does)."""
    return f"zq{owner.tenant_id}x{owner.user_id}zq"


@dataclass
class World:
    owner_of: dict[str, Owner] = field(default_factory=dict)  # episode, passage-episode, fact ids
    event_owner: dict[str, Owner] = field(default_factory=dict)  # session event ids
    passage_ids: set[str] = field(default_factory=set)  # not memories of their own (no list/forget by id)
    entity_tenant: dict[str, str] = field(default_factory=dict)  # entity key → tenant
    entity_user: dict[str, Owner | None] = field(default_factory=dict)  # personal entity key → owner
    checks: int = 0
    requests: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.requests[what] = self.requests.get(what, 0) + 1


async def seed_world(stack: RecallStack, rng: random.Random) -> World:
    world = World()
    for tenant in KEYS:
        for user in USERS:
            owner = Owner(tenant, user)
            tag = marker(owner)
            episode_ids: list[str] = []
            for index, topic in enumerate(rng.sample(TOPICS, 4)):
                channel: Channel = "group" if index == 3 else "private"
                session = f"s-{index}"
                episode_id = await stack.episode(
                    owner,
                    session,
                    f"{topic}: decided next steps with {rng.choice(PEOPLE)} ({tag}).",
                    passages=[f"user: more on {topic} {tag}", f"assistant: noted, {topic}"],
                    channel=channel,
                    occurred_at=days_ago(rng.uniform(1, 60)),
                )
                episode_ids.append(episode_id)
                world.owner_of[episode_id] = owner
                world.owner_of[passage_id_for(episode_id, 0)] = owner
                world.owner_of[passage_id_for(episode_id, 1)] = owner
                world.passage_ids.update(passage_id_for(episode_id, index) for index in (0, 1))
            for attribute, value in (("works_on", rng.choice(TOPICS)), ("lives_in", rng.choice(["Seoul", "Busan"]))):
                fact_id = await stack.fact(
                    owner,
                    f"The user {attribute.replace('_', ' ')} {value} ({tag}).",
                    attribute,
                    value,
                    channel=rng.choice(["private", "group"]),
                )
                world.owner_of[fact_id] = owner
            ref = EpisodeRef(episode_ids[0], "s-0", days_ago(1).timestamp())
            personal = await stack.graph.upsert_entities(
                owner, "personal", [EntityInput(name) for name in PEOPLE] + [EntityInput(tag)], episode=ref
            )
            for entity in personal:
                world.entity_tenant[entity.key] = tenant
                world.entity_user[entity.key] = owner
            keys = [entity.key for entity in personal]
            await stack.graph.upsert_relations(
                owner,
                "personal",
                [RelationInput(keys[i], "related_to", keys[i + 1]) for i in range(len(keys) - 1)],
                episode=ref,
            )
            # A team entity every user of the tenant mentions: shared within the tenant by design.
            group_ref = EpisodeRef(episode_ids[3], "s-3", days_ago(1).timestamp())
            (team,) = await stack.graph.upsert_entities(owner, "team", [EntityInput("DGIA")], episode=group_ref)
            world.entity_tenant[team.key] = tenant
            world.entity_user[team.key] = None
    return world


def assert_no_leak(world: World, requester: Owner, channel: str, body: Any, *, expand_id: str | None = None) -> None:
    """Every id and marker in `body` belongs to the requester (and to a group session when the
    channel is group); a raw dump of the answer contains no other owner's marker."""
    text = json.dumps(body, ensure_ascii=False)
    for tenant in KEYS:
        for user in USERS:
            other = Owner(tenant, user)
            if other != requester:
                assert marker(other) not in text, (requester, other, text[:500])
    items = body.get("items", []) if isinstance(body, dict) else []
    for item in items:
        world.checks += 1
        assert world.owner_of.get(item["id"]) == requester, (requester, item)
        if channel == "group":
            assert item["channel"] == "group", item
    for entity in body.get("entities", []) if isinstance(body, dict) else []:
        world.checks += 1
        assert world.entity_tenant[entity["key"]] == requester.tenant_id, (requester, entity)
        assert world.entity_user[entity["key"]] in (None, requester), (requester, entity)
        for source in entity["provenance"]:
            assert world.owner_of[source["episode_id"]] == requester, (requester, entity)
    for relation in body.get("relations", []) if isinstance(body, dict) else []:
        world.checks += 1
        for key in (relation["source_key"], relation["target_key"]):
            assert world.entity_tenant[key] == requester.tenant_id
            assert world.entity_user[key] in (None, requester)
        for source in relation["provenance"]:
            assert world.owner_of[source["episode_id"]] == requester
    if expand_id is not None and isinstance(body, dict) and "kind" in body:
        world.checks += 1
        assert world.owner_of.get(expand_id) == requester


@pytest.fixture
async def served(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True) as stack:
        yield stack


async def test_random_requests_never_leak_across_tenants_or_users(served: RecallStack) -> None:
    rng = random.Random(SEED)
    world = await seed_world(served, rng)
    assert served.base_url is not None
    all_ids = [*world.owner_of, str(uuid.uuid4())]
    async with contextlib.AsyncExitStack() as exits:
        clients: dict[str, httpx.AsyncClient] = {}
        sessions: dict[str, Client] = {}
        for tenant, key in KEYS.items():
            clients[tenant] = await exits.enter_async_context(served.client(key))
            mcp_http = await exits.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0))
            )
            sessions[tenant] = await exits.enter_async_context(
                Client(streamable_http_client(f"{served.base_url}/mcp", http_client=mcp_http))
            )
        for _ in range(400):
            tenant = rng.choice(list(KEYS))
            requester = Owner(tenant, rng.choice(USERS))
            channel = rng.choice(["private", "group"])
            query = " ".join(rng.sample([*TOPICS, *PEOPLE, "what did we decide", "그거 어떻게 됐어?"], 2))
            action = rng.choice(ALL_ACTIONS)
            world.count(action)
            request = _Request(world, requester, channel, query, all_ids, rng)
            if action in MCP_WRITE_ACTIONS:
                await _mcp_write_request(sessions[tenant], action, request)
            elif action in HTTP_WRITE_ACTIONS:
                await _http_write_request(clients[tenant], action, request)
            elif action.startswith("mcp_"):
                await _mcp_request(sessions[tenant], action, request)
            else:
                await _http_request(clients[tenant], action, request)
    # The test looked at real results, on every kind of request.
    assert set(world.requests) == set(ALL_ACTIONS)
    assert world.checks > 400, world.checks


@dataclass
class _Request:
    """One random request: who asks, from which channel, about what."""

    world: World
    requester: Owner
    channel: str
    query: str
    all_ids: list[str]
    rng: random.Random

    @property
    def base(self) -> dict[str, str]:
        return {"user_id": self.requester.user_id, "channel": self.channel}

    def check(self, body: Any, expand_id: str | None = None) -> None:
        assert_no_leak(self.world, self.requester, self.channel, body, expand_id=expand_id)


async def _http_request(http: httpx.AsyncClient, action: str, r: _Request) -> None:
    base, world, rng = r.base, r.world, r.rng
    if action == "auto":
        response = await http.post("/v1/recall/auto", json={**base, "message": r.query, "max_entries": 5})
    elif action == "search":
        response = await http.post("/v1/memories/search", json={**base, "query": r.query, "limit": 20})
    elif action == "facts":
        response = await http.get("/v1/facts", params=base)
    elif action == "graph":
        body: dict[str, Any] = {**base, "hops": rng.randint(1, 3)}
        body.update({"entity": rng.choice(PEOPLE)} if rng.random() < 0.5 else {"query": r.query})
        response = await http.post("/v1/graph/search", json=body)
    elif action == "expand":
        memory_id = rng.choice(r.all_ids)
        response = await http.get(f"/v1/memories/{memory_id}", params=base)
        if world.owner_of.get(memory_id) != r.requester or memory_id in world.passage_ids:
            # Another owner's id, or a passage id (expand opens episodes and facts), reads as absent.
            assert response.status_code == 404
            assert response.json() == NOT_FOUND_BODY
        elif response.status_code == 200:
            r.check(response.json(), expand_id=memory_id)
        else:  # own memory, but private and asked from a group channel
            assert (response.status_code, r.channel) == (404, "group")
        return
    else:
        assert action == "save"
        text = f"The user likes {rng.choice(TOPICS)} ({marker(r.requester)})."
        response = await http.post("/v1/facts", json={**base, "text": text, "attribute": "likes"})
        assert response.status_code == 200, response.text
        world.owner_of[response.json()["fact_id"]] = r.requester
        r.all_ids.append(response.json()["fact_id"])
        return
    assert response.status_code == 200
    r.check(response.json())


async def _mcp_request(mcp: Client, action: str, r: _Request) -> None:
    base = r.base
    if action == "mcp_expand":
        memory_id = r.rng.choice(r.all_ids)
        result = await mcp.call_tool("memory_expand", {**base, "id": memory_id})
        if r.world.owner_of.get(memory_id) != r.requester or memory_id in r.world.passage_ids:
            assert result.is_error
        elif result.is_error:  # own memory, but private and asked from a group channel
            assert r.channel == "group"
        else:
            r.check(result.structured_content, expand_id=memory_id)
        return
    if action == "mcp_search":
        result = await mcp.call_tool("memory_search", {**base, "query": r.query, "limit": 20})
    elif action == "mcp_graph":
        result = await mcp.call_tool("knowledge_graph_search", {**base, "entity": r.rng.choice(PEOPLE), "hops": 2})
    else:
        assert action == "mcp_recall"
        result = await mcp.call_tool("memory_recall", base)
    assert not result.is_error
    r.check(result.structured_content)


def _foreign(r: _Request, memory_id: str) -> bool:
    return r.world.owner_of.get(memory_id) != r.requester


def _check_owned(r: _Request, ids: list[str], body: Any) -> None:
    assert_no_leak(r.world, r.requester, "private", {"body": body})
    for memory_id in ids:
        r.world.checks += 1
        assert r.world.owner_of.get(memory_id) == r.requester, (r.requester, memory_id)


def _new_session(r: _Request) -> dict[str, Any]:
    event = session_event(
        tenant_id=r.requester.tenant_id, user_id=r.requester.user_id, texts=[f"notes {marker(r.requester)}"]
    )
    r.world.event_owner[str(event.event_id)] = r.requester
    return event.model_dump(mode="json")


def _some_event(r: _Request) -> str:
    known = list(r.world.event_owner)
    return r.rng.choice(known) if known and r.rng.random() < 0.9 else str(uuid.uuid4())


async def _http_write_request(http: httpx.AsyncClient, action: str, r: _Request) -> None:
    user = {"user_id": r.requester.user_id}
    memory_id = r.rng.choice(r.all_ids)
    if action == "list":
        response = await http.get("/v1/memories", params={**user, "kind": r.rng.choice(["episode", "fact", "all"])})
        assert response.status_code == 200, response.text
        _check_owned(r, [item["id"] for item in response.json()["items"]], response.json())
    elif action in ("fact_get", "history"):
        path = f"/v1/facts/{memory_id}" + ("/history" if action == "history" else "")
        response = await http.get(path, params=user)
        if _foreign(r, memory_id):
            assert (response.status_code, response.json()) == (404, NOT_FOUND_BODY)
        elif response.status_code == 200:
            body = response.json()
            _check_owned(r, [v["id"] for v in body.get("versions", [body])], body)
    elif action == "correct":
        correction = {**user, "value": "Daegu", "text": f"The user lives in Daegu ({marker(r.requester)})."}
        response = await http.post(f"/v1/facts/{memory_id}/corrections", json=correction)
        if _foreign(r, memory_id):
            assert (response.status_code, response.json()) == (404, NOT_FOUND_BODY)
        elif response.status_code == 200:
            r.world.owner_of[response.json()["fact_id"]] = r.requester
            r.all_ids.append(response.json()["fact_id"])
    elif action == "forget":
        response = await http.delete(f"/v1/memories/{memory_id}", params=user)
        expected = 404 if _foreign(r, memory_id) or memory_id in r.world.passage_ids else 202
        assert response.status_code == expected, response.text
    elif action == "session":
        response = await http.post("/v1/sessions", json=_new_session(r))
        assert response.status_code == 202, response.text
    else:
        assert action == "event"
        event_id = _some_event(r)
        response = await http.get(f"/v1/events/{event_id}", params=user)
        owned = r.world.event_owner.get(event_id) == r.requester
        assert response.status_code == (200 if owned else 404), (event_id, response.text)
        r.world.checks += 1


async def _mcp_write_request(mcp: Client, action: str, r: _Request) -> None:
    user = {"user_id": r.requester.user_id}
    memory_id = r.rng.choice(r.all_ids)
    if action == "mcp_list":
        result = await mcp.call_tool("memory_list", {**user, "kind": r.rng.choice(["episode", "fact", "all"])})
        assert not result.is_error and result.structured_content is not None
        _check_owned(r, [i["id"] for i in result.structured_content["items"]], result.structured_content)
        return
    if action == "mcp_sessions":
        result = await mcp.call_tool("memory_add_sessions", {"sessions": [_new_session(r)]})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["items"][0]["status"] == "accepted"
        return
    if action == "mcp_event":
        event_id = _some_event(r)
        result = await mcp.call_tool("memory_event_status", {**user, "event_id": event_id})
        assert result.is_error == (r.world.event_owner.get(event_id) != r.requester)
        r.world.checks += 1
        return
    tool, arguments = {
        "mcp_get_fact": ("memory_get_fact", {**user, "fact_id": memory_id}),
        "mcp_history": ("memory_fact_history", {**user, "fact_id": memory_id}),
        "mcp_forget": ("memory_forget", {**user, "memory_id": memory_id}),
        "mcp_correct": ("memory_correct", {**user, "fact_id": memory_id, "value": "Ulsan", "text": "Lives in Ulsan."}),
    }[action]
    result = await mcp.call_tool(tool, arguments)
    if _foreign(r, memory_id):
        assert result.is_error, (tool, result.structured_content)
        r.world.checks += 1
    elif not result.is_error and result.structured_content is not None:
        body = result.structured_content
        if action == "mcp_correct":
            r.world.owner_of[body["fact_id"]] = r.requester
            r.all_ids.append(body["fact_id"])
        else:
            _check_owned(r, [v["id"] for v in body.get("versions", [])], body)
