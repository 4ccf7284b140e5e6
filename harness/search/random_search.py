"""Random search of seed 000 §5.4.5 (``random``) and the sampler of §6.5 (``levels``)."""

from __future__ import annotations

from harness.search import Problem, SearchConfig, Strategy
from harness.search._conv import Sampled
from kernels.candidate import Candidate


class RandomSearch(Strategy):
    """A plan uniformly, then tiling atoms inner to outer, uniform over (dimension, divisor) pairs."""

    name = "random"
    sampler = "random"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        self.draws = Sampled(problem, cfg, self.sampler)

    def ask(self, n: int) -> list[Candidate]:
        out = []
        for _ in range(n):
            c = self.draws.next()
            if c is None:
                break
            out.append(c)
        return out


class LevelsSampler(RandomSearch):
    """§6.5: levels per dimension uniform in [1, 4], divisible or free sizes, uniform-pop permutation."""

    name = "levels"
    sampler = "levels"
