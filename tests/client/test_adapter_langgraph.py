"""LangGraph's BaseStore over tiermem, against the real stack (recall API over HTTP, nats-server,
FalkorDB, Qdrant Edge, summarizer, extractor): namespaces map to users, puts go through the write
policy (a rule or single-valued fact on the same key supersedes), the sync and async paths agree, and
bad input fails with a typed error."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import InvalidNamespaceError
from tiermem_client import AsyncTiermemClient, InvalidRequestError, TiermemClient, TiermemError
from tiermem_client.adapters.langgraph import TiermemStore, UnsupportedStoreOperation

from scripts.langgraph_memory_example import run_demo
from tests.integration.test_write_api import ACME_KEY, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack

pytestmark = pytest.mark.integration


async def test_the_example_graph_recalls_a_fact_applies_a_rule_and_a_new_rule_replaces_it(
    write_stack: WriteStack,
) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        outcome = await run_demo(client, "acme", "lg-alice")
    assert outcome == {"fact_recalled": True, "rule_applied": True, "rule_replaced": True}


async def test_async_store_keys_are_attributes_and_topics_under_the_write_policy(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        store = TiermemStore(aclient=client)
        memories, rules = ("alice", "memories"), ("alice", "procedures")
        await store.aput(memories, "lives_in", {"text": "Alice lives in Busan.", "value": "Busan"})
        got = await store.aget(memories, "lives_in")
        assert got is not None and got.value["value"] == "Busan" and got.namespace == memories
        await store.aput(memories, "lives_in", {"text": "Alice lives in Seoul.", "value": "Seoul"})
        moved = await store.aget(memories, "lives_in")
        assert moved is not None and moved.value["value"] == "Seoul"  # single-valued: Busan is superseded
        history = await client.fact_history("alice", moved.value["id"])
        assert (history.versions[0].value, history.versions[0].status) == ("Busan", "superseded")

        await store.aput(rules, "report", {"text": "Reports start with a table."})
        await store.aput(rules, "report", {"text": "Reports start with a summary."})
        found = await store.asearch(rules, query="write the weekly report")
        assert [(item.key, item.value["text"]) for item in found] == [("report", "Reports start with a summary.")]
        current = await store.aget(rules, "report")
        assert current is not None and current.value["text"] == "Reports start with a summary."

        listed = await store.asearch(memories)
        assert [item.value["text"] for item in listed] == ["Alice lives in Seoul."]  # rules are not memories
        searched = await store.asearch(memories, query="Where does Alice live?", filter={"kind": "fact"})
        assert searched and searched[0].value["text"] == "Alice lives in Seoul." and searched[0].score is not None

        assert await store.asearch(("bob", "memories"), query="Where does Alice live?") == []
        assert await store.aget(("bob", "procedures"), "report") is None

        await store.adelete(memories, "lives_in")
        await store.adelete(memories, "lives_in")  # idempotent
        assert await store.aget(memories, "lives_in") is None


async def test_blocking_store_from_a_worker_thread(write_stack: WriteStack) -> None:
    """LangGraph's sync API (`graph.invoke`) uses the blocking client; here from a worker thread because the
    test's recall API runs on this event loop."""

    def sync_path() -> tuple[str | None, list[str]]:
        with TiermemClient(write_stack.base_url, ACME_KEY) as client:
            store = TiermemStore(client)
            store.put(("carol", "procedures"), "answer_language", {"text": "Always answer in Korean."})
            store.put(("carol", "procedures"), "answer_language", {"text": "Always answer in English."})
            got = store.get(("carol", "procedures"), "answer_language")
            found = store.search(("carol", "procedures"), query="hello")
            return (got.value["text"] if got else None), [item.value["text"] for item in found]

    got, found = await asyncio.to_thread(sync_path)
    assert got == "Always answer in English." and found == ["Always answer in English."]


async def test_bad_input_is_a_typed_error_and_changes_nothing(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        store = TiermemStore(aclient=client, user_index=1)  # LangMem's ("memories", user_id)
        with pytest.raises(InvalidNamespaceError):
            await store.aput(("memories", "not a user!"), "k", {"text": "x"})
        with pytest.raises(InvalidNamespaceError):
            await store.aget(("memories",), "k")
        with pytest.raises(TiermemError, match="needs one of"):
            await store.aput(("memories", "dave"), "likes", {"colour": "blue"})
        with pytest.raises(InvalidRequestError) as refused:
            await store.aput(("memories", "dave"), "likes", {"text": "x" * 5000})
        assert refused.value.status == 422
        with pytest.raises(UnsupportedStoreOperation):
            await store.alist_namespaces()
        with pytest.raises(UnsupportedStoreOperation):
            await store.asearch(("memories", "dave"), filter={"kind": {"$ne": "fact"}})
        with pytest.raises(UnsupportedStoreOperation):
            store.get(("memories", "dave"), "likes")  # no blocking client given
        assert await store.asearch(("memories", "dave")) == []
        await store.aput(("memories", "dave"), "likes", {"content": {"content": "Dave likes hiking."}})
        assert [item.value["text"] for item in await store.asearch(("memories", "dave"))] == ["Dave likes hiking."]
