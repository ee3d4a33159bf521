"""Event models exchanged over NATS JetStream.

Every model is frozen, carries a `Literal` `event_type` and `schema_version`, and describes every
field, so the exported JSON Schemas are a usable public reference for upstream producers.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contracts.times import WINDOW_TEXT, EventTime

# Ids become NATS subject tokens, so only characters that can never be wildcards or separators.
ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def is_subject_token(value: object) -> bool:
    """Whether `value` is a valid id. Python code must check ids with this, never `re.match(ID_PATTERN)`:
    Python's `$` also matches before a trailing newline, so "alice\\n" would pass. (Pydantic checks
    ID_PATTERN with a Rust regex, where `$` is the true end.)"""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


Channel = Literal["private", "group"]
Scope = Literal["personal", "team", "org"]
MessageRole = Literal["user", "assistant", "system", "tool"]


def _no_surrogates(value: str) -> str:
    # Lone surrogates come from broken UTF-8 decoded with surrogateescape; they cannot be encoded
    # back to UTF-8 and would crash every store downstream.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid UTF-8 ({exc.reason} at position {exc.start})") from exc
    return value


CleanText = Annotated[str, AfterValidator(_no_surrogates)]


# A tenant/user/agent/session id: it becomes a NATS subject token.
SubjectToken = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ID_PATTERN)]


# Session metadata: string key/values that reach the session's episodes and facts and can be
# filtered on. Keys are id-like so a key can never be read as a nested payload path (no dots);
# the count and sizes are bounded because every key is stored on every derived point.
METADATA_KEY_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=METADATA_KEY_PATTERN)]
MetadataValue = Annotated[str, StringConstraints(max_length=256), AfterValidator(_no_surrogates)]
METADATA_MAX_KEYS = 16


class _Event(BaseModel):
    # NaN and infinities are refused in every event: no stage can rank, compare or store them.
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False, allow_inf_nan=False)


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: MessageRole = Field(description="Who produced the turn.")
    content: CleanText = Field(description="The text of the turn, verbatim.")
    ts: EventTime | None = Field(default=None, description=f"When the turn was sent (timezone-aware, {WINDOW_TEXT}).")
    name: str | None = Field(default=None, max_length=256, description="Display name of the speaker, when known.")


class SessionCompleted(_Event):
    """A finished conversation, published by an upstream chat system. The public input format."""

    event_type: Literal["session.completed"] = Field(
        default="session.completed", description="Discriminator of the event kind."
    )
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(
        description="Id of this event, unique for its tenant and user. It is de-duplicated per owner: the "
        "Nats-Msg-Id header is 'session:<tenant_id>:<user_id>:<event_id>' (the HTTP API and tiermem ingest send "
        "it; a producer publishing on NATS sends the same), so the same id from another tenant or user is "
        "another event, never a duplicate."
    )
    tenant_id: SubjectToken = Field(description="Tenant that owns the conversation.")
    user_id: SubjectToken = Field(description="End user the memory belongs to.")
    agent_id: SubjectToken = Field(description="Agent that took part in the conversation.")
    session_id: SubjectToken = Field(description="Conversation id, unique within the tenant and user.")
    channel: Channel = Field(
        description="'private' (one user and the agent) or 'group'; private memories never surface in groups."
    )
    scope: Scope = Field(default="personal", description="Visibility of derived memories: personal, team or org.")
    started_at: EventTime = Field(
        description=f"When the conversation started (timezone-aware ISO 8601, {WINDOW_TEXT})."
    )
    ended_at: EventTime = Field(
        description=f"When the conversation ended (timezone-aware ISO 8601, {WINDOW_TEXT}; not before started_at)."
    )
    locale: str | None = Field(
        default=None, max_length=35, description="BCP 47 language tag of the conversation, e.g. 'ko' or 'en-US'."
    )
    messages: list[Message] = Field(min_length=1, description="The turns, oldest first.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="String key/values from the producer (at most 16; keys 1-64 of A-Z a-z 0-9 _ -, values at "
        "most 256 characters). They are stored on the episodes and facts made from the session, and search, "
        "the memory list and L0 can filter on them.",
    )

    @field_validator("ended_at")
    @classmethod
    def _ended_after_started(cls, ended_at: datetime, info: ValidationInfo) -> datetime:
        # A field validator (started_at is declared first), so the refusal names ended_at.
        started_at = info.data.get("started_at")
        if isinstance(started_at, datetime) and ended_at < started_at:
            raise ValueError("ended_at must not be earlier than started_at")
        return ended_at


class EpisodeCreated(_Event):
    """An episode (summary + abstract + passages) was written to the episodic index."""

    event_type: Literal["episode.created"] = Field(default="episode.created", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Deterministic id derived from the episode id and source event.")
    source_event_id: UUID = Field(description="event_id of the SessionCompleted this episode was made from.")
    episode_id: str = Field(description="Deterministic id of the episode point (UUID text).")
    tenant_id: SubjectToken = Field(description="Tenant that owns the episode.")
    user_id: SubjectToken = Field(description="User the episode belongs to.")
    agent_id: SubjectToken = Field(description="Agent of the source session.")
    session_id: SubjectToken = Field(description="Source session id.")
    channel: Channel = Field(description="Channel of the source session.")
    scope: Scope = Field(description="Scope of the source session.")
    occurred_at: EventTime = Field(description=f"When the source session ended ({WINDOW_TEXT}).")
    language: str = Field(description="Detected or declared language of the session (e.g. 'ko', 'en').")
    summary: str = Field(description="The episode summary, in the session's language.")
    abstract: str = Field(description="One-line abstract used by L0 auto-inject.")
    entity_names: list[str] = Field(default_factory=list, description="Entities named in the summary.")
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=METADATA_MAX_KEYS,
        description="The source session's metadata; the facts extracted from the episode carry it.",
    )
    raw_stream_sequence: int | None = Field(
        default=None, description="Stream sequence of the raw SessionCompleted message in the session stream."
    )
    importance: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="How much the episode matters, 0 (chit-chat) to 1 (decisions, commitments, preferences, "
        "errors, health, an explicit 'remember this'): from the summarising model, else the offline heuristic; "
        "0.5 when the producer did not score it.",
    )


class EntityRef(BaseModel):
    """A reference to an entity node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entity_id: str = Field(description="Deterministic entity key.")
    name: str = Field(description="Display name.")
    entity_type: str = Field(description="person, pet, project, technology, organisation, place or other.")


class EntityUpserted(_Event):
    """An entity node was created or changed by semantic extraction."""

    event_type: Literal["entity.upserted"] = Field(default="entity.upserted", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Deterministic id (entity and source episode).")
    tenant_id: SubjectToken = Field(description="Tenant that owns the entity.")
    user_id: SubjectToken = Field(description="User whose session produced the change.")
    scope: Scope = Field(description="Scope of the entity.")
    entity: EntityRef = Field(description="The entity that was created or changed.")
    aliases: list[str] = Field(default_factory=list, description="Known surface forms of the entity.")
    source_episode_id: str | None = Field(default=None, description="Episode that mentioned the entity.")
    created: bool = Field(description="True when the node was new, False when an existing node changed.")


class EntityMerged(_Event):
    """Duplicate entity nodes were merged into one canonical node."""

    event_type: Literal["entity.merged"] = Field(default="entity.merged", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Deterministic id (canonical and merged ids).")
    tenant_id: SubjectToken = Field(description="Tenant that owns the entities.")
    user_id: SubjectToken = Field(description="User whose upsert triggered the merge.")
    scope: Scope = Field(description="Scope of the entities.")
    canonical: EntityRef = Field(description="The surviving node.")
    merged_entity_ids: list[str] = Field(description="Keys of the nodes folded into the canonical node.")
    aliases: list[str] = Field(description="All aliases of the canonical node after the merge.")
    method: Literal["exact", "alias", "fuzzy", "embedding", "llm"] = Field(
        description="Which matching stage decided the merge."
    )
    similarity: float = Field(ge=0.0, le=1.0, description="Similarity that decided the merge (1.0 for exact).")


class ErasureTarget(BaseModel):
    """What an erasure covers: a whole user, or one fact or episode of that user."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["user", "fact", "episode"] = Field(description="Granularity of the erasure.")
    item_id: str | None = Field(default=None, description="Fact or episode id; required unless kind is 'user'.")

    @model_validator(mode="after")
    def _item_needed(self) -> ErasureTarget:
        if self.kind != "user" and not self.item_id:
            raise ValueError(f"item_id is required to erase a {self.kind}")
        return self


class ErasureRequested(_Event):
    """Somebody asked for a user's memory (or one item of it) to be erased everywhere."""

    event_type: Literal["erasure.requested"] = Field(default="erasure.requested", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Unique id of the request.")
    tenant_id: SubjectToken = Field(description="Tenant of the user.")
    user_id: SubjectToken = Field(description="User whose memory is erased.")
    target: ErasureTarget = Field(description="What to erase.")
    requested_at: EventTime = Field(description=f"When the request was made ({WINDOW_TEXT}).")
    reason: str | None = Field(default=None, max_length=1000, description="Free-text reason, for the audit log.")
    session_cut: int | None = Field(
        default=None,
        ge=0,
        description="The session stream's last sequence when the request was accepted: raw sessions at or "
        "below it are erased (for a fact or an episode: redacted or removed where they hold it), and every later "
        "one is kept with what is derived from it, even when it states a forgotten value again. Absent in "
        "requests made before this field existed; a whole-user erasure cuts those when the pruner starts on "
        "them, a fact or episode erasure then covers every session.",
    )


class ErasureCompleted(_Event):
    """An erasure was carried out; counts say what was removed from each store."""

    event_type: Literal["erasure.completed"] = Field(default="erasure.completed", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Deterministic id derived from the request id.")
    request_event_id: UUID = Field(description="event_id of the ErasureRequested.")
    tenant_id: SubjectToken = Field(description="Tenant of the user.")
    user_id: SubjectToken = Field(description="User whose memory was erased.")
    target: ErasureTarget = Field(description="What was erased.")
    completed_at: AwareDatetime = Field(description="When the erasure finished.")
    removed: dict[str, int] = Field(description="Removed items per store, e.g. {'episodes': 3, 'graph_nodes': 5}.")


class PruneReport(_Event):
    """What one prune pass removed (expired and never-recalled episodes, superseded fact versions), what it
    compressed and what importance kept."""

    event_type: Literal["prune.completed"] = Field(default="prune.completed", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(
        description="Deterministic id of the pass (from its clock reading); also the Nats-Msg-Id, so a pass "
        "repeated at the same clock reading is published once."
    )
    now: AwareDatetime = Field(description="The clock reading every rule was evaluated against.")
    started_at: AwareDatetime = Field(description="Wall-clock start of the pass.")
    finished_at: AwareDatetime = Field(description="Wall-clock end of the pass.")
    owners_scanned: int = Field(ge=0, description="Tenant/user pairs the pass looked at.")
    removed: dict[str, int] = Field(
        description="episodes_expired, episodes_unrecalled, passages, facts_superseded: how many points went."
    )
    truncated_owners: list[str] = Field(
        default_factory=list,
        description="tenant/user pairs whose scan hit the scan limit; the next pass continues there.",
    )
    episodes_compressed: int = Field(
        default=0,
        ge=0,
        description="Forgotten episodes folded into compressed summary episodes (also counted in "
        "removed.episodes_unrecalled: they left the store as episodes; their gist and provenance live on).",
    )
    summaries_written: int = Field(
        default=0, ge=0, description="Compressed summary episodes written (each lists all its source sessions)."
    )
    kept_by_importance: int = Field(
        default=0,
        ge=0,
        description="Episodes past the never-recalled age that were kept because they are important or often "
        "recalled (retention weighs importance, then access, then age).",
    )


class DeadLetterRecord(_Event):
    """A message that could not be processed: poison, or out of deliveries."""

    event_type: Literal["dead_letter"] = Field(default="dead_letter", description="Discriminator.")
    schema_version: Literal[1] = Field(default=1, description="Version of this event's schema.")
    event_id: UUID = Field(description="Deterministic id from stream, sequence and consumer.")
    original_subject: str = Field(description="Subject the failed message was published on.")
    original_stream: str = Field(description="Stream that held the failed message.")
    stream_sequence: int = Field(description="Stream sequence of the failed message.")
    consumer: str = Field(description="Durable consumer that gave up on it.")
    deliveries: int = Field(description="How many times it was delivered.")
    reason: str = Field(description="Why it failed (exception type and message, or validation errors).")
    kind: Literal["poison", "exhausted"] = Field(
        description="'poison': rejected without retry (invalid payload); 'exhausted': failed max_deliver times."
    )
    tenant_id: str | None = Field(default=None, description="Tenant token from the subject, when present.")
    user_id: str | None = Field(default=None, description="User token from the subject, when present.")
    payload: str = Field(description="The original payload, decoded as UTF-8 with replacement characters.")
    failed_at: datetime = Field(description="When the record was written.")


EVENT_MODELS: tuple[type[BaseModel], ...] = (
    SessionCompleted,
    EpisodeCreated,
    EntityUpserted,
    EntityMerged,
    ErasureRequested,
    ErasureCompleted,
    PruneReport,
    DeadLetterRecord,
)
