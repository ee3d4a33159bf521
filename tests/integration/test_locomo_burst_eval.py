"""`tiermem eval locomo --form burst` end to end: the real CLI in a subprocess splits a small LoCoMo
sample into one-sentence messages with their times, ingests them into the embedded stack (nats-server,
FalkorDB, Qdrant Edge, the consolidation services, the recall API) with the episodic-summarizer's burst
merging set from the environment, and asks its questions. The report must say which form ran, how
many messages were sent, the burst constants and the merging setting the consolidation ran with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiermem_lab.evaluation.locomo_burst import SECONDS_BETWEEN_MESSAGES, SECONDS_BETWEEN_TURNS

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

TIERMEM = [sys.executable, "-m", "services.cli"]


def _turn(speaker: str, dia_id: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


SAMPLE: dict[str, Any] = {
    "sample_id": "burst-conv",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "10:00 am on 8 May, 2023",
        "session_1": [
            _turn("Ann", "D1:1", "Guess what! I adopted a grey cat named Pixel yesterday. She is tiny."),
            _turn("Bo", "D1:2", "Congratulations! How is Pixel settling in?"),
        ],
        "session_2_date_time": "6:00 pm on 20 June, 2023",
        "session_2": [
            _turn("Bo", "D2:1", "I ran my first marathon in Berlin last Sunday."),
            _turn("Ann", "D2:2", "Wow! How long did it take?\nFour hours?"),
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {"question": "Where did Bo run a marathon?", "answer": "Berlin", "evidence": ["D2:1"], "category": 4},
    ],
}
MESSAGES = 3 + 2 + 1 + 3  # each turn's sentences and lines


def test_the_burst_form_runs_through_the_cli_and_the_report_says_how(tmp_path: Path) -> None:
    data = tmp_path / "locomo-tiny.json"
    data.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    out = tmp_path / "report.json"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TIERMEM_DATA_DIR": str(tmp_path / "data"),
        "TIERMEM_BURST_GAP_SECONDS": "120",
    }
    env.pop("TIERMEM_LLM__MODEL", None)  # consolidation stays offline
    command = [*TIERMEM, "eval", "locomo", str(data), "--form", "burst", "--k", "5", "--out", str(out)]
    command += ["--work-dir", str(tmp_path / "work")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr

    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["form"] == "burst"
    assert report["messages"] == MESSAGES
    assert report["burst"]["seconds_between_messages"] == SECONDS_BETWEEN_MESSAGES
    assert report["burst"]["seconds_between_turns"] == SECONDS_BETWEEN_TURNS
    assert report["settings"]["ingest"]["burst_gap_seconds"] == 120
    assert report["published"] == {"sessions": 2, "duplicate": 0}
    assert report["stored"]["episodes"] == 2
    assert report["questions"]["total"] == 2
    # Two sessions and k=5: L1 returns both sessions' episodes, so both evidence sessions are found.
    assert report["session_recall"]["tiermem L1"]["overall"]["5"] == 1.0
