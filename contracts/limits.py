"""Size limits on incoming sessions: configurable, enforced before anything reaches the stream."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import SessionCompleted


class SizeLimits(BaseModel):
    """Limits on one SessionCompleted event. The byte default stays under JetStream's 1 MiB max payload."""

    model_config = ConfigDict(frozen=True)

    max_messages: int = Field(default=2000, ge=1, description="Most messages in one session.")
    max_message_chars: int = Field(default=32_000, ge=1, description="Most characters (code points) in one message.")
    max_event_bytes: int = Field(default=900_000, ge=1024, description="Most bytes of the serialized event.")


class SizeLimitExceeded(ValueError):
    """A session is larger than the configured limits."""


def check_session_size(event: SessionCompleted, limits: SizeLimits, encoded: bytes | None = None) -> bytes:
    """Raise SizeLimitExceeded with a clear reason; return the JSON encoding that was measured."""
    if len(event.messages) > limits.max_messages:
        raise SizeLimitExceeded(f"session has {len(event.messages)} messages; the limit is {limits.max_messages}")
    for index, message in enumerate(event.messages):
        if len(message.content) > limits.max_message_chars:
            raise SizeLimitExceeded(
                f"messages[{index}] has {len(message.content)} characters; the limit is {limits.max_message_chars}"
            )
    data = encoded if encoded is not None else event.model_dump_json().encode("utf-8")
    if len(data) > limits.max_event_bytes:
        raise SizeLimitExceeded(f"event is {len(data)} bytes; the limit is {limits.max_event_bytes}")
    return data
