"""The Memory Context section's token count piece by piece (memory_section.fit_section) is the count of
the whole section, for every bundled encoding and any memory text; and the cached counter counts the
same as the plain one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.domain.tokens import TokenCounter
from services.recall_api.retrieval import memory_section

ENCODINGS = ("o200k_base", "cl100k_base")

# Characters where pre-tokenizers decide boundaries: line breaks of every kind (sanitised to spaces),
# spaces, the line's own "-", the fence's backtick, "/" (which cl100k/o200k join to a line break),
# apostrophe contractions, digits, Hangul, emoji, combining marks.
_TRICKY = st.sampled_from(
    [*"\n\r\t \u2028\u0085-`/)('sdtm0123456789.,:;!?#~<>|", "한", "빛", "🙂", "\u0301", "A", "b", "Z", "é"]
)
memory_text = st.one_of(st.text(max_size=80), st.lists(_TRICKY, max_size=60).map("".join))
provenance = st.one_of(st.none(), st.just("2026-05-02"), st.text(max_size=12))


@pytest.fixture(scope="module", params=ENCODINGS)
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return TokenCounter(request.param)


@given(st.lists(st.tuples(memory_text, provenance), max_size=6))
@settings(max_examples=400, deadline=None, database=None)
def test_the_pieces_count_as_the_whole_section(counter: TokenCounter, items: list[tuple[str, str | None]]) -> None:
    lines = [memory_section.render_item(text, date) for text, date in items]
    fitted = memory_section.fit_section(lines, token_budget=10**6, count_tokens=counter.count_tokens)
    if not lines:
        assert fitted.text == ""
        return
    assert fitted.included == list(range(len(lines)))
    assert fitted.text == memory_section.compose_section(lines)
    assert fitted.tokens == counter.count_tokens(fitted.text)


@given(st.lists(st.tuples(memory_text, provenance), min_size=1, max_size=6), st.integers(min_value=1, max_value=400))
@settings(max_examples=300, deadline=None, database=None)
def test_a_fitted_section_is_within_its_budget_and_counted_right(
    counter: TokenCounter, items: list[tuple[str, str | None]], budget: int
) -> None:
    lines = [memory_section.render_item(text, date) for text, date in items]
    fitted = memory_section.fit_section(lines, token_budget=budget, count_tokens=counter.count_tokens_cached)
    if fitted.included:
        assert counter.count_tokens(fitted.text) == fitted.tokens <= budget
        assert fitted.text == memory_section.compose_section([lines[i] for i in fitted.included])
    else:
        assert (fitted.text, fitted.tokens) == ("", 0)


def test_the_cached_count_is_the_count(counter: TokenCounter) -> None:
    texts = ["- Minji moved to Busan (2026-05-02)\n", "- 한빛페이 결제 모듈 🙂\n", "x" * 2_500]
    for _ in range(2):  # the second round answers from the cache (the long text is never kept)
        assert [counter.count_tokens_cached(t) for t in texts] == [counter.count_tokens(t) for t in texts]


def test_a_line_that_is_not_a_rendered_memory_is_refused(counter: TokenCounter) -> None:
    for line in ["no dash", "- two\nlines", "- a\u2028b"]:
        with pytest.raises(ValueError, match="not a memory line"):
            memory_section.fit_section([line], token_budget=100, count_tokens=counter.count_tokens)
