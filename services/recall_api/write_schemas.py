"""Bodies of the write and memory-management endpoints (sessions in, event status, listing, fact
history, corrections, forgetting) and the one error shape every 4xx/5xx answer uses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import Channel, CleanText, Scope, SubjectToken
from contracts.session_form import SessionForm
from services.common.domain.facts import FactSource, FactStatus, Volatility

ListKind = Literal["episode", "fact", "all"]
EventState = Literal["accepted", "consolidated", "processed", "dead_lettered", "erasure_pending", "erasure_completed"]

_MINIMAL_SESSION_EXAMPLE: dict[str, Any] = {
    "user_id": "alice",
    "messages": [
        {"role": "user", "content": "I moved to Busan last month."},
        {"role": "assistant", "content": "Noted: you live in Busan now."},
    ],
}
_SESSION_EXAMPLE: dict[str, Any] = {
    "event_id": "0b6f3f0e-8a8e-4c43-9a55-1d9f5b0a7c11",
    "tenant_id": "acme",
    "user_id": "alice",
    "agent_id": "support-bot",
    "session_id": "s-2026-05-02-1",
    "channel": "private",
    "started_at": "2026-05-02T09:00:00Z",
    "ended_at": "2026-05-02T09:30:00Z",
    "messages": [
        {"role": "user", "content": "I moved to Busan last month."},
        {"role": "assistant", "content": "Noted: you live in Busan now."},
    ],
}


class ErrorDetail(BaseModel):
    field: str | None = Field(default=None, description="Dotted path of the offending field, when one is.")
    reason: str = Field(description="What is wrong with it (never the value itself).")


class ErrorResponse(BaseModel):
    """The one shape of every error answer (4xx and 5xx)."""

    detail: str = Field(description="One line for people.")
    code: str = Field(description="Stable machine-readable code, e.g. 'invalid_request', 'not_found'.")
    errors: list[ErrorDetail] = Field(default_factory=list, description="Per-field problems, when any.")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionSubmission(SessionForm):
    """A conversation as `POST /v1/sessions` takes it: only `user_id` and `messages` are required; the
    API key decides the tenant (a record naming another one is refused), and the ids, agent, channel
    and times are filled in deterministically (`contracts.session_form`) when left out."""


class SessionAccepted(BaseModel):
    event_id: str
    status: Literal["accepted"] = "accepted"
    duplicate: bool = Field(description="True when this event id was already accepted (nothing new happens).")
    status_url: str = Field(description="Where to ask what became of it: GET /v1/events/{event_id}?user_id=….")


class SessionBatchRequest(_Body):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"sessions": [_MINIMAL_SESSION_EXAMPLE, _SESSION_EXAMPLE]}]}
    )

    sessions: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=100,
        description="Sessions in the form of POST /v1/sessions (only user_id and messages are required); "
        "each is validated on its own.",
    )


class SessionBatchItem(BaseModel):
    index: int = Field(description="Position in the request's list.")
    status: Literal["accepted", "rejected"]
    event_id: str | None = None
    duplicate: bool = False
    status_url: str | None = None
    error: ErrorResponse | None = Field(default=None, description="Why the item was rejected.")


class SessionBatchResponse(BaseModel):
    items: list[SessionBatchItem]
    accepted: int
    duplicates: int
    rejected: int


class EventStatus(BaseModel):
    event_id: str
    kind: Literal["session", "erasure"]
    state: EventState = Field(
        description=(
            "session: accepted (not consolidated yet), consolidated (into `episode_id`), processed (handled, "
            "but nothing was worth an episode) or dead_lettered (`reason`); erasure: erasure_pending, "
            "erasure_completed (`removed` counts) or dead_lettered."
        )
    )
    episode_id: str | None = None
    reason: str | None = Field(default=None, description="Why it was dead-lettered (or made no episode).")
    removed: dict[str, int] | None = Field(default=None, description="What the erasure removed, per store.")
    completed_at: str | None = None


class MemoryRecord(BaseModel):
    id: str
    kind: Literal["episode", "fact"]
    text: str = Field(description="The episode abstract or the fact sentence.")
    occurred_at: str | None = Field(description="When the session ended (episodes) or the fact was last said.")
    session_id: str | None = None
    scope: Scope
    channels: list[str]
    status: FactStatus | None = Field(default=None, description="Facts only.")
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    superseded_by: str | None = None
    metadata: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Session metadata: key → the values its session(s) gave it (one for an episode; a fact "
        "stated in several sessions may have several).",
    )


class MemoryListResponse(BaseModel):
    items: list[MemoryRecord]
    next_cursor: str | None = Field(description="Pass as `cursor` (with the same filters) for the next page.")


class FactObservation(BaseModel):
    source: FactSource = Field(description="'extraction' (from a session) or 'api' (stated by the user or app).")
    user_stated: bool = Field(description="True for explicit saves and corrections.")
    episode_id: str
    session_id: str | None
    occurred_at: str


class FactVersion(BaseModel):
    id: str
    text: str
    subject: str
    attribute: str
    value: str
    scope: Scope
    status: FactStatus
    volatility: Volatility
    evidence_count: int
    valid_from: str
    valid_to: str | None
    superseded_by: str | None
    user_stated: bool = Field(description="The latest observation was stated by the user (a save or correction).")
    channels: list[str]
    provenance: list[FactObservation]


class FactHistoryResponse(BaseModel):
    fact_id: str
    versions: list[FactVersion] = Field(description="Every value of this subject and attribute, oldest first.")


class CorrectionRequest(_Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"user_id": "alice", "value": "Busan", "text": "The user lives in Busan."}],
        },
    )

    user_id: SubjectToken = Field(description="End user the fact belongs to.")
    value: CleanText = Field(min_length=1, max_length=400, description="The corrected value.")
    text: CleanText = Field(min_length=1, max_length=1000, description="The corrected fact as one sentence.")
    channel: Channel = Field(default="private", description="Channel the correction was made in.")


class CorrectionResponse(BaseModel):
    fact_id: str = Field(description="The corrected (now current) fact.")
    superseded: str = Field(description="The fact that was corrected; kept with valid_to and superseded_by.")
    outcome: str
    status: FactStatus | None


class ForgetAccepted(BaseModel):
    event_id: str
    status: Literal["accepted"] = "accepted"
    duplicate: bool = False
    kind: Literal["episode", "fact"]
    status_url: str
