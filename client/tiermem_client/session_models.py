"""Typed results of the per-turn session routes (`/v1/users/{user_id}/sessions/{session_id}/...`), as
the client sees them: mirrors of `services/recall_api/write/turn_schemas.py`, kept field for field by
`tests/client/test_contract_drift.py`. Like `models.py`, they ignore fields they do not know."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TurnsAccepted(_Result):
    """What an append did: `turns` the open session holds now, `appended` new ones, `duplicates` turns
    whose `turn_id` it already held."""

    user_id: str
    session_id: str
    state: str = "open"
    turns: int
    appended: int
    duplicates: int


class SessionEnded(_Result):
    """The session completed into one event; follow `event_id` with `wait`."""

    event_id: str
    status: str = "accepted"
    duplicate: bool
    status_url: str
    session_id: str
    turns: int


class SessionTurn(_Result):
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    ts: str | None = None
    name: str | None = None
    turn_id: str | None = None


class OpenSession(_Result):
    """A per-turn session: `open` with its turns, or `closing`/`closed` with the event it became."""

    user_id: str
    session_id: str
    state: str
    turn_count: int
    turns: list[SessionTurn]
    agent_id: str
    channel: str
    scope: str
    metadata: dict[str, str]
    opened_at: str
    last_turn_at: str
    closed_at: str | None = None
    closed_by: str | None = None
    event_id: str | None = None
    status_url: str | None = None
