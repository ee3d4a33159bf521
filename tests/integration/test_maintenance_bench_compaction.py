"""`tiermem bench maintenance --mode compaction` at a tiny size: a real `tiermem up` (builds "never"),
a quarter of the seeded users erased over HTTP, and the window ends only once the compacted generation
is current. A smoke test of the mode's mechanics: latencies are benchmarks, not assertions."""

from __future__ import annotations

import pytest

from tiermem_lab.benchmarks import maintenance

pytestmark = pytest.mark.integration


async def test_the_compaction_mode_erases_users_and_waits_for_the_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A compaction that never came would otherwise hold the window for an hour before failing.
    monkeypatch.setattr(maintenance, "_WINDOW_LIMIT_S", 300.0)
    # 125 of 500 users erased = 1250 of 5000 points: above the 1000 and 20% at which compaction starts.
    [result] = await maintenance.run_maintenance_bench(
        points=5000, users=500, rate=5, tail_s=1, modes=("compaction",), seed=7
    )
    row = result.summary()
    assert row["mode"] == "compaction" and row["errors"] == 0 and row["calls"] >= 5
    assert row["maintenance_window_s"] > 0  # it ended: the compacted generation became current
    assert row["readyz_probes"] > 0


async def test_compaction_is_not_a_default_mode() -> None:
    assert "compaction" not in maintenance.MODES  # the default set measures builds
    with pytest.raises(ValueError, match="compaction"):
        await maintenance.run_maintenance_bench(points=1, users=1, rate=1, tail_s=0, modes=("vacuum",), seed=7)
