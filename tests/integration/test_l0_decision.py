"""L0's calibrated decision (services/recall_api/l0/decision.py) on the way people ask: questions about
three stored sessions, worded as users word them, inject their session; a question whose topic is
stored but whose detail was never said injects nothing, and the answer says why (`skipped_reason`, a
reason per cut candidate). The model is the default; the hand rules decide with `TIERMEM_L0_DECISION=rules`.
Against the real stack: nats-server, FalkorDB, Qdrant Edge, the e5 model, the app over ASGI."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_recall_api import ALICE, RecallStack, auto, days_ago, embedder, keywords, stack

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords", "stack"]  # fixtures shared with test_recall_api

SESSIONS = {
    "atlas": (
        "Priya and the user chose PostgreSQL 16 as the database for the Atlas project, over MongoDB.",
        (
            "User: ok so for Atlas we need to settle the db question",
            "User: Priya benchmarked both, mongo was faster on writes but we need joins",
            "User: we're going with PostgreSQL 16 for Atlas, final",
        ),
    ),
    "ci": (
        "The team is switching CI from Jenkins to GitHub Actions next month.",
        (
            "User: jenkins broke again lol",
            "User: we're switching CI to GitHub Actions next month, I'll move the pipelines",
        ),
    ),
    "lunch": (
        "The Atlas team had lunch together at the new ramen place.",
        ("User: atlas team lunch today, ramen place was great",),
    ),
    "bori": (
        "The user's dog Bori turned 3 and got a new toy at the birthday party.",
        (
            "User: my dog Bori turned 3 today!!",
            "User: we threw him a little party, he got a squeaky duck",
        ),
    ),
}

ANSWERABLE = [
    ("which database did we pick for Atlas?", "atlas"),
    ("what database are we using for Atlas?", "atlas"),
    ("what CI are we moving to?", "ci"),
    ("how old is Bori?", "bori"),
]
# Nothing about these was ever said.
NOT_IN_MEMORY = [
    "what is my sister's phone number?",
    "which hotel did we book in Lisbon?",
]


async def seed(stack: RecallStack) -> dict[str, str]:
    return {
        name: await stack.episode(ALICE, f"s-{name}", summary, passages=passages, occurred_at=days_ago(2 + number))
        for number, (name, (summary, passages)) in enumerate(SESSIONS.items())
    }


async def test_product_questions_inject_their_session_and_a_missing_detail_abstains_with_a_reason(
    stack: RecallStack,
) -> None:
    assert stack.settings.l0_decision == "model", "the default decides"
    ids = await seed(stack)
    for question, expected in ANSWERABLE:
        result = await auto(stack.http, question)
        assert result["skipped_reason"] is None, (question, result)
        assert result["items"][0]["id"] == ids[expected], (question, result)
        assert all(cut["reason"] for cut in result["cut"]), result
        # The other Atlas session (the team lunch) shares the project's name, not the question: the model
        # cuts it and says with what p, against which bar, and what pulled it down.
        if expected == "atlas":
            (lunch,) = [cut for cut in result["cut"] if cut["id"] == ids["lunch"]]
            assert re.fullmatch(r"below the confidence bar \(p=0\.\d\d < 0\.\d\d\): .+", lunch["reason"]), lunch
    for question in NOT_IN_MEMORY:
        result = await auto(stack.http, question)
        assert result["injected"] == 0, (question, result)
        assert result["skipped_reason"], result
        # A candidate past the floor is cut with the model's sentence, and the empty answer gives the best one's.
        if result["cut"]:
            assert result["skipped_reason"] == f"every candidate cut: {result['cut'][0]['reason']}"
            assert all(cut["reason"] for cut in result["cut"]), result


@pytest.mark.recall_settings(l0_decision="rules")
async def test_the_rules_decide_when_asked(stack: RecallStack) -> None:
    await seed(stack)
    cut = await auto(stack.http, "which cloud region did we pick for the Atlas servers?")
    # The rules' own sentences, never the model's.
    assert cut["cut"], cut
    assert not any("confidence bar" in c["reason"] for c in cut["cut"]), cut
