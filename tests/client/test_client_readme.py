"""client/README.md's examples, run as written in a fresh virtualenv holding only the client and its
two dependencies (no tiktoken, no o200k_base file, nothing downloaded) against the real recall API and
pipeline: the minimal add → wait → search, then a turn's context with the approximate token counter."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.integration.test_write_api import ACME_KEY, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "client" / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


async def run_in(python: Path, code: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(python),
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=python.parents[2],  # not the repository: `-c` puts the working directory on sys.path
        env=env,  # no PYTHONPATH, no TIKTOKEN_CACHE_DIR or TIERMEM_O200K_FILE from the test run
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    return process.returncode or 0, out.decode(), err.decode()


async def test_the_readme_examples_run_as_written_in_a_fresh_offline_virtualenv(
    client_venv: Path, write_stack: WriteStack
) -> None:
    first, second = python_blocks()[:2]
    assert "client.add(" in first and "user_id=" in first  # the minimal add comes first
    env = {"PATH": "/usr/bin:/bin", "TIERMEM_RECALL_URL": write_stack.base_url, "TIERMEM_API_KEY": ACME_KEY}
    code, out, err = await run_in(client_venv, first, env)
    assert code == 0, err
    assert "Busan" in out, out + err
    code, out, err = await run_in(client_venv, second, env)
    assert code == 0, err
    assert "ApproximateTokensWarning" in err  # said, not hidden: the counts are estimates here
    assert "You help." in out
