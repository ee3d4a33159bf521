"""Publishing events to JetStream: every publish carries a message id, so the stream's duplicate
window drops a republish of the same event."""

from __future__ import annotations

from dataclasses import dataclass

from faststream.nats import NatsBroker
from pydantic import BaseModel

from services.common.domain.ids import MessageId, dedup_headers


@dataclass(frozen=True, slots=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool


class EventPublisher:
    """Publishes events to JetStream, always with `Nats-Msg-Id` so a republish is dropped by the
    stream's duplicate window. The id is a `MessageId` (`domain.ids`): scoped by owner, never a bare
    event id that another owner could share."""

    def __init__(self, broker: NatsBroker) -> None:
        self._broker = broker

    async def publish(self, event: BaseModel, subject: str, msg_id: MessageId, stream: str) -> PublishResult:
        ack = await self._broker.publish(
            event.model_dump_json().encode("utf-8"),
            subject,
            headers=dedup_headers(msg_id),
            stream=stream,
            timeout=10.0,
        )
        return PublishResult(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))
