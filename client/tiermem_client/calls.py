"""One description per recall API call, shared by the sync and the async client.

Each function turns typed arguments into a `Call` (method, path, query, body, result model): the two
clients only differ in how they send it, so the wire format is written down exactly once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

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

ResultT = TypeVar("ResultT", bound=BaseModel)
Channel = Literal["private", "group"]
Scope = Literal["personal", "team", "org"]


@dataclass(frozen=True)
class Call(Generic[ResultT]):
    method: str
    path: str
    result: type[ResultT]
    params: dict[str, str | int] = field(default_factory=dict)
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
    return Call("POST", "/v1/sessions", SessionAccepted, body=session.model_dump_json())


def event_status(user_id: str, event_id: str) -> Call[EventStatus]:
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
) -> Call[AutoRecallResponse]:
    body = {
        "user_id": user_id,
        "message": message,
        "channel": channel,
        "agent_id": agent_id,
        "max_entries": max_entries,
        "token_budget": token_budget,
        "recent_messages": [turn.model_dump() for turn in recent_messages or []],
    }
    return Call("POST", "/v1/recall/auto", AutoRecallResponse, body=_json(body))


def search(
    user_id: str,
    query: str,
    *,
    limit: int = 10,
    kinds: list[MemoryKind] | None = None,
    channel: Channel = "private",
    agent_id: str | None = None,
    include_superseded: bool = False,
) -> Call[SearchResponse]:
    body = {
        "user_id": user_id,
        "query": query,
        "limit": limit,
        "kinds": kinds,
        "channel": channel,
        "agent_id": agent_id,
        "include_superseded": include_superseded,
    }
    return Call("POST", "/v1/memories/search", SearchResponse, body=_json(body))


def expand(user_id: str, memory_id: str, *, channel: Channel = "private") -> Call[ExpandedMemory]:
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
    body = {"user_id": user_id, "query": query, "entity": entity, "hops": hops, "limit": limit, "channel": channel}
    return Call("POST", "/v1/graph/search", GraphSearchResponse, body=_json(body))


def facts(
    user_id: str, *, token_budget: int | None = None, channel: Channel = "private", subject: str | None = None
) -> Call[FactsResponse]:
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
    return Call("GET", f"/v1/facts/{_segment(fact_id)}", MemoryRecord, params={"user_id": user_id})


def fact_history(user_id: str, fact_id: str) -> Call[FactHistoryResponse]:
    return Call("GET", f"/v1/facts/{_segment(fact_id)}/history", FactHistoryResponse, params={"user_id": user_id})


def correct_fact(
    user_id: str, fact_id: str, *, value: str, text: str, idempotency_key: str | None = None
) -> Call[CorrectionResponse]:
    body = _json({"user_id": user_id, "value": value, "text": text})
    path = f"/v1/facts/{_segment(fact_id)}/corrections"
    return Call("POST", path, CorrectionResponse, body=body, headers=_idempotency(idempotency_key))


def list_memories(
    user_id: str, *, kind: Literal["episode", "fact", "all"] = "all", cursor: str | None = None, limit: int = 50
) -> Call[MemoryListResponse]:
    params: dict[str, str | int] = {"user_id": user_id, "kind": kind, "limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/memories", MemoryListResponse, params=params)


def forget(user_id: str, memory_id: str, *, idempotency_key: str | None = None) -> Call[ForgetAccepted]:
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("DELETE", path, ForgetAccepted, params={"user_id": user_id}, headers=_idempotency(idempotency_key))


def erase_user(user_id: str, *, idempotency_key: str | None = None) -> Call[ErasureAccepted]:
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
