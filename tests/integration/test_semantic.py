"""The semantic tier on real servers: the fact write policy through the pipeline (English and
Korean), subject checks, dedup with two workers, replays, and a two-hop graph question."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts import EntityRef, EntityUpserted, Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.stack import RunningServices, start_services
from services.common.domain.facts import FactCandidate, FactProvenance
from services.common.domain.owner import Owner
from services.common.runtime.broker import build_broker
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.resources import Resources
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings
from services.common.stores.graph.repository import EntityInput, EpisodeRef, GraphRepository, RelationInput
from services.common.stores.vector.port import FACTS
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.integration.test_pipeline import publish, snapshot
from tests.support.events import session_event
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration
DEFINITIONS: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]


async def facts_of(running: RunningServices, owner: Owner) -> list[dict[str, Any]]:
    index = await running.resources.vector_index()
    return [r.payload for r in await index.scroll(FACTS, owner)]


def _when(day: int) -> datetime:
    return datetime(2026, 5, day, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("locale", "first", "moved", "again", "friend", "old", "new"),
    [
        (
            "en",
            "I live in Seoul.",
            "I moved to Busan last week.",
            "Busan is great, I love living in Busan now. I live in Busan.",
            "My friend uses R.",
            "Seoul",
            "Busan",
        ),
        (
            "ko",
            "저는 서울에 살아요.",
            "저는 부산으로 이사했어요.",
            "저는 부산에 살아요.",
            "제 친구는 R을 써요.",
            "서울",
            "부산",
        ),
    ],
)
async def test_moving_supersedes_and_repetition_confirms(
    stack_settings: TierMemSettings,
    pipeline: RunningServices,
    locale: str,
    first: str,
    moved: str,
    again: str,
    friend: str,
    old: str,
    new: str,
) -> None:
    owner = Owner("acme", "alice")
    for day, text in ((1, first), (8, moved), (15, friend)):
        await publish(stack_settings, session_event(texts=[text, "OK, noted."], ended_at=_when(day), locale=locale))
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    lives = {f["value"]: f for f in await facts_of(pipeline, owner) if f["attribute"] == "lives_in"}
    assert set(lives) == {old, new}
    assert lives[new]["status"] == "tentative" and lives[new]["valid_to"] is None
    assert lives[old]["status"] == "superseded"
    assert lives[old]["superseded_by"] == lives[new]["fact_id"]
    assert lives[old]["valid_to"] is not None, "history is kept, closed"
    user_facts = [f for f in await facts_of(pipeline, owner) if f["subject"] == "user"]
    assert not any(f["value"] == "R" for f in user_facts), "'my friend uses R' is not about the user"

    await publish(stack_settings, session_event(texts=[again, "Noted."], ended_at=_when(22), locale=locale))
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    lives = {f["value"]: f for f in await facts_of(pipeline, owner) if f["attribute"] == "lives_in"}
    assert lives[new]["status"] == "confirmed"
    assert lives[new]["evidence_count"] == 2


async def _publish_upserts(settings: TierMemSettings, owner: Owner, entities: list[Any]) -> None:
    subjects = Subjects(settings.nats.subject_root)
    broker = build_broker(settings, "test")
    await broker.connect()
    try:
        publisher = EventPublisher(broker)
        for entity in entities:
            event = EntityUpserted(
                event_id=uuid.uuid4(),
                tenant_id=owner.tenant_id,
                user_id=owner.user_id,
                scope="personal",
                entity=EntityRef(entity_id=entity.key, name=entity.name, entity_type=entity.entity_type),
                aliases=list(entity.aliases),
                created=True,
            )
            await publisher.publish(
                event,
                subjects.entity_upserted(owner.tenant_id, owner.user_id),
                message_id(event),
                subjects.derived_stream,
            )
    finally:
        await broker.stop()


async def test_two_dedup_workers_merge_variants_keep_aliases_and_relations(stack_settings: TierMemSettings) -> None:
    # One process, so one Edge shard shared by both workers (as in the embedded stack).
    shared = Resources(stack_settings)
    workers = [await start_services(stack_settings, [DEDUP], resources=shared) for _ in range(2)]
    try:
        graph: GraphRepository = await workers[0].resources.graph()
        alice, other_tenant = Owner("acme", "alice"), Owner("globex", "alice")
        episode = EpisodeRef(episode_id=str(uuid.uuid4()), session_id="s1", occurred_at_ts=_when(1).timestamp())
        names = ["DGIA", "dgia", "D.G.I.A.", "DGIA project", "온비서", "온 비서", "온비서 프로젝트", "Minsu", "Go"]
        upserted = await graph.upsert_entities(
            alice,
            "personal",
            [EntityInput(name=n, entity_type="project") for n in names[:-2]]
            + [EntityInput(name="Minsu", entity_type="person"), EntityInput(name="Go", entity_type="technology")],
            episode,
        )
        key = {r.name: r.key for r in upserted}
        relations = [
            RelationInput(key["Minsu"], "works_on", key["DGIA project"]),
            RelationInput(key["Minsu"], "works_on", key["온비서 프로젝트"]),
            RelationInput(key["DGIA"], "uses", key["Go"]),
            RelationInput(key["온비서"], "uses", key["Go"]),
        ]
        await graph.upsert_relations(alice, "personal", relations, episode)
        their_episode = EpisodeRef(episode_id=str(uuid.uuid4()), session_id="s1", occurred_at_ts=episode.occurred_at_ts)
        theirs = await graph.upsert_entities(other_tenant, "personal", [EntityInput("DGIA", "project")], their_episode)
        before = await graph.count(other_tenant)

        # A fact about a variant name must end up on the surviving entity's name.
        observed = FactProvenance(
            episode_id=episode.episode_id, session_id="s1", occurred_at=_when(1), source="extraction"
        )
        await (await shared.facts()).write(
            alice,
            FactCandidate(
                tenant_id="acme",
                user_id="alice",
                scope="personal",
                subject="DGIA project",
                attribute="uses_tool",
                value="Go",
                text="The DGIA project uses Go.",
                language="en",
                provenance=observed,
            ),
            channel="private",
            now=_when(1),
        )

        await _publish_upserts(stack_settings, alice, upserted)
        await wait_until_idle(stack_settings, [DEDUP], timeout_s=120)
    finally:
        for worker in workers:
            await worker.stop()

    verify = await start_services(stack_settings, [])
    try:
        graph = await verify.resources.graph()
        entities = await graph.list_entities(alice, "personal")
        projects = [e for e in entities if e.entity_type == "project"]
        assert len(projects) == 2, [(e.name, e.aliases) for e in projects]
        dgia = next(e for e in projects if "DGIA" in e.aliases or e.name == "DGIA")
        assert {"DGIA", "dgia", "D.G.I.A.", "DGIA project"} <= set(dgia.aliases)
        onbiseo = next(e for e in projects if e is not dgia)
        assert {"온비서", "온 비서", "온비서 프로젝트"} <= set(onbiseo.aliases)
        minsu = next(e for e in entities if e.name == "Minsu")
        hood = await graph.neighbourhood(alice, entity_key=minsu.key, hops=1, limit=50)
        assert {r.relation_type for r in hood.relations} == {"works_on"}
        assert len(hood.relations) == 2, "no relation lost, none duplicated"
        go = next(e for e in entities if e.name == "Go")
        go_hood = await graph.neighbourhood(alice, entity_key=go.key, hops=1, limit=50)
        assert len([r for r in go_hood.relations if r.relation_type == "uses"]) == 2
        assert await graph.count(other_tenant) == before, "another tenant's 'DGIA' is never merged"
        facts = [r.payload for r in await (await verify.resources.vector_index()).scroll(FACTS, alice)]
        assert dgia.name == "DGIA", "the survivor is chosen deterministically (here: not 'DGIA project')"
        assert [(f["subject"], f["attribute"], f["value"]) for f in facts] == [(dgia.name, "uses_tool", "Go")]
        assert facts[0]["provenance"][0]["episode_id"] == episode.episode_id, "provenance moves with the fact"
        assert (await graph.get_entity(other_tenant, theirs[0].key)) is not None
    finally:
        await verify.stop()


async def test_replaying_everything_twice_changes_no_count(
    stack_settings: TierMemSettings, pipeline: RunningServices
) -> None:
    owner = Owner("acme", "alice")
    events = [
        session_event(texts=["Caroline here. I work on the DGIA project with Minsu.", "Noted."], ended_at=_when(1)),
        session_event(texts=["I live in Seoul and I use Go.", "Noted."], ended_at=_when(2)),
        session_event(texts=["온비서 프로젝트는 김철수 팀장님이 맡고 있어요.", "네."], ended_at=_when(3), locale="ko"),
    ]
    await publish(stack_settings, *events)
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    first = await snapshot(stack_settings, pipeline, owner)
    for _ in range(2):
        await publish(stack_settings, *(e.model_copy(update={"event_id": uuid.uuid4()}) for e in events))
        await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
        assert await snapshot(stack_settings, pipeline, owner) == first


async def test_two_hop_question_which_projects_did_this_person_work_on(
    stack_settings: TierMemSettings, pipeline: RunningServices
) -> None:
    owner = Owner("acme", "caroline")
    texts = [
        ("Caroline", "I work on the DGIA project with Minsu."),
        ("Caroline", "Minsu works on Onbiseo too, he leads it."),
    ]
    for day, (name, text) in enumerate(texts, start=1):
        event = session_event(user_id="caroline", texts=[text, "Noted."], ended_at=_when(day))
        messages = [m.model_copy(update={"name": name}) if m.role == "user" else m for m in event.messages]
        await publish(stack_settings, event.model_copy(update={"messages": messages}))
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)
    graph = await pipeline.resources.graph()
    hood = await graph.neighbourhood(owner, name="Caroline", hops=2, limit=50)
    reached = {e.name for e in hood.entities}
    assert "DGIA" in reached, reached
    assert "Minsu" in reached, "two hops: Caroline → DGIA → Minsu"
    assert all(r.episode_ids for r in hood.relations), "every relation carries provenance"
