"""The short forms against the real recall API and pipeline (nats-server, FalkorDB, Qdrant Edge, the
summarizer, extractor and pruner in-process; uvicorn on a loopback port): `add(messages, user_id=...)`
with nothing else, `wait` until the pipeline is done with an event, and `search(query, user_id=...)`
next to the deprecated `search(user_id, query)`, which must keep its meaning."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from tiermem_client import (
    AsyncTiermemClient,
    DeadLettered,
    NotFoundError,
    TiermemClient,
    WaitTimeout,
)

from contracts import ErasureRequested, ErasureTarget
from tests.integration.test_write_api import ACME_KEY, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack

pytestmark = pytest.mark.integration

BUSAN = [
    {"role": "user", "content": "I moved to Busan last month, the sea view from my flat is great."},
    {"role": "assistant", "content": "Nice, enjoy living in Busan."},
]


async def test_add_with_only_messages_and_a_user_is_found_and_a_retry_is_a_duplicate(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        accepted = await client.add(BUSAN, user_id="alice", metadata={"source": "onboarding"})
        assert accepted.duplicate is False
        again = await client.add(BUSAN, user_id="alice", metadata={"source": "onboarding"})
        assert (again.event_id, again.duplicate) == (accepted.event_id, True)
        status = await client.wait(accepted.event_id, user_id="alice", timeout=90)
        assert status.state == "consolidated" and status.episode_id is not None
        found = await client.search("Busan sea view", user_id="alice", kinds=["episode"])
        assert [item.id for item in found.items] == [status.episode_id]
        # Another user saying the same thing is a conversation of their own, not a duplicate.
        bobs = await client.add(BUSAN, user_id="bob", metadata={"source": "onboarding"})
        assert bobs.duplicate is False and bobs.event_id != accepted.event_id
        # The same turns in another session are another event.
        other = await client.add(BUSAN, user_id="alice", session_id="s-other", metadata={"source": "onboarding"})
        assert other.duplicate is False and other.event_id != accepted.event_id


async def test_the_blocking_add_and_wait(write_stack: WriteStack) -> None:
    def use_blocking_client() -> None:
        with TiermemClient(write_stack.base_url, ACME_KEY) as client:
            stamp = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
            turns = [{"role": "user", "content": "Our team chose FastAPI for the billing service.", "ts": stamp}]
            accepted = client.add(turns, user_id="carol")
            assert client.add(turns, user_id="carol").duplicate is True
            status = client.wait(accepted.event_id, user_id="carol", timeout=90)
            assert status.finished and status.state in {"consolidated", "processed"}
            if status.episode_id is not None:
                expanded = client.expand("carol", status.episode_id)
                assert expanded.provenance.get("session_id") is not None
                assert [m.content for m in expanded.messages] == [turns[0]["content"]]

    await asyncio.to_thread(use_blocking_client)


async def test_a_bad_add_is_refused_before_anything_is_sent(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        with pytest.raises(ValidationError, match="messages"):
            await client.add([], user_id="alice")
        with pytest.raises(ValidationError, match="role"):
            await client.add([{"role": "robot", "content": "beep"}], user_id="alice")
        with pytest.raises(ValidationError, match="user_id"):
            await client.add(BUSAN, user_id="alice smith")
        with pytest.raises(ValidationError, match="metadata"):
            await client.add(BUSAN, user_id="alice", metadata={"count": 3})  # type: ignore[dict-item]
        assert (await client.list_memories("alice")).items == []


async def test_wait_raises_on_a_dead_letter_a_timeout_and_an_unknown_event(write_stack: WriteStack) -> None:
    poison = ErasureRequested(
        event_id=uuid.uuid4(),
        tenant_id="acme",
        user_id="alice",
        target=ErasureTarget(kind="fact", item_id="not-a-uuid"),
        requested_at=datetime.now(UTC),
        reason="test",
    )
    nats = await write_stack.resources.nats()
    await nats.jetstream().publish(
        write_stack.subjects.erasure_requested("acme", "alice"),
        poison.model_dump_json().encode(),
        stream=write_stack.subjects.derived_stream,
    )
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        with pytest.raises(DeadLettered, match="not a UUID") as dead:
            await client.wait(str(poison.event_id), user_id="alice", timeout=60)
        assert dead.value.status.state == "dead_lettered"
        with pytest.raises(NotFoundError):  # the event is alice's: bob cannot follow it
            await client.wait(str(poison.event_id), user_id="bob", timeout=5)
        accepted = await client.add(BUSAN, user_id="dave")
        with pytest.raises(WaitTimeout, match="still accepted") as late:
            await client.wait(accepted.event_id, user_id="dave", timeout=0.001)
        assert isinstance(late.value, TimeoutError) and late.value.status.state == "accepted"
        with pytest.raises(ValueError, match="timeout"):
            await client.wait(accepted.event_id, user_id="dave", timeout=0)


async def test_search_takes_the_query_first_and_the_old_order_keeps_its_meaning(write_stack: WriteStack) -> None:
    def use_blocking_client() -> None:
        with TiermemClient(write_stack.base_url, ACME_KEY) as client:
            saved = client.save_fact("alice", "The user prefers window seats.", request_id="seats")
            assert saved.fact_id is not None
            client.save_fact("bob", "The user prefers aisle seats.", request_id="seats-bob")
            found = client.search("seats", user_id="alice")
            assert [item.id for item in found.items] == [saved.fact_id]
            assert client.search(query="seats", user_id="alice") == found
            # The deprecated order still means (user, query): alice's fact, never a search for "alice"
            # in the memories of a user called "seats".
            with pytest.warns(DeprecationWarning, match=r"search\('seats', user_id='alice'\)"):
                assert client.search("alice", "seats") == found
            with pytest.warns(DeprecationWarning, match="deprecated"):
                assert client.search("alice", query="seats") == found
            # A query cannot be a user id: the caller meant search(query, user_id), which is refused.
            with pytest.raises(TypeError, match=r"search\(query, user_id=\.\.\.\)"):
                client.search("which seats?", "alice")
            with pytest.raises(TypeError, match="user_id"):
                client.search("seats")  # type: ignore[call-overload]
            with pytest.raises(TypeError, match="user_id"):
                client.search("alice", "seats", user_id="bob")  # type: ignore[call-overload]

    await asyncio.to_thread(use_blocking_client)
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        found = await client.search("seats", user_id="bob")
        with pytest.warns(DeprecationWarning, match=r"search\('seats', user_id='bob'\)"):
            assert await client.search("bob", "seats") == found
        assert [item.abstract for item in found.items] == ["The user prefers aisle seats."]


async def test_metadata_filters_search_list_and_l0(write_stack: WriteStack) -> None:
    atlas = [{"role": "user", "content": "I use PostgreSQL for the billing ledger of the atlas project."}]
    bori = [{"role": "user", "content": "I use Kubernetes for the deploy pipeline of the bori project."}]
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        episodes: dict[str, str | None] = {}
        for project, said in (("atlas", atlas), ("bori", bori)):
            accepted = await client.add(said, user_id="dana", metadata={"project": project})
            status = await client.wait(accepted.event_id, user_id="dana", timeout=90)
            assert status.state == "consolidated", status
            episodes[project] = status.episode_id
        only_atlas = {"project": "atlas"}
        listed = await client.list_memories("dana", kind="episode", metadata=only_atlas)
        assert [item.id for item in listed.items] == [episodes["atlas"]]
        assert listed.items[0].metadata == {"project": ["atlas"]}
        query = "PostgreSQL Kubernetes billing deploy pipeline"
        found = await client.search(query, user_id="dana", kinds=["episode"], metadata=only_atlas)
        assert [item.id for item in found.items] == [episodes["atlas"]]
        everything = await client.search(query, user_id="dana", kinds=["episode"])
        assert {item.id for item in everything.items} == set(episodes.values())
        section = await client.auto("dana", "What do I use PostgreSQL and Kubernetes for?", metadata=only_atlas)
        assert section.items and {item.id for item in section.items} <= {episodes["atlas"]} | {
            item.id for item in (await client.list_memories("dana", kind="fact", metadata=only_atlas)).items
        }
