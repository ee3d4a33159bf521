"""The `SessionCompleted` event, vendored from the server's `contracts/events.py`.

A copy rather than a dependency: `contracts` lives in the server distribution, and the client must
install without it. `tests/client/test_contract_drift.py` fails when the two JSON Schemas differ, so
the copy cannot drift silently.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

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


# The instants every pipeline stage can compute with (contracts/times.py): checked here so a date the
# server would refuse fails before it is sent.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2199, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
WINDOW_TEXT = "1970-01-01T00:00:00Z to 2199-12-31T23:59:59Z"


def _in_window(value: datetime) -> datetime:
    if not EARLIEST <= value <= LATEST:
        raise ValueError(f"must be within {WINDOW_TEXT}")
    return value


CleanText = Annotated[str, AfterValidator(_no_surrogates)]
EventTime = Annotated[AwareDatetime, AfterValidator(_in_window)]
SubjectToken = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ID_PATTERN)]


# Session metadata: string key/values that reach the session's episodes and facts and can be
# filtered on. Keys are id-like so a key can never be read as a nested payload path (no dots);
# the count and sizes are bounded because every key is stored on every derived point.
METADATA_KEY_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=METADATA_KEY_PATTERN)]
MetadataValue = Annotated[str, StringConstraints(max_length=256), AfterValidator(_no_surrogates)]
METADATA_MAX_KEYS = 16


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: MessageRole = Field(description="Who produced the turn.")
    content: CleanText = Field(description="The text of the turn, verbatim.")
    ts: EventTime | None = Field(default=None, description=f"When the turn was sent (timezone-aware, {WINDOW_TEXT}).")
    name: str | None = Field(default=None, max_length=256, description="Display name of the speaker, when known.")


class SessionCompleted(_Event):
    """A finished conversation, published by an upstream chat system. The public input format."""

    event_type: Literal["session.completed"] = Field(
        default="session.completed", description="Discriminator of the event kind."
    )
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(
        description="Id of this event, unique for its tenant and user. It is de-duplicated per owner: the "
        "Nats-Msg-Id header is 'session:<tenant_id>:<user_id>:<event_id>' (the HTTP API and tiermem ingest send "
        "it; a producer publishing on NATS sends the same), so the same id from another tenant or user is "
        "another event, never a duplicate."
    )
    tenant_id: SubjectToken = Field(description="Tenant that owns the conversation.")
    user_id: SubjectToken = Field(description="End user the memory belongs to.")
    agent_id: SubjectToken = Field(description="Agent that took part in the conversation.")
    session_id: SubjectToken = Field(description="Conversation id, unique within the tenant and user.")
    channel: Channel = Field(
        description="'private' (one user and the agent) or 'group'; private memories never surface in groups."
    )
    scope: Scope = Field(default="personal", description="Visibility of derived memories: personal, team or org.")
    started_at: EventTime = Field(
        description=f"When the conversation started (timezone-aware ISO 8601, {WINDOW_TEXT})."
    )
    ended_at: EventTime = Field(
        description=f"When the conversation ended (timezone-aware ISO 8601, {WINDOW_TEXT}; not before started_at)."
    )
    locale: str | None = Field(
        default=None, max_length=35, description="BCP 47 language tag of the conversation, e.g. 'ko' or 'en-US'."
    )
    messages: list[Message] = Field(min_length=1, description="The turns, oldest first.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="String key/values from the producer (at most 16; keys 1-64 of A-Z a-z 0-9 _ -, values at "
        "most 256 characters). They are stored on the episodes and facts made from the session, and search, "
        "the memory list and L0 can filter on them.",
    )

    @field_validator("ended_at")
    @classmethod
    def _ended_after_started(cls, ended_at: datetime, info: ValidationInfo) -> datetime:
        # A field validator (started_at is declared first), so the refusal names ended_at.
        started_at = info.data.get("started_at")
        if isinstance(started_at, datetime) and ended_at < started_at:
            raise ValueError("ended_at must not be earlier than started_at")
        return ended_at
