"""The maintenance benchmark's bookkeeping: which phase a slow call fell in, and which calls a stall of
the client itself overlapped (those are left out of the clean maximum: the server did not cause them)."""

from __future__ import annotations

from tiermem_lab.benchmarks.maintenance import ModeResult, render_maintenance


def _result() -> ModeResult:
    result = ModeResult("never", 100, window_start=10.0, window_end=20.0)
    # (started at s, latency ms): one call before, three in, one after the window.
    for started, latency in [(5.0, 30.0), (11.0, 40.0), (12.0, 900.0), (15.0, 60.0), (25.0, 50.0)]:
        result.started_at.append(started)
        result.latencies_ms.append(latency)
    return result


def test_phase_maxima_split_the_calls_at_the_window() -> None:
    result = _result()
    assert (result.phase_max_ms("before"), result.phase_max_ms("window"), result.phase_max_ms("after")) == (
        30.0,
        900.0,
        50.0,
    )
    assert result.slowest(2) == [(2.0, 900.0), (5.0, 60.0)]


def test_calls_a_client_stall_overlapped_are_left_out_of_the_clean_figures() -> None:
    result = _result()
    assert max(result.clean_latencies_ms()) == 900.0
    result.client_stalls.append((12.5, 12.7))  # inside the 900 ms call (12.0-12.9 s)
    assert result.clean_latencies_ms() == [30.0, 40.0, 60.0, 50.0]
    result.client_stalls.append((4.0, 5.01))  # overlaps the first call's start
    assert result.clean_latencies_ms() == [40.0, 60.0, 50.0]
    summary = result.summary()
    assert (summary["max_ms"], summary["max_clean_ms"], summary["calls_clean"]) == (900.0, 60.0, 3)
    assert "without the 2 calls a client stall" in render_maintenance([result], rate=10.0)
