"""A real OpenAI-compatible HTTP server on loopback, driven by a script, so tests exercise litellm's
whole HTTP path (request building, status-code → exception mapping, timeouts, response parsing)
without any network or model.

Tests push scripted responses per route before making calls; every request received is recorded.
A chat request that finds no scripted response gets a 500 and is counted as unscripted, so the
fixture can fail the test loudly instead of letting a retry loop hide it. Embedding requests without
a scripted response get deterministic hash-derived vectors, which is enough for most callers.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Route = Literal["chat", "embeddings"]

_ROUTES: dict[str, Route] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
}


@dataclass(frozen=True)
class ScriptedResponse:
    """One response the stub will send: a status, a JSON body and an optional delay before sending."""

    status: int
    body: dict[str, Any]
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    """A request the stub received."""

    route: Route
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    scripted: bool

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of a chat request (empty for other routes)."""
        value = self.body.get("messages", [])
        return list(value) if isinstance(value, list) else []


def chat_completion_body(
    content: str | None, *, model: str = "stub-model", prompt_tokens: int = 11, completion_tokens: int = 7
) -> dict[str, Any]:
    """An OpenAI chat.completion response body carrying `content`."""
    return {
        "id": f"chatcmpl-stub-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-style error body."""
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}


def hash_embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector derived from the text (not semantic; only stable)."""
    values: list[float] = []
    counter = 0
    while len(values) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend((byte - 127.5) / 127.5 for byte in digest)
        counter += 1
    values = values[:dim]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_body(
    vectors: list[list[float]], *, model: str = "stub-embedding", prompt_tokens: int = 3
) -> dict[str, Any]:
    """An OpenAI embeddings response body."""
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": vector} for i, vector in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


class LlmStubServer:
    """OpenAI-compatible stub on 127.0.0.1 serving /v1/chat/completions and /v1/embeddings from a script."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, embedding_dim: int = 8) -> None:
        self._host = host
        self._requested_port = port
        self.embedding_dim = embedding_dim
        self._lock = threading.Lock()
        self._scripts: dict[Route, deque[ScriptedResponse]] = {"chat": deque(), "embeddings": deque()}
        self._requests: list[RecordedRequest] = []
        self._chat_responder: Callable[[dict[str, Any]], ScriptedResponse] | None = None
        # Set to wake every handler that is sleeping in a scripted delay (reset / stop).
        self._abort_delays = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("llm stub already started")
        server = ThreadingHTTPServer((self._host, self._requested_port), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="llm-stub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._abort_delays.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("llm stub is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def api_base(self) -> str:
        """What litellm's `api_base` should be (the OpenAI client appends /chat/completions)."""
        return f"{self.url}/v1"

    # ---- script ----------------------------------------------------------------------------

    def push(self, route: Route, response: ScriptedResponse) -> None:
        with self._lock:
            self._scripts[route].append(response)

    def push_chat_content(
        self,
        content: str | None,
        *,
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        delay_s: float = 0.0,
        model: str = "stub-model",
    ) -> None:
        """Script one successful chat completion whose message content is `content`."""
        body = chat_completion_body(
            content, model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        self.push("chat", ScriptedResponse(status=200, body=body, delay_s=delay_s))

    def push_chat_json(self, value: Any, **kwargs: Any) -> None:
        """Script one successful chat completion whose content is `value` encoded as JSON."""
        self.push_chat_content(json.dumps(value, ensure_ascii=False), **kwargs)

    def push_error(
        self,
        status: int,
        message: str = "scripted error",
        *,
        route: Route = "chat",
        delay_s: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Script one error response with an OpenAI-style error body."""
        self.push(
            route,
            ScriptedResponse(status=status, body=error_body(status, message), delay_s=delay_s, headers=headers or {}),
        )

    def push_embeddings(self, vectors: list[list[float]], *, delay_s: float = 0.0, prompt_tokens: int = 3) -> None:
        """Script one embeddings response with exactly these vectors."""
        self.push(
            "embeddings",
            ScriptedResponse(status=200, body=embeddings_body(vectors, prompt_tokens=prompt_tokens), delay_s=delay_s),
        )

    def respond_with(self, responder: Callable[[dict[str, Any]], ScriptedResponse] | None) -> None:
        """Answer chat requests the script does not cover with `responder(request body)` (called in the
        handler thread; such requests count as scripted). For many concurrent calls whose order is not
        fixed: the response is derived from the request. `reset` removes it."""
        with self._lock:
            self._chat_responder = responder

    def pending(self, route: Route = "chat") -> int:
        """Scripted responses not consumed yet."""
        with self._lock:
            return len(self._scripts[route])

    def requests(self, route: Route | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._requests if route is None or r.route == route]

    def unscripted_chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests("chat") if not r.scripted]

    def reset(self) -> None:
        """Forget the script and the recorded requests; wake handlers sleeping in a scripted delay."""
        with self._lock:
            for script in self._scripts.values():
                script.clear()
            self._requests.clear()
            self._chat_responder = None
            self._abort_delays.set()
            self._abort_delays = threading.Event()

    # ---- request handling (handler threads) ------------------------------------------------

    def _take(self, route: Route, path: str, body: dict[str, Any], headers: dict[str, str]) -> ScriptedResponse:
        with self._lock:
            script = self._scripts[route]
            response = script.popleft() if script else None
            responder = self._chat_responder if route == "chat" and response is None else None
            scripted = response is not None or responder is not None
            self._requests.append(
                RecordedRequest(
                    route=route,
                    path=path,
                    body=body,
                    headers=headers,
                    received_at=time.monotonic(),
                    scripted=scripted,
                )
            )
        if response is not None:
            return response
        if responder is not None:
            return responder(body)
        if route == "embeddings":
            return ScriptedResponse(status=200, body=embeddings_body(self._default_vectors(body)))
        return ScriptedResponse(status=500, body=error_body(500, f"llm stub: no scripted response left for {path}"))

    def _default_vectors(self, body: dict[str, Any]) -> list[list[float]]:
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else [str(item) for item in raw]
        return [hash_embedding(text, self.embedding_dim) for text in texts]

    def _delay(self, seconds: float) -> None:
        if seconds > 0:
            with self._lock:
                abort = self._abort_delays
            abort.wait(seconds)


def _make_handler(stub: LlmStubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            # Silence the per-request stderr log; requests are recorded instead.
            return

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            route = _ROUTES.get(path)
            if route is None:
                self._send(404, error_body(404, f"llm stub: unknown path {path}"), {})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, error_body(400, "llm stub: request body is not JSON"), {})
                return
            headers = {key.lower(): value for key, value in self.headers.items()}
            response = stub._take(route, path, body if isinstance(body, dict) else {}, headers)
            stub._delay(response.delay_s)
            self._send(response.status, response.body, response.headers)

        def do_GET(self) -> None:
            self._send(404, error_body(404, "llm stub: only POST is served"), {})

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (its timeout fired while we were delaying): expected in timeout tests.
                self.close_connection = True

    return Handler
