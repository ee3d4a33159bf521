"""`tiermem stats` shows what the stores hold (issue 15): the process serving the recall API counts
episodes, facts and entities (real nats-server, FalkorDB, Qdrant Edge; the offline extraction
path) and exports the totals on its `/metrics`; per-tenant counts appear only when the stack opts
in (`TIERMEM_TELEMETRY__TENANT_COUNTS`) and the command asks (`--per-tenant`), and never a user id."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.consolidation import wait_until_idle
from services.cli.main import app
from services.cli.servers.net import free_port
from services.cli.stack import recall_http_api
from services.cli.stats import StackStats, collect_stats
from services.common.domain.owner import Owner
from services.common.runtime.root import ServiceRoot, bootstrap
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.integration.test_pipeline import publish
from tests.support.events import session_event

pytestmark = pytest.mark.integration
SERVICES: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]
OWNERS = [Owner("acme", "alice"), Owner("acme", "bob"), Owner("globex", "carol")]
TEXTS = ["I moved to Busan last spring and I work at Hanbit Robotics.", "Noted: Busan, Hanbit Robotics."]


async def _stored_in(root: ServiceRoot) -> dict[str, dict[str, int]]:
    """The expected counts, read from the stores directly (per owner, summed per tenant)."""
    episodes, facts = await root.resources.episodes(), await root.resources.facts()
    graph = await root.resources.graph()
    expected: dict[str, dict[str, int]] = {}
    for owner in OWNERS:
        row = expected.setdefault(owner.tenant_id, {"episodes": 0, "facts": 0, "entities": 0})
        row["episodes"] += await episodes.count(owner)
        row["facts"] += await facts.count(owner)
    for tenant, entities in (await graph.entity_counts_by_tenant()).items():
        expected[tenant]["entities"] = entities
    return expected


async def _counted_after(settings: TierMemSettings, url: str, since: float, per_tenant: bool) -> StackStats:
    """The stats once the stack has counted the stores after `since` (it counts every interval)."""
    deadline = time.monotonic() + 60
    while True:
        stats = await collect_stats(settings, [url], per_tenant=per_tenant)
        if stats.stored_at is not None and stats.stored_at > since:
            return stats
        assert time.monotonic() < deadline, f"no count of the stores after {since}: {stats.as_json()}"
        await asyncio.sleep(0.2)


async def test_stats_show_stored_totals_and_per_tenant_counts_only_when_both_opt_in(
    stack_settings: TierMemSettings,
) -> None:
    telemetry = stack_settings.telemetry.model_copy(update={"tenant_counts": True, "store_counts_interval_s": 0.5})
    settings = stack_settings.model_copy(update={"telemetry": telemetry, "http_port": free_port()})
    url = f"http://127.0.0.1:{settings.http_port}/metrics"
    root = await bootstrap(settings, SERVICES, http_api=recall_http_api("127.0.0.1", settings.http_port, "warning"))
    try:
        await publish(settings, *(session_event(tenant_id=o.tenant_id, user_id=o.user_id, texts=TEXTS) for o in OWNERS))
        await wait_until_idle(settings, SERVICES, timeout_s=120)
        expected = await _stored_in(root)
        idle_at = time.time()
        private = await _counted_after(settings, url, idle_at, per_tenant=False)
        stats = await _counted_after(settings, url, idle_at, per_tenant=True)
        cli = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["stats", "--json", "--per-tenant", "--metrics-url", url],
            env={
                "TIERMEM_NATS__URL": settings.nats.url,
                "TIERMEM_NATS__TOKEN": settings.nats.token.get_secret_value() if settings.nats.token else "",
                "TIERMEM_NATS__SUBJECT_ROOT": settings.nats.subject_root,
            },
        )
    finally:
        await root.stop()

    assert expected["acme"]["episodes"] == 2 and expected["globex"]["episodes"] == 1
    assert expected["acme"]["entities"] >= 1, "the offline extraction found entities"
    totals = {kind: sum(row[kind] for row in expected.values()) for kind in ("episodes", "facts", "entities")}
    assert private.stored == totals and stats.stored == totals
    assert private.tenants == {} and "tenants" not in private.as_json()
    for tenant, counts in expected.items():
        assert {kind: stats.tenants[tenant][kind] for kind in counts} == counts, tenant
    assert stats.tenants["acme"]["sessions"] == 2 and stats.tenants["globex"]["sessions"] == 1
    assert cli.exit_code == 0, cli.output
    document = json.loads(cli.stdout)
    assert document["stored"] == totals and document["tenants"]["globex"]["episodes"] == 1
    assert not any(owner.user_id in cli.stdout for owner in OWNERS), "no user id on the screen"


async def test_per_tenant_stored_counts_stay_off_unless_the_stack_opts_in(stack_settings: TierMemSettings) -> None:
    telemetry = stack_settings.telemetry.model_copy(update={"store_counts_interval_s": 0.5})
    settings = stack_settings.model_copy(update={"telemetry": telemetry, "http_port": free_port()})
    url = f"http://127.0.0.1:{settings.http_port}/metrics"
    root = await bootstrap(settings, SERVICES, http_api=recall_http_api("127.0.0.1", settings.http_port, "warning"))
    try:
        await publish(settings, session_event(texts=TEXTS))
        await wait_until_idle(settings, SERVICES, timeout_s=120)
        stats = await _counted_after(settings, url, time.time(), per_tenant=True)
    finally:
        await root.stop()
    assert stats.stored["episodes"] == 1
    assert not stats.stored_by_tenant_exported
    assert set(stats.tenants["acme"]) == {"sessions", "episodes_created", "entity_upserts"}, "events only"
