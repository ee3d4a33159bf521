"""The `SessionCompleted` event, vendored from the server's `contracts/events.py`.

A copy rather than a dependency: `contracts` lives in the server distribution, and the client must
install without it. `tests/client/test_contract_drift.py` fails when the two JSON Schemas differ, so
the copy cannot drift silently.
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, model_validator

ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"

Channel = Literal["private", "group"]
Scope = Literal["personal", "team", "org"]
MessageRole = Literal["user", "assistant", "system", "tool"]


def _no_surrogates(value: str) -> str:
    # Lone surrogates cannot be encoded to UTF-8: refuse them here rather than as a 422 later.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid UTF-8 ({exc.reason} at position {exc.start})") from exc
    return value


CleanText = Annotated[str, AfterValidator(_no_surrogates)]
SubjectToken = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ID_PATTERN)]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: MessageRole = Field(description="Who produced the turn.")
    content: CleanText = Field(description="The text of the turn, verbatim.")
    ts: AwareDatetime | None = Field(default=None, description="When the turn was sent (timezone-aware).")
    name: str | None = Field(default=None, max_length=256, description="Display name of the speaker, when known.")


class SessionCompleted(_Event):
    """A finished conversation, published by an upstream chat system. The public input format."""

    event_type: Literal["session.completed"] = Field(
        default="session.completed", description="Discriminator of the event kind."
    )
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Unique id of this event; also sent as the Nats-Msg-Id header.")
    tenant_id: SubjectToken = Field(description="Tenant that owns the conversation.")
    user_id: SubjectToken = Field(description="End user the memory belongs to.")
    agent_id: SubjectToken = Field(description="Agent that took part in the conversation.")
    session_id: SubjectToken = Field(description="Conversation id, unique within the tenant and user.")
    channel: Channel = Field(
        description="'private' (one user and the agent) or 'group'; private memories never surface in groups."
    )
    scope: Scope = Field(default="personal", description="Visibility of derived memories: personal, team or org.")
    started_at: AwareDatetime = Field(description="When the conversation started (timezone-aware ISO 8601).")
    ended_at: AwareDatetime = Field(description="When the conversation ended (timezone-aware ISO 8601).")
    locale: str | None = Field(
        default=None, max_length=35, description="BCP 47 language tag of the conversation, e.g. 'ko' or 'en-US'."
    )
    messages: list[Message] = Field(min_length=1, description="The turns, oldest first.")
    metadata: dict[str, str] = Field(default_factory=dict, description="Free-form string metadata from the producer.")

    @model_validator(mode="after")
    def _ended_after_started(self) -> SessionCompleted:
        if self.ended_at < self.started_at:
            raise ValueError("ended_at must not be earlier than started_at")
        return self
