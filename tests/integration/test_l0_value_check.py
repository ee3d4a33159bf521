"""L0 does not inject a memory that knows the topic but states no value of the kind the question asks
for (a number for how old / how much, a clock time for what time), and says so in `cut`; the value may
sit in any passage of the session the search reached, not only the best one. Against the real stack:
nats-server, FalkorDB, Qdrant Edge, the e5 model, the app served by uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_l0_reasons import served
from tests.integration.test_recall_api import ALICE, RecallStack, auto, build_stack, embedder, keywords

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords", "served"]  # fixtures shared with test_recall_api and test_l0_reasons

BORI = "Maya's dog Bori, a jindo mix, had her birthday party with a pup cup; she cannot have chicken."
BORI_PASSAGES = (
    "Maya: my dog Bori turned 3 yesterday, we got her a pup cup",
    "Maya: reminder she cant have chicken, allergic",
    "Maya: also vet next tuesday for her shots, can u remind me",
)
LISBON = "Maya and Sam booked a trip to Lisbon for May 8-15, flying TAP direct; her sister Lin keeps Bori."
LISBON_PASSAGES = ("Maya: sam and i booked lisbon!! may 8-15", "Maya: TAP, direct", "Maya: lin is taking bori")


async def _seeded(stack: RecallStack) -> dict[str, str]:
    return {
        "bori": await stack.episode(ALICE, "s-bori", BORI, passages=BORI_PASSAGES),
        "lisbon": await stack.episode(ALICE, "s-lisbon", LISBON, passages=LISBON_PASSAGES),
    }


def _cut_reasons(answer: dict[str, Any]) -> dict[str, str]:
    return {cut["id"]: cut["reason"] for cut in answer["cut"]}


async def test_a_memory_without_the_asked_value_is_cut_with_its_reason(served: RecallStack) -> None:
    ids = await _seeded(served)
    # The age is stated in a passage of Bori's session: injected.
    age = await auto(served.http, "how old is Bori now?")
    assert ids["bori"] in [item["id"] for item in age["items"]], age

    # The flights are known, their price never was: a date is not an amount.
    price = await auto(served.http, "how much were the TAP flights to Lisbon?")
    assert ids["lisbon"] not in [item["id"] for item in price["items"]], price
    assert _cut_reasons(price)[ids["lisbon"]] == "knows the topic, states no number for it"

    # The vet visit has a day, not a time.
    vet = await auto(served.http, "what time is Bori's vet appointment?")
    assert ids["bori"] not in [item["id"] for item in vet["items"]], vet
    # The value check's sentence, after the decision model's own when the model cuts it first.
    assert _cut_reasons(vet)[ids["bori"]].endswith("knows the topic, states no clock time for it"), vet
    if not vet["items"]:
        assert vet["skipped_reason"].startswith("every candidate cut: "), vet
        assert vet["skipped_reason"].endswith("knows the topic, states no clock time for it"), vet


async def test_the_check_can_be_switched_off(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True, l0_value_check=False
    ) as stack:
        ids = await _seeded(stack)
        price = await auto(stack.http, "how much were the TAP flights to Lisbon?")
        assert ids["lisbon"] in [item["id"] for item in price["items"]], price
