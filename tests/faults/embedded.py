"""`tiermem up` as a child process for the fault tests: output to a file (a pipe nobody reads would
block the stack once an outage fills it with log lines), children listed from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

TIERMEM = [sys.executable, "-m", "services.cli"]


def children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class UpProcess:
    """One `tiermem up` run on `data_dir`."""

    def __init__(self, data_dir: Path, http_port: int, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.http_port = http_port
        self.log_path = log_path
        self.env = {
            **os.environ,
            "TIERMEM_DATA_DIR": str(data_dir),
            # No scheduled prune pass during a fault test: passes fall on the wall clock's 6-hour marks
            # (00:00, 06:00, ... UTC), and a run that straddles one forgets the superseded facts that the
            # fault-free run it is compared with kept (seen once in CI, a faulted run across 18:00).
            "TIERMEM_PRUNE_INITIAL_DELAY_S": str(7 * 86_400),
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120.0) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*TIERMEM, "up", "--http-port", str(self.http_port)], env=self.env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"tiermem up exited with {self.process.returncode}:\n{self.log()}")
            if self.ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"tiermem up did not become ready:\n{self.log()}")

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.http_port}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self, tail: int | None = 5000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-tail:] if tail else text

    def server_pid(self, name: str) -> int:
        pid = self.find_server(name)
        if pid is None:
            raise AssertionError(f"no {name} among the children of tiermem up")
        return pid

    def find_server(self, name: str) -> int | None:
        assert self.process is not None
        for pid in children(self.process.pid):
            try:
                if name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    return pid
            except OSError:
                continue
        return None

    def server_pids(self) -> list[int]:
        assert self.process is not None
        return children(self.process.pid)

    def interrupt(self, timeout_s: float = 60.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """Test clean-up: the process and whatever children it still has."""
        if self.process is None:
            return
        leftovers = children(self.process.pid) if self.process.poll() is None else []
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in leftovers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
