"""The benchmarks' out-of-process HTTP client (lab/tiermem_lab/benchmarks/http_driver.py) against a real
socket server that drops each keep-alive connection after one answer, as uvicorn does with one left
idle past its keep-alive timeout (a 1M-point scale run lost its power-user phase to that)."""

from __future__ import annotations

import asyncio
import json

from tiermem_lab.benchmarks.http_driver import OutOfProcessClient

_ANSWER = b'{"ok": true}'


async def test_a_dropped_keep_alive_connection_is_reopened_and_the_call_answered() -> None:
    connections: list[int] = []
    bodies: list[dict[str, int]] = []

    async def one_answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections) + 1)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        bodies.append(json.loads(await reader.readexactly(length)))
        # HTTP/1.1 without "Connection: close": the client keeps the connection for its next call.
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(_ANSWER))
        writer.write(_ANSWER)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(one_answer_then_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    driver = await OutOfProcessClient.start(port, {"Authorization": "Bearer test"})
    try:
        answers = [await driver.call("POST", "/v1/recall/auto", {"call": number}) for number in range(3)]
    finally:
        await driver.close()
        server.close()
        await server.wait_closed()
    assert [(status, text) for status, _, text in answers] == [(200, _ANSWER.decode())] * 3
    assert all(milliseconds > 0 for _, milliseconds, _ in answers)
    # Each call reached the server exactly once, on a connection of its own.
    assert bodies == [{"call": 0}, {"call": 1}, {"call": 2}] and len(connections) == 3
