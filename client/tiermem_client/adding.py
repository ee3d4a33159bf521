"""`add(messages, user_id=...)`: a conversation in the short form, completed on the client.

The recall API takes a whole `SessionCompleted` record; a chat system often has only the turns and the
user. The client fills in the rest so the same add is the same event, which the server reports as a
duplicate (its de-duplication key is the API key's tenant, the user and the event id):
- `event_id` and `session_id`: uuid5 over the user, the agent, the channel, the scope, the locale, the
  turns (role, content, name, ts) and the metadata, plus the session id when you give one;
- `started_at` / `ended_at`: the first and last turn's `ts` when the turns carry one, else now (times
  are not part of the ids, so a retry a minute later is still the same event);
- `agent_id` "default", `channel` "private", `scope` "personal"; `tenant_id` is left out: the API key
  decides it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from tiermem_client.events import Channel, Message, Scope, SessionCompleted

DEFAULT_AGENT = "default"
# Fixed namespaces: the ids must come out the same on every machine and in every release.
_EVENT_NAMESPACE = uuid.UUID("3f7d0a52-9c1e-5b8a-a4d6-2e61c0b7f915")
_SESSION_NAMESPACE = uuid.UUID("a8c4e1f0-27b3-5d96-8e0a-5f3b9d72c461")
# Stands in for the tenant while the record is validated with the vendored model; it is never sent.
_TENANT_PLACEHOLDER = "_"

MessageInput = Message | BaseModel | Mapping[str, Any]


def _message(turn: MessageInput) -> Message:
    if isinstance(turn, Message):
        return turn
    if isinstance(turn, BaseModel):  # a ChatTurn, or any model with role and content
        return Message.model_validate(turn.model_dump(exclude_none=True))
    return Message.model_validate(dict(turn))


def _content_key(
    user_id: str, messages: Sequence[Message], metadata: Mapping[str, str], options: Mapping[str, str | None]
) -> str:
    turns = [turn.model_dump(mode="json", exclude_none=True) for turn in messages]
    record = {"user_id": user_id, **options, "messages": turns, "metadata": dict(sorted(metadata.items()))}
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def minimal_session(
    messages: Sequence[MessageInput],
    *,
    user_id: str,
    metadata: Mapping[str, str] | None = None,
    agent_id: str = DEFAULT_AGENT,
    session_id: str | None = None,
    channel: Channel = "private",
    scope: Scope = "personal",
    locale: str | None = None,
) -> dict[str, Any]:
    """The `POST /v1/sessions` body for these turns, every id derived from the content (see the module
    docstring). Raises pydantic's `ValidationError` (a `ValueError`) on a bad turn, id or metadata."""
    turns = [_message(turn) for turn in messages]
    tags = dict(metadata or {})
    options = {"agent_id": agent_id, "channel": channel, "scope": scope, "locale": locale}
    key = _content_key(user_id, turns, tags, options)
    session = session_id or str(uuid.uuid5(_SESSION_NAMESPACE, key))
    event_id = uuid.uuid5(_EVENT_NAMESPACE, f"{session}\x1f{key}")
    stamps = [turn.ts for turn in turns if turn.ts is not None]
    now = datetime.now(UTC)
    record = SessionCompleted.model_validate(
        {
            **options,
            "event_id": event_id,
            "tenant_id": _TENANT_PLACEHOLDER,
            "user_id": user_id,
            "session_id": session,
            "started_at": min(stamps, default=now),
            "ended_at": max(stamps, default=now),
            "messages": turns,
            "metadata": tags,
        }
    )
    return record.model_dump(mode="json", exclude={"tenant_id"}, exclude_none=True)
