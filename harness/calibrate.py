"""Calibrated FMA-throughput peak of one core per ISA (harness/driver/peak.c), cached per machine.

"% of peak" divides by this number, so it must measure the FMA units and nothing else: the benchmark's
loop is checked to keep every accumulator in a register before it is trusted.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import interrupt
from harness import machine as machine_mod
from harness.build import build_executable, cc_version

PEAK_SOURCE = Path(__file__).parent / "driver" / "peak.c"
PEAK_FLAGS = ("-O2",)
PEAK_FUNCTIONS = {"avx2": "peak_avx2", "avx512": "peak_avx512"}
PEAK_ACCUMULATORS = {"avx2": 12, "avx512": 24}
# About 0.2 s per trial at the expected peak: long enough for a stable clock, short enough for tests.
DEFAULT_ITERS = {"avx2": 100_000_000, "avx512": 50_000_000}

_LABEL = re.compile(r"^([.\w$]+):")
_JUMP = re.compile(r"^\s*j\w+\s+([.\w$]+)\s*$")


def function_asm(asm_text: str, name: str) -> str:
    """The assembly of one function (from its label to its ``.size`` directive) in gcc -S output."""
    lines = asm_text.splitlines()
    try:
        start = lines.index(f"{name}:")
    except ValueError:
        raise ValueError(f"function {name} not found in the assembly") from None
    end = next((i for i in range(start, len(lines)) if lines[i].strip().startswith(f".size\t{name},")), None)
    return "\n".join(lines[start : end or len(lines)])


def fma_loops(asm_text: str) -> list[list[str]]:
    """Bodies of the loops (label ... backward jump to it) that contain FMA instructions."""
    lines = [line.split("#")[0].rstrip() for line in asm_text.splitlines()]
    labels: dict[str, int] = {}
    loops = []
    for i, line in enumerate(lines):
        if m := _LABEL.match(line):
            labels[m.group(1)] = i
        elif (m := _JUMP.match(line)) and m.group(1) in labels:
            body = [s.strip() for s in lines[labels[m.group(1)] + 1 : i] if s.strip()]
            if any(s.startswith("vfmadd") for s in body):
                loops.append(body)
    return loops


def _has_memory_operand(instr: str) -> bool:
    _, _, operands = instr.partition(" ")
    return "(" in operands or "[" in operands or "PTR" in operands  # AT&T or Intel syntax


def fma_loop_spills(asm_text: str) -> bool:
    """True if an FMA loop of ``asm_text`` touches memory (FMA memory operands or vector spills/reloads).

    Meant for a register-only benchmark loop such as peak.c's; raises ValueError if there is no FMA loop.
    """
    loops = fma_loops(asm_text)
    if not loops:
        raise ValueError("no loop with FMA instructions in the assembly")
    return any(
        s.startswith("v") and _has_memory_operand(s) for body in loops for s in body if not s.startswith(".")
    )


def peak_asm(cc: str = "gcc") -> str:
    """peak.c compiled with -S and the flags the benchmark is built with."""
    with tempfile.TemporaryDirectory(prefix="peak-asm-") as tmp:
        out = Path(tmp) / "peak.s"
        cmd = [cc, *PEAK_FLAGS, "-S", str(PEAK_SOURCE), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"cannot compile {PEAK_SOURCE} to assembly:\n{proc.stderr[-2000:]}")
        return out.read_text()


def _pin_last_cpu() -> None:
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def _tool(source: Path, cache_dir: Path, cc: str) -> Path:
    """A benchmark tool of harness/driver (the peak benchmark, the cache probe), compiled once per cache."""
    exe = build_executable(source, Path(cache_dir), PEAK_FLAGS, (), cc)
    if not exe.ok or exe.so_path is None:
        raise RuntimeError(f"cannot build {source}:\n{exe.error}")
    return exe.so_path


def _trials(exe: Path, args: list[str], what: str, timeout: float) -> list[float]:
    """Run a benchmark tool on the last CPU this process may use; the per-trial numbers it prints."""
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_pin_last_cpu, check=False)  # fmt: skip
    interrupt.raise_if_stopped(proc.returncode, what)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return [float(t) for t in json.loads(proc.stdout)["trials"]]


def _measure(exe: Path, isa: str, iters: int, trials: int) -> dict[str, object]:
    found = _trials(exe, [isa, str(iters), str(trials)], f"the peak benchmark for {isa}", 600)
    mean = statistics.fmean(found)
    return {
        "gflops": max(found),  # best of N: slower trials were interrupted, not a slower core
        "trials": found,
        "cv": statistics.stdev(found) / mean if len(found) > 1 and mean > 0 else 0.0,
        "iters": iters,
    }


BUSY_LIMIT = 20.0  # % of the pinned core used by other processes above which a calibration is suspect
ATTEMPTS = 3


def _measure_quietly(exe: Path, isa: str, iters: int, trials: int) -> dict[str, object]:
    """Measure while watching the core: a peak measured beside another process is too low and would
    put every later kernel above 100%, so retry, and record the load if it never clears."""
    from harness.sanity import CoreWatch

    cpu = max(os.sched_getaffinity(0))
    for attempt in range(ATTEMPTS):
        with CoreWatch(cpu) as watch:
            result = _measure(exe, isa, iters, trials)
        result["other_busy_pct"] = round(watch.other_pct, 1)
        if watch.other_pct <= BUSY_LIMIT:
            return result
        if attempt + 1 < ATTEMPTS:
            time.sleep(2.0)
    result["under_load"] = True
    print(f"warning: {isa} peak measured while other processes used {watch.other_pct:.0f}% of CPU {cpu}; "
          "kernels may show more than 100% of it (run `harness calibrate --force` on a quiet machine)",
          file=sys.stderr)  # fmt: skip
    return result


def calibrate(
    machine: machine_mod.Machine | None = None,
    force: bool = False,
    cache_dir: Path = Path("results/cache"),
    iters: dict[str, int] | None = None,
    trials: int = 7,
    cc: str = "gcc",
) -> dict[str, dict[str, object]]:
    """Peak GFLOP/s of one core for each ISA the CPU runs, measured once per machine and cached as JSON.

    Raises RuntimeError if the compiled benchmark loop spills (its number would be a memory bound).
    """
    m = machine or machine_mod.detect()
    cache_dir = Path(cache_dir)
    path = cache_dir / f"calibration-{m.fingerprint}.json"
    if path.exists() and not force:
        return json.loads(path.read_text())["peaks"]

    asm = peak_asm(cc)
    for isa in m.isas:
        if fma_loop_spills(function_asm(asm, PEAK_FUNCTIONS[isa])):
            raise RuntimeError(f"peak.c's {isa} FMA loop uses memory operands with {cc_version(cc)}")
    exe = _tool(PEAK_SOURCE, cache_dir, cc)
    iters = {**DEFAULT_ITERS, **(iters or {})}
    peaks = {isa: _measure_quietly(exe, isa, iters[isa], trials) for isa in m.isas}

    record = {"fingerprint": m.fingerprint, "model_name": m.model_name, "cc_version": cc_version(cc)}
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({**record, "peaks": peaks}, indent=1))
    os.replace(tmp, path)
    return peaks


STREAM_SOURCE = Path(__file__).parent / "driver" / "stream.c"
STREAM_READ_BYTES = 64 << 20  # bytes read per trial of the cache probe: a few ms at L3 bandwidth


def cache_probe_bytes(m: machine_mod.Machine) -> int:
    """The cache probe's buffer: four times L2, so it lives in the shared last-level cache (8 MiB when
    the machine does not say its L2)."""
    l2 = m.cache_bytes(2)
    return 4 * l2 if l2 else 8 << 20


def probe_cache(
    nbytes: int, cache_dir: Path = Path("results/cache"), trials: int = 3, cc: str = "gcc"
) -> float:
    """Read bandwidth (GB/s, best of ``trials``) over ``nbytes`` on the pinned CPU: the drift sentinel's
    reference kernel for the shared cache (harness/driver/stream.c), a few tens of ms."""
    passes = max(1, STREAM_READ_BYTES // nbytes)
    exe = _tool(STREAM_SOURCE, cache_dir, cc)
    return max(_trials(exe, [str(nbytes), str(passes), str(trials)], "the cache probe", 120))


def probe_peak(
    isa: str,
    cache_dir: Path = Path("results/cache"),
    iters: int = 5_000_000,
    trials: int = 3,
    cc: str = "gcc",
) -> float:
    """A short re-measurement of the peak (tens of ms), to see whether the core runs as when calibrated."""
    return float(_measure(_tool(PEAK_SOURCE, cache_dir, cc), isa, iters, trials)["gflops"])  # type: ignore[arg-type]
