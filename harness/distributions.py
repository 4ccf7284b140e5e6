"""Performance distributions of a search space (seed 000 §5.1, §5.4.6): histograms, ECDF / survival,
expect(n, τ), the expected best of n draws, bootstrap confidence intervals and computation-weighted
averages per network.

All functions take plain arrays of "% of peak" values (one per candidate; failed candidates excluded by
the caller, as the thesis's distributions only count measured implementations).

- ``π(p) = |{c : perf(c) >= p}| / |C|`` is the empirical survival function (the thesis calls it the
  cumulative distribution);
- ``expect(n, τ) = π⁻¹(1 - (1 - τ)^{1/n})``: the performance reached by the best of n uniform draws with
  probability at least τ, i.e. the empirical quantile at level ``q = (1 - τ)^{1/n}`` (saturating at the
  sample maximum);
- ``E[max_n] = Σ_i x_(i) ((i/N)^n - ((i-1)/N)^n)`` for sorted x_(1..N), draws with replacement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

TAUS: tuple[float, ...] = (0.5, 0.7, 0.9)
BIN_WIDTH = 4.0  # % of peak (Figs 5.11-5.14)


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("no finite performance value")
    return x


def histogram(
    values: Sequence[float], width: float = BIN_WIDTH, top: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Density histogram with bins of ``width`` % starting at 0 (heights x width sum to 1).

    Returns (density, edges). The last bin reaches at least the sample maximum (and ``top`` if given).
    """
    x = _clean(values)
    hi = max(float(x.max()), top or 0.0)
    n_bins = max(1, int(np.floor(hi / width)) + 1)
    edges = np.arange(n_bins + 1) * width
    density, edges = np.histogram(x, bins=edges, density=True)
    return density, edges


def ecdf(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, F(x) = fraction of values <= x) at each sorted value."""
    x = np.sort(_clean(values))
    return x, np.arange(1, x.size + 1) / x.size


def survival(values: Sequence[float], points: Sequence[float] | np.ndarray) -> np.ndarray:
    """π(p): the fraction of candidates reaching at least p, at each point (Figs 6.10-6.14)."""
    x = np.sort(_clean(values))
    p = np.asarray(points, dtype=float)
    below = np.searchsorted(x, p, side="left")  # number of values < p
    return (x.size - below) / x.size


def quantile_level(n: int | np.ndarray, tau: float) -> np.ndarray | float:
    """q = (1 - τ)^{1/n}: the level of the quantile that the best of n draws exceeds with probability τ."""
    if not 0 < tau < 1:
        raise ValueError(f"τ must be in (0, 1), got {tau}")
    n_arr = np.asarray(n, dtype=float)
    if np.any(n_arr < 1):
        raise ValueError("n must be >= 1")
    return (1.0 - tau) ** (1.0 / n_arr)


def expect(values: Sequence[float], n: int | Sequence[int], tau: float) -> np.ndarray | float:
    """expect(n, τ) of §5.4.6: the empirical quantile of the sample at level (1 - τ)^{1/n}.

    The quantile is the inverse of the empirical survival function (lower interpolation, so the value is
    a measured candidate's and saturates at the sample maximum).
    """
    x = _clean(values)
    q = quantile_level(np.asarray(n), tau)
    out = np.quantile(x, q, method="inverted_cdf")
    return float(out) if np.ndim(out) == 0 else out


def expected_best(values: Sequence[float], n: int | Sequence[int]) -> np.ndarray | float:
    """E[max of n draws with replacement from the sample] (exact for the empirical distribution)."""
    x = np.sort(_clean(values))
    ns = np.atleast_1d(np.asarray(n, dtype=float))
    out = np.array([float(np.sum(x * _best_weights(x.size, k))) for k in ns])
    return float(out[0]) if np.ndim(n) == 0 else out


def _best_weights(size: int, n: float) -> np.ndarray:
    """P(the max of n draws from a sample of ``size`` is its i-th smallest), i = 1..size."""
    i = np.arange(1, size + 1)
    return (i / size) ** n - ((i - 1) / size) ** n


def bootstrap_ci(
    values: Sequence[float],
    statistic: str = "expect",
    n: int = 100,
    tau: float = 0.9,
    confidence_level: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI (scipy.stats.bootstrap) of ``expect(n, τ)``, ``best`` (E[max_n]),
    ``median`` or ``mean`` of the sample; fixed seed so a report is reproducible."""
    x = _clean(values)
    if x.size < 3 or np.all(x == x[0]):
        v = float(x[0]) if np.all(x == x[0]) else float("nan")
        return v, v
    q = float(quantile_level(np.asarray(n), tau))
    weights = _best_weights(x.size, n)
    # whole resamples at once (a row each): a quantile per row in a Python loop was most of the report's
    # time in the thesis's expect curves
    fns = {
        "expect": lambda s, axis=-1: np.quantile(s, q, axis=axis, method="inverted_cdf"),
        "best": lambda s, axis=-1: np.sum(np.sort(s, axis=axis) * weights, axis=axis),
        "median": lambda s, axis=-1: np.median(s, axis=axis),
        "mean": lambda s, axis=-1: np.mean(s, axis=axis),
    }
    if statistic not in fns:
        raise ValueError(f"statistic must be one of {sorted(fns)}, got {statistic!r}")
    res = stats.bootstrap(
        (x,), fns[statistic], confidence_level=confidence_level, n_resamples=n_resamples,
        method="percentile", random_state=np.random.default_rng(seed), vectorized=True,
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def best_of_first(values_in_order: Sequence[float], n: int) -> float:
    """The best of the first n candidates of a run, in the order they were proposed (Fig 6.2, 6.3:
    "best of 100 / of 1000 random draws"). NaN when the run proposed fewer than n: the best of fewer
    draws is a different statistic, not a stand-in for it."""
    x = np.asarray(values_in_order, dtype=float)
    if x.size < n:
        return float("nan")
    x = x[:n]
    x = x[np.isfinite(x)]
    return float(x.max()) if x.size else float("nan")


def weighted_average(perf: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Computation-weighted average of per-layer % of peak (Fig 6.3: weights = MACs of each layer).

    Layers without a finite value are left out (and so is their weight)."""
    num = den = 0.0
    for layer, p in perf.items():
        if p is None or not np.isfinite(p):
            continue
        w = float(weights[layer])
        num += w * float(p)
        den += w
    if den == 0:
        return float("nan")
    return num / den
