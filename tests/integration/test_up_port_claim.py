"""`tiermem up` claims the recall API's port before it starts nats-server and FalkorDB, and holds it
until the API serves on it: a port found free at start cannot be taken meanwhile (a CI run saw one
of the stack's own outgoing connections land on it, and the API then failed to bind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.servers.net import PortInUseError, ensure_port_free, free_port
from services.cli.stack import supervised_servers

pytestmark = pytest.mark.integration


async def test_the_http_port_is_held_while_the_servers_start_and_let_go_after(tmp_path: Path) -> None:
    port = free_port()
    async with supervised_servers(tmp_path / "data", port) as (servers, _):
        assert servers.http_socket is not None
        assert servers.http_socket.getsockname()[1] == port
        with pytest.raises(PortInUseError, match="already in use"):
            ensure_port_free(port, "another listener")
    ensure_port_free(port, "the next stack")  # let go with the stack
