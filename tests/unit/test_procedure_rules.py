"""Procedural memory in the write policy: a rule is a `procedure_<topic>` fact, one current per topic."""

from __future__ import annotations

from services.common.domain.fact_attributes import attribute_spec
from tests.unit.test_fact_policy import Store, candidate


def test_a_rule_attribute_is_single_valued_and_other_unknown_attributes_are_not() -> None:
    assert attribute_spec("procedure_보고서").single_valued is True
    assert attribute_spec("procedure_answer_language").volatility == "low"
    assert attribute_spec("favourite_report").single_valued is False


def test_a_new_rule_on_the_same_topic_supersedes_the_old_and_other_topics_stay() -> None:
    store = Store()
    table = "보고서는 표부터 보여줘."
    summary = "보고서는 요약부터 보여줘."
    korean = "Always answer in Korean."
    first = store.write(candidate(table, day=0, subject="procedure", attribute="procedure_보고서", text=table))
    assert first.outcome == "created"
    store.write(candidate(korean, day=1, subject="procedure", attribute="procedure_answer_language", text=korean))
    replaced = store.write(candidate(summary, day=2, subject="procedure", attribute="procedure_보고서", text=summary))
    assert replaced.outcome == "superseding"
    assert [fact.value for fact in store.current("procedure_보고서")] == [summary]
    assert store.by_value(table).status == "superseded"
    assert store.by_value(table).superseded_by == store.by_value(summary).fact_id
    assert [fact.value for fact in store.current("procedure_answer_language")] == [korean]
