"""Dead letters: the one record kept for a message that was poison or ran out of deliveries, with the
reason (`describe_error`), published to the dead-letter stream exactly once per delivery failure."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from pydantic import ValidationError

from contracts import DeadLetterRecord, Subjects
from contracts.events import is_subject_token
from services.common.domain.ids import MessageId, deterministic_uuid, owner_message_id, unowned_message_id
from services.common.domain.owner import Owner
from services.common.runtime.instruments import DEAD_LETTERS
from services.common.runtime.publishing import EventPublisher


class DeadLetterWriter:
    """Writes exactly one DeadLetterRecord per (stream, sequence, consumer)."""

    def __init__(self, publisher: EventPublisher, subjects: Subjects) -> None:
        self._publisher = publisher
        self._subjects = subjects

    async def write(
        self,
        *,
        subject: str,
        stream: str,
        sequence: int,
        consumer: str,
        deliveries: int,
        reason: str,
        kind: str,
        payload: bytes,
    ) -> None:
        tenant_id, user_id = self._subjects.tokens_from(subject)
        DEAD_LETTERS.labels(consumer=consumer, kind=kind).inc()
        record_id = deterministic_uuid("dead-letter", stream, str(sequence), consumer)
        record = DeadLetterRecord(
            event_id=record_id,
            original_subject=subject,
            original_stream=stream,
            stream_sequence=sequence,
            consumer=consumer,
            deliveries=deliveries,
            reason=reason[:4000],
            kind="poison" if kind == "poison" else "exhausted",
            tenant_id=tenant_id,
            user_id=user_id,
            payload=payload.decode("utf-8", errors="replace"),
            failed_at=datetime.now(UTC),
        )
        await self._publisher.publish(
            record,
            self._subjects.dead_letter(consumer, tenant_id, user_id),
            msg_id=_dead_letter_msg_id(tenant_id, user_id, record_id),
            stream=self._subjects.dead_letter_stream,
        )


def _dead_letter_msg_id(tenant_id: str | None, user_id: str | None, record_id: UUID) -> MessageId:
    # The record id names one stream message (unique across owners already); the owner is added
    # whenever the subject names one, like every other message id.
    if tenant_id and user_id and is_subject_token(tenant_id) and is_subject_token(user_id):
        return owner_message_id(Owner(tenant_id, user_id), "dlq", record_id)
    return unowned_message_id("dlq", record_id)


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '<root>'}: {error['msg']}" for error in exc.errors()
        )
        return f"invalid payload: {problems}"
    return f"{type(exc).__name__}: {exc}"
