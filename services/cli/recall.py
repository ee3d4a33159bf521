"""`tiermem recall auto|search|expand|graph`: thin clients of the recall HTTP API, and `tiermem mcp`."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer
from rich.console import Console

from services.cli.metadata_option import MetaOption, metadata_filter
from services.common.runtime.settings import DEFAULT_DATA_DIR, load_settings, read_stack_file

if TYPE_CHECKING:
    from services.recall_api.settings import RecallApiSettings

recall_app = typer.Typer(help="Ask the running recall API (L0 auto-inject, L1 search/expand, L2 graph).")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data dir of the running stack.")]
ApiKey = Annotated[
    str | None, typer.Option("--api-key", envvar="TIERMEM_API_KEY", help="Default: <data-dir>/dev-api-key.")
]
BaseUrl = Annotated[
    str | None, typer.Option("--url", envvar="TIERMEM_RECALL_URL", help="Default: the running stack's address.")
]
UserId = Annotated[str, typer.Option("--user", "-u", help="End user id.")]


def stack_data_dir(data_dir: Path | None) -> Path:
    return data_dir or Path(os.environ.get("TIERMEM_DATA_DIR") or DEFAULT_DATA_DIR)


def api_client(data_dir: Path | None, api_key: str | None, url: str | None) -> httpx.Client:
    resolved = stack_data_dir(data_dir)
    if url is None:
        settings = load_settings(resolved)
        url = f"http://{settings.http_host}:{settings.http_port}"
    if api_key is None:
        key_file = resolved / "dev-api-key"
        if not key_file.exists():
            err_console.print(f"[red]error:[/] no API key: pass --api-key or run `tiermem up` ({key_file} is missing)")
            raise typer.Exit(2)
        api_key = key_file.read_text(encoding="utf-8").strip()
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60)


def call_api(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        err_console.print(f"[red]error:[/] cannot reach the recall API at {client.base_url}: {exc}")
        raise typer.Exit(2) from exc
    if response.status_code >= 400:
        err_console.print(f"[red]error {response.status_code}:[/] {response.text}")
        raise typer.Exit(1)
    return response.json()


def print_json(value: Any) -> None:
    console.print_json(json.dumps(value, ensure_ascii=False))


@dataclass(frozen=True)
class ApiTarget:
    """Where a thin client command sends its one request: the options every such command takes."""

    data_dir: Path | None
    api_key: str | None
    url: str | None


def print_api_answer(target: ApiTarget, method: str, path: str, **kwargs: Any) -> None:
    """One request to the running recall API, its JSON answer printed (errors exit as `call_api` says)."""
    with api_client(target.data_dir, target.api_key, target.url) as client:
        print_json(call_api(client, method, path, **kwargs))


@recall_app.command("auto")
def auto(
    message: Annotated[str, typer.Argument(help="The current user message.")],
    user: UserId,
    recent: Annotated[list[str] | None, typer.Option("--recent", help="Earlier user turns, oldest first.")] = None,
    channel: Annotated[str, typer.Option(help="private | group")] = "private",
    meta: MetaOption = None,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """L0: the `## Memory Context` section for this turn (or nothing)."""
    body = {
        "user_id": user,
        "message": message,
        "channel": channel,
        "recent_messages": [{"role": "user", "content": text} for text in recent or []],
        "metadata": metadata_filter(meta),
    }
    with api_client(data_dir, api_key, url) as client:
        result = call_api(client, "POST", "/v1/recall/auto", json=body)
    if result.get("section"):
        console.print(result["section"], markup=False, highlight=False)
    else:
        console.print(_nothing_injected(result), markup=False, highlight=False)


def _nothing_injected(result: dict[str, Any]) -> str:
    """Why L0 injected nothing, in words, with the candidates it cut and why (best first)."""
    reason = result.get("skipped_reason") or "no reason given by the server"
    lines = [f"Nothing injected: {reason}."]
    if result.get("top_score") is not None:
        lines.append(f"Best relevance seen: {result['top_score']:.3f}.")
    for cut in result.get("cut") or []:
        lines.append(f"  cut {cut['kind']} {cut['id']} (score {cut['score']:.3f}): {cut['reason']}")
    return "\n".join(lines)


@recall_app.command("search")
def search(
    query: Annotated[str, typer.Argument()],
    user: UserId,
    limit: int = 10,
    meta: MetaOption = None,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """L1 memory_search: ids, abstracts and each item's session metadata."""
    print_api_answer(
        ApiTarget(data_dir, api_key, url),
        "POST",
        "/v1/memories/search",
        json={"user_id": user, "query": query, "limit": limit, "metadata": metadata_filter(meta)},
    )


@recall_app.command("expand")
def expand(
    memory_id: Annotated[str, typer.Argument()],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """L1 memory_expand: the full episode or fact with provenance and source messages."""
    print_api_answer(ApiTarget(data_dir, api_key, url), "GET", f"/v1/memories/{memory_id}", params={"user_id": user})


@recall_app.command("graph")
def graph(
    query: Annotated[str, typer.Argument(help="Free text naming an entity.")],
    user: UserId,
    hops: int = 2,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """L2 knowledge_graph_search: entities and relations around what the query names."""
    print_api_answer(
        ApiTarget(data_dir, api_key, url),
        "POST",
        "/v1/graph/search",
        json={"user_id": user, "query": query, "hops": hops},
    )


def mcp_command(
    api_key: ApiKey = None,
    user: Annotated[str | None, typer.Option("--user", help="Pin every tool call to this user.")] = None,
    data_dir: DataDir = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url", help="Bridge stdio to this MCP endpoint (e.g. http://127.0.0.1:8080/mcp) instead of serving here."
        ),
    ] = None,
) -> None:
    """Serve the MCP tools over stdio. With --url (or while `tiermem up` runs on this data dir) stdio
    is bridged to the running stack's streamable HTTP endpoint, which serves the same tools."""
    import sys

    from services.cli.mcp_bridge import run_bridge
    from services.recall_api.settings import RecallApiSettings

    resolved = stack_data_dir(data_dir)
    settings = load_settings(resolved)
    if api_key is None and (resolved / "dev-api-key").exists():
        api_key = (resolved / "dev-api-key").read_text(encoding="utf-8").strip()
    if url is None and read_stack_file(resolved) is not None and settings.vector.backend == "edge":
        # The Edge shard belongs to the running `tiermem up` process: use its endpoint, never open it twice.
        mcp_path = RecallApiSettings(**settings.model_dump()).mcp_path
        url = f"http://{settings.http_host}:{settings.http_port}{mcp_path}"
    if url is not None:
        if not api_key:
            err_console.print("[red]error:[/] the bridge needs an API key: pass --api-key (or TIERMEM_API_KEY)")
            raise typer.Exit(2)
        run_bridge(url, api_key, user, sys.stdin, sys.stdout)
        return
    asyncio.run(_serve_mcp_stdio(RecallApiSettings(**settings.model_dump()), api_key, user))


async def _serve_mcp_stdio(settings: RecallApiSettings, api_key: str | None, user: str | None) -> None:
    """The MCP tools on the resources of a composition root without consumer services (the same
    resources as every other shape), closed when the client closes stdin."""
    from services.common.runtime.root import bootstrap
    from services.recall_api.mcp.server import serve_stdio

    root = await bootstrap(settings, [])
    try:
        await serve_stdio(settings, api_key=api_key, user_id=user, resources=root.resources)
    finally:
        await root.stop()
