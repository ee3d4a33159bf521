"""How a CLI command that talks to NATS ends when NATS cannot be reached or goes away mid-command: one
error line with the reason and an exit code, not a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.markup import escape


@contextmanager
def exit_on_broker_loss(console: Console, stopped: str, *, code: int) -> Iterator[None]:
    """Run the block; if NATS is unreachable or lost (`BrokerUnavailable`, a nats-py error, a refused or
    reset connection, a timeout), print "error: {stopped}: {reason}" and exit with `code`. Other OS
    errors (a missing input file) are not the broker's and pass through to the command's own handling."""
    from nats.errors import Error as NatsError

    try:
        yield
    except (ConnectionError, TimeoutError, NatsError) as exc:
        console.print(f"[red]error:[/] {stopped}: {escape(_reason(exc))}", highlight=False)
        raise typer.Exit(code) from exc


def _reason(exc: BaseException) -> str:
    """The reason as the user reads it: which error surfaces first when NATS goes away depends on which
    connection notices first (a bare "Connection lost" from a reset socket), so the line always names NATS."""
    text = str(exc) or type(exc).__name__
    return text if "cannot reach NATS" in text else f"cannot reach NATS ({text})"
