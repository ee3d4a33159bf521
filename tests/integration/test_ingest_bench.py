"""`tiermem bench ingest` as a user runs it (the CLI in its own process): a LoCoMo file's sessions
(`--locomo`), or synthetic ones, go through the real pipeline (nats-server, FalkorDB, Qdrant Edge, the
consolidation services) and the report counts what was stored and timed. A smoke test: the ratio
itself is a benchmark, not an assertion. Options that would time nothing (no sessions, or a work dir
whose stack holds them already) exit 2 with the reason before any server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TIERMEM = [sys.executable, "-m", "services.cli", "bench", "ingest"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _session(*lines: tuple[str, str]) -> list[dict[str, str]]:
    return [{"speaker": speaker, "dia_id": f"D:{n}", "text": text} for n, (speaker, text) in enumerate(lines)]


SAMPLE: dict[str, Any] = {
    "sample_id": "bench-conv",
    "conversation": {
        "speaker_a": "Mina",
        "speaker_b": "Joon",
        "session_1_date_time": "10:00 am on 8 May, 2023",
        "session_1": _session(
            ("Mina", "I adopted a grey cat named Pixel yesterday."),
            ("Joon", "How is Pixel settling in?"),
            ("Mina", "She sleeps on my keyboard all day long."),
        ),
        "session_2_date_time": "6:00 pm on 20 June, 2023",
        "session_2": _session(
            ("Joon", "I ran my first marathon in Berlin last Sunday."),
            ("Mina", "How long did the marathon take you?"),
            ("Joon", "Four hours and ten minutes, my legs still hurt."),
        ),
        "session_3_date_time": "9:00 am on 2 August, 2023",
        "session_3": _session(
            ("Mina", "I started learning the cello at a music school in Lyon."),
            ("Joon", "What made you pick the cello?"),
            ("Mina", "My grandmother played the cello when I was little."),
        ),
    },
    "qa": [],
}


@pytest.mark.parametrize(
    ("arguments", "source", "sessions", "users"),
    [
        (["--locomo", "{conversation}", "--form", "group"], "conv.json's sessions (group form)", 3, 1),
        (["--sessions", "2", "--users", "2", "--shape", "locomo"], "synthetic sessions (locomo shape)", 2, 2),
    ],
    ids=["locomo-file-group-form", "synthetic-locomo-shape"],
)
def test_sessions_go_through_the_pipeline_and_are_counted(
    tmp_path: Path, arguments: list[str], source: str, sessions: int, users: int
) -> None:
    conversation, out = tmp_path / "conv.json", tmp_path / "ingest.json"
    conversation.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    command = [*TIERMEM, *(argument.format(conversation=conversation) for argument in arguments), "--out", str(out)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=800, env=ENV, check=False)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert source in " ".join(finished.stdout.split())  # rich wraps the table's title

    report = json.loads(out.read_text(encoding="utf-8"))
    assert (report["sessions"], report["users"], report["source"]) == (sessions, users, source)
    if "--locomo" in arguments:
        assert report["turns"] == 9
    assert report["stored"]["episodes"] == sessions  # one episode per session: none lost, none trivial
    assert report["stored"]["passages"] >= sessions
    assert 0 < report["distinct_texts"] <= report["embedded_texts"]
    assert report["end_to_end_s"] > 0 and report["embed_only_s"] > 0 and report["sessions_per_s"] > 0
    assert report["ratio_end_to_end_to_embed_only"] > 0


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["--locomo", "{missing}"], "No such file"),
        (["--locomo", "{broken}"], "invalid JSON"),
        (["--locomo", "{empty}"], "no sessions with turns"),
        (["--locomo", "{broken}", "--form", "voice"], "--form must be 'chat' or 'group'"),
        (["--shape", "long"], "--shape must be 'short' or 'locomo'"),
        (["--form", "group"], "--form applies to --locomo sessions only"),
        (["--work-dir", "{used}"], "is not empty: give a new or empty directory"),
    ],
)
def test_options_that_would_time_nothing_exit_2_with_the_reason(
    tmp_path: Path, arguments: list[str], reason: str
) -> None:
    (tmp_path / "broken.json").write_text('[{"sample_id": ', encoding="utf-8")
    empty = {**SAMPLE, "conversation": {"speaker_a": "Mina", "speaker_b": "Joon"}}
    (tmp_path / "empty.json").write_text(json.dumps([empty]), encoding="utf-8")
    paths = {name: str(tmp_path / f"{name}.json") for name in ("missing", "broken", "empty")}
    (tmp_path / "used" / "nats").mkdir(parents=True)  # a stack ran here: a re-run would time duplicates only
    paths["used"] = str(tmp_path / "used")
    command = [*TIERMEM, *(argument.format(**paths) for argument in arguments)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV, check=False)
    assert finished.returncode == 2, finished.stdout[-1000:] + finished.stderr[-1000:]
    assert reason in " ".join(finished.stderr.split())  # rich and typer wrap long lines
    assert "Traceback" not in finished.stderr
