"""`tiermem bench scale` at a tiny scale, as a user runs it (the CLI in its own process): it finishes and
its report has every field the README's performance table is built from. A smoke test: the numbers
themselves are benchmarks, not assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_scale_bench_runs_tiny_and_reports_every_field(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    command = [sys.executable, "-m", "services.cli", "bench", "scale", "--scale", "0.0001", "--queries", "5"]
    command += ["--local-memories", "40", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "not semantic" in finished.stdout  # the seeding embedder is disclosed in the output
    assert "qdrant-client local / Edge" in finished.stdout

    report = json.loads(out.read_text(encoding="utf-8"))
    seeding = report["seeding"]
    assert (seeding["memories"], seeding["users"]) == (100, 10)
    assert seeding["seconds"] > 0 and seeding["rss_mb"] > 0 and seeding["disk_mb"] > 0
    assert "not semantic" in seeding["embedder"]
    edge = report["edge"]
    # L0 is timed from a client in another process and from one in the server's loop, each call after its
    # own embedding-floor sample: twice as many floor samples as questions.
    for level, calls in (("l0", 5), ("l0_in_loop", 5), ("l1", 5), ("query_embedding", 10)):
        stats = edge[level]
        assert stats["calls"] == calls
        assert 0 < stats["p50_ms"] <= stats["p99_ms"]
    assert edge["l0_over_embedding_p50"] > 0 and edge["l0_in_loop_over_embedding_p99"] > 0
    assert all(edge["healthz"][client]["calls"] == 100 for client in ("out_of_process", "in_loop"))
    assert "client in the server's loop" in finished.stdout
    local = report["qdrant_local"]
    assert local["memories"] == 40 and local["l0"]["calls"] >= 5
    assert set(report["local_over_edge_l0"]) == {"p50", "p99"}
    power = report["power_user"]
    assert power["memories"] == report["plan"]["power_user_memories"] and power["calls"] >= 3
    # Timed from the client in another process, each call with its own query-embedding floor sample.
    assert power["query_embedding"]["calls"] == power["calls"] and power["over_embedding_p99"] > 0
    assert power["exhaustive"]["calls"] == power["calls"] and "power user L0 / its query embedding" in finished.stdout
    assert set(report["growth"]) == {"recurring_topics", "one_matching_session"}
    for growth in report["growth"].values():
        assert [row["sessions"] for row in growth] == report["plan"]["growth_sessions"]
        assert len(growth) >= 2 and all(row["calls"] >= 3 and row["tokens_per_turn_mean"] >= 0 for row in growth)
    assert "one matching session per question" in finished.stdout
