"""docs/api.md tells a newcomer what they must send and how to run the stack: every field of the
session record (and of a message) is in its table, "required" says what the minimal form demands
(only `user_id` and `messages`; NATS alone needs the whole record), and every option of `tiermem up`
and `tiermem serve` (`--http-port` among them) is named."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from contracts import Message, SessionCompleted
from contracts.session_form import SessionForm
from services.cli.main import app

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _session_table() -> dict[str, str]:
    """field name -> the "required" cell of the session record's table."""
    text = API_DOC.read_text(encoding="utf-8")
    section = text[text.index("## The session record") : text.index("## HTTP: rules every route follows")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                rows[name] = cells[2]
    return rows


def test_every_field_of_the_session_record_is_in_the_table_with_what_the_minimal_form_requires() -> None:
    rows = _session_table()
    assert set(SessionCompleted.model_fields) == set(rows), "the table and SessionCompleted differ"
    for name, required in rows.items():
        minimal = SessionForm.model_fields[name].is_required()
        assert required.startswith("yes") == minimal, f"{name}: required says {required!r}"
        if SessionCompleted.model_fields[name].is_required() and not minimal:
            assert required.startswith("on NATS"), f"{name} is required on NATS only: {required!r}"


def test_every_field_of_a_message_is_named() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    shape = re.search(r"A message is `\{([^}]*)\}`", text)
    assert shape is not None
    assert {field.strip(" ?") for field in shape.group(1).split(",")} == set(Message.model_fields)


def test_every_option_of_up_and_serve_is_named_in_its_row_of_the_cli_table() -> None:
    lines = API_DOC.read_text(encoding="utf-8").splitlines()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for command in ("up", "serve"):
        (row,) = [line for line in lines if line.startswith(f"| `tiermem {command} ")]
        options = {opt for param in commands[command].params for opt in param.opts if opt.startswith("--")}
        missing = {opt for opt in options - {"--help", "--data-dir"} if opt not in row}
        assert not missing, f"tiermem {command}: {sorted(missing)} not in {row!r}"
