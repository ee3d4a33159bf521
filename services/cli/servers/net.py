"""Loopback port and child-process helpers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess


class PortInUseError(RuntimeError):
    """A port we were asked to bind is already taken."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Raise PortInUseError naming the component when `port` cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortInUseError(
                f"{what} cannot use {host}:{port}: the port is already in use "
                f"(stop whatever holds it or choose another port)"
            ) from exc


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
