"""Bodies of the per-turn session routes (`/v1/users/{user_id}/sessions/{session_id}/...`): the turns
a streaming chat system appends, and what it reads back. A turn is the minimal message of
`contracts.session_form` (role, content, optional ts and name) plus an optional `turn_id` that makes a
retried append a duplicate."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts.events import (
    METADATA_MAX_KEYS,
    Channel,
    CleanText,
    Message,
    MessageRole,
    MetadataKey,
    MetadataValue,
    Scope,
    SubjectToken,
)
from contracts.times import WINDOW_TEXT, EventTime
from services.recall_api.write_schemas import SessionAccepted

_TURNS_EXAMPLE: dict[str, Any] = {
    "messages": [
        {"role": "user", "content": "I moved to Busan last month.", "turn_id": "t1"},
        {"role": "assistant", "content": "How do you like Busan?", "turn_id": "t2"},
    ]
}


class TurnIn(BaseModel):
    """One turn to append."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    role: MessageRole = Field(description="Who produced the turn.")
    content: CleanText = Field(description="The text of the turn, verbatim (not empty).")
    ts: EventTime | None = Field(default=None, description=f"When the turn was sent (timezone-aware, {WINDOW_TEXT}).")
    name: CleanText | None = Field(default=None, max_length=256, description="Display name of the speaker, when known.")
    turn_id: SubjectToken | None = Field(
        default=None,
        description="The client's id of this turn, unique within the session: appending a turn_id the session "
        "already holds is a duplicate and changes nothing (send one to make retries safe).",
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is empty: a turn needs some text")
        return value

    def message(self) -> Message:
        return Message(role=self.role, content=self.content, ts=self.ts, name=self.name)


class TurnsRequest(BaseModel):
    """Turns appended to an open session (which the first append opens). `agent_id`, `channel`,
    `scope`, `locale` and `metadata` describe the session: given on the first append (later appends
    may repeat them, not change them)."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [_TURNS_EXAMPLE]})

    messages: list[TurnIn] = Field(min_length=1, description="The new turns, oldest first.")
    agent_id: SubjectToken | None = Field(default=None, description="Agent in the conversation ('default').")
    channel: Channel | None = Field(default=None, description="'private' (the default) or 'group'.")
    scope: Scope | None = Field(default=None, description="personal (the default), team or org.")
    locale: CleanText | None = Field(default=None, max_length=35, description="BCP 47 language tag, e.g. 'ko'.")
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None,
        max_length=METADATA_MAX_KEYS,
        description="String key/values kept with the session, as in POST /v1/sessions.",
    )


class TurnsAccepted(BaseModel):
    user_id: str
    session_id: str
    state: Literal["open"] = "open"
    turns: int = Field(description="Turns the open session holds now.")
    appended: int = Field(description="Turns of this request that were new.")
    duplicates: int = Field(description="Turns of this request whose turn_id the session already held.")


class TurnOut(BaseModel):
    role: MessageRole
    content: str
    ts: datetime | None = None
    name: str | None = None
    turn_id: str | None = None


class OpenSessionView(BaseModel):
    """A per-turn session: its turns while it is open; once closed, the event it became (its turns are
    then memory: follow `status_url`)."""

    user_id: str
    session_id: str
    state: Literal["open", "closing", "closed"]
    turn_count: int
    turns: list[TurnOut] = Field(description="The buffered turns (empty once closed).")
    agent_id: str
    channel: Channel
    scope: Scope
    metadata: dict[str, str]
    opened_at: datetime
    last_turn_at: datetime
    closed_at: datetime | None = None
    closed_by: Literal["end", "idle"] | None = None
    event_id: str | None = Field(default=None, description="The SessionCompleted's id, once it is closing.")
    status_url: str | None = Field(default=None, description="Where the event is, once it is closing.")


class SessionEnded(SessionAccepted):
    """The open session completed into one SessionCompleted; `duplicate` when it had been already."""

    session_id: str
    turns: int = Field(description="Turns of the completed session.")
