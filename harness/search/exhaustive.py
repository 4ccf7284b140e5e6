"""Exhaustive search: every candidate of the space, in a fixed order, up to the budget.

For a conv space (a ``conv:`` section and no static schemes) the candidates are every microkernel plan x
every divisible tiling (up to ``max_levels`` per dimension) in the fixed permutation; only small
workloads have a space small enough for this to mean "exhaustive" (the budget caps the rest).
"""

from __future__ import annotations

from harness.search import Problem, SearchConfig, Strategy
from harness.search._conv import candidate, conv_context
from kernels.candidate import Candidate
from kernels.conv_space import exhaustive_tilings

MAX_ENUMERATED = 100_000


class Exhaustive(Strategy):
    name = "exhaustive"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        if "conv" in problem.space and not problem.space.get("schemes"):
            ctx = conv_context(problem)
            limit = cfg.budget or MAX_ENUMERATED
            texts = exhaustive_tilings(ctx, limit)
            self.todo = [candidate(problem, ctx, t) for t in texts]
        else:
            self.todo = [c for c in problem.candidates if c.kind != "baseline"]

    def ask(self, n: int) -> list[Candidate]:
        out, self.todo = self.todo[:n], self.todo[n:]
        return out
