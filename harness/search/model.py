"""Model-based filtering of seed 000 §5.4.3: sort candidates by a data-movement metric, run the top n.

The thesis enumerates every scheme compatible with an IOOpt-chosen permutation; IOOpt is not available,
so the pool here is ``params.pool`` draws of a sampler of this space (``params.sampler``: ``random`` or
``levels``; with ``space.conv.permutation=fixed`` the permutation is fixed as in the thesis). Each is
scored with ``Σ_i movement(L_i) / bw_i`` over the caches detected on this machine, where movement(L_i) is
the footprint of the shortest suffix overflowing L_i times the trip count above it.
The bandwidths (floats per cycle into L1, L2, L3; the thesis gives none) are ``params.bandwidths``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.search import Problem, SearchConfig, Strategy
from harness.search._conv import Sampled
from kernels.candidate import Candidate
from kernels.conv_space import model_metric

DEFAULT_BANDWIDTHS = (16.0, 8.0, 2.0)  # floats/cycle into L1 (from L2), L2 (from L3), L3 (from DRAM)


def bandwidths(params: Mapping[str, Any]) -> tuple[float, ...]:
    """The metric's bandwidths from a strategy's ``search.params`` (``bandwidths``, else the defaults)."""
    return tuple(float(b) for b in params.get("bandwidths", DEFAULT_BANDWIDTHS))


def metric_for(problem: Problem, text: str, bandwidths: tuple[float, ...] = DEFAULT_BANDWIDTHS) -> float:
    """The §5.4.3 metric of a scheme on this problem's caches; a non-finite value counts as the worst (inf),
    so every strategy that ranks by it sorts the same way."""
    from kernels.targets import get_target

    caps = [c / 4 for c in problem.caches][: len(bandwidths)]
    stride = int(dict(problem.workload.op.params).get("stride", 1))
    score = model_metric(text, problem.workload.size, get_target(problem.target).lanes, caps,
                         bandwidths[: len(caps)], stride)  # fmt: skip
    return score if math.isfinite(score) else math.inf


class ModelFilter(Strategy):
    name = "model"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        p = cfg.params
        budget = cfg.budget or 100
        pool_size = int(p.get("pool", min(max(20 * budget, 200), 5000)))
        bws = bandwidths(p)
        draws = Sampled(problem, cfg, str(p.get("sampler", "random")))
        pool: list[tuple[float, Candidate]] = []
        for _ in range(pool_size):
            c = draws.next()
            if c is None:
                break
            pool.append((metric_for(problem, c.text, bws), c))
        pool.sort(key=lambda sc: (sc[0], sc[1].key))
        self.scores = {c.key: s for s, c in pool}
        self.todo = [c for _, c in pool]

    def ask(self, n: int) -> list[Candidate]:
        out, self.todo = self.todo[:n], self.todo[n:]
        return out
