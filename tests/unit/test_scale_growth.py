"""The growth benchmark's two histories (lab/tiermem_lab/benchmarks/scale_growth.py): which topic each
session is about and which topics its questions ask about, the property that makes the
one-matching-session curve isolate history growth."""

from __future__ import annotations

import random

from tiermem_lab.benchmarks.recall import BaseSentence, base_sentences
from tiermem_lab.benchmarks.scale_growth import one_matching_session, recurring_topics


def _topic(base: BaseSentence) -> tuple[str, str]:
    return base.project, base.component


def test_each_question_of_the_one_match_history_has_exactly_one_session_at_every_size() -> None:
    bases = base_sentences(500, random.Random(14))
    history = one_matching_session(bases, 10)
    asked = history.asked_about(1000)
    assert len(asked) == 10 and len({_topic(base) for base in asked}) == 10
    assert all(history.asked_about(size) == asked for size in (10, 100))
    sessions = [history.base_of(number) for number in range(1000)]
    for probe in asked:
        assert [_topic(base) for base in sessions].count(_topic(probe)) == 1
    assert sessions[:10] == list(asked)  # every probe is written by the smallest size
    # The rest of the history is other topics that share a probe's project or component word: look-alikes.
    probe_projects = {base.project for base in asked}
    assert sum(1 for base in sessions[10:] if base.project in probe_projects) > 100


def test_the_recurring_history_asks_about_what_it_has_written_and_its_topics_gain_sessions() -> None:
    bases = base_sentences(500, random.Random(14))
    history = recurring_topics(bases)
    assert list(history.asked_about(10)) == [history.base_of(n) for n in range(10)]
    assert len(history.asked_about(1000)) == 500
    topics = [_topic(history.base_of(number)) for number in range(1000)]
    assert max(topics.count(topic) for topic in set(topics)) >= 5
