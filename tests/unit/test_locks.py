"""The lock files agree: the production lock (the image) pins a subset of the development lock at the
same versions with hashes, and carries no test, lint or plotting tool."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")
DEV_ONLY = {"pytest", "mypy", "ruff", "import-linter", "hypothesis", "matplotlib"}


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if match := _PIN.match(line):
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_production_lock_is_the_runtime_subset_of_the_dev_lock() -> None:
    dev, prod = _pins("requirements.lock"), _pins("requirements-prod.lock")
    assert len(prod) > 50, "the production lock pins the whole runtime closure"
    assert {name: version for name, version in prod.items() if dev.get(name) != version} == {}
    assert not DEV_ONLY & set(prod), "test and lint tools stay out of the image"
    assert set(dev) >= DEV_ONLY


def test_every_pin_carries_a_hash() -> None:
    for name in ("requirements.lock", "requirements-prod.lock", "requirements-bootstrap.lock"):
        text = (ROOT / name).read_text(encoding="utf-8")
        pins = len(re.findall(r"^[A-Za-z0-9_.\-]+==", text, flags=re.MULTILINE))
        assert pins and text.count("--hash=sha256:") >= pins, name


def test_the_image_installs_the_production_lock() -> None:
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text(encoding="utf-8")
    assert "-r requirements-prod.lock" in dockerfile
    assert "-r requirements.lock" not in dockerfile


def test_litellm_is_pinned_to_a_known_good_release() -> None:
    version = _pins("requirements-prod.lock")["litellm"]
    assert version not in {"1.82.7", "1.82.8"} and not version.startswith("1.107.")
