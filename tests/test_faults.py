"""Faults injected into real runs (issue 37): a results directory that fills mid-sweep, one that is
read-only, a truncated row file, the compiler killed mid-build. Each gives one clear line, loses no
finished row, and the same command run again completes the sweep."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from harness import store
from tests.test_cli import harness
from tests.test_store import _rid, make_row

# 10 candidates (5 schemes x 2 variants), no library, a few repetitions: a sweep of seconds
SWEEP = ["workload=matmul_192", "space=quick_matmul", "baselines=[]", "experiment=faults",
         "sanity.probe=false", "timing.warmup=0", "timing.min_reps=2", "timing.max_reps=2"]  # fmt: skip
N = 10
HARNESS = Path(sys.executable).parent / "harness"


def stored(results: Path) -> dict[str, str]:
    df = store.load(results, "faults")
    assert df["candidate_key"].is_unique
    return dict(zip(df["candidate_key"], df["status"], strict=True))


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("harness: error:")]
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    return lines[0]


def test_a_truncated_row_file_is_set_aside_and_the_others_still_load(tmp_path: Path) -> None:
    for i in range(3):
        store.write_row(tmp_path, make_row(candidate_key=f"k{i}"))
    victim = store.row_path(tmp_path, "exp1", _rid("k1"))
    victim.write_bytes(victim.read_bytes()[:100])  # a disk that lost the end of the file
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = store.load(tmp_path)
    assert sorted(df["candidate_key"]) == ["k0", "k2"]
    assert any("unreadable row file" in str(w.message) for w in caught)
    assert not store.has_row(tmp_path, "exp1", _rid("k1"))  # so a rerun measures it again
    assert (victim.parent / f".{victim.name}.corrupt").is_file()  # kept for a post-mortem, out of listings


@pytest.mark.heavy
def test_a_truncated_row_is_measured_again_by_the_rerun(tmp_path: Path) -> None:
    first = harness("run", *SWEEP, f"results_dir={tmp_path}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = stored(tmp_path)
    victim = store.row_files(tmp_path, "faults")[3]
    victim.write_bytes(b"PAR1 truncated")
    again = harness("run", *SWEEP, f"results_dir={tmp_path}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (
        "set aside an unreadable row file" in again.stderr
        and "9 candidate(s) already measured" in again.stderr
    )
    assert stored(tmp_path) == before


@pytest.mark.heavy
def test_the_compiler_killed_mid_build_records_nothing_and_the_rerun_completes(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    count = tmp_path / "compiles"
    cc = tmp_path / "cc"  # gcc, except that its 5th compilation is killed (as by the OOM killer)
    cc.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --version ] && exec {gcc} "$@"\n'
        f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n"
        f'[ "$n" = 5 ] && kill -9 $$\nexec {gcc} "$@"\n'
    )
    cc.chmod(0o755)
    results = tmp_path / "results"
    out = harness("run", *SWEEP, f"results_dir={results}", f"compiler.cc={cc}")
    assert "the compiler was killed by signal 9" in one_line(out)
    kept = stored(results) if store.row_files(results, "faults") else {}
    assert len(kept) < N and "compile_error" not in kept.values()
    again = harness("run", *SWEEP, f"results_dir={results}", f"compiler.cc={cc}")
    assert again.returncode == 0, again.stderr[-2000:]
    final = stored(results)
    assert len(final) == N and set(final.values()) == {"ok"}
    assert all(final[k] == v for k, v in kept.items())


@pytest.mark.heavy
def test_sigterm_to_a_run_mid_sweep_records_nothing_it_cut_and_the_rerun_completes(tmp_path: Path) -> None:
    """As a batch scheduler's cancel or time limit does: SIGTERM to every process of the run (harness, the
    compiler or the kernel's driver, whichever is running). One line, no row blamed on the signal."""
    results = tmp_path / "results"
    cmd = [str(HARNESS), "run", *SWEEP, f"results_dir={results}"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    row_dir = results / "rows" / "faults"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and len(list(row_dir.glob("*.parquet"))) < 3:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    out = subprocess.CompletedProcess(cmd, proc.returncode, "", err)
    assert "stopped by SIGTERM" in one_line(out)
    kept = stored(results)
    assert 3 <= len(kept) < N and set(kept.values()) == {"ok"}
    assert not list(row_dir.glob(".tmp-*"))
    again = harness("run", *SWEEP, f"results_dir={results}")
    assert again.returncode == 0, again.stderr[-2000:]
    final = stored(results)
    assert len(final) == N and set(final.values()) == {"ok"}
    assert all(final[k] == v for k, v in kept.items())


@pytest.mark.heavy
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounting a tmpfs needs root")
def test_a_results_directory_that_fills_up_mid_sweep_keeps_its_rows(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # room for the calibration, the cache and a few rows (each kernel ~17 KB, each row ~20 KB), not for 10
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(results)], check=True)
    try:
        out = harness("run", *SWEEP, f"results_dir={results}")
        line = one_line(out)
        assert "No space left on device" in line and "every row stored before is kept" in line
        kept = stored(results) if store.row_files(results, "faults") else {}
        assert len(kept) < N and set(kept.values()) <= {"ok"}  # no candidate blamed for the disk
        subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
        assert "cannot be written: Read-only file system" in one_line(
            harness("run", *SWEEP, f"results_dir={results}")
        )
        subprocess.run(["mount", "-o", "remount,rw,size=64m", str(results)], check=True)
        again = harness("run", *SWEEP, f"results_dir={results}")
        assert again.returncode == 0, again.stderr[-2000:]
        final = stored(results)
        assert len(final) == N and set(final.values()) == {"ok"}
        assert all(final[k] == v for k, v in kept.items())
    finally:
        subprocess.run(["umount", str(results)], check=False)
