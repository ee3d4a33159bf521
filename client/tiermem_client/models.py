"""Typed results of the recall API, as the client sees them.

Mirrors of the server's response models (`services/recall_api/schemas.py`, `write_schemas.py`). They
ignore fields they do not know, so a newer server never breaks an older client; the drift test in
`tests/client/test_contract_drift.py` keeps their field names equal to the server's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MemoryKind = Literal["episode", "fact"]


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ChatTurn(_Result):
    role: Literal["user", "assistant", "system", "tool"]
    content: str


class MemoryItem(_Result):
    id: str
    kind: MemoryKind
    abstract: str
    score: float
    weight: float
    occurred_at: str | None = None
    session_id: str | None = None
    status: str | None = None
    scope: str | None = None
    channel: str | None = None
    channels: list[str] = Field(default_factory=list)
    matched_passage: str | None = None
    metadata: dict[str, list[str]] = Field(default_factory=dict)  # session metadata: key -> its values


class CutCandidate(_Result):
    id: str
    kind: str
    score: float
    reason: str  # why L0 left it out


class AutoRecallResponse(_Result):
    section: str
    items: list[MemoryItem]
    injected: int
    top_score: float | None = None
    tokens: int
    skipped_reason: str | None = None  # why nothing was injected; set whenever injected is 0
    cut: list[CutCandidate] = Field(default_factory=list)  # candidates past the floor not injected, with why
    degraded: str | None = None  # "embedding_deadline": answered from keyword search alone, not late


class SearchResponse(_Result):
    items: list[MemoryItem]
    top_score: float | None = None


class SourceMessage(_Result):
    role: str
    content: str
    ts: str | None = None
    name: str | None = None


class ExpandedMemory(_Result):
    id: str
    kind: MemoryKind
    provenance: dict[str, Any] = Field(default_factory=dict)
    summary: str | None = None
    abstract: str | None = None
    fact: dict[str, Any] | None = None
    messages: list[SourceMessage] = Field(default_factory=list)
    messages_available: bool = False
    messages_truncated: bool = False
    messages_note: str | None = None


class GraphSearchResponse(_Result):
    entities: list[dict[str, Any]]
    relations: list[dict[str, Any]]


class SaveFactResponse(_Result):
    outcome: str
    fact_id: str | None = None
    status: str | None = None
    rejected_reason: str | None = None
    written: list[str] = Field(default_factory=list)


class FactsResponse(_Result):
    section: str
    items: list[MemoryItem]
    tokens: int
    omitted: int


class ErasureAccepted(_Result):
    event_id: str
    status: str = "accepted"
    duplicate: bool = False
    status_url: str | None = None


class SessionAccepted(_Result):
    event_id: str
    status: str = "accepted"
    duplicate: bool
    status_url: str


class ForgetAccepted(_Result):
    event_id: str
    status: str = "accepted"
    duplicate: bool = False
    kind: MemoryKind
    status_url: str


class EventStatus(_Result):
    event_id: str
    kind: Literal["session", "erasure"]
    state: str = Field(
        description="accepted, consolidated, processed, dead_lettered, erasure_pending or erasure_completed."
    )
    episode_id: str | None = None
    reason: str | None = None
    removed: dict[str, int] | None = None
    completed_at: str | None = None

    @property
    def finished(self) -> bool:
        """Whether nothing more will happen to the event."""
        return self.state in {"consolidated", "processed", "dead_lettered", "erasure_completed"}


class MemoryRecord(_Result):
    id: str
    kind: MemoryKind
    text: str
    occurred_at: str | None = None
    session_id: str | None = None
    scope: str
    channels: list[str]
    status: str | None = None
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    superseded_by: str | None = None
    metadata: dict[str, list[str]] = Field(default_factory=dict)  # session metadata: key -> its values


class MemoryListResponse(_Result):
    items: list[MemoryRecord]
    next_cursor: str | None = None


class FactObservation(_Result):
    source: str
    user_stated: bool
    episode_id: str
    session_id: str | None = None
    occurred_at: str


class FactVersion(_Result):
    id: str
    text: str
    subject: str
    attribute: str
    value: str
    scope: str
    status: str
    volatility: str
    evidence_count: int
    valid_from: str
    valid_to: str | None = None
    superseded_by: str | None = None
    user_stated: bool
    channels: list[str]
    provenance: list[FactObservation]


class FactHistoryResponse(_Result):
    fact_id: str
    versions: list[FactVersion]


class CorrectionResponse(_Result):
    fact_id: str
    superseded: str
    outcome: str
    status: str | None = None


class ErrorDetail(_Result):
    field: str | None = None
    reason: str


class Instructions(_Result):
    lang: str
    text: str


class ProcedureRule(_Result):
    id: str
    topic: str
    text: str
    owner: Literal["user", "tenant"]
    scope: str
    since: str
    relevance: float | None = None


class ProceduresResponse(_Result):
    """GET /v1/procedures: the turn's working rules (all while few, the relevant ones under the budget)."""

    rules: list[ProcedureRule]
    section: str
    tokens: int
    ranked: bool
    total: int
    omitted: int
    left_out: list[ProcedureRule] = Field(default_factory=list)
