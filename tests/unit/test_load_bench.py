"""The load benchmark's questions: every L0 call asks something new, as live turns do, so each call
embeds its query (repeated questions were answered from the query-vector cache and timed L0 without
its largest part)."""

from __future__ import annotations

import re

from tiermem_lab.benchmarks.load import DistinctQuestions

_HANGUL = re.compile("[\uac00-\ud7a3]")


def test_a_run_never_asks_the_same_question_twice() -> None:
    questions = DistinctQuestions(seed=7)
    asked = [questions.next() for _ in range(5_000)]  # more than a 20 s phase of 4 clients asks
    assert len(set(asked)) == len(asked)
    korean = [question for question in asked if _HANGUL.search(question)]
    assert 0.25 < len(korean) / len(asked) < 0.75  # both languages (some English ones name a Korean project)
    assert not any(question.endswith(")") for question in asked)  # no numbered fallback was needed


def test_the_questions_are_the_same_for_a_seed() -> None:
    first, second, other = DistinctQuestions(seed=3), DistinctQuestions(seed=3), DistinctQuestions(seed=4)
    run = [first.next() for _ in range(50)]
    assert run == [second.next() for _ in range(50)]
    assert run != [other.next() for _ in range(50)]
