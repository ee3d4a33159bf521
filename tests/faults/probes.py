"""One request per HTTP route and MCP tool of the recall API, built from the app's own routes and the
MCP server's own tool list, so a route or tool added later is probed without touching the probe.

Ids in paths, queries and bodies are filled by parameter name from the seeded memories. Routes that
change or remove memory (DELETE, corrections, forgetting, erasing) are sent for a user that holds
nothing and with ids that do not exist: they still reach the stores (a lookup, a publish) on every
call, and the seeded memories the other probes read stay as they were, so "back to normal" means the
same status as before the outage."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from mcp import Client
from mcp.types import TextContent
from pydantic import BaseModel

SEED_USER = "alice"
EMPTY_USER = "probe-nobody"
# Routes whose repetition would change the seeded state, so they run for nobody: logout would end
# the browser session the /ui probes use (it touches no store).
SKIPPED = {("POST", "/ui/logout")}
# Ending a per-turn session is one too: after it, appending to the seeded open session would be a 409.
_DESTRUCTIVE = re.compile(r"/(forget|erase|correct|corrections|end)$")
OPEN_SESSION = "probe-open"
"""The seed user's per-turn session (opened by the seed, so reading it is a 200 from the first round)."""
_CSRF = re.compile(r'name="csrf"\s+value="([^"]+)"')


@dataclass(frozen=True)
class Seed:
    """What the probes refer to: one consolidated session's ids."""

    session: dict[str, Any]
    api_key: str
    event_id: str
    episode_id: str
    fact_id: str


@dataclass(frozen=True)
class Outcome:
    """What one probe got: an HTTP status (0 for no answer at all) and a short text."""

    status: int
    text: str
    is_error_shape: bool = False


@dataclass(frozen=True)
class Probe:
    name: str
    send: Callable[[], Awaitable[Outcome]]


def api_routes(app: FastAPI) -> list[tuple[str, APIRoute]]:
    """(method, route) of every route, through FastAPI's included routers."""

    def walk(routes: Iterable[Any], prefix: str) -> Iterator[tuple[str, APIRoute]]:
        for route in routes:
            included = getattr(route, "original_router", None)
            if included is not None:
                yield from walk(included.routes, prefix + route.include_context.prefix)
            elif isinstance(route, APIRoute):
                for method in sorted((route.methods or set()) - {"HEAD"}):
                    yield method, route

    return list(walk(app.router.routes, ""))


def _ids(seed: Seed, destructive: bool) -> dict[str, str]:
    unknown = str(uuid.uuid4())
    if destructive:
        return {"user_id": EMPTY_USER, "memory_id": unknown, "fact_id": unknown, "episode_id": unknown}
    return {
        "user_id": SEED_USER,
        "memory_id": seed.episode_id,
        "episode_id": seed.episode_id,
        "fact_id": seed.fact_id,
        "event_id": seed.event_id,
    }


def _values(seed: Seed, ids: dict[str, str]) -> dict[str, Any]:
    """A value for each parameter or body field a route or tool may require, by its name."""
    return {
        **ids,
        "id": ids["memory_id"],
        "query": "Busan",
        "message": "Where do I live now?",
        "entity": "Busan",
        "text": "The user lives in Busan.",
        "value": "Busan",
        "session": seed.session,
        "sessions": [seed.session],
        "messages": [{"role": "user", "content": "I live in Busan now."}],
        "session_id": OPEN_SESSION,
        "confirm": ids["user_id"],
        "api_key": seed.api_key,
    }


def _body(route: APIRoute, values: dict[str, Any]) -> dict[str, Any] | None:
    field = route.body_field
    if field is None:
        return None
    model = field.field_info.annotation
    if isinstance(model, type) and issubclass(model, BaseModel) and "event_id" in model.model_fields:
        return dict(values["session"])  # a SessionCompleted itself
    if isinstance(model, type) and issubclass(model, BaseModel) and len(route.dependant.body_params) == 1:
        return {name: values[name] for name in model.model_fields if name in values}
    return {name: values[name] for name in (f.name for f in route.dependant.body_params) if name in values}


def http_probes(app: FastAPI, http: httpx.AsyncClient, browser: httpx.AsyncClient, seed: Seed) -> list[Probe]:
    probes = []
    for method, route in api_routes(app):
        if (method, route.path) in SKIPPED:
            continue
        destructive = method == "DELETE" or bool(_DESTRUCTIVE.search(route.path))
        values = _values(seed, _ids(seed, destructive))
        path = route.path.format(**{p.name: values[p.name] for p in route.dependant.path_params})
        query = {p.name: values[p.name] for p in route.dependant.query_params if p.name in values}
        body = _body(route, values)
        # The logged-in browser for /ui, except a login: its new cookie would replace the browser's,
        # whose CSRF token the other /ui probes send.
        ui = route.path.startswith("/ui") and (method, route.path) != ("POST", "/ui/login")
        probes.append(Probe(f"{method} {route.path}", _http_sender(browser if ui else http, method, path, query, body)))
    return probes


def _http_sender(
    client: httpx.AsyncClient, method: str, path: str, query: dict[str, Any], body: dict[str, Any] | None
) -> Callable[[], Awaitable[Outcome]]:
    form = path.startswith("/ui")  # the memory browser's actions are HTML forms

    async def send() -> Outcome:
        data = dict(body or {})
        if form and method == "POST":
            data.setdefault("csrf", getattr(client, "csrf", ""))
            if isinstance(data.get("messages"), list):  # the browser's form takes one "role: text" turn a line
                data["messages"] = "\n".join(f"{m['role']}: {m['content']}" for m in data["messages"])
        try:
            response = await client.request(
                method,
                path,
                params=query,
                json=data if body is not None and not form else None,
                data=data if form and method == "POST" else None,
            )
        except httpx.TransportError as exc:
            return Outcome(0, f"no answer: {type(exc).__name__}")
        return _outcome(response)

    return send


def _outcome(response: httpx.Response) -> Outcome:
    text = response.text[:300]
    shape = False
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        shape = isinstance(body, dict) and {"detail", "code", "errors"} <= body.keys()
    return Outcome(response.status_code, text, shape)


async def login(browser: httpx.AsyncClient, api_key: str) -> None:
    """A /ui session on `browser` (its cookie), and its CSRF token as `browser.csrf`."""
    response = await browser.post("/ui/login", data={"api_key": api_key})
    assert response.status_code in (200, 303), response.text
    page = await browser.get("/ui")
    found = _CSRF.search(page.text)
    assert found, "no CSRF token on /ui"
    browser.csrf = found.group(1)  # type: ignore[attr-defined]


async def mcp_probes(client: Client, seed: Seed) -> list[Probe]:
    probes = []
    for tool in (await client.list_tools()).tools:
        destructive = bool(tool.annotations and tool.annotations.destructive_hint)
        values = _values(seed, _ids(seed, destructive or "correct" in tool.name))
        required = tool.input_schema.get("required") or []
        arguments = {name: values[name] for name in tool.input_schema.get("properties", {}) if name in values}
        missing = [name for name in required if name not in arguments]
        assert not missing, f"the probe has no value for {tool.name}'s {missing}: add one to _values"
        probes.append(Probe(f"mcp {tool.name}", _tool_sender(client, tool.name, arguments)))
    return probes


def _tool_sender(client: Client, name: str, arguments: dict[str, Any]) -> Callable[[], Awaitable[Outcome]]:
    async def send() -> Outcome:
        try:
            result = await client.call_tool(name, arguments)
        except Exception as exc:  # the MCP endpoint itself failed (an HTTP 500, a dropped connection)
            return Outcome(500, f"call failed: {type(exc).__name__}: {exc}"[:300])
        text = " ".join(part.text for part in result.content if isinstance(part, TextContent))
        return Outcome(1 if result.is_error else 0, text[:300])

    return send
