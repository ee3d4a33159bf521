"""The one error line a command prints when NATS goes away names NATS, whichever connection error surfaced
first (under load a reset socket's bare "Connection lost" can come before the broker's own error)."""

from __future__ import annotations

import io

import pytest
import typer
from rich.console import Console

from services.cli.broker_loss import exit_on_broker_loss


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionResetError("Connection lost"), "error: the bench stopped: cannot reach NATS (Connection lost)"),
        (TimeoutError(), "error: the bench stopped: cannot reach NATS (TimeoutError)"),
        (
            ConnectionError("cannot reach NATS at nats://127.0.0.1:1 after 3 attempts: refused"),
            "error: the bench stopped: cannot reach NATS at nats://127.0.0.1:1 after 3 attempts: refused",
        ),
    ],
)
def test_the_line_names_nats_whatever_error_came_first(error: BaseException, expected: str) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    with pytest.raises(typer.Exit) as ended, exit_on_broker_loss(console, "the bench stopped", code=1):
        raise error
    assert ended.value.exit_code == 1
    assert out.getvalue().strip() == expected
