"""Fact status of corrections over the real pipeline (nats-server, FalkorDB, Qdrant Edge, the
summarizer, extractor and pruner in-process behind the HTTP API and the CLI): a correction the user
states, through the correction API or in their own words in a session ("Actually, I live in Busan,
not Seoul"), is confirmed at once; what the assistant says, or the user states without correcting
anything, stays tentative until observed again."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.test_fact_status import _save_and_correct
from tests.integration.test_write_api import NOW, WriteStack, _cli
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack
from tests.support.events import session_event, wait_for

pytestmark = pytest.mark.integration


async def test_a_correction_through_the_api_is_confirmed_and_a_plain_save_stays_tentative(
    write_stack: WriteStack,
) -> None:
    old_id, new_id = await _save_and_correct(write_stack)
    history = (await write_stack.http.get(f"/v1/facts/{new_id}/history", params={"user_id": "alice"})).json()
    versions = [(v["id"], v["status"], v["evidence_count"]) for v in history["versions"]]
    assert versions == [(old_id, "superseded", 1), (new_id, "confirmed", 1)]
    assert history["versions"][1]["user_stated"] is True

    corrected_cli = await asyncio.to_thread(
        _cli, write_stack, "memories", "correct", new_id, "Daegu", "The user lives in Daegu.", "-u", "alice"
    )
    assert corrected_cli.exit_code == 0 and '"status": "confirmed"' in corrected_cli.stdout, corrected_cli.output


def _facts_by_value(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["value"]: m for m in items if m["kind"] == "fact"}


async def test_a_correction_the_user_states_in_a_session_is_confirmed_others_stay_tentative(
    write_stack: WriteStack,
) -> None:
    stated = session_event(
        session_id="s-seoul", texts=["I live in Seoul these days.", "Good to know."], ended_at=NOW - timedelta(days=2)
    )
    corrected = session_event(
        session_id="s-busan-fix",
        texts=["Actually, I live in Busan, not Seoul. I work at Naver.", "Thanks, noted: Busan."],
        ended_at=NOW - timedelta(days=1),
    )
    # The assistant "corrects" the user; the user only states a value, with no correction of their own.
    told = session_event(
        session_id="s-told",
        user_id="carol",
        texts=["I live in Daegu.", "Actually, you live in Daegu, not Busan."],
        ended_at=NOW,
    )
    for event in (stated, corrected, told):
        await write_stack.post_session(event)

    async def extracted(user_id: str, values: set[str]) -> dict[str, dict[str, Any]] | None:
        facts = _facts_by_value(await write_stack.memories(user_id=user_id))
        return facts if values <= set(facts) else None

    # Both of alice's sessions are in once Seoul (from the earlier one) is superseded by Busan.
    await wait_for(lambda: write_stack.memories(status="superseded"), timeout_s=90, what="Seoul superseded")
    facts = await wait_for(lambda: extracted("alice", {"Seoul", "Busan", "Naver"}), timeout_s=90, what="alice's facts")
    assert facts["Busan"]["status"] == "confirmed", facts["Busan"]
    assert facts["Seoul"]["status"] == "superseded", facts["Seoul"]
    # Said in the same message as the correction, but not corrected: one observation, tentative.
    assert facts["Naver"]["status"] == "tentative", facts["Naver"]
    carol = await wait_for(lambda: extracted("carol", {"Daegu"}), timeout_s=90, what="carol's fact")
    assert carol["Daegu"]["status"] == "tentative", carol
