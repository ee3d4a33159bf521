"""The shape of the code, checked: small modules and functions (the complexity cap is ruff's C90,
the room layering is import-linter's). A module that grows past the limit is split by
responsibility, not given an exception here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
CHECKED = ("services", "contracts", "scripts", "lab")  # lab/: the evaluation and benchmarks package


def _python_files(*tops: str) -> list[Path]:
    return sorted(path for top in tops for path in (ROOT / top).rglob("*.py") if "__pycache__" not in path.parts)


def _long_functions(source: str, label: str) -> list[str]:
    tree = ast.parse(source, filename=label)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{label}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_checks_see_the_code() -> None:
    files = _python_files(*CHECKED)
    assert len(files) > 50, "the shape checks must look at the real tree"
    assert any(path.name == "broker.py" for path in files)


@pytest.mark.parametrize("top", ["services", "contracts", "lab"])
def test_no_module_over_the_line_limit(top: str) -> None:
    too_long = [
        f"{path.relative_to(ROOT)} ({n} lines)"
        for path in _python_files(top)
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: split them by responsibility: {too_long}"


def test_no_function_over_the_line_limit() -> None:
    too_long = [
        finding
        for path in _python_files(*CHECKED)
        for finding in _long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_the_function_check_catches_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"def short() -> None:\n    pass\n\n\nasync def too_long() -> None:\n{body}\n"
    assert _long_functions(source, "probe.py") == [f"probe.py:5 too_long ({MAX_FUNCTION_LINES + 1} lines)"]
