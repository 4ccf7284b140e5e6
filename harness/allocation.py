"""The batch-scheduler allocation a process runs in (SLURM), recorded with every row it measures.

Inside a SLURM job the scheduler binds the job to the CPUs it allocated (``task/affinity``), so
:func:`harness.run.cpus_for` already pins within them: the driver takes the last CPU this process may
use, CPU 0 of a host whose job was given CPU 0, not the host's last CPU. The row keeps the job id, node,
partition and allocated CPUs so a reader can tell a cluster measurement from a local one and see that the
kernel's CPUs lie inside what the job was given (docs/cluster.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

#: environment variables of a SLURM job -> the allocation's keys
SLURM_ENV = {
    "SLURM_JOB_ID": "job_id",
    "SLURM_ARRAY_JOB_ID": "array_job_id",
    "SLURM_ARRAY_TASK_ID": "array_task_id",
    "SLURM_JOB_NAME": "job_name",
    "SLURMD_NODENAME": "node",
    "SLURM_JOB_PARTITION": "partition",
    "SLURM_JOB_ACCOUNT": "account",
    "SLURM_CPUS_ON_NODE": "cpus_on_node",
    "SLURM_CLUSTER_NAME": "cluster",
}


def current(environ: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """The allocation this process runs in: scheduler, job id, node, partition, account and the CPUs it
    may use; None outside a batch job."""
    env = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in env:
        return None
    found: dict[str, object] = {"scheduler": "slurm"}
    found.update({key: env[var] for var, key in SLURM_ENV.items() if env.get(var)})
    found["cpus"] = sorted(os.sched_getaffinity(0))
    return found


def as_column(environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`current` as the row column ``allocation`` (a JSON object, null outside a batch job)."""
    found = current(environ)
    return None if found is None else json.dumps(found, sort_keys=True)


def scheduler_problem(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why a SLURM submission from here would fail, in one line (None: ``sbatch`` is installed and the
    controller answers). Checked before the slurm profile or the cluster launcher submits anything, so a
    missing scheduler is one clear line instead of a plugin's traceback."""
    if which("sbatch") is None:
        return (
            "no SLURM here: sbatch is not on PATH (on a cluster, run from a login node; on this machine, "
            "`make slurm-up` starts a local single-node cluster, docs/cluster.md)"
        )
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"SLURM's controller does not answer (scontrol ping: {exc})"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        lines = [ln.strip() for ln in (ping.stdout + ping.stderr).splitlines() if ln.strip("* \n")]
        said = lines[0] if lines else ""
        return (
            f"SLURM's controller does not answer (scontrol ping: {said or 'no output'}); "
            "`make slurm-up` starts the local one"
        )
    return None
