"""Publishing events to JetStream: every publish carries a message id, so the stream's duplicate
window drops a republish of the same event."""

from __future__ import annotations

from dataclasses import dataclass

from faststream.nats import NatsBroker
from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool


class EventPublisher:
    """Publishes events to JetStream, always with `Nats-Msg-Id` so a republish is dropped by the
    stream's duplicate window."""

    def __init__(self, broker: NatsBroker) -> None:
        self._broker = broker

    async def publish(self, event: BaseModel, subject: str, msg_id: str, stream: str) -> PublishResult:
        ack = await self._broker.publish(
            event.model_dump_json().encode("utf-8"),
            subject,
            headers={"Nats-Msg-Id": msg_id, "content-type": "application/json"},
            stream=stream,
            timeout=10.0,
        )
        return PublishResult(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))
