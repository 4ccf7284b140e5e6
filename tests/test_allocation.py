"""The allocation a row records, and the one-line refusal when no scheduler is there (no SLURM needed:
tests/test_slurm.py runs the real thing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness import allocation
from harness.cli import _slurm_launcher

HARNESS = Path(sys.executable).parent / "harness"


def test_outside_a_job_there_is_no_allocation() -> None:
    assert allocation.current({"PATH": "/usr/bin"}) is None
    assert allocation.as_column({}) is None


def test_inside_a_job_the_row_names_job_node_partition_and_cpus() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "41", "SLURM_ARRAY_TASK_ID": "1",
           "SLURMD_NODENAME": "n7", "SLURM_JOB_PARTITION": "compute", "SLURM_CPUS_ON_NODE": "2"}  # fmt: skip
    found = json.loads(allocation.as_column(env) or "null")
    assert found == {
        "scheduler": "slurm", "job_id": "42", "array_job_id": "41", "array_task_id": "1", "node": "n7",
        "partition": "compute", "cpus_on_node": "2", "cpus": sorted(os.sched_getaffinity(0)),
    }  # fmt: skip


def test_no_sbatch_is_one_line_naming_the_way_out() -> None:
    problem = allocation.scheduler_problem(which=lambda name: None)
    assert problem and "sbatch is not on PATH" in problem and "make slurm-up" in problem


def test_the_cluster_launcher_is_recognised_in_overrides() -> None:
    assert _slurm_launcher(["workload=x", "hydra/launcher=cluster"])
    assert _slurm_launcher(["+hydra/launcher=submitit_slurm"])
    assert not _slurm_launcher(["hydra/launcher=basic", "cluster=1"])


def test_harness_run_on_the_cluster_launcher_without_slurm_refuses_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no sbatch, no scontrol
    out = subprocess.run(
        [str(HARNESS), "run", "-m", "hydra/launcher=cluster", "workload=matmul_192", "space=quick_matmul",
         f"results_dir={tmp_path / 'r'}"],  # fmt: skip
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "harness: error: " + (allocation.scheduler_problem(which=lambda name: None) or "")
    ]


SLURM_TOOLS = ("sbatch", "srun", "salloc", "scontrol", "squeue", "sacct", "sacctmgr", "sinfo", "scancel")


def test_the_slurm_profile_without_slurm_stops_in_one_line_before_submitting(tmp_path: Path) -> None:
    """`snakemake --profile profiles/slurm` on a machine without SLURM's commands (the PATH rebuilt from
    /usr/bin and /bin minus them): the Snakefile's onstart check says so, and no job starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in (Path("/usr/bin"), Path("/bin")):
        for tool in folder.iterdir():
            link = bin_dir / tool.name
            if tool.name not in SLURM_TOOLS and not link.exists():
                link.symlink_to(tool)
    results = tmp_path / "r"
    out = subprocess.run(
        [str(HARNESS.parent / "snakemake"), "--profile", "profiles/slurm", "--config", "profile=quick",
         f"results={results}", "--", f"{results}/done/quick_matmul.txt"],  # fmt: skip
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PATH": f"{HARNESS.parent}:{bin_dir}"},
    )  # fmt: skip
    assert out.returncode != 0
    assert "no SLURM here: sbatch is not on PATH" in out.stdout + out.stderr
    assert not (results / "done" / "calibrate.txt").exists()
