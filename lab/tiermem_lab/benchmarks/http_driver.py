"""An HTTP client in a process of its own, for benchmarks that time the recall API.

In production the agent calling `/v1/recall/auto` runs in another process. A client in the server's
own event loop (httpx, as the benchmarks used) parses its requests and responses on the loop and the
GIL the server needs, and that time lands in the measured latency (~0.5-1 ms a call on 2 busy
cores). `OutOfProcessClient` drives the calls from a child process instead: plain `http.client`
over one keep-alive connection, timed in the child from sending the request until the last byte of
the answer is read. The pipe between the benchmark and the child is outside the timed span.

The child (`python -m tiermem_lab.benchmarks.http_driver PORT`, stdlib only) reads one request a
line as JSON `[method, path, body or null]` and answers `[status, milliseconds, response text]`."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx


class OutOfProcessClient:
    """Sequential calls to 127.0.0.1:`port` from a child process; `await close()` ends it."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, port: int, headers: dict[str, str]) -> OutOfProcessClient:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            str(port),
            json.dumps(headers),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, float, str]:
        """(status, client-side milliseconds, response text) of one call."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps([method, path, body]).encode() + b"\n")
        await stdin.drain()
        line = await stdout.readline()
        if not line:
            raise RuntimeError(f"the HTTP driver exited (code {await self._process.wait()})")
        status, milliseconds, text = json.loads(line)
        return int(status), float(milliseconds), str(text)

    async def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), timeout=10)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()


@contextlib.asynccontextmanager
async def driver_beside(http: httpx.AsyncClient) -> AsyncIterator[OutOfProcessClient]:
    """An out-of-process client for the server `http` talks to, with the same Authorization header."""
    port = http.base_url.port
    assert port is not None
    driver = await OutOfProcessClient.start(port, {"Authorization": http.headers["Authorization"]})
    try:
        yield driver
    finally:
        await driver.close()


# The server closes a keep-alive connection idle for longer than its timeout (uvicorn: 5 s), e.g. while
# the benchmark compares search results between two timed series; an agent's HTTP client then opens a
# new one, and so does this driver (once per call), timing the call from the new attempt.
_DROPPED = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


def _drive(port: int, headers: dict[str, str]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for line in sys.stdin:
        method, path, body = json.loads(line)
        data = None if body is None else json.dumps(body).encode()
        sent = {**headers, "Content-Type": "application/json"} if data is not None else headers
        for attempt in (1, 2):
            started = time.perf_counter()
            try:
                connection.request(method, path, body=data, headers=sent)
                response = connection.getresponse()
                payload = response.read()
                break
            except _DROPPED:
                connection.close()  # the next request() connects again
                if attempt == 2:
                    raise
        milliseconds = (time.perf_counter() - started) * 1000
        sys.stdout.write(json.dumps([response.status, milliseconds, payload.decode("utf-8", "replace")]) + "\n")
        sys.stdout.flush()
    connection.close()


if __name__ == "__main__":
    _drive(int(sys.argv[1]), json.loads(sys.argv[2]))
