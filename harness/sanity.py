"""Measurement sanity: flag timings that should not be trusted at face value, never hide them.

Three signs are checked (none needs a PMU): a high coefficient of variation of the repetitions; other
processes busy on the core the kernel was pinned to while it ran; and a drift of the core's FMA
throughput between calibration and the experiment (a short peak probe at its start), which reveals
frequency changes a VM cannot otherwise see.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class SanityConfig:
    max_cov: float = 0.05  # flag a row whose repetitions vary more than this (std / mean)
    max_core_busy: float = 20.0  # % of the pinned core used by other processes while the kernel ran
    max_peak_drift: float = 0.10  # relative change of the probed peak against the calibrated one
    # a median above this % of the calibrated peak is not a fast kernel but a wrong reference: wider vectors
    # than its target (a library's JIT), more cores than pinned, or a miscounted flop count
    max_pct_peak: float = 110.0
    probe: bool = True  # run the peak probe (about 0.1 s per experiment)
    sentinel_s: float | None = 120.0  # the probe again every this many seconds of a run (harness/sentinel.py)


def _busy_seconds(cpu: int) -> float:
    t = psutil.cpu_times(percpu=True)[cpu]
    return (
        t.user
        + t.nice
        + t.system
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )


def _children_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class CoreWatch:
    """% of the cores used by *other* processes while a child (the driver) ran on them.

    The cores' busy time minus the CPU time of this process's finished children, over the wall time times
    the number of cores (a parallel kernel runs on several). Coarse (the kernel counts in ticks), so meant
    for flags above ~10%, not for corrections.
    """

    def __init__(self, cpus: int | Sequence[int]):
        self.cpus = [cpus] if isinstance(cpus, int) else list(cpus)
        self.other_pct = 0.0

    def _busy(self) -> float:
        return sum(_busy_seconds(c) for c in self.cpus)

    def __enter__(self) -> CoreWatch:
        self._busy0, self._child, self._wall = self._busy(), _children_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._wall
        other = (self._busy() - self._busy0) - (_children_seconds() - self._child)
        span = wall * len(self.cpus)
        self.other_pct = max(0.0, 100.0 * other / span) if wall > 0.05 else 0.0


def drift_flags(
    cfg: SanityConfig, calibrated: float | None, probed: list[float], calibration_load: float | None = None
) -> list[str]:
    """Flags for every row of an experiment: a peak probe that disagrees with the calibration, or a
    calibration that was itself measured beside other processes."""
    flags = []
    if calibration_load is not None and calibration_load > cfg.max_core_busy:
        flags.append(f"calibration under load: other processes used {calibration_load:.0f}% of the core")
    if calibrated and probed:
        drift = max(abs(p - calibrated) / calibrated for p in probed)
        if drift > cfg.max_peak_drift:
            values = ", ".join(f"{p:.1f}" for p in probed)
            flags.append(
                f"peak drift: probe {values} GFLOP/s vs calibrated {calibrated:.1f} "
                f"({100 * drift:.0f}% > {100 * cfg.max_peak_drift:g}%)"
            )
    return flags


def row_flags(
    cfg: SanityConfig, cov: float | None, other_pct: float, pct_peak: float | None = None, threads: int = 1
) -> list[str]:
    """The flags of a measured row: noisy repetitions, a busy core, a speed above the calibrated peak.

    ``pct_peak`` is against one core's calibrated peak (a row's ``peak_gflops``), also for a row timed on
    ``threads`` threads, so its ceiling is ``threads`` times the threshold: 2 threads may run at 190%."""
    flags = []
    if cov is not None and cov == cov and cov > cfg.max_cov:
        flags.append(f"noisy: CoV {cov:.3f} > {cfg.max_cov:g}")
    if other_pct > cfg.max_core_busy:
        flags.append(f"busy core: {other_pct:.0f}% used by other processes during the run")
    ceiling = cfg.max_pct_peak * max(1, threads)
    if pct_peak is not None and pct_peak == pct_peak and pct_peak > ceiling:
        on = f" on {threads} threads" if threads > 1 else ""
        flags.append(
            f"above peak: {pct_peak:.0f}% of the calibrated peak of its target{on} (> {ceiling:g}%): "
            "wider vectors than its target, more CPUs than pinned, or a wrong flop count"
        )
    return flags
