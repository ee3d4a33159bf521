"""The redacted copy of an open (per-turn) session's record: what a fact erasure writes back to the
open-session bucket, so the session completes without the value; and of a per-turn session completed
after the erasure was accepted with turns appended before it (`redact_early_turns`): the earlier
turns are redacted in its SessionCompleted, the later ones kept.

The same phrase matching and the same sentence redaction as the raw sessions (`redact_messages`): a
turn keeps its sentences that do not state the value, and goes when none is left, with its turn id
and append time, so the three lists stay aligned. Only what was appended before the erasure was
accepted is redacted (`Lineage.spares_turn`); the metadata counts as appended when the session
opened."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from contracts import Message, SessionCompleted
from services.common.domain.value_text import Needle, value_mentions
from services.common.stores.open_sessions import OpenSessionRecord
from services.common.stores.value_places import Lineage, open_metadata_mentions, open_turns_mentioning
from services.pruner.logic import redact_messages


def redact_open_record(
    record: OpenSessionRecord, needles: Sequence[Needle], lineage: Lineage | None
) -> OpenSessionRecord | None:
    """The record without the needles' text in its unspared turns and metadata; None when nothing in
    it is to go."""
    doomed = set(open_turns_mentioning(record, needles, lineage))
    redact_metadata = open_metadata_mentions(record, needles, lineage)
    if not doomed and not redact_metadata:
        return None
    turns: list[Message] = []
    turn_ids: list[str | None] = []
    appended_at = []
    for index, (turn, turn_id, at) in enumerate(
        zip(record.turns, record.turn_ids, record.turn_appended_at, strict=True)
    ):
        kept = redact_messages([turn], needles).messages if index in doomed else [turn]
        for message in kept:
            turns.append(message)
            turn_ids.append(turn_id)
            appended_at.append(at)
    metadata = record.metadata
    if redact_metadata:
        metadata = {key: value for key, value in metadata.items() if not value_mentions([key, value], needles)}
    return record.model_copy(
        update={
            "turns": turns,
            "turn_ids": turn_ids,
            "turn_appended_at": appended_at,
            "turn_count": len(turns),
            "metadata": metadata,
        }
    )


def redact_early_turns(
    event: SessionCompleted, needles: Sequence[Needle], early: Sequence[bool], new_event_id: UUID
) -> SessionCompleted | None:
    """The session with its early turns (and its metadata) redacted as `redact_session` redacts a
    whole one, its later turns verbatim, under a new event id; None when no turn is left."""
    messages: list[Message] = []
    for index, message in enumerate(event.messages):
        is_early = index < len(early) and early[index]
        messages.extend(redact_messages([message], needles).messages if is_early else [message])
    if not messages:
        return None
    metadata = {key: value for key, value in event.metadata.items() if not value_mentions([key, value], needles)}
    return SessionCompleted.model_validate(
        {
            **event.model_dump(),
            "event_id": new_event_id,
            "messages": [message.model_dump() for message in messages],
            "metadata": metadata,
        }
    )
