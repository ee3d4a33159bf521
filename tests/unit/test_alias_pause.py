"""L1's alias expansion stops asking a graph that failed, for a while: a graph that is down must not add
its whole timeout to every search."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.recall_api.retrieval.alias_expansion import AliasExpander


class _HangingGraph:
    """Resources whose graph never answers (pure stand-in: only `graph()` and `keywords()` are read)."""

    def __init__(self) -> None:
        self.asked = 0

    def keywords(self) -> Any:
        class _Keywords:
            @staticmethod
            def tokens(text: str) -> list[str]:
                return text.casefold().split()

        return _Keywords()

    async def graph(self) -> Any:
        self.asked += 1
        await asyncio.sleep(10)


def test_a_graph_that_times_out_is_not_asked_again_until_the_pause_ends() -> None:
    async def scenario() -> tuple[int, list[list[str]], float]:
        resources = _HangingGraph()
        expander = AliasExpander(cast(Resources, resources), timeout_s=0.05, pause_after_failure_s=0.5)
        owner = Owner("acme", "minji")
        answers = [await expander.extra_names(owner, "what did Jonny say", "private")]
        loop = asyncio.get_running_loop()
        started = loop.time()
        answers += [await expander.extra_names(owner, "what did Jonny say", "private") for _ in range(5)]
        paused_calls_s = loop.time() - started
        asked_while_paused = resources.asked
        await asyncio.sleep(0.6)
        answers.append(await expander.extra_names(owner, "what did Jonny say", "private"))
        return resources.asked - asked_while_paused, answers, paused_calls_s

    asked_after_pause, answers, paused_calls_s = asyncio.run(scenario())
    assert answers == [[]] * 7
    assert paused_calls_s < 0.05  # five searches during the pause waited for no graph
    assert asked_after_pause == 1  # once the pause is over, the graph is asked again
