"""`help()` and IDEs see every client method's real parameters and docstring, in both clients.

Most methods are made from their `calls.py` function (one signature for the wire and both clients);
this checks that what `inspect.signature` and pydoc show is that function's parameters, not a
wrapper's `(*args, **kwargs)`."""

from __future__ import annotations

import inspect
import pydoc
from collections.abc import Callable
from typing import Any

import pytest
from tiermem_client import AsyncTiermemClient, TiermemClient, calls

CLIENTS: list[type[TiermemClient] | type[AsyncTiermemClient]] = [TiermemClient, AsyncTiermemClient]
# Written out by hand rather than made from a call (connection handling, or more than one call).
OWN_METHODS = {"send", "close", "aclose", "wait", "search"}


def public_methods(client: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(client, callable)
        if not name.startswith("_") and not inspect.isclass(member)
    }


def test_both_clients_have_the_same_methods() -> None:
    sync, asynchronous = (set(public_methods(client)) - {"close", "aclose"} for client in CLIENTS)
    assert sync == asynchronous
    assert {"add", "wait", "search", "add_session", "event_status", "facts"} <= sync


@pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.__name__)
def test_every_public_method_shows_its_real_parameters_and_a_docstring(client: type[object]) -> None:
    for name, method in public_methods(client).items():
        parameters = list(inspect.signature(method).parameters.values())
        kinds = {parameter.kind for parameter in parameters}
        assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{client.__name__}.{name}{inspect.signature(method)}"
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{client.__name__}.{name}{inspect.signature(method)}"
        assert parameters[0].name == "self", name
        assert method.__doc__ and len(method.__doc__.strip()) > 20, f"{client.__name__}.{name} has no docstring"
        assert method.__name__ == name and method.__qualname__ == f"{client.__name__}.{name}"
        if name in OWN_METHODS:
            continue
        built = inspect.signature(getattr(calls, name))
        assert list(inspect.signature(method).parameters)[1:] == list(built.parameters), name
        assert method.__doc__ == getattr(calls, name).__doc__


@pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.__name__)
def test_help_shows_search_in_mem0s_order_and_the_result_type(
    client: type[TiermemClient] | type[AsyncTiermemClient],
) -> None:
    shown = pydoc.plain(pydoc.render_doc(client.search))
    assert "search(self, query: str, *, user_id: str, limit: int = 10" in shown
    assert "-> tiermem_client.models.SearchResponse" in shown
    assert "DeprecationWarning" in shown  # the old order is explained where the method is
    added = inspect.signature(client.add)
    assert list(added.parameters)[:4] == ["self", "messages", "user_id", "metadata"]
    assert added.parameters["user_id"].kind is inspect.Parameter.KEYWORD_ONLY
    waited = inspect.signature(client.wait)
    assert list(waited.parameters) == ["self", "event_id", "user_id", "timeout"]


def test_a_bound_method_shows_its_parameters_without_self() -> None:
    client = TiermemClient("http://127.0.0.1:9", "key")
    try:
        assert str(inspect.signature(client.facts)).startswith("(user_id: str, *, token_budget: int | None = None")
        assert str(inspect.signature(client.search)).startswith("(query: str, *, user_id: str")
    finally:
        client.close()
