"""Offline extraction of chat through the real pipeline (issue 50): a chat session published like any
other reaches FalkorDB as typed edges (owns, chose, switching_to, works_at) and a pet-typed entity, and
its facts (an age, a decision naming its project) reach the fact index."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.cli.consolidation import wait_until_idle
from services.cli.stack import RunningServices
from services.common.domain.owner import Owner
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings
from services.dedup.handlers import DEFINITION as DEDUP
from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
from services.semantic_extractor.handlers import DEFINITION as SEMANTIC
from tests.integration.test_pipeline import publish
from tests.integration.test_semantic import facts_of
from tests.support.events import session_event

pytestmark = pytest.mark.integration
DEFINITIONS: list[ServiceDefinition[Any]] = [EPISODIC, SEMANTIC, DEDUP]


def _chat(user_id: str, user: str, texts: list[str], locale: str = "en", day: int = 1) -> Any:
    """A session whose user messages carry the user's display name, as a chat app sends them."""
    event = session_event(
        user_id=user_id, texts=texts, ended_at=datetime(2026, 5, day, 12, 0, tzinfo=UTC), locale=locale
    )
    messages = [m.model_copy(update={"name": user}) if m.role == "user" else m for m in event.messages]
    return event.model_copy(update={"messages": messages})


@pytest.mark.parametrize(
    ("locale", "user", "texts", "pet", "edges", "age"),
    [
        (
            "en",
            "Mina",
            [
                "my dog bori turned 3 today!!",
                "Happy birthday to Bori!",
                "also we chose PostgreSQL 16 for Atlas, mongo was a pain",
                "Noted.",
                "switching CI to github actions next sprint",
                "Got it.",
            ],
            "bori",
            {("mina", "owns", "bori"), ("atlas", "chose", "postgresql 16"), ("mina", "switching_to", "github actions")},
            ("bori", "3"),
        ),
        (
            "ko",
            "지수",
            ["우리 강아지 보리 오늘 세 살 됐어", "축하해요!", "아틀라스는 포스트그레스로 결정했어요", "네."],
            "보리",
            {("지수", "owns", "보리"), ("아틀라스", "chose", "포스트그레스")},
            ("보리", "3"),
        ),
    ],
)
async def test_a_chat_session_yields_typed_edges_and_a_pet(
    stack_settings: TierMemSettings,
    pipeline: RunningServices,
    locale: str,
    user: str,
    texts: list[str],
    pet: str,
    edges: set[tuple[str, str, str]],
    age: tuple[str, str],
) -> None:
    owner = Owner("acme", f"{locale}-user")
    await publish(stack_settings, _chat(owner.user_id, user, texts, locale))
    await wait_until_idle(stack_settings, DEFINITIONS, timeout_s=120)

    graph = await pipeline.resources.graph()
    hood = await graph.neighbourhood(owner, name=user, hops=2, limit=50)
    names = {e.key: e.name.casefold() for e in hood.entities}
    types = {e.name.casefold(): e.entity_type for e in hood.entities}
    found = {(names[r.source_key], r.relation_type, names[r.target_key]) for r in hood.relations}
    assert types.get(pet) == "pet", types
    assert types.get(user.casefold()) == "person"
    assert edges <= found, found
    assert not any(r.relation_type == "related_to" and names[r.target_key] == pet for r in hood.relations)

    facts = {
        (f["subject"].casefold(), f["attribute"], f["value"].casefold()): f for f in await facts_of(pipeline, owner)
    }
    assert (age[0], "age", age[1]) in facts, sorted(facts)
    chose = [f for key, f in facts.items() if key[1] == "chose"]
    assert chose and all(f["subject"] == "user" for f in chose)
