"""`tiermem mcp --url URL`: the MCP stdio transport bridged to a running stack's streamable HTTP
endpoint, so a desktop client configured with `command: tiermem mcp` talks to the same server (and
the same Edge shard) as everybody else while `tiermem up` runs.

The recall API serves MCP stateless with JSON responses, so the bridge is a plain relay: each
newline-delimited JSON-RPC message from stdin is POSTed as it is, and the JSON answer (none for a
notification) is written to stdout as one line. Failures of the HTTP hop become JSON-RPC errors for
the request they belong to; nothing is dropped silently."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

import httpx

PROTOCOL_HEADER = "mcp-protocol-version"
USER_HEADER = "x-tiermem-user-id"
_INTERNAL_ERROR = -32603
_PARSE_ERROR = -32700


def _error(message_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text[:1000]}}


def _ids(message: Any) -> list[Any]:
    """The ids of the requests in a message (a batch has several; notifications have none)."""
    items = message if isinstance(message, list) else [message]
    return [item["id"] for item in items if isinstance(item, dict) and "id" in item and "method" in item]


class McpHttpBridge:
    """Relays JSON-RPC messages to one MCP endpoint with the API key (and an optional pinned user)."""

    def __init__(self, client: httpx.Client, url: str, api_key: str, user_id: str | None = None) -> None:
        self._client = client
        self._url = url
        self._headers = {
            "authorization": f"Bearer {api_key}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        if user_id:
            self._headers[USER_HEADER] = user_id

    def relay(self, line: str) -> list[dict[str, Any]]:
        """The answers to write for one line read from stdin (empty for notifications)."""
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            return [_error(None, _PARSE_ERROR, f"invalid JSON from the client: {exc.msg}")]
        ids = _ids(message)
        try:
            response = self._client.post(self._url, content=line.encode("utf-8"), headers=self._headers)
        except httpx.HTTPError as exc:
            return [_error(i, _INTERNAL_ERROR, f"cannot reach {self._url}: {exc}") for i in ids]
        if not response.content.strip():
            return [] if response.status_code < 400 or not ids else self._http_failure(response, ids)
        try:
            answer = response.json()
        except ValueError:
            return self._http_failure(response, ids)
        answers = answer if isinstance(answer, list) else [answer]
        if not all(isinstance(a, dict) and "jsonrpc" in a for a in answers):
            return self._http_failure(response, ids)
        self._note_protocol(answers)
        return answers

    def _http_failure(self, response: httpx.Response, ids: list[Any]) -> list[dict[str, Any]]:
        return [_error(i, _INTERNAL_ERROR, f"HTTP {response.status_code}: {response.text}") for i in ids]

    def _note_protocol(self, answers: list[dict[str, Any]]) -> None:
        # After initialize, every request carries the negotiated version (streamable HTTP requires it).
        for answer in answers:
            result = answer.get("result")
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self._headers[PROTOCOL_HEADER] = result["protocolVersion"]

    def run(self, lines: Iterable[str], out: TextIO) -> None:
        for line in lines:
            if not line.strip():
                continue
            for answer in self.relay(line.strip()):
                out.write(json.dumps(answer, ensure_ascii=False) + "\n")
                out.flush()


def run_bridge(url: str, api_key: str, user_id: str | None, stdin: TextIO, stdout: TextIO) -> None:
    """Blocking: relay until stdin closes."""
    timeout = httpx.Timeout(30.0, read=300.0)
    with httpx.Client(timeout=timeout) as client:
        McpHttpBridge(client, url, api_key, user_id).run(stdin, stdout)
