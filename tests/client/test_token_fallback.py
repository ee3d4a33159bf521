"""Token counting in a fresh, offline install: `load_counter()` is exact when tiktoken and the
o200k_base file are there and otherwise falls back to `ApproximateCounter`, whose stated property is
checked here against the real tokenizer (the recall API's, read from the copy litellm's wheel carries)."""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import pytest
from tiermem_client import ApproximateCounter, ApproximateTokensWarning, O200kCounter, load_counter

from services.common.domain.tokens import bundled_encoding_path

REPO = Path(__file__).resolve().parents[2]
EXACT = O200kCounter.load(bundled_encoding_path("o200k_base"))
APPROXIMATE = ApproximateCounter()
HARD_CASES = [
    "| what | result | command |\n|---|---|---|\n| LoCoMo dev | 0.61 | `tiermem eval locomo` |",
    "1234567890" * 5,
    "0x3f9a 0x88ff 2026-11-02T09:30:00+09:00",
    "😀😀😀 🎉 ok",
    "東京都の天気は晴れです。",
    "Привет, как дела? Всё хорошо.",
    "ㅇㅋ 고마워 ㅋㅋㅋ",
    "https://example.com/a/b?c=d&e=f",
    "aaaa bbbb cccc dddd",
]


def prose() -> list[str]:
    """Every turn of the example conversations (English and Korean)."""
    examples = REPO / "scripts" / "examples"
    sessions = json.loads((examples / "sessions-en.json").read_text(encoding="utf-8"))
    lines = (examples / "sessions-ko.jsonl").read_text(encoding="utf-8").splitlines()
    sessions += [json.loads(line) for line in lines if line.strip()]
    return [message["content"] for session in sessions for message in session["messages"]]


def code() -> list[str]:
    """The client's own source, paragraph by paragraph: dense with short words and symbols."""
    sources = sorted((REPO / "client" / "tiermem_client").rglob("*.py"))
    return [part for path in sources for part in path.read_text(encoding="utf-8").split("\n\n") if part.strip()]


def test_the_approximation_never_under_counts_prose_and_over_counts_it_by_about_half() -> None:
    texts = prose()
    assert len(texts) >= 20
    for text in texts:
        assert APPROXIMATE.count_tokens(text) >= EXACT.count_tokens(text), text
    ratio = sum(map(APPROXIMATE.count_tokens, texts)) / sum(map(EXACT.count_tokens, texts))
    assert 1.0 < ratio < 2.0


def test_on_code_tables_and_other_scripts_it_falls_short_by_at_most_15_percent() -> None:
    for text in [*code(), *HARD_CASES]:
        assert APPROXIMATE.count_tokens(text) >= 0.85 * EXACT.count_tokens(text), text
    assert APPROXIMATE.count_tokens("") == 0


def test_load_counter_is_exact_with_the_file_and_approximate_without(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("TIERMEM_O200K_FILE", "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.warns(ApproximateTokensWarning, match="TIERMEM_O200K_FILE"):
        fallback = load_counter()
    assert isinstance(fallback, ApproximateCounter) and not fallback.exact
    monkeypatch.setenv("TIERMEM_O200K_FILE", str(bundled_encoding_path("o200k_base")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exact = load_counter()
    assert isinstance(exact, O200kCounter) and exact.count_tokens("보고서는 표부터") == EXACT.count_tokens(
        "보고서는 표부터"
    )


def test_the_tokens_extra_without_the_file_counts_approximately_and_exactly_with_it(
    client_venv_with_tokens: Path,
) -> None:
    probe = "from tiermem_client import load_counter; c = load_counter(); print(type(c).__name__, c.count_tokens('ok'))"
    bare = subprocess.run(
        [str(client_venv_with_tokens), "-c", probe],
        env={"PATH": "/usr/bin:/bin"},
        cwd=client_venv_with_tokens.parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.split() == ["ApproximateCounter", "1"] and "ApproximateTokensWarning" in bare.stderr
    env = {"PATH": "/usr/bin:/bin", "TIERMEM_O200K_FILE": str(bundled_encoding_path("o200k_base"))}
    with_file = subprocess.run(
        [str(client_venv_with_tokens), "-c", probe],
        env=env,
        cwd=client_venv_with_tokens.parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert with_file.returncode == 0, with_file.stderr
    assert with_file.stdout.split() == ["O200kCounter", "1"] and not with_file.stderr
