"""One description per recall API call, shared by the sync and the async client.

Each function turns typed arguments into a `Call` (method, path, query, body, result model): the two
clients only differ in how they send it, so the wire format is written down exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from tiermem_client.adding import DEFAULT_AGENT, MessageInput, minimal_session
from tiermem_client.events import SessionCompleted
from tiermem_client.models import (
    AutoRecallResponse,
    ChatTurn,
    CorrectionResponse,
    ErasureAccepted,
    EventStatus,
    ExpandedMemory,
    FactHistoryResponse,
    FactsResponse,
    ForgetAccepted,
    GraphSearchResponse,
    Instructions,
    MemoryKind,
    MemoryListResponse,
    MemoryRecord,
    ProceduresResponse,
    SaveFactResponse,
    SearchResponse,
    SessionAccepted,
)
from tiermem_client.procedures import PROCEDURE_ATTRIBUTE_PREFIX, PROCEDURE_SUBJECT, rule_topic
from tiermem_client.session_models import OpenSession, SessionEnded, TurnsAccepted

ResultT = TypeVar("ResultT", bound=BaseModel)
Channel = Literal["private", "group"]
Scope = Literal["personal", "team", "org"]


@dataclass(frozen=True)
class Call(Generic[ResultT]):
    method: str
    path: str
    result: type[ResultT]
    params: Mapping[str, str | int | list[str]] = field(default_factory=dict)  # a list: the key repeated
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _segment(value: str) -> str:
    # Ids go into the path: quote everything so an odd id can never name another route.
    return quote(value, safe="")


def _json(payload: dict[str, Any]) -> str:
    return json.dumps({key: value for key, value in payload.items() if value is not None}, ensure_ascii=False)


def _idempotency(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def add_session(session: SessionCompleted) -> Call[SessionAccepted]:
    """Publish a finished conversation (`POST /v1/sessions`), every field given by you. Posting the same
    `event_id` again answers `duplicate=True` and changes nothing. For the short form, see `add`."""
    return Call("POST", "/v1/sessions", SessionAccepted, body=session.model_dump_json())


def add(
    messages: Sequence[MessageInput],
    *,
    user_id: str,
    metadata: Mapping[str, str] | None = None,
    agent_id: str = DEFAULT_AGENT,
    session_id: str | None = None,
    channel: Channel = "private",
    scope: Scope = "personal",
    locale: str | None = None,
) -> Call[SessionAccepted]:
    """Add a conversation from its turns alone, as mem0's `add(messages, user_id=...)`.

    `messages` are `{"role": ..., "content": ...}` dicts (or `Message`/`ChatTurn` models), oldest
    first; `metadata` is string key/values kept with the session. Everything else is filled in:
    `event_id` and `session_id` are derived from the user and the content, so adding the same turns
    again answers `duplicate=True` and stores nothing twice; the times are the turns' `ts` or now; the
    agent is "default", the channel "private" and the tenant the API key's. Follow the returned
    `event_id` with `wait`. A malformed turn, id or metadata raises `ValueError` before anything is sent.
    """
    body = minimal_session(
        messages,
        user_id=user_id,
        metadata=metadata,
        agent_id=agent_id,
        session_id=session_id,
        channel=channel,
        scope=scope,
        locale=locale,
    )
    return Call("POST", "/v1/sessions", SessionAccepted, body=_json(body))


def _turn(turn: MessageInput) -> dict[str, Any]:
    if isinstance(turn, BaseModel):
        return turn.model_dump(mode="json", exclude_none=True)
    return {key: value for key, value in dict(turn).items() if value is not None}


def add_turns(
    user_id: str,
    session_id: str,
    messages: Sequence[MessageInput],
    *,
    agent_id: str | None = None,
    channel: Channel | None = None,
    scope: Scope | None = None,
    locale: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Call[TurnsAccepted]:
    """Append turns to an open session as they happen (Zep's `add_messages`); the first append opens it.

    `messages` are `{"role": ..., "content": ..., "ts"?: ..., "name"?: ..., "turn_id"?: ...}` dicts (or
    models), oldest first. Give each turn a `turn_id` to make a retry safe: a turn_id the session already
    holds is a duplicate. `agent_id`, `channel`, `scope`, `locale` and `metadata` describe the session on
    its first append. The session becomes one conversation in memory when `end_session` is called, or by
    itself after the server's idle timeout. A closed session raises `InvalidRequestError` (409)."""
    body = {
        "messages": [_turn(turn) for turn in messages],
        "agent_id": agent_id,
        "channel": channel,
        "scope": scope,
        "locale": locale,
        "metadata": dict(metadata) if metadata is not None else None,
    }
    path = f"/v1/users/{_segment(user_id)}/sessions/{_segment(session_id)}/messages"
    return Call("POST", path, TurnsAccepted, body=_json(body))


def end_session(user_id: str, session_id: str) -> Call[SessionEnded]:
    """End an open session: its turns become one conversation in memory (follow the returned `event_id`
    with `wait`). Ending it again answers the same event with `duplicate=True`."""
    path = f"/v1/users/{_segment(user_id)}/sessions/{_segment(session_id)}/end"
    return Call("POST", path, SessionEnded)


def read_session(user_id: str, session_id: str) -> Call[OpenSession]:
    """A per-turn session as it is now: `open` with its buffered turns, or `closing`/`closed` with the
    `event_id` it became."""
    return Call("GET", f"/v1/users/{_segment(user_id)}/sessions/{_segment(session_id)}", OpenSession)


def event_status(user_id: str, event_id: str) -> Call[EventStatus]:
    """Where an accepted session or erasure of `user_id` is now (`GET /v1/events/{event_id}`): accepted,
    consolidated, processed, dead_lettered, erasure_pending or erasure_completed. `wait` follows it."""
    return Call("GET", f"/v1/events/{_segment(event_id)}", EventStatus, params={"user_id": user_id})


def auto(
    user_id: str,
    message: str,
    *,
    recent_messages: list[ChatTurn] | None = None,
    channel: Channel = "private",
    agent_id: str | None = None,
    max_entries: int | None = None,
    token_budget: int | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Call[AutoRecallResponse]:
    """L0, once per turn: the `## Memory Context` section for `message` (plus up to two recent user
    turns), only memories scoring above the server's floor, within `token_budget`. Trivial messages
    ("ok", "thanks") are skipped without searching (`skipped_reason`). `metadata`: only memories from
    sessions that carried every one of these key/values."""
    body = {
        "user_id": user_id,
        "message": message,
        "channel": channel,
        "agent_id": agent_id,
        "max_entries": max_entries,
        "token_budget": token_budget,
        "metadata": dict(metadata) if metadata else None,
        "recent_messages": [turn.model_dump() for turn in recent_messages or []],
    }
    return Call("POST", "/v1/recall/auto", AutoRecallResponse, body=_json(body))


class SearchOptions(TypedDict, total=False):
    """The options of `search` besides the query and the user."""

    limit: int
    kinds: list[MemoryKind] | None
    channel: Channel
    agent_id: str | None
    include_superseded: bool
    metadata: Mapping[str, str] | None


def search(
    query: str,
    *,
    user_id: str,
    limit: int = 10,
    kinds: list[MemoryKind] | None = None,
    channel: Channel = "private",
    agent_id: str | None = None,
    include_superseded: bool = False,
    metadata: Mapping[str, str] | None = None,
) -> Call[SearchResponse]:
    """L1: memories of `user_id` matching `query` (hybrid keyword and vector search over episodes and
    facts), best first, as ids and abstracts; `expand` an id for the whole memory. `kinds` narrows to
    episodes or facts; superseded fact versions are left out unless `include_superseded`; `metadata`
    keeps only memories from sessions that carried every one of these key/values."""
    body = {
        "user_id": user_id,
        "query": query,
        "limit": limit,
        "kinds": kinds,
        "channel": channel,
        "agent_id": agent_id,
        "include_superseded": include_superseded,
        "metadata": dict(metadata) if metadata else None,
    }
    return Call("POST", "/v1/memories/search", SearchResponse, body=_json(body))


def expand(user_id: str, memory_id: str, *, channel: Channel = "private") -> Call[ExpandedMemory]:
    """L1 detail: a memory's full summary (or fact), its provenance and the source messages."""
    params: dict[str, str | int] = {"user_id": user_id, "channel": channel}
    return Call("GET", f"/v1/memories/{_segment(memory_id)}", ExpandedMemory, params=params)


def graph(
    user_id: str,
    *,
    query: str | None = None,
    entity: str | None = None,
    hops: int = 1,
    limit: int | None = None,
    channel: Channel = "private",
) -> Call[GraphSearchResponse]:
    """L2: entities and relations around `entity` or matching `query`, up to `hops` steps away."""
    body = {"user_id": user_id, "query": query, "entity": entity, "hops": hops, "limit": limit, "channel": channel}
    return Call("POST", "/v1/graph/search", GraphSearchResponse, body=_json(body))


def facts(
    user_id: str, *, token_budget: int | None = None, channel: Channel = "private", subject: str | None = None
) -> Call[FactsResponse]:
    """The current facts of `user_id` (optionally about one `subject`), most important first, as many
    as fit `token_budget`, with the section ready for a prompt."""
    params: dict[str, str | int] = {"user_id": user_id, "channel": channel}
    if token_budget is not None:
        params["token_budget"] = token_budget
    if subject is not None:
        params["subject"] = subject
    return Call("GET", "/v1/facts", FactsResponse, params=params)


def save_fact(
    user_id: str,
    text: str,
    *,
    subject: str | None = None,
    attribute: str | None = None,
    value: str | None = None,
    scope: Scope = "personal",
    channel: Channel = "private",
    language: str | None = None,
    request_id: str | None = None,
) -> Call[SaveFactResponse]:
    """Save one fact, stated as one sentence, through the server's write policy (it may be refused,
    merged with an existing fact, or supersede one on the same single-valued attribute). The same
    `request_id` again is a duplicate."""
    body = {
        "user_id": user_id,
        "text": text,
        "subject": subject,
        "attribute": attribute,
        "value": value,
        "scope": scope,
        "channel": channel,
        "language": language,
        "request_id": request_id,
    }
    return Call("POST", "/v1/facts", SaveFactResponse, body=_json(body))


def fact(user_id: str, fact_id: str) -> Call[MemoryRecord]:
    """One fact of `user_id` by id (`NotFoundError` when it is not theirs or does not exist)."""
    return Call("GET", f"/v1/facts/{_segment(fact_id)}", MemoryRecord, params={"user_id": user_id})


def fact_history(user_id: str, fact_id: str) -> Call[FactHistoryResponse]:
    """Every version of a fact, oldest first, with what superseded what and where each was observed."""
    return Call("GET", f"/v1/facts/{_segment(fact_id)}/history", FactHistoryResponse, params={"user_id": user_id})


def correct_fact(
    user_id: str, fact_id: str, *, value: str, text: str, idempotency_key: str | None = None
) -> Call[CorrectionResponse]:
    """Correct a fact: the new `value` (stated as `text`) supersedes it, and the old version is kept as
    history. The same `idempotency_key` again changes nothing."""
    body = _json({"user_id": user_id, "value": value, "text": text})
    path = f"/v1/facts/{_segment(fact_id)}/corrections"
    return Call("POST", path, CorrectionResponse, body=body, headers=_idempotency(idempotency_key))


def list_memories(
    user_id: str,
    *,
    kind: Literal["episode", "fact", "all"] = "all",
    cursor: str | None = None,
    limit: int = 50,
    metadata: Mapping[str, str] | None = None,
) -> Call[MemoryListResponse]:
    """A page of `user_id`'s memories in a stable order; pass the returned `next_cursor` for the next
    (with the same `metadata`, which keeps only memories from sessions that carried every key/value)."""
    params: dict[str, str | int | list[str]] = {"user_id": user_id, "kind": kind, "limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    if metadata:
        params["metadata"] = [f"{key}:{value}" for key, value in sorted(metadata.items())]
    return Call("GET", "/v1/memories", MemoryListResponse, params=params)


def forget(user_id: str, memory_id: str, *, idempotency_key: str | None = None) -> Call[ForgetAccepted]:
    """Forget one memory and everything derived from it (asynchronous: `wait` on the returned event)."""
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("DELETE", path, ForgetAccepted, params={"user_id": user_id}, headers=_idempotency(idempotency_key))


def erase_user(user_id: str, *, idempotency_key: str | None = None) -> Call[ErasureAccepted]:
    """Erase everything stored about `user_id` (asynchronous: `wait` on the returned event)."""
    return Call("DELETE", f"/v1/users/{_segment(user_id)}", ErasureAccepted, headers=_idempotency(idempotency_key))


def save_rule(
    user_id: str,
    text: str,
    *,
    topic: str | None = None,
    scope: Scope = "personal",
    channel: Channel = "private",
    request_id: str | None = None,
) -> Call[SaveFactResponse]:
    """A working rule, through the write policy: a rule on the same topic supersedes the previous one."""
    attribute = PROCEDURE_ATTRIBUTE_PREFIX + (topic or rule_topic(text))
    return save_fact(
        user_id,
        text,
        subject=PROCEDURE_SUBJECT,
        attribute=attribute,
        scope=scope,
        channel=channel,
        request_id=request_id,
    )


def rules(user_id: str, *, channel: Channel = "private") -> Call[FactsResponse]:
    """Every current rule of `user_id` visible in `channel` (narrow them with `select_rules`)."""
    return facts(user_id, token_budget=8000, channel=channel, subject=PROCEDURE_SUBJECT)


def procedures(
    user_id: str,
    *,
    query: str | None = None,
    token_budget: int | None = None,
    channel: Channel = "private",
    include_shared: bool = True,
) -> Call[ProceduresResponse]:
    """The working rules to load this turn: the user's and the tenant's shared ones, all while they fit
    `token_budget`, else the ones relevant to `query` (the turn's message), best first."""
    params: dict[str, str | int] = {"user_id": user_id, "channel": channel}
    if query is not None:
        params["query"] = query
    if token_budget is not None:
        params["token_budget"] = token_budget
    if not include_shared:
        params["include_shared"] = "false"
    return Call("GET", "/v1/procedures", ProceduresResponse, params=params)


def memory_instructions(lang: str = "en") -> Call[Instructions]:
    """The paragraph telling the model how to use the memory section and tools ('en' or 'ko')."""
    return Call("GET", "/v1/prompt/memory-instructions", Instructions, params={"lang": lang})
