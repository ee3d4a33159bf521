"""Message ids for events a test publishes itself: always owner-scoped, like the project's own
publishers (`services.common.domain.ids`); a session gets the id every session path uses."""

from __future__ import annotations

from typing import Any

from contracts import SessionCompleted
from services.common.domain.ids import MessageId, owner_message_id, session_message_id
from services.common.domain.owner import Owner


def message_id(event: Any, kind: str | None = None) -> MessageId:
    """The id `event` is published under (`kind` to publish it again under another id)."""
    if isinstance(event, SessionCompleted) and kind is None:
        return session_message_id(event)
    return owner_message_id(Owner(event.tenant_id, event.user_id), kind or event.event_type, event.event_id)
