"""Semantic check: a kernel's output against the float64 reference, before its time counts.

Inputs are small non-zero integers by default: every product and partial sum is then exact in float32
(while sums stay below 2**24), so a correct kernel matches the reference *exactly* whatever its
summation order, and a single dropped, duplicated or misplaced term changes the result by at least 1.
This makes the check's verdict independent of the reduction order the scheme chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from kernels.candidate import Workload

INT_VALUES = np.array([-4, -3, -2, -1, 1, 2, 3, 4], dtype=np.float32)
EXACT_LIMIT = 2**24


@dataclass(frozen=True)
class CheckConfig:
    points: int = 1000  # sampled output points
    eps: float = 1e-5  # |o - e| / max(|o|, |e|) <= eps passes; 0/0 passes
    init: str = "integers"  # integers | uniform
    full_below: int = 4096  # outputs with at most this many points are checked in full
    boundary: bool = True  # always include the corners of the output among the sampled points

    def __post_init__(self) -> None:
        if self.init not in ("integers", "uniform"):
            raise ValueError(f"check.init must be 'integers' or 'uniform', got {self.init!r}")
        if self.points < 1 or self.eps < 0:
            raise ValueError("check.points must be >= 1 and check.eps >= 0")


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    mode: str  # sampled | full
    points: int
    max_err: float
    n_bad: int
    first_bad: tuple[int, ...] | None
    init: str


def effective_init(workload: Workload, cfg: CheckConfig) -> str:
    """Integers unless a reduction is so long that exactness would be lost."""
    red = 1
    for d in workload.op.reduction_dims:
        red *= workload.size[d]
    return "uniform" if cfg.init == "integers" and 16 * (red + 1) >= EXACT_LIMIT else cfg.init


def make_tensors(workload: Workload, seed: int, cfg: CheckConfig) -> list[np.ndarray]:
    """Seeded initial contents of every tensor in ABI order (the output is initialised too, so a kernel
    that overwrites instead of accumulating is caught)."""
    rng = np.random.default_rng(seed)
    init = effective_init(workload, cfg)
    out = []
    for shape in workload.shapes():
        if init == "integers":
            out.append(rng.choice(INT_VALUES, size=shape))
        else:
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(np.float32))
    return out


def sample_points(shape: tuple[int, ...], cfg: CheckConfig, seed: int) -> tuple[np.ndarray, str]:
    n = int(np.prod(shape))
    if n <= cfg.full_below:
        return np.stack(np.unravel_index(np.arange(n), shape), axis=1), "full"
    rng = np.random.default_rng(seed + 1)
    pts = np.stack([rng.integers(0, s, size=cfg.points) for s in shape], axis=1)
    if cfg.boundary:
        corners = np.array(list(product(*[(0, s - 1) for s in shape])), dtype=pts.dtype)
        pts = np.concatenate([corners, pts[len(corners) :]])
    return pts, "sampled"


def relative_error(out: np.ndarray, exp: np.ndarray) -> np.ndarray:
    out = out.astype(np.float64)
    denom = np.maximum(np.abs(out), np.abs(exp))
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(denom == 0, 0.0, np.abs(out - exp) / denom)
    return np.where(np.isfinite(out), err, np.inf)


def check_output(
    workload: Workload, initial: list[np.ndarray], output: np.ndarray, cfg: CheckConfig, seed: int
) -> CheckResult:
    """Compare ``output`` (after one kernel run on ``initial``) with the float64 reference."""
    shape = workload.shapes()[0]
    output = np.asarray(output).reshape(shape)
    pts, mode = sample_points(shape, cfg, seed)
    exp = workload.op.reference_points(initial, workload.size, pts)
    got = output[tuple(pts[:, a] for a in range(pts.shape[1]))]
    err = relative_error(got, exp)
    bad = np.flatnonzero(err > cfg.eps)
    return CheckResult(
        passed=len(bad) == 0,
        mode=mode,
        points=len(pts),
        max_err=float(err.max()) if len(err) else 0.0,
        n_bad=int(len(bad)),
        first_bad=tuple(int(x) for x in pts[bad[0]]) if len(bad) else None,
        init=effective_init(workload, cfg),
    )
