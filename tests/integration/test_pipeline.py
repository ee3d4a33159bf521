"""The consolidation path on real servers: SessionCompleted → episode + passages → EpisodeCreated →
facts, entities → EntityUpserted → dedup. Replays change nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import SessionCompleted, Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import RunningServices
from services.common.domain.owner import Owner
from services.common.runtime.broker import build_broker
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings
from services.common.stores.episodes import episode_id_for
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, HybridWeights
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.recall_api.retrieval.candidates import episode_filter
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.support.events import decoded, session_event, stream_messages
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration
DEFINITIONS: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]


async def publish(settings: TierMemSettings, *events: SessionCompleted) -> None:
    subjects = Subjects(settings.nats.subject_root)
    broker = build_broker(settings, "test-publisher")
    await broker.connect()
    try:
        publisher = EventPublisher(broker)
        for event in events:
            await publisher.publish(
                event,
                subjects.session_completed(event.tenant_id, event.user_id),
                message_id(event),
                subjects.session_stream,
            )
    finally:
        await broker.stop()


async def snapshot(settings: TierMemSettings, running: RunningServices, owner: Owner) -> dict[str, Any]:
    index = await running.resources.vector_index()
    graph = await running.resources.graph()
    return {
        "episodes": sorted((r.id, r.payload["summary"]) for r in await index.scroll(EPISODES, owner)),
        "passages": sorted((r.id, r.payload["text"]) for r in await index.scroll(PASSAGES, owner)),
        "facts": sorted(
            (r.id, r.payload["status"], r.payload["evidence_count"]) for r in await index.scroll(FACTS, owner)
        ),
        "graph": await graph.count(owner),
    }


async def test_session_becomes_episode_passages_and_downstream_events(
    stack_settings: TierMemSettings, pipeline: RunningServices, nats_client: Any
) -> None:
    event = session_event(
        texts=[
            "We decided to build the DGIA billing service in Go. I live in Seoul.",
            "Understood: the DGIA billing service will be written in Go.",
            "The deadline for DGIA is June 30 and Minsu reviews the code.",
            "I will prepare the plan for Minsu.",
        ]
    )
    await publish(stack_settings, event)
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)

    owner = Owner("acme", "alice")
    state = await snapshot(stack_settings, pipeline, owner)
    episode_id = episode_id_for(Owner("acme", "alice"), event.session_id)
    assert [episode for episode, _ in state["episodes"]] == [episode_id]
    assert state["passages"], "the raw session is indexed as passages"
    assert any("DGIA" in text for _, text in state["passages"])
    assert state["facts"], "'I live in Seoul' becomes a fact"

    subjects = Subjects(stack_settings.nats.subject_root)
    derived = decoded(await stream_messages(nats_client.jetstream(), subjects.derived_stream))
    kinds = [d["event_type"] for d in derived]
    assert kinds.count("episode.created") == 1
    assert "entity.upserted" in kinds
    created = next(d for d in derived if d["event_type"] == "episode.created")
    assert created["episode_id"] == episode_id
    assert created["raw_stream_sequence"] == 1

    # Replaying the same event (new Nats-Msg-Id, as after a dedup window) changes nothing.
    replay = event.model_copy(update={"event_id": __import__("uuid").uuid4()})
    await publish(stack_settings, replay)
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    assert await snapshot(stack_settings, pipeline, owner) == state


async def test_trivial_session_makes_no_episode(stack_settings: TierMemSettings, pipeline: RunningServices) -> None:
    await publish(stack_settings, session_event(texts=["ok", "👍", "고마워"]))
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=60)
    index = await pipeline.resources.vector_index()
    assert await index.count(EPISODES, Owner("acme", "alice")) == 0
    assert pipeline.contexts["episodic-summarizer"].counters.get("sessions_trivial") == 1


async def test_an_imported_transcript_older_than_the_ttl_is_remembered(
    stack_settings: TierMemSettings, pipeline: RunningServices
) -> None:
    """A conversation from three years ago, imported today: its episode expires a TTL after the import
    (not two years ago), so recall's expiry filter and the pruner keep it; its date stays its own."""
    ended = datetime.now(UTC) - timedelta(days=3 * 365)
    event = session_event(ended_at=ended)
    before = datetime.now(UTC)
    await publish(stack_settings, event)
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    index = await pipeline.resources.vector_index()
    owner = Owner("acme", "alice")
    (episode,) = await index.scroll(EPISODES, owner)
    ttl = timedelta(days=stack_settings.episode_ttl_days)
    assert episode.payload["expires_at_ts"] >= (before + ttl).timestamp() - 5, "counted from the import"
    assert episode.payload["occurred_at_ts"] == ended.timestamp(), "the session keeps its own date"
    store, query = await pipeline.resources.episodes(), "DGIA billing service"
    found = await store.search(
        owner,
        dense=await pipeline.resources.embedder().embed_query(query),
        sparse=pipeline.resources.keywords().encode_query(query),
        weights=HybridWeights(keyword=0.5, dense=0.5),
        limit=5,
        search_filter=episode_filter("private", None, datetime.now(UTC)),  # recall's, expiry included
    )
    assert [hit.episode.session_id for hit in found] == [event.session_id]
