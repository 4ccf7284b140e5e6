"""Run one compiled kernel in an isolated, pinned child process (harness/driver/driver.c) and time it.

A crash, a hang or a kernel error kills only the child: it comes back as a RunResult with a reason, so
a sweep never dies on one bad candidate.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import interrupt, machine
from harness.build import build_executable, cc_version

DRIVER_SOURCE = Path(__file__).parent / "driver" / "driver.c"
PAPI_HEADER = Path("/usr/include/papi.h")
TMP_ROOT = Path("/dev/shm")  # tmpfs: writing large tensors costs no disk I/O
STDERR_TAIL = 2000
IMPL_PREFIX = "harness-impl: "  # a kernel's stderr line naming the implementation a library chose
CONTENTION_KINDS = ("none", "stream")
ALIGN = 1024  # bytes: beyond any vector width or cache line, so alignment never differs between candidates


@dataclass(frozen=True)
class TimingConfig:
    # "hot": warm-up first; "cold": evict the kernel's data before every repetition; "fresh": cold, and the
    # workspace is mapped anew before every repetition so the call pays its first touch (seed 001)
    mode: str = "hot"
    cold_method: str = "clflushopt"  # or "sweep" (a buffer of flush_bytes written and read)
    flush_bytes: int | None = None  # None: 8x the last-level cache of this machine
    warmup: int = 3
    warmup_seconds: float = 0.0  # hot mode: keep warming up at least this long (microsecond kernels)
    min_reps: int = 5
    max_reps: int = 50
    rel_ci: float = 0.02  # stop when the 95% CI half-width of the mean is within this fraction of it
    max_seconds: float = 5.0
    # calls per timed sample, back to back after one eviction (cold/fresh): a batch of images, as seed
    # 001 times; the sample's time is divided by it
    batch: int = 1
    # passes over an experiment's candidates (pyperf's several processes): round r times every candidate
    # once more, in a rotated order, so a drift of the host during the experiment shows up as dispersion
    # and as per-round ratios (harness.analysis.round_ratio) instead of biasing whoever ran in a slow minute
    rounds: int = 1
    # racing, in a search: a draw whose first two timed calls are both slower than `race` x the best
    # median found so far stops there (row flag "raced"), so the hopeless draws, most of a random sample,
    # skip the repetitions the 2% CI rule asks of them; warm-ups are kept. None: never
    race: float | None = None
    # in rounds 2..: a round whose median is more than `retime` x the median of the row's earlier rounds is
    # timed again at the end of its pass, after a pause (up to RETIME_TRIES times; the last try is kept and
    # flagged): on these shared hosts a disturbed minute slows every kernel, oneDNN included, 1.3-2x, and the
    # slow round then drags its row's median of rounds. None: keep every round as timed
    retime: float | None = None
    # seconds to wait before timing a slow round again: a disturbance of the host seen here lasted under a
    # minute; the quick profile waits less (its verdicts are a first look, and 13 waits cost 4 minutes)
    retime_wait: float = 20.0
    # a neighbour during the timing (issue 32): "none", or "stream", a co-runner on another CPU that streams
    # through `contention_bytes` (None: the last-level cache's size) from the warm-up to the last timed call,
    # as a process on the other core of a shared host takes the shared cache and memory bandwidth
    contention: str = "none"
    contention_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.contention not in CONTENTION_KINDS:
            raise ValueError(
                f"timing.contention must be one of {', '.join(CONTENTION_KINDS)}, got {self.contention!r}"
            )
        if self.contention_bytes is not None and self.contention_bytes < 64:
            raise ValueError(
                f"timing.contention_bytes must be at least 64 (a cache line), got {self.contention_bytes}"
            )
        if self.batch < 1:
            raise ValueError(f"timing.batch must be >= 1, got {self.batch}")
        if self.rounds < 1:
            raise ValueError(f"timing.rounds must be >= 1, got {self.rounds}")
        if self.race is not None and self.race <= 1:
            raise ValueError(f"timing.race must be > 1 (a multiple of the best time so far), got {self.race}")
        if self.retime is not None and self.retime <= 1:
            raise ValueError(f"timing.retime must be > 1 (a multiple of a median time), got {self.retime}")
        if self.retime_wait < 0:
            raise ValueError(f"timing.retime_wait must be >= 0 seconds, got {self.retime_wait}")

    cpu: int | None = None  # None: the last CPU this process may use (CPU 0 takes most interrupts)
    # OpenMP threads of a parallel kernel (Tpar/Tfused); > 1 runs on that many CPUs (cpus_for), 1 keeps
    # the single-core pinning
    threads: int = 1
    align: int = ALIGN  # bytes of alignment of every tensor and the workspace


#: the counter backends the driver reads itself (harness/cachegrind.py simulates one after the run)
DRIVER_COUNTERS = ("papi", "perf_event")


@dataclass(frozen=True)
class RunLimits:
    timeout_s: float = 60.0
    memory_bytes: int | None = None  # None: 80% of RAM, so a runaway kernel cannot take the machine down


@dataclass
class RunResult:
    status: str  # "ok", "crash", "timeout", "kernel_error" or "error"
    reason: str = ""
    output: np.ndarray | None = None
    times_ns: list[int] = field(default_factory=list)
    tsc: list[int] = field(default_factory=list)
    tsc_hz: float | None = None
    counter_backend: str = "none"
    counters: dict[str, list[int]] = field(default_factory=dict)
    counters_unavailable: dict[str, str] = field(default_factory=dict)
    cold_method: str = "none"
    n_reps: int = 0
    raced: bool = False  # timing stopped early: slower than give_up_ns (TimingConfig.race)
    threads: int = 1  # OMP_NUM_THREADS the kernel ran with
    cpus: list[int] = field(default_factory=list)  # the CPU set the child ran on
    impl: str = ""  # what a library kernel reported choosing (its IMPL_PREFIX line on stderr)
    contention: str = "none"  # the co-runner the timing met (TimingConfig.contention)
    contention_bytes: int = 0  # its footprint
    contention_gbps: float = 0.0  # what it streamed, GB/s: how hard it pushed


@functools.cache
def _papi_links(cc: str) -> bool:
    """papi.h can exist without a usable libpapi (or the reverse): only a test link decides."""
    if not PAPI_HEADER.exists():
        return False
    code = "#include <papi.h>\nint main(void) { return PAPI_library_init(PAPI_VER_CURRENT) < 0; }\n"
    with tempfile.TemporaryDirectory(prefix="papi-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(code)
        cmd = [cc, str(src), "-o", str(Path(tmp) / "probe"), "-lpapi"]
        try:
            return subprocess.run(cmd, capture_output=True, timeout=60, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def build_driver(cache_dir: Path, cc: str = "gcc") -> Path:
    """The driver executable for this machine, compiled once (keyed by source, flags and compiler)."""
    papi = _papi_links(cc)
    flags = ["-O2", "-std=gnu11", *(["-DHAVE_PAPI"] if papi else [])]
    libs = ["-ldl", "-lm", *(["-lpapi"] if papi else [])]
    result = build_executable(DRIVER_SOURCE, cache_dir, flags, libs, cc)
    if not result.ok or result.so_path is None:
        raise RuntimeError(f"cannot build the measurement driver ({cc_version(cc)}):\n{result.error}")
    return result.so_path


def default_cpu() -> int:
    return max(os.sched_getaffinity(0))


def cpus_for(timing: TimingConfig) -> list[int]:
    """The CPUs a run is pinned to: one (``timing.cpu`` or the default) for a serial kernel, the last
    ``threads`` CPUs this process may use for a parallel one (an error if there are fewer)."""
    if timing.threads < 1:
        raise ValueError(f"timing.threads must be >= 1, got {timing.threads}")
    if timing.threads == 1:
        return [default_cpu() if timing.cpu is None else timing.cpu]
    allowed = sorted(os.sched_getaffinity(0))
    if timing.threads > len(allowed):
        raise ValueError(f"timing.threads={timing.threads} but this process may use only {len(allowed)} CPUs")
    return allowed[-timing.threads :]


def corunner_cpu(timing: TimingConfig, cpus: Sequence[int]) -> int:
    """The CPU of a contention co-runner: the last one this process may use besides the kernel's."""
    free = sorted(set(os.sched_getaffinity(0)) - set(cpus))
    if not free:
        raise ValueError(
            f"timing.contention={timing.contention} needs a CPU besides the kernel's {list(cpus)}, and this "
            "process may use no other: run it where two CPUs are allowed (taskset) or with timing.threads=1"
        )
    return free[-1]


def _limit_memory(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _tail(text: str) -> str:
    return text.strip()[-STDERR_TAIL:]


def run_kernel(
    so_path: Path,
    tensors: Sequence[np.ndarray],
    workspace_bytes: int = 0,
    timing: TimingConfig | None = None,
    counters: Sequence[str] = ("papi", "perf_event"),
    limits: RunLimits | None = None,
    workdir: Path = Path("results/cache"),
    driver: Path | None = None,
    give_up_ns: float | None = None,
) -> RunResult:
    """Run ``so_path`` on ``tensors`` (ABI order, output first) and time it; never raises for a bad kernel.

    ``give_up_ns``: stop timing after two calls if both were slower than this (racing).

    ``workdir`` holds the compiled driver; tensor files go to a temporary directory under TMP_ROOT
    (/dev/shm), or under ``workdir`` where that does not exist, and are removed in every case.
    """
    interrupt.check()
    timing = timing or TimingConfig()
    limits = limits or RunLimits()
    workdir = Path(workdir)
    try:
        driver = driver or build_driver(workdir)
    except RuntimeError as exc:
        return RunResult("error", str(exc))
    arrays = [np.ascontiguousarray(t, dtype=np.float32) for t in tensors]
    if not arrays:
        return RunResult("error", "no tensors: the output tensor comes first")
    m = machine.detect()
    flush_bytes = timing.flush_bytes or 8 * (m.llc_bytes or 32 << 20)
    memory = limits.memory_bytes or int(0.8 * m.memory_bytes)
    try:
        cpus = cpus_for(timing)
        corun = [] if timing.contention == "none" else [
            "--corun", timing.contention, "--corun-cpu", str(corunner_cpu(timing, cpus)),
            "--corun-bytes", str(timing.contention_bytes or m.llc_bytes or 32 << 20),
        ]  # fmt: skip
    except ValueError as exc:
        return RunResult("error", str(exc))

    tmp_parent = TMP_ROOT if TMP_ROOT.is_dir() and os.access(TMP_ROOT, os.W_OK) else workdir
    tmp_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-run-", dir=tmp_parent) as tmp:
        driver_counters = ",".join(c for c in counters if c in DRIVER_COUNTERS)
        cmd = [str(driver), "--lib", str(Path(so_path).resolve())]
        for i, a in enumerate(arrays):
            path = Path(tmp) / f"t{i}.bin"
            a.tofile(path)
            cmd += ["--tensor", f"{path}:{a.size}"]
        out_path = Path(tmp) / "out.bin"
        cmd += [
            "--out", str(out_path), "--ws", str(workspace_bytes), "--align", str(timing.align),
            "--mode", timing.mode, "--cold-method", timing.cold_method, "--flush-bytes", str(flush_bytes),
            "--warmup", str(timing.warmup), "--warmup-seconds", repr(timing.warmup_seconds),
            "--min-reps", str(timing.min_reps),
            "--max-reps", str(timing.max_reps), "--rel-ci", repr(timing.rel_ci),
            "--max-seconds", repr(timing.max_seconds), "--counters", driver_counters,
            "--cpus", ",".join(map(str, cpus)), "--threads", str(timing.threads),
            "--batch", str(timing.batch), "--give-up-ns", repr(float(give_up_ns or 0.0)), *corun,
        ]  # fmt: skip
        # Pinned to one CPU, library threads would only contend with each other; a parallel kernel gets
        # its OpenMP threads (the driver sets OMP_NUM_THREADS), one per CPU of its set
        env = {**os.environ}
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
            env.setdefault(var, "1")
        if timing.threads > 1:
            env.setdefault("OMP_PROC_BIND", "spread")
            env.setdefault("OMP_PLACES", "threads")  # one place per CPU of the set
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=limits.timeout_s,
                env=env,
                preexec_fn=functools.partial(_limit_memory, memory),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return RunResult("timeout", f"timeout after {limits.timeout_s:g}s")
        except OSError as exc:
            return RunResult("error", f"cannot start the driver: {exc}")
        return _parse(proc, out_path, arrays[0])


def reported_impl(stderr: str | None) -> str:
    """The last implementation a kernel announced on stderr (a library choosing among its own kernels,
    e.g. oneDNN's ``jit:avx2``), so the row says which code was timed under the library's name."""
    lines = (stderr or "").splitlines()
    found = [ln.removeprefix(IMPL_PREFIX).strip() for ln in lines if ln.startswith(IMPL_PREFIX)]
    return found[-1] if found else ""


def _parse(proc: subprocess.CompletedProcess[str], out_path: Path, output_like: np.ndarray) -> RunResult:
    interrupt.raise_if_stopped(proc.returncode, "the kernel's driver")
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = str(-proc.returncode)
        stderr = _tail(proc.stderr)
        return RunResult("crash", f"signal {name}" + (f": {stderr}" if stderr else ""))
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return RunResult("error", f"exit {proc.returncode}, no JSON from the driver: {_tail(proc.stderr)}")
    status = data.get("status", "error")
    if status != "ok" or proc.returncode != 0:
        return RunResult(status if status != "ok" else "error", data.get("reason") or _tail(proc.stderr))
    output = np.fromfile(out_path, dtype=np.float32)
    if output.size != output_like.size:
        return RunResult("error", f"output file has {output.size} floats, expected {output_like.size}")
    return RunResult(
        status="ok",
        output=output.reshape(output_like.shape),
        times_ns=data["times_ns"],
        tsc=data["tsc"],
        tsc_hz=data["tsc_hz"],
        counter_backend=data["counter_backend"],
        counters=data["counters"],
        counters_unavailable=data["counters_unavailable"],
        cold_method=data["cold_method"],
        n_reps=data["n_reps"],
        raced=bool(data.get("raced", False)),
        threads=int(data.get("threads", 1)),
        cpus=[int(c) for c in data.get("cpus", [])],
        impl=reported_impl(proc.stderr),
        contention=str(data.get("corun", "none")),
        contention_bytes=int(data.get("corun_bytes", 0)),
        contention_gbps=float(data.get("corun_gbps", 0.0)),
    )
