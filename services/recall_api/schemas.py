"""Request and response bodies of the recall API (they make up the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import (
    METADATA_MAX_KEYS,
    Channel,
    CleanText,
    MessageRole,
    MetadataKey,
    MetadataValue,
    Scope,
    SubjectToken,
)
from services.common.domain.facts import FactStatus, Volatility

MemoryKind = Literal["episode", "fact"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatTurn(_Body):
    role: MessageRole = Field(description="Who produced the turn.")
    content: CleanText = Field(max_length=32_000, description="The text of the turn.")


class AutoRecallRequest(_Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"user_id": "alice", "message": "Can you book the usual place in Busan?"}]},
    )

    user_id: SubjectToken = Field(description="End user whose memory is searched.")
    agent_id: SubjectToken | None = Field(default=None, description="Only this agent's episodes, when given.")
    channel: Channel = Field(default="private", description="'group' never sees memories from private sessions.")
    message: CleanText = Field(max_length=32_000, description="The current user message.")
    recent_messages: list[ChatTurn] = Field(
        default_factory=list, max_length=100, description="Earlier turns of this conversation, oldest first."
    )
    max_entries: int | None = Field(
        default=None, ge=1, le=20, description="Most entries injected (default 2, TIERMEM_L0_DEFAULT_MAX_ENTRIES)."
    )
    token_budget: int | None = Field(default=None, ge=1, le=8000, description="Most tokens of the section (300).")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="Only memories from sessions whose metadata has every one of these key/values.",
    )


class MemoryItem(BaseModel):
    id: str = Field(description="Episode or fact id; pass it to memory_expand.")
    kind: MemoryKind
    abstract: str = Field(description="One line: the episode abstract or the fact sentence.")
    score: float = Field(description="Fused relevance in [0, 1] (what the minimum score is compared with).")
    weight: float = Field(description="Relevance × recency: the ranking key.")
    occurred_at: str | None = Field(description="When the session ended (episodes) or the fact was last said.")
    session_id: str | None = Field(description="Source session (episodes; facts: the latest observation's).")
    status: FactStatus | None = Field(default=None, description="Fact status; None for episodes.")
    scope: Scope | None = None
    channel: Channel | None = Field(
        default=None, description="'group' when it was stated in a group conversation (a group may see it)."
    )
    channels: list[Channel] = Field(default_factory=list, description="Every channel it was stated in.")
    matched_passage: str | None = Field(default=None, description="The passage that matched, when one did.")
    metadata: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Session metadata: key → the values its session(s) gave it (one for an episode; a fact "
        "lists every value its sessions gave), as in the memory list.",
    )


class CutCandidate(BaseModel):
    id: str = Field(description="Episode or fact id; pass it to memory_expand.")
    kind: MemoryKind
    score: float = Field(description="Fused relevance in [0, 1].")
    reason: str = Field(description="Why L0 left it out, e.g. 'does not fit the 300-token budget'.")


class AutoRecallResponse(BaseModel):
    section: str = Field(description="The '## Memory Context' text to put into the prompt, or ''.")
    items: list[MemoryItem]
    injected: int = Field(description="How many entries the section holds.")
    top_score: float | None = Field(description="Best relevance seen (before the threshold), None if none.")
    tokens: int = Field(description="Tokens of the section (o200k_base).")
    skipped_reason: str | None = Field(
        description="Why nothing was injected, as a sentence; set whenever `injected` is 0 (e.g. 'trivial message "
        "(not searched)', 'no memory for this user', 'nothing scored above the floor (top 0.45 < 0.60)', "
        "'every candidate cut: <why the best one was cut>'), None when something was injected."
    )
    cut: list[CutCandidate] = Field(
        default_factory=list,
        description="The candidates past the score floor that were not injected, in rank order, each with why.",
    )
    degraded: Literal["embedding_deadline"] | None = Field(
        default=None,
        description="Set when the answer is partial: 'embedding_deadline' = the query embedding missed the L0 "
        "deadline, so only keyword search was used.",
    )


class SearchRequest(_Body):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"user_id": "alice", "query": "payment module rewrite"}]}
    )

    user_id: SubjectToken
    query: CleanText = Field(min_length=1, max_length=4000)
    limit: int = Field(default=10, ge=1, le=100)
    kinds: list[MemoryKind] | None = Field(default=None, description="episode and/or fact; both when omitted.")
    channel: Channel = Field(default="private", description="'group' only searches memories from group sessions.")
    agent_id: SubjectToken | None = None
    include_superseded: bool = Field(default=False, description="Also return facts a newer value replaced.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="Only memories from sessions whose metadata has every one of these key/values.",
    )


class SearchResponse(BaseModel):
    items: list[MemoryItem]
    top_score: float | None


class SourceMessage(BaseModel):
    role: str
    content: str
    ts: str | None = None
    name: str | None = None


class ExpandedMemory(BaseModel):
    id: str
    kind: MemoryKind
    provenance: dict[str, Any] = Field(description="Where it came from: session, channel, dates, source events.")
    summary: str | None = Field(default=None, description="Full episode summary.")
    abstract: str | None = None
    fact: dict[str, Any] | None = Field(default=None, description="The full fact, for facts.")
    messages: list[SourceMessage] = Field(default_factory=list, description="Source messages of an episode.")
    messages_available: bool = Field(
        default=False, description="False when the raw session could not be read back (erased or expired)."
    )
    messages_truncated: bool = False
    messages_note: str | None = None


class GraphSearchRequest(_Body):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"user_id": "alice", "entity": "DGIA", "hops": 2}]}
    )

    user_id: SubjectToken
    query: CleanText | None = Field(default=None, max_length=1000, description="Free text naming an entity.")
    entity: CleanText | None = Field(default=None, max_length=400, description="An entity key or exact name.")
    hops: int = Field(default=1, ge=1, le=3)
    limit: int | None = Field(default=None, ge=1, le=200)
    channel: Channel = Field(default="private", description="'group' only returns what group sessions support.")


class GraphSearchResponse(BaseModel):
    entities: list[dict[str, Any]]
    relations: list[dict[str, Any]]


class SaveFactRequest(_Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"user_id": "alice", "text": "The user is vegetarian.", "request_id": "r-1"}]},
    )

    user_id: SubjectToken
    text: CleanText = Field(min_length=1, max_length=1000, description="The fact as one sentence.")
    subject: CleanText | None = Field(default=None, max_length=200, description="Default 'user'.")
    attribute: CleanText | None = Field(default=None, max_length=100, description="Default 'note'.")
    value: CleanText | None = Field(default=None, max_length=400, description="Default: the text.")
    scope: Scope = "personal"
    volatility: Volatility | None = None
    channel: Channel = Field(default="private", description="Channel the fact was learned in.")
    language: str | None = Field(default=None, max_length=35)
    request_id: str | None = Field(
        default=None,
        max_length=128,
        description="Idempotency key: the same request id is one observation. Default: text, scope and UTC day.",
    )


class SaveFactResponse(BaseModel):
    outcome: str
    fact_id: str | None
    status: FactStatus | None = None
    rejected_reason: str | None = None
    written: list[str] = Field(default_factory=list, description="Ids of the facts stored or updated.")


class FactsResponse(BaseModel):
    section: str = Field(description="The facts as a fenced '## Memory Context' block within the budget.")
    items: list[MemoryItem]
    tokens: int
    omitted: int = Field(description="Current facts that did not fit into the budget.")


class ErasureAccepted(BaseModel):
    event_id: str
    status: Literal["accepted"] = "accepted"
    duplicate: bool = False
    status_url: str | None = Field(default=None, description="GET it to see when the erasure is complete.")


class Instructions(BaseModel):
    lang: str
    text: str
