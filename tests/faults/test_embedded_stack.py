"""`tiermem up` under operator faults: SIGKILL of the parent, a second `up` on the same data dir,
leftovers of a crashed run, dead servers; and the data dir holds nothing other local users can read."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from services.cli.servers.nats_server import find_nats_server_binary
from services.cli.servers.net import free_port, port_answers
from tests.faults.embedded import UpProcess, alive, wait_until
from tests.integration.test_stack import EXAMPLES, TIERMEM, _all_episodes, _derived, _ingest, _wait_for_types

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _readable_by_others(data_dir: Path) -> list[str]:
    exposed = []
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            exposed.append(f"{path.relative_to(data_dir.parent)} {oct(mode)}")
    return exposed


def test_kill_9_of_up_leaves_no_server_and_the_next_up_works_over_the_leftovers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = UpProcess(data_dir, free_port(), tmp_path / "first.log")
    try:
        first.start()
        result = _ingest(data_dir, EXAMPLES / "sessions-en.json")
        assert result.returncode == 0, result.stdout + result.stderr
        episodes = sorted(str(e["event_id"]) for e in asyncio.run(_all_episodes(data_dir)))
        assert _readable_by_others(data_dir) == [], "memory text on disk is private to its owner"

        second = subprocess.run(
            [*TIERMEM, "up", "--http-port", str(free_port())],
            env={**os.environ, "TIERMEM_DATA_DIR": str(data_dir)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert re.search(r"in use by another `tiermem up` \(pid \d+\)", second.stderr), second.stderr
        assert (data_dir / "stack.json").exists(), "the second `up` left the first one's stack file alone"
        assert httpx.get(f"http://127.0.0.1:{first.http_port}/readyz", timeout=5).status_code == 200

        assert first.process is not None
        servers = first.server_pids()
        assert len(servers) >= 2, "nats-server and redis-server run as children"
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        wait_until(lambda: not any(alive(pid) for pid in servers), "nats-server and redis-server to die with up")

        # A leftover the parent-death signal cannot catch (another OS, or started by hand): a server
        # still running on the crashed run's config and JetStream store.
        orphan = subprocess.Popen(
            [str(find_nats_server_binary()), "-c", str(data_dir / "nats" / "nats-server.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            old_port = _configured_nats_port(data_dir)
            wait_until(lambda: port_answers(old_port), "the orphaned nats-server to listen")
            restarted = UpProcess(data_dir, free_port(), tmp_path / "restarted.log")
            try:
                restarted.start()
                assert orphan.wait(timeout=15) is not None, "the new `up` stopped the orphaned server"
                assert "stopping servers left behind by a crashed run" in restarted.log(tail=None)
                after = asyncio.run(_derived(data_dir))
                assert sorted(str(e["event_id"]) for e in after if e["event_type"] == "episode.created") == episodes
                assert restarted.interrupt() == 0, restarted.log()
            finally:
                restarted.kill()
        finally:
            if orphan.poll() is None:
                orphan.kill()
                orphan.wait()
    finally:
        first.kill()


def _configured_nats_port(data_dir: Path) -> int:
    return int(json.loads((data_dir / "nats" / "nats-server.conf").read_text())["port"])


def test_dead_servers_are_restarted_and_the_stack_recovers(tmp_path: Path) -> None:
    stack = UpProcess(tmp_path / "data", free_port(), tmp_path / "up.log")
    try:
        stack.start()
        for name, logged_as in (("nats-server", "nats-server"), ("redis-server", "FalkorDB")):
            pid = stack.server_pid(name)
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda pid=pid: not alive(pid), f"{name} to die")  # type: ignore[misc]
            wait_until(stack.ready, f"the stack to be ready again after {name} was killed", timeout_s=60)
            # /readyz can pass as soon as the new server answers, a moment before the supervisor's
            # start call returns and logs the restart: wait for the line rather than read it once.
            restart_line = f"{logged_as} restarted (restart 1)"
            wait_until(lambda line=restart_line: line in stack.log(tail=None), f"the log to say {restart_line!r}")  # type: ignore[misc]
            assert stack.server_pid(name) != pid, f"{name} was restarted"
        assert stack.log(tail=None).count("restarted (restart 1)") == 2, stack.log()
        result = _ingest(stack.data_dir, EXAMPLES / "sessions-en.json")
        assert result.returncode == 0, result.stdout + result.stderr
        asyncio.run(_wait_for_types(stack.data_dir, {"episode.created", "entity.upserted"}))
        assert stack.interrupt() == 0, stack.log()
    finally:
        stack.kill()
