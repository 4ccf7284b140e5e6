"""The Snakemake workflow end to end on a tiny catalogue: kill -9 snakemake mid-run, rerun it, and get
the rows of an uninterrupted run; the rows stored before the kill are kept, not measured again.

tests/test_durability.py covers the same at the level of one `harness run`; this is the user's path
(`snakemake ...`, killed, `snakemake --unlock`, `snakemake ...` again) through the repository's Snakefile,
with a catalogue written into a temporary directory (``--directory``), so it never touches ``results/``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from harness import store

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
HARNESS = Path(sys.executable).parent / "harness"
EXPERIMENT = "wf_tiny"
N_CANDIDATES = 10  # quick_matmul: 5 schemes x hoisting on/off
JOB = [
    "run",
    "workload=matmul_192",
    "space=quick_matmul",
    "baselines=[]",
    f"experiment={EXPERIMENT}",
    "sanity.probe=false",
    "timing.warmup=0",
    "timing.min_reps=3",
    "timing.max_reps=3",
]


def catalogue(workdir: Path) -> None:
    """A one-figure catalogue: the Snakefile reads workflow/config.yaml and studies/*/catalogue.yaml from
    cwd (none here)."""
    (workdir / "workflow").mkdir(parents=True)
    config = {
        "profile": "quick",
        "results": "results",
        "harness": str(HARNESS),
        "figures": {"wf_tiny_fig": [EXPERIMENT]},
        "papers": {"wf_paper": ["wf_tiny_fig"]},
        "jobs": {"quick": {EXPERIMENT: JOB}},
    }
    (workdir / "workflow" / "config.yaml").write_text(yaml.safe_dump(config))


def snakemake(workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(SNAKEMAKE),
            *extra,  # first: --resources takes every word after it
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(workdir),
            "--cores",
            "1",
            "--resources",
            "machine=1",
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the kill reaches harness and the driver too
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]


def interrupt_when_stored(
    proc: subprocess.Popen[bytes], row_dir: Path, n: int, interrupt: Callable[[], None]
) -> None:
    """Call ``interrupt`` as soon as ``n`` rows are stored (or give up after 10 minutes)."""
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if len(list(row_dir.glob("*.parquet"))) >= n:
            interrupt()
            return
        time.sleep(0.01)


def rows(workdir: Path) -> dict[str, tuple[str, bool]]:
    df = store.load(workdir / "results", EXPERIMENT)
    assert df["candidate_key"].is_unique  # a resumed run never stores a candidate twice
    return {r.candidate_key: (r.status, bool(r.check_passed)) for r in df.itertuples()}


@pytest.mark.slow
@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed in this environment")
def test_killed_snakemake_run_resumes_to_the_uninterrupted_rows(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    catalogue(reference)
    finish(snakemake(reference, "wf_paper"))
    expected = rows(reference)
    assert len(expected) == N_CANDIDATES
    assert (reference / "results" / "done" / f"{EXPERIMENT}.txt").is_file()

    killed = tmp_path / "killed"
    catalogue(killed)
    row_dir = killed / "results" / "rows" / EXPERIMENT
    proc = snakemake(killed, "wf_paper")
    interrupt_when_stored(proc, row_dir, N_CANDIDATES // 2, lambda: os.killpg(proc.pid, signal.SIGKILL))
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "snakemake finished before it could be killed"
    assert not (killed / "results" / "done" / f"{EXPERIMENT}.txt").exists()
    before = {p.name: p.stat().st_mtime_ns for p in row_dir.glob("*.parquet")}
    assert N_CANDIDATES // 2 <= len(before) < N_CANDIDATES

    finish(snakemake(killed, "--unlock"))
    finish(snakemake(killed, "wf_paper", "--rerun-incomplete"))
    assert rows(killed) == expected
    after = {p.name: p.stat().st_mtime_ns for p in row_dir.glob("*.parquet")}
    assert len(after) == N_CANDIDATES
    # only the missing candidates were measured: the row files stored before the kill are untouched
    assert {name: after[name] for name in before} == before


@pytest.mark.heavy
@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed in this environment")
def test_sigterm_to_snakemake_mid_job_finishes_the_job_and_the_rerun_completes(tmp_path: Path) -> None:
    """As a scheduler or a user's Ctrl-C would: SIGTERM to Snakemake alone (not its process group) while a
    harness job runs. Snakemake lets the running job finish (every row of it stored whole, its done-file
    written), starts no other, and exits non-zero; the same command run again completes the workflow
    without measuring anything again. (kill -9 mid-job: test_killed_snakemake_run_resumes_....)"""
    work = tmp_path / "wf"
    catalogue(work)
    row_dir = work / "results" / "rows" / EXPERIMENT
    proc = snakemake(work, "wf_paper")
    interrupt_when_stored(proc, row_dir, 3, lambda: proc.send_signal(signal.SIGTERM))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0, "snakemake finished before it could be stopped"
    assert "Will exit after finishing currently running jobs" in err.decode(errors="replace")
    stray = subprocess.run(["pgrep", "-f", f"experiment={EXPERIMENT}"], capture_output=True, text=True)
    assert not stray.stdout.strip(), f"harness still running after snakemake stopped: {stray.stdout}"
    before = rows(work)  # every stored file reads: none was cut mid-write
    assert len(before) == N_CANDIDATES and not list(row_dir.glob(".tmp-*"))
    assert (work / "results" / "done" / f"{EXPERIMENT}.txt").is_file()
    stamps = {p.name: p.stat().st_mtime_ns for p in row_dir.glob("*.parquet")}
    finish(snakemake(work, "--unlock"))
    finish(snakemake(work, "wf_paper"))
    assert rows(work) == before
    assert {p.name: p.stat().st_mtime_ns for p in row_dir.glob("*.parquet")} == stamps  # nothing re-measured
