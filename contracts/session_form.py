"""The session every way in accepts (HTTP single and batch, MCP, `tiermem ingest`, `tiermem sessions
add`): a whole SessionCompleted, or only `user_id` and `messages` with the rest completed here.

Completing derives every id from the content, so the same add is the same event and a retry is
reported as a duplicate (the broker's de-duplication key is the tenant, the user and the event id):
- `event_id` and `session_id`: uuid5 over the user, the agent, the channel, the scope, the locale, the
  turns (role, content, name, ts) and the metadata, plus the session id when one is given;
- `started_at` / `ended_at`: the first and last turn's `ts` when the turns carry one, else now (times
  are not part of the ids, so a retry a minute later is still the same event);
- `agent_id` "default", `channel` "private", `scope` "personal"; the tenant is the caller's (the API
  key's, or `tiermem ingest --tenant`) when the record names none.

The light client (client/tiermem_client/adding.py) cannot import this package and derives the ids the
same way, with the same namespaces; tests/unit/test_session_form.py proves both give the same ids.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import (
    METADATA_MAX_KEYS,
    Channel,
    Message,
    MetadataKey,
    MetadataValue,
    Scope,
    SessionCompleted,
    SubjectToken,
)
from contracts.times import WINDOW_TEXT, EventTime

DEFAULT_AGENT = "default"
# Fixed namespaces: the ids must come out the same on every machine, in every release and in the client.
EVENT_NAMESPACE = uuid.UUID("3f7d0a52-9c1e-5b8a-a4d6-2e61c0b7f915")
SESSION_NAMESPACE = uuid.UUID("a8c4e1f0-27b3-5d96-8e0a-5f3b9d72c461")


class SessionForm(BaseModel):
    """A conversation to remember: `user_id` and `messages` are required, everything else is derived
    when left out (deterministic ids, so sending the same turns again is a duplicate)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    event_type: Literal["session.completed"] = Field(
        default="session.completed", description="Discriminator of the event kind."
    )
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    user_id: SubjectToken = Field(description="End user the memory belongs to.")
    messages: list[Message] = Field(min_length=1, description="The turns, oldest first.")
    tenant_id: SubjectToken | None = Field(
        default=None, description="Tenant that owns the conversation; the caller's (the API key's) when left out."
    )
    event_id: uuid.UUID | None = Field(
        default=None, description="Unique id of this event; derived from the owner and content when left out."
    )
    session_id: SubjectToken | None = Field(
        default=None, description="Conversation id; derived from the owner and content when left out."
    )
    agent_id: SubjectToken = Field(default=DEFAULT_AGENT, description="Agent that took part in the conversation.")
    channel: Channel = Field(
        default="private",
        description="'private' (one user and the agent) or 'group'; private memories never surface in groups.",
    )
    scope: Scope = Field(default="personal", description="Visibility of derived memories: personal, team or org.")
    started_at: EventTime | None = Field(
        default=None, description=f"When it started ({WINDOW_TEXT}); the first turn's ts, else now, when left out."
    )
    ended_at: EventTime | None = Field(
        default=None, description=f"When it ended ({WINDOW_TEXT}); the last turn's ts, else now, when left out."
    )
    locale: str | None = Field(
        default=None, max_length=35, description="BCP 47 language tag of the conversation, e.g. 'ko' or 'en-US'."
    )
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="String key/values kept with the session (at most 16; keys 1-64 of A-Z a-z 0-9 _ -, values "
        "at most 256 characters); its episodes and facts carry them and can be filtered on them.",
    )

    def content_key(self) -> str:
        """The canonical text the ids are derived from (the client builds the same text)."""
        options = {"agent_id": self.agent_id, "channel": self.channel, "scope": self.scope, "locale": self.locale}
        turns = [turn.model_dump(mode="json", exclude_none=True) for turn in self.messages]
        tags = dict(sorted(self.metadata.items()))
        record = {"user_id": self.user_id, **options, "messages": turns, "metadata": tags}
        return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    def derived_ids(self) -> tuple[str, uuid.UUID]:
        """(session_id, event_id): the given ones, else derived from the content."""
        key = self.content_key()
        session = self.session_id or str(uuid.uuid5(SESSION_NAMESPACE, key))
        return session, self.event_id or uuid.uuid5(EVENT_NAMESPACE, f"{session}\x1f{key}")

    def completed_fields(self, tenant_id: str | None) -> dict[str, Any]:
        """The SessionCompleted fields, with what was left out filled in (validate them with
        `SessionCompleted.model_validate`, which names a field that is still missing or wrong)."""
        session, event_id = self.derived_ids()
        stamps = [turn.ts for turn in self.messages if turn.ts is not None] or [datetime.now(UTC)]
        started = self.started_at or min([*stamps, *([self.ended_at] if self.ended_at else [])])
        ended = self.ended_at or max([*stamps, started])
        fields = self.model_dump(exclude_none=True)
        fields.update(event_id=event_id, session_id=session, started_at=started, ended_at=ended)
        if self.tenant_id is None and tenant_id is not None:
            fields["tenant_id"] = tenant_id
        return fields

    def complete(self, tenant_id: str | None) -> SessionCompleted:
        """The whole event (pydantic's ValidationError when it still is not one: no tenant, or an
        `ended_at` before `started_at`)."""
        return SessionCompleted.model_validate(self.completed_fields(tenant_id))
