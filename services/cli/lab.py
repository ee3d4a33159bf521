"""`tiermem eval` and `tiermem bench` come from the tiermem lab (lab/ in the repository), a separate
development install: the runtime wheel and the image hold only the product. The lab announces its
command groups as `tiermem.cli` entry points, so this package never imports it; where it is absent,
each name still exists and answers with one line saying how to install it, instead of click's
"No such command"."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

import typer

ENTRY_POINT_GROUP = "tiermem.cli"
# The lab's command groups, with what they are, for the line shown when the lab is missing.
LAB_COMMANDS = {"eval": "evaluation", "bench": "benchmarks"}
INSTALL_HINT = "from a tiermem checkout run scripts/bootstrap, or pip install -e ./lab"
MISSING_EXIT_CODE = 2


def add_lab_commands(app: typer.Typer) -> None:
    """Add each lab command group the installed lab provides, and a pointer to the lab for each one
    it does not."""
    provided = {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    for name, what in LAB_COMMANDS.items():
        if name in provided:
            app.add_typer(provided[name].load(), name=name)
            continue
        app.command(
            name,
            help=f"{what.capitalize()}: not installed here (they come with the tiermem lab).",
            # Any arguments, --help included, reach the command, which answers them all the same way.
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False,
        )(_missing_lab_command(name, what))


def missing_lab_message(name: str, what: str) -> str:
    return f"error: `tiermem {name}` ({what}) comes with the tiermem lab, which is not installed: {INSTALL_HINT}"


def _missing_lab_command(name: str, what: str) -> Callable[[typer.Context], None]:
    def missing(ctx: typer.Context) -> None:
        typer.echo(missing_lab_message(name, what), err=True)
        raise typer.Exit(MISSING_EXIT_CODE)

    return missing
