"""Importance in LLM mode, on the real litellm HTTP path (local stub) and a real nats-server: the
summarising and the extracting call each return it in the same answer (no extra call); a missing or
malformed rating falls back to the offline heuristic instead of failing the message."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from contracts import Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import start_services
from services.common.domain.importance import messages_importance, text_importance
from services.common.domain.owner import Owner
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.common.stores.episodes import episode_id_for
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import decoded, session_event, stream_messages
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]

ALICE = Owner("acme", "alice")


def _with_llm(settings: TierMemSettings, stub: LlmStubServer) -> TierMemSettings:
    llm = LlmSettings(
        model=STUB_MODEL, api_base=stub.api_base, api_key=SecretStr(STUB_API_KEY), timeout_s=10, max_attempts=3
    )
    return settings.model_copy(update={"llm": llm})


async def test_the_models_ratings_are_stored_and_a_malformed_one_falls_back_to_the_heuristic(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer
) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    llm_stub.push_chat_json(
        {
            "summary": "Alice decided to build the DGIA billing service in Go by June 30.",
            "entity_names": ["DGIA"],
            "importance": 0.15,  # deliberately unlike the heuristic: the model's rating must win
        }
    )
    llm_stub.push_chat_json(
        {
            "entities": [{"name": "DGIA", "type": "project"}],
            "facts": [
                {
                    "subject": "user",
                    "attribute": "works_on",
                    "value": "DGIA billing service",
                    "text": "The user works on the DGIA billing service.",
                    "importance": 0.95,
                },
                {
                    "subject": "user",
                    "attribute": "uses_tool",
                    "value": "Go",
                    "text": "The user uses Go.",
                    "importance": "extremely",
                },
            ],
        }
    )
    event = session_event()
    running = await start_services(settings, [EPISODIC, SEMANTIC])
    try:
        await publish(settings, event)
        await wait_until_idle(settings, [EPISODIC, SEMANTIC], timeout_s=90)
        episodes = await running.resources.episodes()
        (episode,) = await episodes.get(ALICE, [episode_id_for(ALICE, event.session_id)])
        facts = {s.fact.value: s.fact for s in await (await running.resources.facts()).scroll(ALICE)}
        js = (await running.resources.nats()).jetstream()
        subjects = Subjects(settings.nats.subject_root)
        (created,) = decoded(
            await stream_messages(js, subjects.derived_stream, subjects.episode_created("acme", "alice"))
        )
    finally:
        await running.stop()

    assert episode.importance == pytest.approx(0.15)
    assert created["importance"] == pytest.approx(0.15)
    assert messages_importance(m.content for m in event.messages) > 0.6  # what the heuristic would have said
    assert facts["DGIA billing service"].importance == pytest.approx(0.95)
    assert facts["Go"].importance == pytest.approx(text_importance("The user uses Go."))
    summary_request, extraction_request = llm_stub.requests("chat")  # two calls: no extra one for importance
    assert '"importance"' in str(summary_request.body)
    assert "importance" in str(extraction_request.body)


async def test_a_summary_without_a_rating_is_scored_offline(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer
) -> None:
    settings = _with_llm(stack_settings, llm_stub)
    llm_stub.push_chat_json({"summary": "They said hello and thanks.", "entity_names": [], "importance": "n/a"})
    event = session_event(texts=["hi! how are you?", "fine thanks, haha", "I watched a movie yesterday."])
    running = await start_services(settings, [EPISODIC])
    try:
        await publish(settings, event)
        await wait_until_idle(settings, [EPISODIC], timeout_s=60)
        (episode,) = await (await running.resources.episodes()).get(ALICE, [episode_id_for(ALICE, event.session_id)])
    finally:
        await running.stop()
    assert episode.importance == pytest.approx(messages_importance(m.content for m in event.messages))
    assert episode.importance <= 0.25
    assert len(llm_stub.requests("chat")) == 1
