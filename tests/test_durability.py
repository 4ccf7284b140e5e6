"""kill -9 at random points of a sweep, then a rerun: the same final rows, never a corrupt file."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import store

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "workload=matmul_192",
    "space=quick_matmul",
    "baselines=[]",
    "experiment=dur",
    "sanity.probe=false",
    "timing.warmup=0",
    "timing.min_reps=3",
    "timing.max_reps=3",
]
N_CANDIDATES = 10  # 5 schemes x 2 variants


def start(results: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", *ARGS, f"results_dir={results}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill reaches the driver too
    )


def outcome(results: Path) -> dict[str, tuple[str, bool]]:
    df = store.load(results, "dur")
    assert df["candidate_key"].is_unique
    return {r.candidate_key: (r.status, bool(r.check_passed)) for r in df.itertuples()}


# five `harness run`s, ~30 s on 2 vCPUs: with -m heavy (CI runs it)
@pytest.mark.heavy
def test_kill_9_then_rerun_gives_the_uninterrupted_rows(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    assert start(reference).wait(timeout=300) == 0
    expected = outcome(reference)
    assert len(expected) == N_CANDIDATES

    results = tmp_path / "killed"
    rng = random.Random(7)
    rows_dir = results / "rows" / "dur"
    kills = 0
    for _ in range(3):
        target = rng.randint(1, N_CANDIDATES - 1)
        proc = start(results)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if len(list(rows_dir.glob("*.parquet"))) >= target:
                # sometimes at once, sometimes mid-candidate (while a kernel is being timed)
                time.sleep(rng.random() * 0.3)
                os.killpg(proc.pid, signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.005)
        proc.wait(timeout=30)
        for f in rows_dir.glob("*.parquet"):  # every visible row file is complete
            assert pq.read_table(f).num_rows == 1
    assert kills >= 1
    assert start(results).wait(timeout=300) == 0
    assert outcome(results) == expected
    assert len(list(rows_dir.glob("*.parquet"))) == N_CANDIDATES
