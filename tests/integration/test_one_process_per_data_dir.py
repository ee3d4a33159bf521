"""Qdrant Edge data belongs to one process. A second process on the same data refuses to start,
naming the holder, and touches nothing of the first one's; `tiermem serve recall-api` says so (and
says when its port is taken) in one line and a non-zero exit, without a traceback."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.cli.servers.net import free_port
from services.common.stores.dir_lock import DirInUse
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES
from tests.support.events import wait_for

pytestmark = [pytest.mark.integration]

_HOLD_EDGE = """
import asyncio, sys
from pathlib import Path
from services.common.stores.vector.edge import EdgeVectorIndex

async def main() -> None:
    index = EdgeVectorIndex(Path(sys.argv[1]))
    await index.ensure_collection("episodes", 8)
    print("open", flush=True)
    sys.stdin.readline()
    await index.close()

asyncio.run(main())
"""


@pytest.fixture
def edge_held_elsewhere(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A child process with `tmp_path/edge` open (until its stdin closes)."""
    edge = tmp_path / "edge"
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD_EDGE, str(edge)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "open"
        yield edge, child
    finally:
        child.stdin.close()
        child.wait(timeout=60)


async def test_a_second_process_is_refused_before_it_touches_the_first_ones_files(
    edge_held_elsewhere: tuple[Path, subprocess.Popen[str]],
) -> None:
    edge, holder = edge_held_elsewhere
    # What a build in the holder looks like on disk: a generation that is not current yet.
    building = edge / "episodes.g1"
    building.mkdir()
    (building / "segment").write_text("being built")
    second = EdgeVectorIndex(edge)
    with pytest.raises(DirInUse, match=rf"in use by another process \(pid {holder.pid}\).*Qdrant server"):
        await second.ensure_collection(EPISODES, 8)
    with pytest.raises(DirInUse):
        second.claim()
    assert (building / "segment").read_text() == "being built", "the refused process cleared the holder's build"
    await second.close()  # nothing to close; no error


async def test_the_data_is_free_again_once_its_holder_closes(tmp_path: Path) -> None:
    first = EdgeVectorIndex(tmp_path / "edge")
    await first.ensure_collection(EPISODES, 8)
    with pytest.raises(DirInUse, match=f"pid {os.getpid()}"):
        EdgeVectorIndex(tmp_path / "edge").claim()
    await first.close()
    again = EdgeVectorIndex(tmp_path / "edge")
    await again.ensure_collection(EPISODES, 8)
    await again.close()


def _serve_recall_api(data_dir: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "TIERMEM_HTTP_PORT": str(port), "TIERMEM_DATA_DIR": str(data_dir)}
    env.pop("TIERMEM_API_KEYS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", "recall-api"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
async def test_serve_recall_api_refuses_a_taken_data_dir_or_port_in_one_line(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    first = _serve_recall_api(data_dir, port)
    try:

        async def _healthy() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"http://127.0.0.1:{port}/healthz", timeout=2)).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(_healthy, timeout_s=120, what="the first recall API to answer /healthz")
        for case, (second_data_dir, second_port, reason) in {
            "same data dir": (data_dir, free_port(), rf"qdrant-edge is in use by another process \(pid {first.pid}\)"),
            "same port": (tmp_path / "other", port, f"127.0.0.1:{port}: the port is already in use"),
        }.items():
            second = _serve_recall_api(second_data_dir, second_port)
            try:
                output, _ = await asyncio.to_thread(second.communicate, timeout=120)
            finally:
                second.kill()  # a no-op once it has exited; it must not outlive a failed check
            assert second.returncode == 2, f"{case}: exit {second.returncode}\n{output}"
            assert "error:" in output, f"{case}\n{output}"
            assert re.search(reason, " ".join(output.split())), f"{case}\n{output}"
            assert "Traceback" not in output and "Task was destroyed" not in output, f"{case}\n{output}"
        assert await _healthy(), "the first recall API stopped answering"
    finally:
        first.terminate()
        try:
            output, _ = await asyncio.to_thread(first.communicate, timeout=60)
        finally:
            first.kill()
    assert first.returncode == 0, output
