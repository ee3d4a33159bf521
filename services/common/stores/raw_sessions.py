"""Reading raw sessions back from the session stream (the raw archive)."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from contracts import SessionCompleted
from services.common.domain.owner import Owner


async def read_raw_session(js: JetStreamContext, stream: str, sequence: int, owner: Owner) -> SessionCompleted | None:
    """The SessionCompleted stored at `sequence`, or None when it was purged (erasure, max age).
    A message of another tenant or user is treated exactly like a missing one."""
    try:
        stored = await js.get_msg(stream, sequence)
    except NotFoundError:
        return None
    try:
        session = SessionCompleted.model_validate_json(stored.data or b"")
    except ValidationError:
        return None
    if (session.tenant_id, session.user_id) != (owner.tenant_id, owner.user_id):
        return None
    return session
