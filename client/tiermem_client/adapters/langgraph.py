"""LangGraph's long-term memory store (`langgraph.store.base.BaseStore`) backed by tiermem.

`pip install 'tiermem-client[langgraph]'`, then compile a graph with it:

    store = TiermemStore(TiermemClient(url, key), AsyncTiermemClient(url, key))
    graph = builder.compile(store=store)          # nodes get it as `store` / `get_store()`
    store.put(("alice", "memories"), "lives_in", {"text": "Alice lives in Busan.", "value": "Busan"})
    store.search(("alice", "memories"), query="where does she live?")

Namespaces map onto tiermem's owners: the tenant is the API key's (a namespace can never name another
tenant), the user is the namespace segment at `user_index` (0 by default: `(user_id, "memories")`;
use `user_index=1` for LangMem's `("memories", user_id)`). What the store keeps is memory, through
the write policy, not arbitrary JSON:

- `(user, "procedures")`: working rules. The key is the rule's topic, the value `{"text": rule}`; a
  `put` on a topic supersedes the previous rule (versioned), `search(query=...)` is `GET /v1/procedures`
  (all rules while few, the relevant ones under `rules_token_budget` when many).
- any other label: facts about the user. The key is the attribute (`lives_in`, `employer`, ...) and the
  value `{"text": sentence, "value": short value}`; single-valued attributes supersede on `put`,
  `get` returns the newest current fact, `search(query=...)` is the hybrid L1 search over facts and
  episodes (including what the pipeline extracted from sessions), `search()` without a query lists the
  user's current facts, and `delete` forgets the current facts of that attribute (idempotent).

Errors are typed: a namespace without a valid user is `InvalidNamespaceError` (LangGraph's own), a
value the write policy refuses is `tiermem_client.InvalidRequestError`, an unreachable server
`UnavailableError`/`TransportError`, a delete not done within `delete_timeout_s` `DeletePending`
(forgetting is asynchronous in tiermem; the store waits for it). `list_namespaces` is
`UnsupportedStoreOperation`: tiermem does not enumerate users to a tenant's agents. TTLs are not
supported (forgetting is the pruner's job).

Each operation is written once as a generator of recall-API calls (`_plan`); the blocking `batch` and
the asyncio `abatch` only differ in how they send them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from pydantic import BaseModel

from tiermem_client import calls
from tiermem_client.calls import Call
from tiermem_client.client import AsyncTiermemClient, TiermemClient
from tiermem_client.errors import NotFoundError, TiermemError
from tiermem_client.models import MemoryRecord
from tiermem_client.procedures import PROCEDURE_SUBJECT

PROCEDURES_LABEL = "procedures"
_USER_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_TEXT_FIELDS = ("text", "content", "memory", "rule")
_PAGE = 200
T = TypeVar("T", bound=BaseModel)


class UnsupportedStoreOperation(TiermemError):
    """An operation of LangGraph's store interface that tiermem deliberately does not offer."""


class DeletePending(TiermemError):
    """A delete was accepted but not carried out within `delete_timeout_s` (it still will be)."""


@dataclass(frozen=True)
class _Pause:
    """A plan step that waits instead of calling (polling an asynchronous forget)."""

    seconds: float


Step = Call[Any] | _Pause
Plan = Generator[Step, Any, Result]


def _attribute_key(key: str) -> str:
    # The recall API stores attributes snake_case and casefolded: compare keys the same way.
    return re.sub(r"_+", "_", re.sub(r"[^\w]+", "_", key.strip().casefold())).strip("_")


def _text_of(value: Mapping[str, Any]) -> str:
    for name in _TEXT_FIELDS:
        text = value.get(name)
        if isinstance(text, str) and text.strip():
            return text.strip()
        if isinstance(text, Mapping):  # LangMem's {"content": {"content": "..."}}
            return _text_of(text)
    raise TiermemError(f"a memory value needs one of {_TEXT_FIELDS} as text, got keys {sorted(value)}")


def _time(text: str | None) -> datetime:
    return datetime.fromisoformat(text) if text else datetime.now(UTC)


def _record_value(record: MemoryRecord) -> dict[str, Any]:
    return {
        "text": record.text,
        "value": record.value,
        "kind": record.kind,
        "status": record.status,
        "id": record.id,
        "scope": record.scope,
    }


class TiermemStore(BaseStore):
    """A LangGraph `BaseStore` over the tiermem recall API (sync with `client`, async with `aclient`)."""

    def __init__(
        self,
        client: TiermemClient | None = None,
        aclient: AsyncTiermemClient | None = None,
        *,
        user_index: int = 0,
        rules_token_budget: int = 400,
        channel: calls.Channel = "private",
        delete_timeout_s: float = 30.0,
    ) -> None:
        if client is None and aclient is None:
            raise TiermemError("TiermemStore needs a TiermemClient, an AsyncTiermemClient or both")
        self.client = client
        self.aclient = aclient
        self.user_index = user_index
        self.rules_token_budget = rules_token_budget
        self.channel: calls.Channel = channel
        self.delete_timeout_s = delete_timeout_s

    # ------------------------------------------------------------------ LangGraph's two abstract methods

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.client is None:
            raise UnsupportedStoreOperation("this TiermemStore has no blocking client: use the async methods")
        return [self._run_sync(self._plan(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self.aclient is None:
            raise UnsupportedStoreOperation("this TiermemStore has no async client: use the blocking methods")
        return [await self._run_async(self._plan(op)) for op in ops]

    def _run_sync(self, plan: Plan) -> Result:
        assert self.client is not None
        try:
            call = next(plan)
            while True:
                call = plan.send(self._send_sync(call))
        except StopIteration as done:
            result: Result = done.value
            return result

    async def _run_async(self, plan: Plan) -> Result:
        assert self.aclient is not None
        try:
            call = next(plan)
            while True:
                call = plan.send(await self._send_async(call))
        except StopIteration as done:
            result: Result = done.value
            return result

    def _send_sync(self, call: Call[T] | _Pause) -> T | None:
        assert self.client is not None
        if isinstance(call, _Pause):
            time.sleep(call.seconds)
            return None
        try:
            return self.client.send(call)
        except NotFoundError:
            return None  # a missing item is None to LangGraph, never an error

    async def _send_async(self, call: Call[T] | _Pause) -> T | None:
        assert self.aclient is not None
        if isinstance(call, _Pause):
            await asyncio.sleep(call.seconds)
            return None
        try:
            return await self.aclient.send(call)
        except NotFoundError:
            return None

    # ------------------------------------------------------------------ one plan per operation

    def _user(self, namespace: tuple[str, ...]) -> tuple[str, str]:
        """(user_id, label) of a namespace; the label is what the other segments name."""
        try:
            user_id = namespace[self.user_index]
        except IndexError:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} has no user at position {self.user_index} (e.g. ('alice', 'memories'))"
            ) from None
        if not _USER_ID.match(user_id):
            raise InvalidNamespaceError(f"{user_id!r} is not a user id (1-128 characters of [A-Za-z0-9_-])")
        rest = [segment for i, segment in enumerate(namespace) if i != self.user_index % max(len(namespace), 1)]
        return user_id, "/".join(rest) or "memories"

    def _plan(self, op: Op) -> Plan:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op) if op.value is not None else self._delete(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            raise UnsupportedStoreOperation("tiermem does not list namespaces: users are not enumerable")
        raise UnsupportedStoreOperation(f"unknown store operation {type(op).__name__}")

    def _current(self, user_id: str, label: str, key: str) -> Generator[Step, Any, list[MemoryRecord]]:
        """The user's current facts (or rules) stored under `key`, newest first."""
        wanted = _attribute_key(("procedure_" + key) if label == PROCEDURES_LABEL else key)
        found: list[MemoryRecord] = []
        cursor: str | None = None
        while True:
            page = yield calls.list_memories(user_id, kind="fact", cursor=cursor, limit=_PAGE)
            found += [
                record
                for record in page.items
                if record.attribute is not None
                and _attribute_key(record.attribute) == wanted
                and record.superseded_by is None
                and record.valid_to is None
            ]
            cursor = page.next_cursor
            if cursor is None:
                return sorted(found, key=lambda record: record.valid_from or "", reverse=True)

    def _get(self, op: GetOp) -> Plan:
        user_id, label = self._user(op.namespace)
        current = yield from self._current(user_id, label, op.key)
        if not current:
            return None
        newest = current[0]
        created = _time(newest.valid_from)
        return Item(
            value=_record_value(newest), key=op.key, namespace=op.namespace, created_at=created, updated_at=created
        )

    def _put(self, op: PutOp) -> Plan:
        assert op.value is not None
        user_id, label = self._user(op.namespace)
        text = _text_of(op.value)
        if label == PROCEDURES_LABEL:
            yield calls.save_rule(user_id, text, topic=op.key, channel=self.channel)
            return None
        value = op.value.get("value")
        yield calls.save_fact(
            user_id,
            text,
            subject=str(op.value.get("subject") or "user"),
            attribute=op.key,
            value=value if isinstance(value, str) else None,
            channel=self.channel,
        )
        return None

    def _delete(self, op: PutOp) -> Plan:
        user_id, label = self._user(op.namespace)
        # Forgetting is carried out asynchronously by the pipeline; LangGraph expects a delete to have
        # happened when it returns, so wait (bounded) for each erasure to complete.
        for record in (yield from self._current(user_id, label, op.key)):
            accepted = yield calls.forget(user_id, record.id, idempotency_key=f"langgraph-delete-{record.id}")
            deadline = time.monotonic() + self.delete_timeout_s
            while True:
                status = yield calls.event_status(user_id, accepted.event_id)
                if status is None or status.finished:
                    break
                if time.monotonic() > deadline:
                    raise DeletePending(f"forgetting {record.id} was accepted but is still {status.state}")
                yield _Pause(0.2)
        return None

    def _search(self, op: SearchOp) -> Plan:
        user_id, label = self._user(op.namespace_prefix)
        _check_filter(op.filter)
        if label == PROCEDURES_LABEL:
            return (yield from self._search_rules(op, user_id))
        if op.query:
            limit = min(op.offset + op.limit, 50)
            found = yield calls.search(op.query, user_id=user_id, limit=limit, channel=self.channel)
            items = found.items[op.offset : op.offset + op.limit]
            return [
                SearchItem(
                    namespace=op.namespace_prefix,
                    key=item.id,
                    value={"text": item.abstract, "kind": item.kind, "status": item.status, "id": item.id},
                    created_at=_time(item.occurred_at),
                    updated_at=_time(item.occurred_at),
                    score=item.score,
                )
                for item in items
                if _matches(op.filter, {"kind": item.kind, "status": item.status})
            ]
        listed = yield calls.list_memories(user_id, kind="fact", limit=min(op.offset + op.limit, _PAGE))
        current = [r for r in listed.items if r.superseded_by is None and r.subject != PROCEDURE_SUBJECT]
        return [
            SearchItem(
                namespace=op.namespace_prefix,
                key=record.attribute or record.id,
                value=_record_value(record),
                created_at=_time(record.valid_from),
                updated_at=_time(record.valid_from),
            )
            for record in current[op.offset : op.offset + op.limit]
            if _matches(op.filter, _record_value(record))
        ]

    def _search_rules(self, op: SearchOp, user_id: str) -> Plan:
        found = yield calls.procedures(
            user_id, query=op.query, token_budget=self.rules_token_budget, channel=self.channel
        )
        return [
            SearchItem(
                namespace=op.namespace_prefix,
                key=rule.topic,
                value={"text": rule.text, "owner": rule.owner, "id": rule.id},
                created_at=_time(rule.since),
                updated_at=_time(rule.since),
                score=rule.relevance,
            )
            for rule in found.rules[op.offset : op.offset + op.limit]
            if _matches(op.filter, {"text": rule.text, "owner": rule.owner})
        ]


def _check_filter(wanted: Mapping[str, Any] | None) -> None:
    """Operator filters ({"score": {"$gt": 1}}) are refused up front, never silently ignored."""
    for expected in (wanted or {}).values():
        if isinstance(expected, Mapping):
            raise UnsupportedStoreOperation(f"filter operators are not supported: {json.dumps(dict(expected))}")


def _matches(wanted: Mapping[str, Any] | None, value: Mapping[str, Any]) -> bool:
    """LangGraph's exact-match filter ({"kind": "fact"})."""
    return all(value.get(name) == expected for name, expected in (wanted or {}).items())
