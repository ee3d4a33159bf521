"""docs/api.md names every route of the recall API and every MCP tool: the page is checked against
the FastAPI app and the MCP server themselves, so a new route or tool cannot go undocumented."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import SessionCompleted

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _routes(routes: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """(method, path) of every route, through included routers and mounts; ('', path) for a mount."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's include_router wrapper
        if included is not None:
            prefix = route.include_context.prefix
            yield from ((method, prefix + path) for method, path in _routes(included.routes))
        elif hasattr(route, "methods") and route.methods:
            yield from ((method, route.path) for method in sorted(route.methods - {"HEAD"}))
        else:
            yield "", route.path


@pytest.fixture(scope="module")
def page() -> str:
    return API_DOC.read_text(encoding="utf-8")


def test_every_http_route_is_documented(page: str) -> None:
    from services.recall_api.app import create_app

    found = sorted(set(_routes(create_app().router.routes)))
    assert len(found) > 30, "the walk must see the included routers"
    missing = [
        f"{method} {path}".strip()
        for method, path in found
        # `METHOD /path` closed by a backtick or its query string, so /v1/memories is not /v1/memories/{id}
        if not re.search(re.escape(f"`{method} {path}".replace("` ", "`")) + r"[`?]", page)
    ]
    assert missing == [], f"routes missing from docs/api.md: {missing}"


def test_every_mcp_tool_is_documented(page: str) -> None:
    import asyncio

    from services.common.runtime.resources import Resources
    from services.recall_api.mcp.server import build_mcp_server
    from services.recall_api.service import RecallService
    from services.recall_api.settings import RecallApiSettings

    settings = RecallApiSettings.model_validate({})
    server = build_mcp_server(RecallService(settings, Resources(settings)))
    tools = [tool.name for tool in asyncio.run(server.list_tools())]
    assert len(tools) > 10
    assert [name for name in tools if f"| `{name}` |" not in page] == []


def test_every_session_field_is_documented(page: str) -> None:
    assert [name for name in SessionCompleted.model_fields if f"`{name}`" not in page] == []
