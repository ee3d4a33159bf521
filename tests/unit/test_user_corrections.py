"""Which extracted facts are the user's own corrections (pure logic: the marking the write policy
confirms at once; the end-to-end path is tests/integration/test_user_corrections.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.common.domain.facts import FactCandidate, FactProvenance, plan_fact_write
from services.semantic_extractor.corrections import as_user_corrections

NOW = datetime(2026, 5, 2, tzinfo=UTC)


def _candidate(value: str, attribute: str = "lives_in") -> FactCandidate:
    return FactCandidate(
        tenant_id="acme",
        user_id="alice",
        scope="personal",
        subject="user",
        attribute=attribute,
        value=value,
        text=f"The user {attribute} {value}.",
        language="en",
        provenance=FactProvenance(episode_id="e1", occurred_at=NOW, source="extraction"),
    )


@pytest.mark.parametrize(
    ("message", "value", "corrected"),
    [
        ("Actually, I live in Busan, not Seoul.", "Busan", True),
        ("Actually, I live in Busan, not Seoul.", "Seoul", False),  # the value named as the wrong one
        ("I live in Busan, not in Seoul.", "Busan", True),
        ("Correction: I work at Naver.", "Naver", True),
        ("아니, 나 서울이 아니라 부산에 살아.", "부산", True),
        ("아니, 나 서울이 아니라 부산에 살아.", "서울", False),
        ("정정할게. 나는 부산에 살아.", "부산", True),
        ("I live in Busan these days.", "Busan", False),  # a statement, not a correction
        ("Actually, I live in Busan. I work at Naver.", "Naver", False),  # not the correcting sentence
        ("Actually it is good.", "Go", False),  # a whole word only
    ],
)
def test_only_a_value_the_user_asserts_while_correcting_is_marked(message: str, value: str, corrected: bool) -> None:
    (marked,) = as_user_corrections([_candidate(value)], [message])
    assert marked.provenance.user_correction is corrected


def test_a_marking_from_elsewhere_is_cleared_and_a_marked_fact_is_confirmed_on_its_first_observation() -> None:
    claimed = _candidate("Busan")
    claimed = claimed.model_copy(update={"provenance": claimed.provenance.model_copy(update={"user_correction": True})})
    (cleared,) = as_user_corrections([claimed], ["I live in Busan."])
    assert cleared.provenance.user_correction is False
    assert plan_fact_write(cleared, [], now=NOW).upserts[0].status == "tentative"
    (marked,) = as_user_corrections([_candidate("Busan")], ["Actually, I live in Busan."])
    assert plan_fact_write(marked, [], now=NOW).upserts[0].status == "confirmed"
