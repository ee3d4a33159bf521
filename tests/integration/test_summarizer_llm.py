"""The episodic-summarizer on the real litellm HTTP path (local stub server) and a real nats-server:
LLM summaries with tokens and cost, malformed output dead-lettered with the reason (without
multiplying retries), a slow model kept alive with in-progress acks, Korean in and out."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import SecretStr

from contracts import Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import start_services
from services.common.domain.owner import Owner
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.common.stores.episodes import episode_id_for
from services.common.stores.vector.port import EPISODES, PASSAGES, HybridWeights, SearchFilter
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import decoded, session_event, stream_messages, wait_for
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]


def _with_llm(settings: TierMemSettings, stub: LlmStubServer, **changes: object) -> TierMemSettings:
    llm = LlmSettings(
        model=STUB_MODEL,
        api_base=stub.api_base,
        api_key=SecretStr(STUB_API_KEY),
        timeout_s=10,
        max_attempts=3,
        input_cost_per_token=0.000001,
        output_cost_per_token=0.000002,
        progress_interval_s=0.2,
    )
    return settings.model_copy(update={"llm": llm, **changes})


async def test_llm_summary_with_tokens_and_cost(stack_settings: TierMemSettings, llm_stub: LlmStubServer) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    llm_stub.push_chat_json(
        {"summary": "Alice decided to build the DGIA billing service in Go by June 30.", "entity_names": ["DGIA"]},
        prompt_tokens=120,
        completion_tokens=30,
    )
    running = await start_services(settings, [EPISODIC])
    try:
        event = session_event()
        await publish(settings, event)
        await wait_until_idle(settings, [EPISODIC], timeout_s=60)
        index = await running.resources.vector_index()
        (episode,) = await index.get(
            EPISODES, Owner("acme", "alice"), [episode_id_for(Owner("acme", "alice"), event.session_id)]
        )
    finally:
        await running.stop()
    payload = episode.payload
    assert payload["summary"].startswith("Alice decided to build the DGIA billing service")
    assert payload["abstract"] == "Alice decided to build the DGIA billing service in Go by June 30."
    assert (payload["prompt_tokens"], payload["completion_tokens"]) == (120, 30)
    assert payload["cost_usd"] == pytest.approx(120 * 0.000001 + 30 * 0.000002)
    assert payload["model"]
    (request,) = llm_stub.requests("chat")
    assert "DGIA billing service" in str(request.body)


async def test_malformed_output_is_dead_lettered_once_without_stacked_retries(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer, nats_client: object
) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    for _ in range(3):
        llm_stub.push_chat_content("this is not json {")
    running = await start_services(settings, [EPISODIC])
    subjects = Subjects(settings.nats.subject_root)
    js = nats_client.jetstream()  # type: ignore[attr-defined]
    try:
        await publish(settings, session_event())
        dead = await wait_for(lambda: stream_messages(js, subjects.dead_letter_stream), what="dead letter")
        await wait_until_idle(settings, [EPISODIC], timeout_s=60)
        index = await running.resources.vector_index()
        episodes = await index.count(EPISODES, Owner("acme", "alice"))
    finally:
        await running.stop()
    (record,) = decoded(dead)
    assert record["consumer"] == "episodic-summarizer"
    assert "LlmOutputInvalid" in record["reason"]
    assert "JSON" in record["reason"]
    assert len(llm_stub.requests("chat")) == 3, "the gateway's 3 attempts, not 3 x max_deliver"
    assert episodes == 0


async def test_slow_model_keeps_the_message_in_progress(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer
) -> None:
    # ack_wait is 1 s and the model takes 3 s: without in-progress acks JetStream would redeliver.
    nats = stack_settings.nats.model_copy(update={"ack_wait_s": 1.0})
    settings = _with_llm(stack_settings, llm_stub, nats=nats)
    llm_stub.push_chat_json({"summary": "A slow but fine summary of the DGIA plan.", "entity_names": []}, delay_s=3.0)
    running = await start_services(settings, [EPISODIC])
    try:
        # Load the models first: their first load blocks the event loop (no in-progress acks can go
        # out) for longer than this test's 1 s ack wait, which is not what this test is about.
        await running.resources.embedder().embed_query("warm up")
        await asyncio.to_thread(running.resources.keywords().warm_up)
        await publish(settings, session_event())
        await wait_until_idle(settings, [EPISODIC], timeout_s=60)
        index = await running.resources.vector_index()
        count = await index.count(EPISODES, Owner("acme", "alice"))
    finally:
        await running.stop()
    assert count == 1
    assert len(llm_stub.requests("chat")) == 1, "no redelivery while the model was thinking"


async def test_korean_session_korean_summary_and_keyword_search(
    stack_settings: TierMemSettings, pipeline: object
) -> None:
    from services.cli.stack import RunningServices

    assert isinstance(pipeline, RunningServices)
    korean = session_event(
        texts=[
            "온비서 프로젝트는 FastAPI로 가기로 결정했어요. 다음 주 금요일까지 API 초안을 완성해야 해요.",
            "알겠습니다. 온비서 API 초안을 다음 주 금요일까지 준비하겠습니다.",
        ],
        locale="ko",
    )
    english = session_event(texts=["The quarterly marketing budget for Orion is 40k dollars.", "Noted."])
    await publish(stack_settings, korean, english)
    await wait_until_idle(stack_settings, [EPISODIC], timeout_s=60)
    owner = Owner("acme", "alice")
    index = await pipeline.resources.vector_index()
    (episode,) = await index.get(EPISODES, owner, [episode_id_for(Owner("acme", "alice"), korean.session_id)])
    assert episode.payload["language"] == "ko"
    assert any("\uac00" <= ch <= "\ud7a3" for ch in episode.payload["summary"])
    assert any("\uac00" <= ch <= "\ud7a3" for ch in episode.payload["abstract"])
    assert await index.count(PASSAGES, owner, SearchFilter(match={"episode_id": episode.id})) >= 1

    embedder = pipeline.resources.embedder()
    keywords = pipeline.resources.keywords()
    for query, session in (("온비서 API 초안", korean), ("Orion marketing budget", english)):
        hits = await index.hybrid_query(
            EPISODES,
            owner,
            dense=await embedder.embed_query(query),
            sparse=keywords.encode_query(query),
            weights=HybridWeights(keyword=0.7, dense=0.3),
            limit=2,
        )
        assert hits[0].payload["session_id"] == session.session_id, query
