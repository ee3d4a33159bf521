"""`tiermem eval product` end to end on a slice: the real CLI in a subprocess starts the embedded stack
(nats-server, FalkorDB, Qdrant Edge, the consolidation services, the recall API), ingests one held-out
user's chat sessions and asks two answerable and two not-in-memory questions through L0, L1 and the
baselines. The report must have the documented shape and name only that user's sessions; bad
input ends with one error line and exit 2, before any server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiermem_lab.evaluation.product_run import BASELINE_SYSTEMS
from tiermem_lab.evaluation.product_set import DEFAULT_PRODUCT_SET, load_product_set

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TIERMEM = [sys.executable, "-m", "services.cli"]
USER = "en-leo"
MEASURES = {
    "questions",
    "answerable",
    "not_in_memory",
    "l1_recall_at_1",
    "l1_recall_at_5",
    "baselines_recall_at_1",
    "baselines_recall_at_5",
    "l0_recall",
    "l0_contamination",
    "l0_abstention",
    "l0_topic_injected",
    "stale_injected",
    "empty_answers",
    "empty_without_reason",
    "items_mean",
}


def _run(*args: str, tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    temp = tmp_path / "tmp"  # where a run without --work-dir puts its stack
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TIERMEM_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(temp)}
    return subprocess.run(
        [*TIERMEM, "eval", "product", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_slice_of_the_held_out_split_reports_every_measure(tmp_path: Path) -> None:
    result = _run(
        "--split", "test", "--user", USER, "--questions", "2", "--json", "--work-dir", str(tmp_path / "work"),
        tmp_path=tmp_path,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    [user] = [u for u in load_product_set().users if u.user_id == USER]
    own = {s.id for s in user.sessions}

    assert report["split"] == "test" and report["form"] == "chat"
    assert [u["user_id"] for u in report["users"]] == [USER]
    assert report["published"]["sessions"] == len(user.sessions)
    questions = report["per_question"]
    assert [q["answerable"] for q in questions].count(True) == 2
    assert [q["answerable"] for q in questions].count(False) == 2

    summary = report["summary"]
    for group in (summary["all"], summary["by_split"]["test"], summary["by_language"]["en"]):
        assert set(group) == MEASURES
        assert set(group["baselines_recall_at_5"]) == set(group["baselines_recall_at_1"]) == set(BASELINE_SYSTEMS)
    assert set(summary["by_split"]) == {"test"} and set(summary["by_split_language"]) == {"test/en"}
    assert summary["by_kind"]["not_in_memory"]["not_in_memory"] == 2
    assert summary["all"]["questions"] == 4

    for question in questions:
        assert set(question["sessions"]) <= own
        assert set(question["l1_top5"]) <= own
        assert all(set(item) <= own for item in question["l0"]["injected"])
        assert set(question["baselines_top5"]) == set(BASELINE_SYSTEMS)
        assert all(len(r) == 5 and set(r) <= own for r in question["baselines_top5"].values())
    # L1 found episodes of this user: the questions were asked of the ingested, consolidated sessions.
    assert any(q["l1_top5"] for q in questions), questions
    held_out = [c for c in report["targets"] if c["held_out"]]
    assert {c["target"] for c in held_out} == {
        "L0 recall (answerable)",
        "L0 abstention (not in memory)",
        "empty answers without a reason",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--split", "train"), "--split must be dev, test or all"),
        (("--user", "nobody"), "no user nobody"),
        (("--form", "voice"), "--form must be 'chat' or 'group'"),
    ],
)
def test_bad_input_ends_with_one_error_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = _run(*args, tmp_path=tmp_path, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "tmp").glob("tiermem-product-*")), "a stack was started for bad input"


def test_a_malformed_set_is_refused_with_where(tmp_path: Path) -> None:
    broken = tmp_path / "set.json"
    data = json.loads(DEFAULT_PRODUCT_SET.read_text(encoding="utf-8"))
    data["users"][0]["questions"][0]["evidence"] = ["no-such-session"]
    broken.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    result = _run("--set", str(broken), tmp_path=tmp_path, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no session no-such-session" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
