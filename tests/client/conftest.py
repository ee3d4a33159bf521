"""Fresh virtualenvs holding only the client (built from client/ with the machine's local index)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT_SOURCE = Path(__file__).resolve().parents[2] / "client"
LOCAL_INDEX = "file:///opt/pypi/simple"  # pip reads this directory: nothing is downloaded


def make_client_venv(root: Path, requirement_suffix: str = "") -> Path:
    """A new virtualenv with `pip install client/<suffix>` in it; returns its python."""
    source = root / "client-src"
    shutil.copytree(CLIENT_SOURCE, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--index-url", LOCAL_INDEX, f"{source}{requirement_suffix}"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return python


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the client and its two dependencies."""
    return make_client_venv(tmp_path_factory.mktemp("client-venv"))


@pytest.fixture(scope="session")
def client_venv_with_tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client with its `tokens` extra (tiktoken), for working memory."""
    return make_client_venv(tmp_path_factory.mktemp("client-venv-tokens"), "[tokens]")
