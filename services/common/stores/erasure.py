"""Erasure plumbing shared by the pruner and the CLI: reading and removing one user's messages in the
JetStream streams, the audit that lists every remaining trace of a user in every store, and the core
NATS control requests (`tiermem prune --now`, `tiermem audit`) a running pruner answers.

Why a control request: the running pruner owns the stores, and a Qdrant Edge shard cannot be opened
by a second process, so the CLI asks the pruner first and opens the stores itself only when no
pruner answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError, NotFoundError, ServerError
from pydantic import BaseModel, ConfigDict, Field

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.stores.open_sessions import OpenSessionStore
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES

if TYPE_CHECKING:
    from services.common.stores.graph.repository import GraphRepository
    from services.common.stores.vector.port import VectorIndex

ERASURE_RECORD_KINDS: frozenset[str] = frozenset({"erasure.requested", "erasure.completed"})
"""Derived events kept on purpose after an erasure: the proof that it was asked for and done. They
carry ids and counts, never memory text."""

VECTOR_COLLECTIONS: tuple[str, ...] = (EPISODES, PASSAGES, FACTS)

_NO_MESSAGE_ERR_CODE = 10057  # "no message found": deleting a message that is already gone


# --------------------------------------------------------------------------------------------------
# Streams


def user_derived_filter(subjects: Subjects, tenant_id: str, user_id: str) -> str:
    """Every per-user derived subject of one user (`<root>.<noun>.<verb>.v1.<tenant>.<user>`)."""
    return f"{subjects.root}.*.*.v1.{tenant_id}.{user_id}"


def subject_kind(subjects: Subjects, subject: str) -> str | None:
    """`episode.created` for `<root>.episode.created.v1.t.u`; None for anything else."""
    parts = subject.split(".")
    if len(parts) == 6 and parts[0] == subjects.root and parts[3] == "v1":
        return f"{parts[1]}.{parts[2]}"
    return None


async def subject_counts(js: JetStreamContext, stream: str, subject_filter: str) -> dict[str, int]:
    """Messages per subject matching the filter; empty when the stream does not exist."""
    try:
        info = await js.stream_info(stream, subjects_filter=subject_filter)
    except NotFoundError:
        return {}
    return {str(subject): int(count) for subject, count in (info.state.subjects or {}).items()}


async def stream_messages(
    js: JetStreamContext, stream: str, subject_filter: str, *, from_seq: int = 1
) -> AsyncIterator[js_api.RawStreamMsg]:
    """Every stored message matching the filter (at or above `from_seq`), oldest first, one direct
    lookup at a time (no consumer is created, so reading leaves no state behind)."""
    sequence = max(from_seq, 1)
    while True:
        try:
            message = await js.get_msg(stream, seq=sequence, subject=subject_filter, next=True)
        except NotFoundError:
            return
        if message.seq is None:
            return
        yield message
        sequence = message.seq + 1


async def delete_message(js: JetStreamContext, stream: str, sequence: int) -> bool:
    """Remove one message; False when it was already gone (a re-run after a crash)."""
    try:
        return bool(await js.delete_msg(stream, sequence))
    except ServerError as exc:
        if exc.err_code == _NO_MESSAGE_ERR_CODE:
            return False
        raise
    except NotFoundError:
        return False


async def purge_subject(js: JetStreamContext, stream: str, subject_filter: str, *, upto_seq: int | None = None) -> int:
    """Remove every message matching the filter (only those at or below `upto_seq` when given);
    returns how many there were."""
    before = sum((await subject_counts(js, stream, subject_filter)).values())
    if not before:
        return 0
    if upto_seq is None:
        await js.purge_stream(stream, subject=subject_filter)
        return before
    if upto_seq < 1:
        return 0
    await js.purge_stream(stream, subject=subject_filter, seq=upto_seq + 1)  # purges below `seq`
    return before - sum((await subject_counts(js, stream, subject_filter)).values())


async def count_messages_upto(js: JetStreamContext, stream: str, subject_filter: str, upto_seq: int) -> int:
    """Messages matching the filter at or below `upto_seq`."""
    count = 0
    async for message in stream_messages(js, stream, subject_filter):
        if message.seq is None or message.seq > upto_seq:
            break
        count += 1
    return count


# --------------------------------------------------------------------------------------------------
# Audit


class AuditReport(BaseModel):
    """Every trace of one user in every store. `erasure_records` are reported but are not traces of
    memory (they are the erasure's own audit trail)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str
    user_id: str
    vectors: dict[str, int] = Field(description="Points per collection (episodes, passages, facts).")
    graph: dict[str, int] = Field(description="Nodes and edges the user contributed to, and their Episode nodes.")
    session_messages: int = Field(description="Raw SessionCompleted messages in the session stream.")
    derived_events: dict[str, int] = Field(description="Derived events per kind (erasure records excluded).")
    dead_letters: int = Field(description="Dead-letter records on the user's subjects.")
    open_sessions: int = Field(
        default=0,
        description="Records of per-turn sessions in the open-session bucket (open, closing, or closed and "
        "not yet forgotten). Not counted with a session cut: a record there holds only later turns.",
    )
    erasure_records: int = Field(description="erasure.requested / erasure.completed events (kept as proof).")

    def traces(self) -> dict[str, int]:
        """Flat `store.item → count` of everything that remains, zeros included."""
        flat = {f"vectors.{name}": count for name, count in self.vectors.items()}
        flat.update({f"graph.{name}": count for name, count in self.graph.items()})
        flat["streams.sessions"] = self.session_messages
        flat.update({f"streams.{kind}": count for kind, count in self.derived_events.items()})
        flat["streams.dead_letters"] = self.dead_letters
        flat["open_sessions"] = self.open_sessions
        return flat

    @property
    def remaining(self) -> int:
        return sum(self.traces().values())

    @property
    def clean(self) -> bool:
        return self.remaining == 0


async def audit_user(
    *,
    index: VectorIndex,
    graph: GraphRepository,
    js: JetStreamContext,
    subjects: Subjects,
    owner: Owner,
    session_cut: int | None = None,
) -> AuditReport:
    """Count what is left of `owner` in the vector collections, the graph, the session stream, the
    derived stream, the dead-letter stream and the open-session bucket. With `session_cut`, raw
    sessions above it (published after an erasure started: the user came back) are not counted, nor
    open sessions (the erasure removed the user's records when it was accepted; one there now was
    opened by a later turn)."""
    vectors = {collection: await index.count(collection, owner) for collection in VECTOR_COLLECTIONS}
    graph_counts = await graph.count(owner)
    session_subject = subjects.session_completed(owner.tenant_id, owner.user_id)
    if session_cut is None:
        session_messages = sum((await subject_counts(js, subjects.session_stream, session_subject)).values())
    else:
        session_messages = await count_messages_upto(js, subjects.session_stream, session_subject, session_cut)
    derived: dict[str, int] = {}
    erasure_records = 0
    for subject, count in (
        await subject_counts(js, subjects.derived_stream, user_derived_filter(subjects, owner.tenant_id, owner.user_id))
    ).items():
        kind = subject_kind(subjects, subject) or subject
        if kind in ERASURE_RECORD_KINDS:
            erasure_records += count
        else:
            derived[kind] = derived.get(kind, 0) + count
    dead = await subject_counts(
        js, subjects.dead_letter_stream, subjects.user_dead_letters(owner.tenant_id, owner.user_id)
    )
    open_sessions = await count_open_sessions(js, subjects, owner) if session_cut is None else 0
    return AuditReport(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        vectors=vectors,
        graph=graph_counts,
        session_messages=session_messages,
        derived_events=derived,
        dead_letters=sum(dead.values()),
        open_sessions=open_sessions,
        erasure_records=erasure_records,
    )


async def count_open_sessions(js: JetStreamContext, subjects: Subjects, owner: Owner) -> int:
    """The owner's records in the open-session bucket (0 where there is no bucket: it is not created)."""
    store = OpenSessionStore(js, subjects)
    try:
        await js.key_value(store.bucket)
    except BucketNotFoundError:
        return 0
    return len(await store.keys(owner))


# --------------------------------------------------------------------------------------------------
# Control requests to a running pruner

ControlCommand = Literal["prune", "audit", "audit_value"]
CONTROL_QUEUE = "pruner-control"


def control_subject(subjects: Subjects, command: ControlCommand) -> str:
    """Core NATS (not JetStream) subject a running pruner answers on; outside every stream's subjects."""
    return f"{subjects.root}.control.pruner.{command}"


class AuditRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str
    user_id: str


class ControlReply(BaseModel):
    """What the pruner answers: `result` (a PruneReport or AuditReport as JSON) or `error`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    result: dict[str, object] | None = None
    error: str | None = None


class ControlError(RuntimeError):
    """The running pruner answered the request with an error."""


async def request_control(
    nc: NatsClient, subjects: Subjects, command: ControlCommand, payload: BaseModel | None, timeout_s: float
) -> dict[str, object] | None:
    """Ask a running pruner; its result, or None when no pruner listens. Raises ControlError when
    it answered with an error, and TimeoutError when it did not answer in time."""
    data = payload.model_dump_json().encode("utf-8") if payload is not None else b"{}"
    try:
        reply = await nc.request(control_subject(subjects, command), data, timeout=timeout_s)
    except NoRespondersError:
        return None
    except NatsTimeoutError as exc:
        raise TimeoutError(f"the running pruner did not answer the {command} request within {timeout_s:.0f}s") from exc
    answer = ControlReply.model_validate(json.loads(reply.data))
    if answer.error is not None:
        raise ControlError(answer.error)
    return answer.result
