"""Loopback port and child-process helpers."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
PRIVATE_UMASK = 0o077
"""Children create their files 0600 and directories 0700: the FalkorDB AOF and the JetStream
store hold memory text."""


class PortInUseError(RuntimeError):
    """A port we were asked to bind is already taken."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def claim_port(port: int, what: str, host: str = "127.0.0.1") -> socket.socket:
    """A socket listening on `host:port`, for the caller to serve (PortInUseError naming the
    component when it cannot be bound). SO_REUSEADDR, as uvicorn, nats-server and redis-server set
    for their own listeners: a port whose last connections linger in TIME-WAIT (a stack stopped a
    moment ago) is free for them, and only a port somebody listens on is refused. Listening at once:
    a socket only bound with SO_REUSEADDR does not keep another such bind off the port. Held, the
    port is also out of reach of the outgoing connections the process makes meanwhile."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn picks it
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off on each accepted connection only when the
    # socket's `proto` says TCP (base_events._set_nodelay); see root.py `_no_delay` for what it cost.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = (
            "the port is already in use (stop whatever holds it or choose another port)"
            if exc.errno == errno.EADDRINUSE
            else f"{exc.strerror or exc} (check the host)"
        )
        raise PortInUseError(f"{what} cannot use {host}:{port}: {reason}") from exc
    sock.listen()
    return sock


def ensure_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Raise PortInUseError naming the component when `port` cannot be bound (`claim_port`, let go)."""
    claim_port(port, what, host).close()


def port_answers(port: int, host: str = "127.0.0.1", timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM the child's process group (servers flush their files on it), wait, SIGKILL the group
    as a last resort; the child is always reaped, so nothing is left behind."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


def _set_parent_death_signal() -> None:
    """Linux: the kernel sends SIGTERM to this child when the thread that started it dies, so a
    server never outlives a `tiermem up` killed with SIGKILL (nothing else would stop it). Elsewhere
    the data-dir lock and the leftover sweep on the next start are the only guard."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def child_setup(parent_pid: int) -> Callable[[], None]:
    """`preexec_fn` of every server child: private files, death with the parent. The parent may
    have died between fork and prctl: then the child exits at once instead of running orphaned."""

    def _setup() -> None:
        os.umask(PRIVATE_UMASK)
        _set_parent_death_signal()
        if os.getppid() != parent_pid:
            os._exit(1)

    return _setup
