"""`tiermem eval` and `tiermem bench` come from the lab (lab/tiermem_lab), found through its
`tiermem.cli` entry points: in the dev virtualenv they are all there; in an environment without the
lab (a virtualenv holding everything the dev one does except the lab) each answers with one line
saying how to install it, exit 2, and the rest of the command still works."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.lab import INSTALL_HINT, MISSING_EXIT_CODE, missing_lab_message
from services.cli.main import app

EVAL_COMMANDS = ("locomo", "scenarios", "extraction", "product")
BENCH_COMMANDS = ("recall", "ingest", "load", "maintenance", "scale", "telemetry")


@pytest.mark.parametrize(("group", "commands"), [("eval", EVAL_COMMANDS), ("bench", BENCH_COMMANDS)])
def test_the_installed_lab_provides_every_command(group: str, commands: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [group, "--help"])
    assert result.exit_code == 0, result.output
    for command in commands:
        assert f" {command} " in result.output, f"`tiermem {group} {command}` is missing: {result.output}"


@pytest.fixture(scope="module")
def python_without_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv whose site-packages links every entry of the dev one except the lab's."""
    root = tmp_path_factory.mktemp("no-lab")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "tiermem_lab" not in entry.name:
            (target / entry.name).symlink_to(entry)
    return python


def _run(python: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(python), *arguments], capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False
    )


def test_the_environment_without_the_lab_really_has_no_lab(python_without_lab: Path, tmp_path: Path) -> None:
    probe = "import importlib.util as u, importlib.metadata as m; "
    probe += "print(u.find_spec('tiermem_lab'), len(m.entry_points(group='tiermem.cli')), u.find_spec('services'))"
    result = _run(python_without_lab, "-c", probe, cwd=tmp_path)
    lab, entry_points, services = result.stdout.split(" ", 2)
    assert (lab, entry_points) == ("None", "0"), result.stderr
    assert services != "None", "the product must still be importable there"


@pytest.mark.parametrize(
    ("arguments", "name", "what"),
    [
        (["eval", "locomo", "conversation.json", "--work-dir", "work"], "eval", "evaluation"),
        (["eval", "--help"], "eval", "evaluation"),
        (["eval"], "eval", "evaluation"),
        (["bench", "scale", "--scale", "0.1"], "bench", "benchmarks"),
    ],
)
def test_without_the_lab_each_lab_command_says_how_to_install_it(
    python_without_lab: Path, tmp_path: Path, arguments: list[str], name: str, what: str
) -> None:
    result = _run(python_without_lab, "-m", "services.cli", *arguments, cwd=tmp_path)
    assert result.returncode == MISSING_EXIT_CODE
    assert result.stderr.splitlines() == [missing_lab_message(name, what)]
    assert INSTALL_HINT in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "work").exists()


def test_without_the_lab_the_rest_of_the_command_works(python_without_lab: Path, tmp_path: Path) -> None:
    result = _run(python_without_lab, "-m", "services.cli", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for command in ("up", "serve", "recall", "eval", "bench"):
        assert f" {command} " in result.stdout
