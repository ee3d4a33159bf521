"""Every idempotency key is scoped by owner (issue 48): the `Nats-Msg-Id` of every publish in
services/ comes from `services.common.domain.ids` (tenant and user are part of it), never from a
bare event id that another owner could share. The scan below fails on a publish that builds its own
message id; the id tests fail when the owner is left out of it."""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime
from pathlib import Path

from contracts import SessionCompleted
from services.common.domain.ids import (
    MSG_ID_HEADER,
    owned_uuid,
    owner_message_id,
    session_message_id,
    unowned_message_id,
)
from services.common.domain.owner import Owner

ROOT = Path(__file__).resolve().parents[2]
IDS_MODULE = ROOT / "services" / "common" / "domain" / "ids.py"
HELPERS = {"dedup_headers"}


def _service_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "services").rglob("*.py") if "__pycache__" not in p.parts)


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _bare(value: ast.expr) -> bool:
    """A message id made on the spot: a literal, an f-string, `str(...)`, or a name or attribute
    (an event id passed through) instead of a call of a helper that returns a MessageId."""
    if isinstance(value, ast.Constant | ast.JoinedStr | ast.Name | ast.Attribute | ast.BinOp):
        return True
    return isinstance(value, ast.Call) and _name(value) in {"str", "format", "MessageId"}


def _headers_scoped(value: ast.expr) -> bool:
    """`headers=dedup_headers(...)` or `{**dedup_headers(...), ...}`."""
    if isinstance(value, ast.Call):
        return _name(value) in HELPERS
    if isinstance(value, ast.Dict):
        return any(key is None and _headers_scoped(item) for key, item in zip(value.keys, value.values, strict=True))
    return False


def _unscoped_publishes(source: str, label: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename=label)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "publish"):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        positional_id = len(node.args) >= 3 and _bare(node.args[2])
        if "msg_id" in keywords:
            if _bare(keywords["msg_id"]):
                found.append(f"{label}:{node.lineno} msg_id is not built by an owner-scoped helper")
        elif "headers" in keywords:
            if not _headers_scoped(keywords["headers"]):
                found.append(f"{label}:{node.lineno} headers are not dedup_headers(<owner-scoped id>)")
        elif positional_id or len(node.args) < 3:
            found.append(f"{label}:{node.lineno} publish without an owner-scoped message id")
    return found


def _stray_header_names(source: str, label: str) -> list[str]:
    """The header name written anywhere but in `ids.py` (docstrings aside): a publish building its
    own headers would bypass the helpers."""
    tree = ast.parse(source, filename=label)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{label}:{node.lineno} names the {MSG_ID_HEADER} header"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value == MSG_ID_HEADER and id(node) not in docstrings)
        or (isinstance(node, ast.Call) and _name(node) == "MessageId")
    ]


def test_every_publish_in_services_uses_an_owner_scoped_message_id() -> None:
    modules = _service_modules()
    assert len(modules) > 50 and any(p.name == "sessions_in.py" for p in modules), "the scan must see services/"
    problems = [
        finding
        for path in modules
        if path != IDS_MODULE
        for finding in (
            _unscoped_publishes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
            + _stray_header_names(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
        )
    ]
    assert problems == []


def test_the_scan_catches_a_bare_event_id() -> None:
    bare = [
        'await js.publish(subject, data, headers={"Nats-Msg-Id": str(event.event_id)})',
        "await publisher.publish(event, subject, msg_id=str(event.event_id), stream=stream)",
        "await publisher.publish(event, subject, event.event_id, stream)",
        'await publisher.publish(event, subject, msg_id=f"x-{event.event_id}", stream=stream)',
        "await js.publish(subject, data)",
    ]
    for line in bare:
        assert _unscoped_publishes(line, "probe") or _stray_header_names(line, "probe"), line
    scoped = [
        "await js.publish(subject, data, headers=dedup_headers(session_message_id(event)))",
        "await publisher.publish(event, subject, msg_id=owner_message_id(owner, 'k', event.event_id), stream=s)",
        "await js.publish(subject, data, headers={**dedup_headers(replay_msg_id(record)), 'x': 'y'})",
    ]
    for line in scoped:
        assert not _unscoped_publishes(line, "probe") and not _stray_header_names(line, "probe"), line


def _session(tenant: str, user: str, event_id: uuid.UUID) -> SessionCompleted:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    return SessionCompleted.model_validate(
        {
            "event_id": event_id,
            "tenant_id": tenant,
            "user_id": user,
            "agent_id": "agent",
            "session_id": "s1",
            "channel": "private",
            "started_at": now,
            "ended_at": now,
            "messages": [{"role": "user", "content": "hello"}],
        }
    )


def test_one_event_id_of_three_owners_is_three_messages() -> None:
    event_id = uuid.uuid4()
    ids = {
        session_message_id(_session("acme", "alice", event_id)),
        session_message_id(_session("other", "alice", event_id)),
        session_message_id(_session("acme", "bob", event_id)),
    }
    assert len(ids) == 3
    assert session_message_id(_session("acme", "alice", event_id)) == f"session:acme:alice:{event_id}"


def test_message_ids_cannot_run_owners_together() -> None:
    # Ids are [A-Za-z0-9_-]: the separator never occurs inside one, so no two owners meet in one id.
    assert owner_message_id(Owner("a", "b_c"), "k", "x") != owner_message_id(Owner("a_b", "c"), "k", "x")
    assert owner_message_id(Owner("a", "b"), "k", "x") != unowned_message_id("k", "x")
    assert owned_uuid(Owner("acme", "alice"), "k", "x") != owned_uuid(Owner("acme", "bob"), "k", "x")
