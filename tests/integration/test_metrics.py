"""Prometheus metrics on the consumers' health port (issue 15), scraped over HTTP from services
running on real servers with litellm's HTTP path to the local LLM stub: the named series are
there, and the counters move when a message is redelivered or dead-lettered."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from rich.console import Console

from services.cli.consolidation import wait_until_idle
from services.cli.servers.net import free_port
from services.cli.stack import start_services
from services.cli.stats import collect_stats, render
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import LlmSettings, TierMemSettings
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import session_event
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]
SERVICES: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _settings(base: TierMemSettings, stub: LlmStubServer) -> TierMemSettings:
    llm = LlmSettings(
        model=STUB_MODEL,
        api_base=stub.api_base,
        api_key=SecretStr(STUB_API_KEY),
        timeout_s=10,
        max_attempts=1,  # one failed call is one failed delivery: the broker's retry is what is measured
        input_cost_per_token=0.000001,
        output_cost_per_token=0.000002,
    )
    return base.model_copy(update={"llm": llm, "health_port": free_port()})


async def scrape(port: int) -> Samples:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _script_session(stub: LlmStubServer) -> None:
    stub.push_chat_json({"summary": "Alice plans the DGIA service in Go.", "entity_names": ["DGIA"]}, prompt_tokens=120)
    stub.push_chat_json(
        {
            "entities": [{"name": "DGIA", "type": "project"}, {"name": "Go", "type": "technology"}],
            "relations": [{"source": "DGIA", "type": "uses", "target": "Go"}],
            "facts": [],
        },
        prompt_tokens=200,
        completion_tokens=40,
    )


async def test_metrics_series_and_counters_that_move_on_redelivery_and_dead_letter(
    stack_settings: TierMemSettings, llm_stub: LlmStubServer
) -> None:
    settings = _settings(stack_settings, llm_stub)
    assert settings.health_port is not None
    running = await start_services(settings, SERVICES)
    try:
        before = await scrape(settings.health_port)
        llm_stub.push_error(503, "overloaded")  # the first delivery fails: JetStream redelivers
        _script_session(llm_stub)
        await publish(settings, session_event())
        await wait_until_idle(settings, SERVICES, timeout_s=120)
        after_session = await scrape(settings.health_port)
        llm_stub.push_chat_content("not json {")  # invalid output: dead-lettered at once (poison)
        await publish(settings, session_event(session_id="s-poison"))
        await wait_until_idle(settings, SERVICES, timeout_s=120)
        after_poison = await scrape(settings.health_port)
        metrics_urls = [f"http://127.0.0.1:{settings.health_port}/metrics"]
        stats = await collect_stats(settings, metrics_urls, per_tenant=True)
        private = await collect_stats(settings, metrics_urls)
    finally:
        await running.stop()

    def moved(samples: Samples, name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    summarizer = "episodic-summarizer"
    assert moved(after_session, "tiermem_redeliveries_total", consumer=summarizer) == 1
    assert moved(after_session, "tiermem_handler_seconds_count", consumer=summarizer, outcome="retry") == 1
    for consumer in ("episodic-summarizer", "semantic-extractor", "dedup"):
        assert moved(after_session, "tiermem_handler_seconds_count", consumer=consumer, outcome="ok") >= 1, consumer
    assert moved(after_session, "tiermem_dead_letters_total", consumer=summarizer, kind="poison") == 0
    tokens = "tiermem_llm_tokens_total"
    assert moved(after_session, tokens, purpose="episode_summary", model="stub-model", direction="input") == 120
    assert moved(after_session, tokens, purpose="semantic_extraction", model="stub-model", direction="input") == 200
    assert moved(after_session, tokens, purpose="semantic_extraction", model="stub-model", direction="output") == 40
    cost = moved(after_session, "tiermem_llm_cost_usd_total", purpose="semantic_extraction", model="stub-model")
    assert cost == pytest.approx(200 * 0.000001 + 40 * 0.000002)
    assert moved(after_session, "tiermem_llm_calls_total", purpose="episode_summary", outcome="LlmUnavailable") == 1
    assert moved(after_session, "tiermem_embedding_seconds_count", kind="passages") >= 1

    assert moved(after_poison, "tiermem_dead_letters_total", consumer=summarizer, kind="poison") == 1
    assert moved(after_poison, "tiermem_handler_seconds_count", consumer=summarizer, outcome="dead_letter") == 1
    assert value(after_poison, "tiermem_dependency_up", dependency="broker") in (0.0, 1.0)
    assert value(after_poison, "process_resident_memory_bytes") > 0
    for consumer in ("episodic-summarizer", "semantic-extractor", "dedup"):
        for gauge in ("tiermem_consumer_pending", "tiermem_consumer_ack_pending"):
            assert (gauge, frozenset({("consumer", consumer)})) in after_poison, (gauge, consumer)
            assert value(after_poison, gauge, consumer=consumer) == 0, "idle: nothing pending"
    labels = {key for (_, pairs) in after_poison for key, _ in pairs}
    assert not labels & {"tenant", "tenant_id", "user", "user_id"}, "no tenant or user labels"

    # `tiermem stats` reads the same stack: lag per consumer, DLQ size, LLM usage, per-tenant counts (opt-in).
    lags = {lag.consumer: lag for lag in stats.consumers}
    assert {"episodic-summarizer", "semantic-extractor", "dedup"} <= set(lags)
    assert lags[summarizer].pending == 0 and lags[summarizer].ack_pending == 0
    assert stats.dead_letters == 1
    assert stats.tenants["acme"]["sessions"] == 2 and stats.tenants["acme"]["episodes_created"] == 1
    assert stats.tenants["acme"]["entity_upserts"] >= 1
    assert private.tenants == {} and "tenants" not in private.as_json(), "per-tenant counts only when asked"
    assert private.dead_letters == 1
    usage = {row.purpose: row for row in stats.llm}
    assert usage["semantic_extraction"].input_tokens >= 200 and usage["semantic_extraction"].cost_usd > 0
    screen = Console(record=True, width=120)
    screen.print(render(stats))
    assert "Dead letters: 1" in screen.export_text()
