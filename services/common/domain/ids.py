"""Deterministic ids: the basis of idempotency (a replayed event produces the same ids), and the
message ids JetStream de-duplicates on.

Every `Nats-Msg-Id` is a `MessageId`, and a `MessageId` is built only here: `owner_message_id` puts
the tenant and user into it, so an event id that two owners happen to share (ids are chosen by the
producer, and often derived from their own session ids) never makes one owner's message a duplicate
of the other's. `unowned_message_id` is for the few records that belong to nobody (a prune pass) or
whose owner is unknown (a dead letter of an unparseable subject); their keys are unique across owners
by construction. `tests/unit/test_message_ids.py` keeps every publish on these helpers."""

from __future__ import annotations

import uuid
from typing import NewType
from uuid import UUID

from contracts import SessionCompleted
from services.common.domain.owner import Owner

_NAMESPACE = uuid.UUID("6f1c2f0e-6d5b-4c9a-9a53-0c1e5c3b7d11")

MSG_ID_HEADER = "Nats-Msg-Id"
"""The header JetStream de-duplicates on (within the stream's duplicate window)."""

MessageId = NewType("MessageId", str)
"""A `Nats-Msg-Id` value; only `owner_message_id` and `unowned_message_id` make one."""


def deterministic_uuid(*parts: str) -> uuid.UUID:
    """uuid5 over the parts; the basis of every derived event and point id."""
    return uuid.uuid5(_NAMESPACE, "\x1f".join(parts))


def owned_uuid(owner: Owner, kind: str, *parts: str) -> uuid.UUID:
    """A deterministic id of something of one owner: tenant and user are always part of it."""
    return deterministic_uuid(kind, owner.tenant_id, owner.user_id, *parts)


def owner_message_id(owner: Owner, kind: str, key: str | UUID) -> MessageId:
    """The message id of an owner's event: `kind:tenant:user:key`. Ids are subject tokens
    ([A-Za-z0-9_-]), so the separator cannot occur inside them and two owners never share one."""
    return MessageId(f"{kind}:{owner.tenant_id}:{owner.user_id}:{key}")


def session_message_id(event: SessionCompleted) -> MessageId:
    """The message id of a raw session: its event id within its owner. The same record posted twice
    (a retry, over any interface) is one message; the same event id from another owner is not."""
    return owner_message_id(Owner(event.tenant_id, event.user_id), "session", event.event_id)


def unowned_message_id(kind: str, key: str | UUID) -> MessageId:
    """The message id of a record of no owner; `key` must already be unique across owners."""
    return MessageId(f"{kind}::{key}")


def dedup_headers(msg_id: MessageId) -> dict[str, str]:
    """Headers of a JSON event published with a message id (for code that publishes with the raw
    JetStream client rather than `EventPublisher`)."""
    return {MSG_ID_HEADER: msg_id, "content-type": "application/json"}


def is_uuid(value: str) -> bool:
    """Whether `value` is a UUID string (point ids are; anything else cannot name a point)."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
