"""Random search of seed 000 §5.4.5 (``random``) and the sampler of §6.5 (``levels``).

``search.params.model_prior: k`` (beyond the thesis, issue 32's lever "the §5.4.3 footprint model as a
prior for the sampler, not only a filter"): each proposal is the best by the model's metric of ``k``
fresh draws, so the draws lean towards low data movement and keep the sampler's variety (the ``model``
strategy instead sorts one large pool and proposes it best first). 1 (default) is the thesis's uniform
draw. ``params.bandwidths`` are the metric's (``harness.search.model``).
"""

from __future__ import annotations

from harness.search import Problem, SearchConfig, SearchError, Strategy
from harness.search._conv import Sampled
from harness.search.model import bandwidths, metric_for
from kernels.candidate import Candidate

PARAMS = ("model_prior", "bandwidths")


class RandomSearch(Strategy):
    """A plan uniformly, then tiling atoms inner to outer, uniform over (dimension, divisor) pairs."""

    name = "random"
    sampler = "random"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        p = cfg.params
        if unknown := set(p) - set(PARAMS):
            raise SearchError(
                f"search.params: unknown key(s) {sorted(unknown)} for {self.name}; known: {PARAMS}"
            )
        k = p.get("model_prior", 1)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise SearchError(f"search.params.model_prior must be an integer >= 1 (1: uniform), got {k!r}")
        self.prior = k
        self.bandwidths = bandwidths(p)
        self.draws = Sampled(problem, cfg, self.sampler)

    def _next(self) -> Candidate | None:
        if self.prior == 1:
            return self.draws.next()
        drawn = [c for c in (self.draws.next() for _ in range(self.prior)) if c is not None]
        if not drawn:
            return None
        # the lowest metric; the first of equal scores (min keeps it): the seeded order decides
        return min(drawn, key=lambda c: metric_for(self.problem, c.text, self.bandwidths))

    def ask(self, n: int) -> list[Candidate]:
        out = []
        for _ in range(n):
            c = self._next()
            if c is None:
                break
            out.append(c)
        return out


class LevelsSampler(RandomSearch):
    """§6.5: levels per dimension uniform in [1, 4], divisible or free sizes, uniform-pop permutation."""

    name = "levels"
    sampler = "levels"
