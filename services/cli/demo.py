"""`tiermem up --demo`: ingest the example sessions (English and Korean) and show what was stored."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from services.cli.consolidation import wait_until_idle
from services.cli.ingest import load_sessions, publish_sessions
from services.common.domain.owner import Owner
from services.common.runtime.settings import TierMemSettings

if TYPE_CHECKING:
    from services.cli.stack import RunningServices

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


async def run_demo(settings: TierMemSettings, running: RunningServices, console: Console | None = None) -> None:
    from services.cli.stack import all_services

    out = console or Console()
    loaded = load_sessions(sorted(EXAMPLES.glob("*.json*")), settings.limits)
    for rejected in loaded.rejected:
        out.print(f"[red]rejected[/] {rejected}")
    events = [event for _, _, event in loaded.valid]
    counts = await publish_sessions(settings, events)
    out.print(f"demo: published {counts.published} sessions ({counts.duplicate} already there)")
    await wait_until_idle(settings, all_services(), timeout_s=600)

    episode_store = await running.resources.episodes()
    fact_store = await running.resources.facts()
    graph = await running.resources.graph()
    for owner in sorted({Owner(e.tenant_id, e.user_id) for e in events}, key=lambda o: (o.tenant_id, o.user_id)):
        episodes = Table(title=f"episodes of {owner.tenant_id}/{owner.user_id}", show_lines=False)
        episodes.add_column("date")
        episodes.add_column("abstract")
        for episode in sorted(await episode_store.scroll(owner), key=lambda e: e.occurred_at):
            episodes.add_row(episode.occurred_at.date().isoformat(), episode.abstract)
        out.print(episodes)
        facts = Table(title=f"facts of {owner.tenant_id}/{owner.user_id}")
        for column in ("status", "subject", "attribute", "value", "text"):
            facts.add_column(column)
        for fact in sorted((stored.fact for stored in await fact_store.scroll(owner)), key=lambda f: f.attribute):
            facts.add_row(fact.status, fact.subject, fact.attribute, fact.value, fact.text)
        out.print(facts)
        entities = await graph.list_entities(owner, "personal")
        out.print(
            "entities: " + ", ".join(sorted(f"{e.name} ({e.entity_type})" for e in entities))
            if entities
            else "no entities"
        )
    out.print(f"counters: {dict(sorted(_counters(running).items()))}")


def _counters(running: RunningServices) -> dict[str, int]:
    totals: dict[str, int] = {}
    for context in running.contexts.values():
        for name, value in context.counters.items():
            totals[name] = totals.get(name, 0) + value
    return totals
