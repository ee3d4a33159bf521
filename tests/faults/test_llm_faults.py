"""A model that misbehaves for a while (garbage, 500, a timeout, 429) and then recovers: the session
still becomes exactly one episode, through JetStream redelivery after the gateway's own bounded
retries ran out, and its recorded cost is that of the call that produced the summary, counted once,
not once per delivery. Real nats-server, FalkorDB, Qdrant Edge and litellm's HTTP path to the stub."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from contracts import Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import start_services
from services.common.domain.owner import Owner
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.common.stores.episodes import episode_id_for
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import session_event, stream_messages
from tests.support.llm_stub import LlmStubServer, ScriptedResponse, chat_completion_body

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("drain_litellm")]

INPUT_COST, OUTPUT_COST = 0.000001, 0.000002
SUMMARY = {"summary": "Alice moved the DGIA billing service to Go; the deadline is June 30.", "entity_names": ["DGIA"]}


def _faulty_settings(base: TierMemSettings, stub: LlmStubServer) -> TierMemSettings:
    llm = LlmSettings(
        model=STUB_MODEL,
        api_base=stub.api_base,
        api_key=SecretStr(STUB_API_KEY),
        timeout_s=1.0,
        max_attempts=3,
        input_cost_per_token=INPUT_COST,
        output_cost_per_token=OUTPUT_COST,
        progress_interval_s=0.2,
    )
    nats = base.nats.model_copy(update={"retry_delays_s": [0.5], "max_deliver": 4})
    return base.model_copy(update={"llm": llm, "nats": nats})


async def test_a_fault_period_ends_in_one_episode_with_its_cost_counted_once(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer, nats_client: object
) -> None:
    settings = _faulty_settings(stack_settings, llm_stub)
    # Delivery 1: garbage, a 500, then a call slower than the timeout → the gateway gives up
    # (unavailable, retry later) and the message is redelivered. Delivery 2: a 429 with Retry-After,
    # a 500, then a valid answer.
    llm_stub.push_chat_content("certainly! here is {not json", prompt_tokens=50, completion_tokens=40)
    llm_stub.push_error(500, "upstream exploded")
    llm_stub.push("chat", ScriptedResponse(status=200, body=chat_completion_body("{}"), delay_s=3.0))
    llm_stub.push_error(429, "slow down", headers={"Retry-After": "0"})
    llm_stub.push_error(500, "still exploding")
    llm_stub.push_chat_json(SUMMARY, prompt_tokens=120, completion_tokens=30)
    running = await start_services(settings, [EPISODIC])
    subjects = Subjects(settings.nats.subject_root)
    js = nats_client.jetstream()  # type: ignore[attr-defined]
    try:
        event = session_event()
        await publish(settings, event)
        await wait_until_idle(settings, [EPISODIC], timeout_s=90)
        owner = Owner(event.tenant_id, event.user_id)
        episodes = await (await running.resources.episodes()).get(owner, [episode_id_for(owner, event.session_id)])
        created = await stream_messages(js, subjects.derived_stream, subjects.all_of("episode.created"))
        dead = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters())
    finally:
        await running.stop()
    assert llm_stub.pending("chat") == 0, "every scripted fault was met"
    assert len(llm_stub.requests("chat")) == 6
    (episode,) = episodes
    assert episode.summary.startswith("Alice moved the DGIA billing service to Go")
    usage = episode.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (120, 30), "only the call that produced the summary"
    assert usage.cost_usd == pytest.approx(120 * INPUT_COST + 30 * OUTPUT_COST)
    assert len(created) == 1
    assert dead == [], "a transient fault period is not poison"
