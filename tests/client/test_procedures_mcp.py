"""`memory_procedures` over MCP answers what GET /v1/procedures answers, for the connection's principal:
a connection pinned to a user cannot read another user's rules, a group connection sees no private ones."""

from __future__ import annotations

import pytest

from services.common.domain.owner import Owner
from tests.integration.test_recall_api import ALICE, RecallStack
from tests.integration.test_recall_mcp import embedder as embedder
from tests.integration.test_recall_mcp import error_text, mcp_session, structured
from tests.integration.test_recall_mcp import keywords as keywords
from tests.integration.test_recall_mcp import served as served

pytestmark = pytest.mark.integration


async def test_memory_procedures_matches_the_http_endpoint_and_keeps_to_the_principal(served: RecallStack) -> None:
    await served.fact(
        ALICE, "보고서는 표부터 보여줘.", "procedure_보고서", "보고서는 표부터 보여줘.", subject="procedure"
    )
    await served.fact(ALICE, "Always answer in Korean.", "procedure_answer_language", "Always answer in Korean.",
                      subject="procedure")  # fmt: skip
    await served.fact(Owner("acme", "_tenant"), "Approval takes two steps.", "procedure_approval",
                      "Approval takes two steps.", subject="procedure", scope="org")  # fmt: skip
    await served.fact(ALICE, "The user lives in Busan.", "lives_in", "Busan")
    async with mcp_session(served) as client:
        result = structured(await client.call_tool("memory_procedures", {"user_id": "alice", "query": "보고서"}))
    texts = [rule["text"] for rule in result["rules"]]
    assert sorted(texts) == sorted(["보고서는 표부터 보여줘.", "Always answer in Korean.", "Approval takes two steps."])
    assert [rule["owner"] for rule in result["rules"]][-1] == "tenant" and not result["ranked"]

    async with served.client() as http:
        response = await http.get("/v1/procedures", params={"user_id": "alice", "query": "보고서"})
    assert response.status_code == 200 and [r["text"] for r in response.json()["rules"]] == texts

    async with mcp_session(served, **{"x-tiermem-user-id": "bob"}) as pinned:
        refused = await pinned.call_tool("memory_procedures", {"user_id": "alice"})
        assert "pinned" in error_text(refused)
        assert [r["text"] for r in structured(await pinned.call_tool("memory_procedures", {}))["rules"]] == [
            "Approval takes two steps."
        ]
    async with mcp_session(served, **{"x-tiermem-channel": "group"}) as group:
        rules = structured(await group.call_tool("memory_procedures", {"user_id": "alice"}))["rules"]
        assert rules == []  # the rules were stated privately (and the tenant rule was not saved as group)
