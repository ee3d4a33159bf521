"""Loopback port helpers."""

from __future__ import annotations

import socket


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
