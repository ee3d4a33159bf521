"""The product ships the product: the runtime wheel, and the wheel the image's build stage makes, hold
no evaluation or benchmark code; the lab (lab/tiermem_lab) is its own distribution. Built for real,
offline: the dev virtualenv's build backend (hatchling), without build isolation."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "infra" / "Dockerfile"
LAB_PACKAGE = ROOT / "lab" / "tiermem_lab"
# Where the lab's code lives now and where it lived inside services before it had a package of its own.
LAB_PATHS = ("tiermem_lab/", "services/cli/evaluation/", "services/cli/benchmarks/", "services/recall_api/seeding.py")
# The L0 decision model's coefficients are data, not code: the wheel must carry them.
PRODUCT_FILES = (
    "services/cli/main.py",
    "services/recall_api/app.py",
    "contracts/events.py",
    "services/recall_api/l0/decision_coefficients.json",
)


def _lab_modules() -> list[str]:
    """The lab's modules by their path inside the lab package (evaluation/locomo.py, ...): found in a
    wheel under any parent, they are the lab's code however it got there."""
    skipped = {"__init__.py", "cli.py"}
    return sorted(str(path.relative_to(LAB_PACKAGE)) for path in LAB_PACKAGE.rglob("*.py") if path.name not in skipped)


def _lab_files(names: list[str]) -> list[str]:
    modules = _lab_modules()
    return [
        name
        for name in names
        if any(part in name for part in LAB_PATHS) or any(name.endswith(f"/{module}") for module in modules)
    ]


def _wheel_files(wheel_dir: Path) -> tuple[list[str], str]:
    (wheel,) = wheel_dir.glob("tiermem-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = (name for name in names if name.endswith(".dist-info/entry_points.txt"))
        return names, archive.read(entry_points).decode()


def _assert_product_only(names: list[str], entry_points: str) -> None:
    assert set(PRODUCT_FILES) <= set(names), "the wheel must hold the product"
    assert not _lab_files(names), f"evaluation or benchmark code in the runtime wheel: {_lab_files(names)}"
    assert "tiermem = services.cli.main:main" in entry_points
    assert "tiermem.cli" not in entry_points, "the runtime wheel must not provide the lab's commands"


def test_the_lab_modules_are_known() -> None:
    modules = _lab_modules()
    assert {"evaluation/locomo.py", "benchmarks/scale.py", "seeding.py"} <= set(modules)
    assert _lab_files(["services/cli/evaluation/locomo.py", "x/benchmarks/scale.py", "services/cli/main.py"]) == [
        "services/cli/evaluation/locomo.py",
        "x/benchmarks/scale.py",
    ]


def test_the_runtime_wheel_holds_the_product_and_no_lab_code(tmp_path: Path) -> None:
    uv = Path(sys.executable).with_name("uv")
    build = [str(uv), "build", "--python", sys.executable, "--wheel", "--offline", "--no-build-isolation"]
    subprocess.run([*build, "--out-dir", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    _assert_product_only(*_wheel_files(tmp_path))


@dataclass(frozen=True)
class Copy:
    stage: str
    sources: tuple[str, ...]
    destination: str
    from_stage: str | None


def _copies() -> list[Copy]:
    """The Dockerfile's COPY lines, by stage (continuation lines joined)."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    copies: list[Copy] = []
    stage = ""
    for line in text.splitlines():
        if line.split(maxsplit=1)[:1] not in (["FROM"], ["COPY"]):
            continue
        words = shlex.split(line, comments=True)
        if words[0].upper() == "FROM":
            stage = words[-1] if len(words) >= 4 and words[-2].upper() == "AS" else words[1]
        elif words[0].upper() == "COPY":
            flags = [word for word in words[1:] if word.startswith("--")]
            paths = [word for word in words[1:] if not word.startswith("--")]
            from_stage = next((flag.split("=", 1)[1] for flag in flags if flag.startswith("--from=")), None)
            copies.append(Copy(stage, tuple(paths[:-1]), paths[-1], from_stage))
    return copies


def test_no_image_stage_copies_the_lab_from_the_repository() -> None:
    from_context = [source for copy in _copies() if copy.from_stage is None for source in copy.sources]
    assert "services" in from_context, "the Dockerfile's COPY lines must be read"
    assert not [source for source in from_context if source in {".", "./"} or source.startswith(("lab", "./lab"))]


def test_the_image_build_stage_makes_a_wheel_without_lab_code(tmp_path: Path) -> None:
    """The build stage replayed: its COPY lines into a fresh directory (its WORKDIR), then its wheel
    command, which is what the runtime stage installs."""
    context = tmp_path / "build"
    context.mkdir()
    for copy in _copies():
        if copy.stage != "build" or copy.from_stage is not None or copy.destination.startswith("/"):
            continue  # /opt/smoke/... is the smoke script, not part of the wheel
        for source in copy.sources:
            origin = ROOT / source
            target = context / copy.destination
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
    dist = tmp_path / "dist"
    # The Dockerfile's own wheel command, with the build stage's Python swapped for this one.
    wheel = [sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*wheel, "--wheel-dir", str(dist), "."],
        cwd=context,
        check=True,
        capture_output=True,
    )
    _assert_product_only(*_wheel_files(dist))
