"""The sync and async clients against the real recall API and pipeline (nats-server, FalkorDB, Qdrant
Edge, the summarizer, extractor and pruner in-process; uvicorn on a loopback port)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from tiermem_client import (
    AsyncTiermemClient,
    AuthenticationError,
    ChatTurn,
    InvalidRequestError,
    NotFoundError,
    SessionCompleted,
    TiermemClient,
)

from tests.integration.test_write_api import ACME_KEY, BUSAN, NOW, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack
from tests.support.events import session_event, wait_for

pytestmark = pytest.mark.integration


def client_session(**options: object) -> SessionCompleted:
    """A test event as the client's own (vendored) model: what a chat system would build."""
    return SessionCompleted.model_validate_json(session_event(**options).model_dump_json())  # type: ignore[arg-type]


async def wait_state(client: AsyncTiermemClient, event_id: str, state: str) -> None:
    async def reached() -> bool:
        return (await client.event_status("alice", event_id)).state == state

    await wait_for(reached, timeout_s=90, what=f"event {event_id} {state}")


async def test_a_session_goes_in_and_comes_back_through_every_recall_call(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        event = client_session(session_id="s-busan", texts=BUSAN, ended_at=NOW - timedelta(hours=1))
        accepted = await client.add_session(event)
        assert (accepted.duplicate, accepted.status_url) == (False, f"/v1/events/{event.event_id}?user_id=alice")
        assert (await client.add_session(event)).duplicate is True
        await wait_state(client, str(event.event_id), "consolidated")
        status = await client.event_status("alice", str(event.event_id))
        assert status.finished and status.episode_id is not None

        async def extracted() -> bool:
            return any(item.abstract and "Busan" in item.abstract for item in (await client.facts("alice")).items)

        await wait_for(extracted, timeout_s=90, what="the Busan fact")
        recent = [ChatTurn(role="user", content="I need a weekend plan.")]
        auto = await client.auto("alice", "Where do I live now, remind me?", recent_messages=recent)
        assert "Busan" in auto.section and auto.injected >= 1 and auto.tokens > 0
        found = await client.search("Busan sea view", user_id="alice", kinds=["episode"])
        assert [item.id for item in found.items] == [status.episode_id]
        expanded = await client.expand("alice", status.episode_id)
        assert expanded.kind == "episode" and [m.content for m in expanded.messages] == BUSAN
        graph = await client.graph("alice", query="Busan", hops=2)
        assert any("Busan" in str(entity) for entity in graph.entities)
        assert "Busan" not in (await client.auto("alice", "Where do I live?", channel="group")).section


async def test_facts_are_saved_corrected_and_forgotten_through_the_client(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        saved = await client.save_fact(
            "alice", "The user lives in Seoul.", attribute="lives_in", value="Seoul", request_id="r-seoul"
        )
        assert saved.outcome == "created" and saved.fact_id is not None
        again = await client.save_fact(
            "alice", "The user lives in Seoul.", attribute="lives_in", value="Seoul", request_id="r-seoul"
        )
        assert again.outcome == "duplicate"
        corrected = await client.correct_fact(
            "alice", saved.fact_id, value="Busan", text="The user lives in Busan.", idempotency_key="fix-1"
        )
        assert corrected.superseded == saved.fact_id
        history = await client.fact_history("alice", corrected.fact_id)
        assert [v.value for v in history.versions] == ["Seoul", "Busan"]
        assert history.versions[0].superseded_by == corrected.fact_id
        assert (await client.fact("alice", corrected.fact_id)).value == "Busan"

        forget = await client.forget("alice", corrected.fact_id, idempotency_key="forget-1")
        assert forget.kind == "fact"

        async def forgotten() -> bool:
            return (await client.event_status("alice", forget.event_id)).state == "erasure_completed"

        await wait_for(forgotten, timeout_s=90, what="the fact forgotten")
        with pytest.raises(NotFoundError):
            await client.fact("alice", corrected.fact_id)
        assert "Busan" not in (await client.facts("alice")).section

        erasure = await client.erase_user("alice", idempotency_key="erase-alice")
        assert erasure.status_url == f"/v1/events/{erasure.event_id}?user_id=alice"
        assert (await client.erase_user("alice", idempotency_key="erase-alice")).event_id == erasure.event_id


async def test_the_blocking_client_and_its_errors(write_stack: WriteStack) -> None:
    def use_blocking_client() -> None:
        with TiermemClient(write_stack.base_url, ACME_KEY) as client:
            saved = client.save_fact("alice", "The user prefers window seats.")
            assert saved.outcome == "created"
            assert [item.abstract for item in client.facts("alice").items] == ["The user prefers window seats."]
            assert client.list_memories("alice", kind="fact").items[0].id == saved.fact_id
            with pytest.raises(InvalidRequestError) as refused:
                client.save_fact("alice", "")
            assert refused.value.status == 422 and [e.field for e in refused.value.errors] == ["text"]
            with pytest.raises(InvalidRequestError) as wrong_tenant:
                client.add_session(client_session(tenant_id="globex"))
            assert wrong_tenant.value.status == 403 and "tenant" in str(wrong_tenant.value)
            with pytest.raises(NotFoundError):
                client.expand("alice", str(uuid.uuid4()))
        with TiermemClient(write_stack.base_url, "not-a-key") as stranger, pytest.raises(AuthenticationError):
            stranger.facts("alice")

    # The server runs on this event loop: the blocking client must run on another thread.
    await asyncio.to_thread(use_blocking_client)
