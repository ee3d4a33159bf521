"""The sentences L0 and MCP answer with, pure: why an L0 answer is empty, and a tool argument error."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.recall_api.l0.reasons import ONLY_WORKING_RULES, EmptyAnswer, narrowed_to
from services.recall_api.mcp.arguments import argument_errors


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (EmptyAnswer(found=0, eligible=0, best=None, floor=0.6), "no memory for this user"),
        (
            EmptyAnswer(found=0, eligible=0, best=None, floor=0.6, narrowed=narrowed_to("group", "bot-1")),
            "no memory for this user in group conversations for agent bot-1",
        ),
        (EmptyAnswer(found=2, eligible=0, best=None, floor=0.6), ONLY_WORKING_RULES),
        (
            EmptyAnswer(found=3, eligible=3, best=0.4512, floor=0.6),
            "nothing scored above the floor (top 0.45 < 0.60)",
        ),
        (
            EmptyAnswer(found=3, eligible=3, best=0.7, floor=0.6, best_cut="about someone other than Priya"),
            "every candidate cut: about someone other than Priya",
        ),
        (
            EmptyAnswer(found=1, eligible=1, best=0.2, floor=0.3, deadline_ms=150.0),
            "deadline: the query embedding missed the 150 ms L0 deadline, keywords alone: "
            "nothing scored above the floor (top 0.20 < 0.30)",
        ),
    ],
)
def test_an_empty_answer_says_why(answer: EmptyAnswer, said: str) -> None:
    assert answer.reason() == said


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, Field(min_length=1, max_length=5)]
    limit: Annotated[int, Field(ge=1, le=100)] = 10
    kind: Literal["episode", "fact"] = "episode"
    tags: Annotated[list[str], Field(min_length=2)] = ["a", "b"]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"query": ""}, "query: must not be empty"),
        ({}, "query: is required"),
        ({"query": "toolong"}, "query: must be at most 5 characters"),
        ({"query": "x", "limit": 0}, "limit: must be at least 1"),
        ({"query": "x", "limit": "many"}, "limit: must be a whole number"),
        ({"query": "x", "kind": "all"}, "kind: must be one of 'episode' or 'fact'"),
        ({"query": "x", "tags": ["a"]}, "tags: must hold at least 2 items"),
        ({"query": "x", "colour": "red"}, "colour: is not a known field"),
        ({"query": "", "limit": 0}, "query: must not be empty; limit: must be at least 1"),
    ],
)
def test_argument_errors_are_sentences_without_the_input_or_a_url(arguments: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError) as raised:
        _Args.model_validate(arguments)
    text = argument_errors(raised.value.errors())
    assert text == said
    assert "pydantic" not in text
