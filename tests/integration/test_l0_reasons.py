"""Every empty or cut L0 answer says why (API `skipped_reason` and `cut`), and MCP speaks plainly: the
`memory_context` tool gives the same answer as `POST /v1/recall/auto`, a batch whose every record is
rejected is a tool error with the reasons, and argument errors read as sentences. Against the real
stack: nats-server, FalkorDB, Qdrant Edge, the e5 model, the app served by uvicorn."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import RecallStack, auto, build_stack, embedder, keywords, seed_scenario
from tests.integration.test_recall_mcp import error_text, mcp_session, structured
from tests.support.events import session_event

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

ONBISEO_QUESTION = "온비서 결제 모듈 어떻게 됐지?"
FLOOR_OR_CUT = re.compile(
    r"^(nothing scored above the floor \(top \d\.\d\d < \d\.\d\d\)|every candidate cut: .+|no memory for this user)$"
)


@pytest.fixture
async def served(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True) as stack:
        yield stack


async def test_every_empty_l0_answer_says_why_and_every_cut_candidate_too(served: RecallStack) -> None:
    ids = await seed_scenario(served)
    # Injected: no skipped reason; what was left out comes with its reason.
    found = await auto(served.http, ONBISEO_QUESTION)
    assert found["items"][0]["id"] == ids["onbiseo"]
    assert found["skipped_reason"] is None
    assert all(cut["reason"] and cut["id"] != ids["onbiseo"] for cut in found["cut"])

    # The same question with a budget nothing fits into: every candidate cut, and why.
    tight = await auto(served.http, ONBISEO_QUESTION, token_budget=1)
    assert tight["injected"] == 0
    assert tight["skipped_reason"] == "every candidate cut: does not fit the 1-token budget"
    assert tight["cut"][0] == {
        "id": ids["onbiseo"],
        "kind": "episode",
        "score": found["items"][0]["score"],
        "reason": "does not fit the 1-token budget",
    }

    # A user with nothing stored; the same user limited to group conversations, where alice has one.
    assert (await auto(served.http, ONBISEO_QUESTION, user_id="nobody"))["skipped_reason"] == (
        "no memory for this user"
    )
    grouped = await auto(served.http, "What is the salary target?", channel="group", user_id="carol")
    assert grouped["skipped_reason"] == "no memory for this user in group conversations"

    # A trivial message is not searched; a follow-up with nothing to refer to still says why.
    assert (await auto(served.http, "ok"))["skipped_reason"] == "trivial message (not searched)"
    alone = await auto(served.http, "그거 어떻게 됐어?")
    assert alone["injected"] == 0
    assert FLOOR_OR_CUT.match(alone["skipped_reason"]), alone["skipped_reason"]
    # The reason and the cut list agree: the best candidate's reason is the one given.
    if alone["cut"]:
        assert alone["skipped_reason"] == f"every candidate cut: {alone['cut'][0]['reason']}"


async def test_memory_context_is_the_l0_section_with_its_reason(served: RecallStack) -> None:
    ids = await seed_scenario(served)
    over_http = await auto(served.http, ONBISEO_QUESTION)
    async with mcp_session(served) as client:
        context = structured(
            await client.call_tool("memory_context", {"user_id": "alice", "message": ONBISEO_QUESTION})
        )
        assert context["items"][0]["id"] == ids["onbiseo"]
        assert context["section"] == over_http["section"]
        assert context["section"].startswith("## Memory Context")
        assert context["skipped_reason"] is None

        empty = structured(await client.call_tool("memory_context", {"user_id": "nobody", "message": ONBISEO_QUESTION}))
        assert (empty["section"], empty["skipped_reason"]) == ("", "no memory for this user")
        trivial = structured(await client.call_tool("memory_context", {"user_id": "alice", "message": "ok"}))
        assert trivial["skipped_reason"] == "trivial message (not searched)"

        # Earlier turns carry the topic, as in POST /v1/recall/auto.
        recent = [{"role": "user", "content": "온비서 결제 모듈 재작성 건 기억나?"}]
        follow_up = structured(
            await client.call_tool(
                "memory_context", {"user_id": "alice", "message": "그거 어떻게 됐어?", "recent_messages": recent}
            )
        )
        assert [item["id"] for item in follow_up["items"]][:1] == [ids["onbiseo"]]

    # A pinned group connection cannot read private memories through memory_context either.
    async with mcp_session(served, **{"X-TierMem-User-Id": "alice", "X-TierMem-Channel": "group"}) as pinned:
        grouped = structured(await pinned.call_tool("memory_context", {"message": "What is my salary target?"}))
        assert ids["salary"] not in [item["id"] for item in grouped["items"]]


async def test_an_all_rejected_batch_is_an_error_and_a_partly_rejected_one_is_not(served: RecallStack) -> None:
    rejected: list[dict[str, Any]] = [
        {"user_id": "alice", "messages": []},
        {"user_id": "../bob", "messages": [{"role": "user", "content": "hi"}]},
    ]
    good = session_event(user_id="alice").model_dump(mode="json")
    good.pop("tenant_id")
    async with mcp_session(served) as client:
        all_bad = await client.call_tool("memory_add_sessions", {"sessions": rejected})
        text = error_text(all_bad)
        assert "no session was added, every one was rejected: sessions[0]: " in text
        assert "; sessions[1]: " in text
        assert "messages" in text and "user_id" in text

        partly = structured(await client.call_tool("memory_add_sessions", {"sessions": [good, *rejected]}))
        assert (partly["accepted"], partly["rejected"]) == (1, 2)
        assert [item["status"] for item in partly["items"]] == ["accepted", "rejected", "rejected"]


async def test_argument_errors_read_as_sentences(served: RecallStack) -> None:
    async with mcp_session(served) as client:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("memory_search", {"user_id": "alice", "query": ""}, "query: must not be empty"),
            ("memory_search", {"user_id": "alice", "query": "x", "limit": 0}, "limit: must be at least 1"),
            ("memory_search", {"user_id": "alice"}, "query: is required"),
            ("memory_context", {"user_id": "alice", "message": ""}, "message: must not be empty"),
            ("memory_context", {"user_id": "alice", "message": "hi", "token_budget": 9000}, "at most 8000"),
            ("memory_list", {"user_id": "alice", "kind": "nope"}, "kind: must be one of 'episode', 'fact' or 'all'"),
        ]
        for tool, arguments, expected in cases:
            text = error_text(await client.call_tool(tool, arguments))
            assert text.startswith(f"Error executing tool {tool}: "), text
            assert expected in text, text
            # No pydantic dump: no URL, no error count, no echo of the input.
            assert "pydantic" not in text and "validation error" not in text and "input_value" not in text, text
