"""The short session form (`user_id` and `messages`) is completed the same way by the server
(contracts.session_form, used by HTTP, MCP and the CLI) and by the light client (which cannot import
the server): the same turns give the same event and session ids, so a client add and a minimal HTTP,
MCP or CLI add of the same turns de-duplicate against each other."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tiermem_client.adding import minimal_session

from contracts.limits import SizeLimits
from contracts.session_input import SessionRejected, parse_session

TURNS = [
    {"role": "user", "content": "I moved to Busan last month."},
    {"role": "assistant", "content": "Noted: you live in Busan now."},
]
STAMPED = [
    {"role": "user", "content": "부산으로 이사했어요.", "ts": "2026-05-02T09:00:00+09:00", "name": "Minji"},
    {"role": "assistant", "content": "알겠습니다.", "ts": "2026-05-02T09:01:30Z"},
]

CASES: list[tuple[list[dict[str, Any]], dict[str, Any]]] = [
    (TURNS, {}),
    (STAMPED, {}),
    (TURNS, {"metadata": {"b": "2", "a": "1"}}),
    (TURNS, {"session_id": "chat-42"}),
    (STAMPED, {"agent_id": "support-bot", "channel": "group", "scope": "team", "locale": "ko"}),
]


@pytest.mark.parametrize(("turns", "options"), CASES)
def test_server_and_client_derive_the_same_ids(turns: list[dict[str, Any]], options: dict[str, Any]) -> None:
    from_client = minimal_session(turns, user_id="alice", **options)
    from_server = parse_session({"user_id": "alice", "messages": turns, **options}, SizeLimits(), "acme")
    assert str(from_server.event_id) == from_client["event_id"]
    assert from_server.session_id == from_client["session_id"]
    assert from_server.tenant_id == "acme"
    # What the client sends, completed by the server, is the same event again.
    resent = parse_session(from_client, SizeLimits(), "acme")
    assert (resent.event_id, resent.session_id) == (from_server.event_id, from_server.session_id)


def test_ids_depend_on_the_owner_and_content_only() -> None:
    first = parse_session({"user_id": "alice", "messages": TURNS}, SizeLimits(), "acme")
    again = parse_session({"user_id": "alice", "messages": TURNS}, SizeLimits(), "acme")
    assert first.event_id == again.event_id, "a retry (later, so another 'now') is the same event"
    other_user = parse_session({"user_id": "bob", "messages": TURNS}, SizeLimits(), "acme")
    other_turns = parse_session({"user_id": "alice", "messages": TURNS[:1]}, SizeLimits(), "acme")
    assert len({first.event_id, other_user.event_id, other_turns.event_id}) == 3
    assert len({first.session_id, other_user.session_id, other_turns.session_id}) == 3


def test_defaults_and_times_from_the_turns() -> None:
    event = parse_session({"user_id": "alice", "messages": STAMPED}, SizeLimits(), "acme")
    assert (event.agent_id, event.channel, event.scope) == ("default", "private", "personal")
    assert event.started_at == datetime(2026, 5, 2, 0, 0, tzinfo=UTC)
    assert event.ended_at == datetime(2026, 5, 2, 9, 1, 30, tzinfo=UTC)
    before = datetime.now(UTC)
    unstamped = parse_session({"user_id": "alice", "messages": TURNS}, SizeLimits(), "acme")
    assert before <= unstamped.started_at == unstamped.ended_at <= datetime.now(UTC)


def test_a_whole_record_is_kept_as_it_is() -> None:
    record = {
        "event_id": "0b6f3f0e-8a8e-4c43-9a55-1d9f5b0a7c11",
        "tenant_id": "acme",
        "user_id": "alice",
        "agent_id": "support-bot",
        "session_id": "s-1",
        "channel": "group",
        "started_at": "2026-05-02T09:00:00Z",
        "ended_at": "2026-05-02T09:30:00Z",
        "messages": TURNS,
    }
    event = parse_session(record, SizeLimits(), "other")  # the record's tenant is kept (the API refuses it)
    kept = event.model_dump(
        mode="json", exclude_none=True, exclude={"scope", "metadata", "event_type", "schema_version"}
    )
    assert kept == record


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"messages": TURNS}, "user_id"),
        ({"user_id": "alice"}, "messages"),
        ({"user_id": "alice", "messages": []}, "messages"),
        ({"user_id": "alice", "messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"user_id": "alice", "messages": [{"role": "user"}]}, "messages.0.content"),
        ({"user_id": "al ice", "messages": TURNS}, "user_id"),
        ({"user_id": "alice", "messages": TURNS, "colour": "red"}, "colour"),
    ],
)
def test_a_bad_short_form_names_the_field(record: dict[str, Any], field: str) -> None:
    with pytest.raises(SessionRejected) as caught:
        parse_session(record, SizeLimits(), "acme")
    assert caught.value.field == field
    assert field in caught.value.reason


def test_without_any_tenant_the_record_names_the_missing_field() -> None:
    with pytest.raises(SessionRejected) as caught:
        parse_session({"user_id": "alice", "messages": TURNS}, SizeLimits())
    assert caught.value.field == "tenant_id"


def test_an_end_before_the_start_is_refused_with_its_field() -> None:
    record = {"user_id": "alice", "messages": TURNS, "started_at": "2026-05-02T00:00:00Z"}
    with pytest.raises(SessionRejected) as caught:
        parse_session({**record, "ended_at": "2026-05-01T00:00:00Z"}, SizeLimits(), "acme")
    assert caught.value.field == "ended_at"
    # Only a start given: the end is now (never before the start).
    assert parse_session(record, SizeLimits(), "acme").ended_at >= datetime(2026, 5, 2, tzinfo=UTC)
