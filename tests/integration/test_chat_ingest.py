"""Real chat through the real stack (nats-server, FalkorDB, Qdrant Edge, the summarizer behind the HTTP
API): a burst chat where Maria calls Jonathan "Jonny" and he says what he did "yesterday" is found by a
question that uses the nickname and the date, ahead of the same words said by another person on that
date and by Jonathan on another date."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.port import EPISODES
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.integration.test_write_api import WriteStack
from tests.integration.test_write_api import write_stack as write_stack

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _chat_settings_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chat mechanism on, whatever the defaults (set before the stack starts, which reads the
    summarizer's settings)."""
    monkeypatch.setenv("TIERMEM_BURST_GAP_SECONDS", "300")
    monkeypatch.setenv("TIERMEM_PASSAGE_SEGMENT_GAP_MINUTES", "30")
    monkeypatch.setenv("TIERMEM_RELATIVE_DATES", "true")
    monkeypatch.setenv("TIERMEM_SPEAKER_ALIASES", "true")


HIKE = "I went hiking at Bear Lake yesterday"


def _session(session_id: str, start: str, turns: list[tuple[str, str, str, float]]) -> dict[str, Any]:
    """turns: (role, name, text, minutes after the start)."""
    started = datetime.fromisoformat(start)
    messages = [
        {"role": role, "name": name, "content": text, "ts": (started + timedelta(minutes=minute)).isoformat()}
        for role, name, text, minute in turns
    ]
    return {
        "event_id": str(uuid.uuid4()),
        "tenant_id": "acme",
        "user_id": "alice",
        "agent_id": "agent-1",
        "session_id": session_id,
        "channel": "private",
        "started_at": started.isoformat(),
        "ended_at": messages[-1]["ts"],
        "messages": messages,
    }


def _jonny_chat(session_id: str, start: str) -> dict[str, Any]:
    return _session(
        session_id,
        start,
        [
            ("user", "Maria", "hey Jonny!", 0),
            ("user", "Maria", "long time no see", 0.2),
            ("assistant", "Jonathan", "hi Maria", 1),
            ("assistant", "Jonathan", "busy week at work", 1.3),
            ("user", "Maria", "so what did you do", 90),
            ("user", "Maria", "anything fun?", 90.2),
            ("assistant", "Jonathan", HIKE, 91),
            ("assistant", "Jonathan", "the trail was icy", 91.5),
            ("user", "Maria", "wow", 92),
        ],
    )


SESSIONS = [
    _jonny_chat("s-target", "2026-11-19T18:00:00+00:00"),  # yesterday: 18 November 2026
    _jonny_chat("s-other-week", "2026-11-26T18:00:00+00:00"),  # the same words a week later (more recent)
    _session(
        "s-peter",
        "2026-11-19T20:00:00+00:00",
        [
            ("user", "Maria", "hi Peter", 0),
            ("assistant", "Peter", "so tired", 1),
            ("assistant", "Peter", HIKE, 1.2),
            ("user", "Maria", "wow", 2),
        ],
    ),
]


async def test_a_nickname_and_a_date_find_the_burst_chat_they_describe(write_stack: WriteStack) -> None:
    for record in SESSIONS:
        response = await write_stack.http.post("/v1/sessions", json=record)
        assert response.status_code == 202, response.text
    for record in SESSIONS:
        await write_stack.wait_state(record["event_id"], "consolidated", timeout_s=120)

    index = await write_stack.resources.vector_index()
    episodes = {r.payload["session_id"]: r.payload for r in await index.scroll(EPISODES, Owner("acme", "alice"))}
    assert episodes["s-target"]["aliases"] == {"Jonathan": ["Jonny"]}
    assert "aliases" not in episodes["s-peter"]

    found = await write_stack.http.post(
        "/v1/memories/search",
        json={"user_id": "alice", "query": "Where did Jonny go hiking on 18 November 2026?", "kinds": ["episode"]},
    )
    assert found.status_code == 200, found.text
    items = found.json()["items"]
    assert items and items[0]["session_id"] == "s-target", [(i["session_id"], i["score"]) for i in items]
    passage = items[0]["matched_passage"] or ""
    assert "Jonathan (Jonny): I went hiking at Bear Lake yesterday [18 November 2026] / the trail was icy" in passage
