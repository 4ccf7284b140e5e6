"""Cache counts without a PMU: a built kernel run in the measurement driver under valgrind's cachegrind.

No VM this harness has run on exposes a PMU (PAPI installs but counts nothing), so ``counters=cachegrind``
(conf/counters/cachegrind.yaml) adds a simulated backend after PAPI and perf_event: a candidate whose timed
run read no counter is run again, twice, under ``valgrind --tool=cachegrind --cache-sim=yes
--branch-sim=yes``, in the same driver with the same arguments as a timed run, with 1 and 1 + EXTRA hot
calls; the difference divided by EXTRA is the counts of one hot call of the kernel alone (driver start-up,
tensor loading and the first call cancel). The simulated caches are fixed (:data:`CACHES`), so counts do
not depend on the host; the row's ``counter_backend`` names them. Valgrind does not execute AVX-512 code:
such rows say so in ``counters_unavailable``. The simulation runs ~50x slower than the kernel: meant for
small workloads. The YaConv study (studies/yaconv/commands/yaconv_counters.py) counts with the same code.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from harness.run import build_driver
from kernels.candidate import KernelSource

EXTRA = 1  # hot calls counted (the difference of two runs); valgrind emulates FMA at ~10 s per 200 MFLOP
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64")
SOURCE = "cachegrind simulation (L1d 32K/8-way, LL 32M/16-way)"
BACKEND = "cachegrind (simulated: I1 32K/8-way, D1 32K/8-way, LL 32M/16-way, 64 B lines)"
#: cachegrind's events, as stored in the ``counters`` column: instructions, data reads and writes, their
#: L1 and last-level misses, conditional and indirect branches and their mispredictions
EVENTS = ("Ir", "Dr", "Dw", "D1mr", "D1mw", "DLmr", "DLmw", "Bc", "Bcm", "Bi", "Bim")


class CachegrindError(RuntimeError):
    """valgrind failed or wrote no summary."""


class CachegrindKilled(RuntimeError):
    """valgrind was stopped by a signal (the user, the OOM killer, a job's end): an interruption, not a
    property of the kernel. Not a CachegrindError, so no caller records it in a row as a failure: the
    run stops, stores nothing for that kernel, and a resumed run measures it again."""


def valgrind() -> str | None:
    return shutil.which("valgrind")


def _summary(path: Path) -> dict[str, int]:
    events: list[str] = []
    values: list[int] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            values = [int(v) for v in line.split()[1:]]
    if not events or len(events) != len(values):
        raise CachegrindError(f"no summary line in {path}")
    return dict(zip(events, values, strict=True))


def _run(
    driver: Path, so: Path, files: list[tuple[Path, int]], out: Path, ws: int, reps: int, cg: Path
) -> str:
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes", *CACHES,
        f"--cachegrind-out-file={cg}", str(driver), "--lib", str(so),
    ]  # fmt: skip
    for path, n in files:
        cmd += ["--tensor", f"{path}:{n}"]
    cmd += [
        "--out", str(out), "--ws", str(ws), "--align", "1024", "--mode", "hot", "--warmup", "0",
        "--warmup-seconds", "0", "--min-reps", str(reps), "--max-reps", str(reps), "--rel-ci", "-1",
        "--max-seconds", "1e9", "--counters", "none",
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    except subprocess.TimeoutExpired as exc:
        raise CachegrindError("valgrind ran over an hour: a workload too large to simulate") from exc
    if proc.returncode < 0:
        raise CachegrindKilled(f"valgrind was killed by signal {-proc.returncode}")
    if proc.returncode != 0:
        raise CachegrindError(f"valgrind exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return proc.stdout


def count(
    src: KernelSource, so: Path, tensors: list[np.ndarray], cache_dir: Path
) -> tuple[dict[str, int], np.ndarray]:
    """Per-call cachegrind counts of a built kernel, and the output of its first call."""
    if src.target == "avx512":
        raise CachegrindError("valgrind does not execute AVX-512 code (run with target=avx2)")
    if valgrind() is None:
        raise CachegrindError("valgrind is not installed (apt install valgrind)")
    driver = build_driver(cache_dir)
    with tempfile.TemporaryDirectory(prefix="cachegrind-") as tmp:
        files = []
        for i, t in enumerate(tensors):
            path = Path(tmp) / f"t{i}.bin"
            np.ascontiguousarray(t, dtype=np.float32).tofile(path)
            files.append((path, t.size))
        out = Path(tmp) / "out.bin"
        totals = []
        for reps in (1, 1 + EXTRA):
            cg = Path(tmp) / f"cg{reps}.out"
            _run(driver, so, files, out, src.workspace_bytes, reps, cg)
            totals.append(_summary(cg))
        first = np.fromfile(out, dtype=np.float32).reshape(tensors[0].shape)
    per_call = {k: (totals[1][k] - totals[0][k]) // EXTRA for k in totals[0]}
    return per_call, first
