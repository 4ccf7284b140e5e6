"""The drift sentinel (issue 37): the peak probe re-timed during a run, its ratio in every row."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.sentinel import Sentinel


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_probe_runs_again_only_when_due_and_rows_carry_the_ratio() -> None:
    clock, readings = Clock(), iter([100.0, 80.0, 99.0])
    calls: list[float] = []

    def probe() -> float:
        calls.append(clock.t)
        return next(readings)

    s = Sentinel(probe, 60.0, 0.10, ["calibration under load"], clock=clock)
    s.tick()  # the first reading
    clock.t = 30.0
    s.tick()  # not due
    row = {"flags": json.dumps(["noisy: CoV 0.2 > 0.05"])}
    s.mark(row)
    assert calls == [0.0] and row["sentinel_ratio"] == 1.0 and len(json.loads(row["flags"])) == 1
    clock.t = 61.0
    s.tick()
    assert calls == [0.0, 61.0] and s.ratio == pytest.approx(0.8) and s.drifted_down()
    s.mark(row)
    flags = json.loads(row["flags"])
    assert row["sentinel_ratio"] == pytest.approx(0.8)
    assert flags[-1] == "sentinel: the peak probe ran at x0.80 of its first timing in this run (20% > 10%)"
    clock.t = 130.0
    s.tick()  # back to normal: the row keeps its worst round, one sentinel flag
    s.mark(row)
    assert row["sentinel_ratio"] == pytest.approx(0.8) and not s.drifted_down()
    assert sum(f.startswith("sentinel:") for f in json.loads(row["flags"])) == 1


def test_without_a_probe_or_an_interval_nothing_runs() -> None:
    s = Sentinel(None, 60.0, 0.1, [])
    s.tick()
    row: dict = {"flags": "[]"}
    s.mark(row)
    assert "sentinel_ratio" not in row
    once = Sentinel(lambda: 1 / 0, None, 0.1, [], first=50.0)  # sentinel_s=null: the start probe only
    once.tick()
    assert once.ratio == 1.0


def test_a_run_with_the_sentinel_on_every_candidate_records_it(tmp_path: Path, shared_cache: Path) -> None:
    from harness.experiment import Experiment, run_experiment
    from harness.sanity import SanityConfig
    from kernels.candidate import Candidate, Workload
    from tests.conftest import FAST_TIMING

    wl = Workload.make("mm", "matmul", {"i": 48, "j": 64, "k": 32})
    opts = tuple(sorted({"target": "avx2", "hoist": True, "fma": True, "partial": "none"}.items()))
    cands = [Candidate("scheme", t, opts) for t in ("[R_j, R_i, R_k, U_{6,i}, U_{1,j}, V_j]",
                                                    "[R_j, R_i, R_k, U_{4,i}, U_{2,j}, V_j]")]  # fmt: skip
    exp = Experiment("sentinel", wl, cands, timing=FAST_TIMING, results_dir=tmp_path, cache_root=shared_cache,
                     sanity=SanityConfig(probe=True, sentinel_s=0.0))  # fmt: skip
    rows = run_experiment(exp, progress=lambda _m: None)
    assert all(r["status"] == "ok" and r["sentinel_ratio"] > 0 for r in rows), rows


@pytest.mark.parametrize(("ratios", "moved"), [([1.0, 0.98, 0.85, 1.01], True), ([1.0, 0.97, 1.04], False)])
def test_the_report_shows_the_sentinel_and_flags_a_run_it_moved_in(
    tmp_path: Path, ratios: list[float], moved: bool
) -> None:
    from harness import store
    from harness.report import render_report
    from tests.test_store import make_row

    for i, r in enumerate(ratios):
        row = make_row(candidate_key=f"k{i}", sentinel_ratio=r, timestamp=f"2026-11-26T12:0{i}:00+00:00")
        store.write_row(tmp_path, row)
    html = render_report(store.load(tmp_path), tmp_path / "report").read_text()
    assert f"x{min(ratios):.3g} to x{max(ratios):.3g} over {len(ratios)} rows" in html
    assert ("moved more than 10%" in html) == moved
    # the readings always as a CSV; a plot of them over time when they moved (a flat line says no more)
    figures = tmp_path / "report" / "figures"
    readings = pd.read_csv(next(figures.glob("*sentinel*.csv")))
    assert sorted(readings["sentinel_ratio"]) == sorted(ratios) and "timestamp" in readings
    assert bool(list(figures.glob("*sentinel*.png"))) == moved
    assert ("plot (PNG)" in html) == moved


def test_the_cache_probe_catches_what_the_peak_probe_does_not() -> None:
    """A neighbour streaming through the shared cache: the FMA peak holds, the cache probe falls; the row
    carries both ratios and names the probe that moved, and a confirmation round would be timed again."""
    clock = Clock()
    peaks, caches = iter([100.0, 99.0]), iter([30.0, 18.0])
    s = Sentinel(lambda: next(peaks), 60.0, 0.10, [], clock=clock, cache=lambda: next(caches))
    s.tick()
    clock.t = 61.0
    s.tick()
    row: dict = {"flags": "[]"}
    s.mark(row)
    assert row["sentinel_ratio"] == pytest.approx(0.99) and row["sentinel_cache_ratio"] == pytest.approx(0.6)
    assert s.drifted_down()
    (flag,) = json.loads(row["flags"])
    assert flag.startswith("sentinel: the cache probe ran at x0.60")


def test_the_cache_probe_measures_a_bandwidth(tmp_path: Path) -> None:
    from harness import machine
    from harness.calibrate import cache_probe_bytes, probe_cache

    nbytes = cache_probe_bytes(machine.detect())
    assert nbytes >= 1 << 20
    assert probe_cache(nbytes, tmp_path, trials=2) > 1.0  # GB/s: any cache reads faster than this
