"""Where the client connects when not told: the variables the `tiermem` CLI reads."""

from __future__ import annotations

import warnings

import pytest
from tiermem_client import DEFAULT_URL, AsyncTiermemClient, TiermemClient, TiermemError


@pytest.fixture(autouse=True)
def no_tiermem_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("TIERMEM_RECALL_URL", "TIERMEM_URL", "TIERMEM_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def test_the_client_reads_the_clis_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERMEM_RECALL_URL", "http://recall.example:9000")
    monkeypatch.setenv("TIERMEM_API_KEY", "key-from-env")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client = TiermemClient()
    with client:
        assert str(client._http.base_url) == "http://recall.example:9000"
        assert client._http.headers["Authorization"] == "Bearer key-from-env"
    monkeypatch.setenv("TIERMEM_URL", "http://old.example:1")  # the new name wins, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert str(AsyncTiermemClient()._http.base_url) == "http://recall.example:9000"


def test_the_old_variable_still_works_with_a_deprecation_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERMEM_URL", "http://old.example:1")
    with pytest.warns(DeprecationWarning, match="set TIERMEM_RECALL_URL"), TiermemClient(api_key="k") as client:
        assert str(client._http.base_url) == "http://old.example:1"


def test_the_defaults_and_a_missing_key() -> None:
    with TiermemClient(api_key="k") as client:
        assert str(client._http.base_url) == DEFAULT_URL
    with pytest.raises(TiermemError, match="TIERMEM_API_KEY"):
        TiermemClient()
