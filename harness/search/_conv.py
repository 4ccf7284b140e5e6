"""Helpers shared by the conv strategies: the sampling context of a problem, scheme text -> candidate."""

from __future__ import annotations

import random

from harness.search import Problem, SearchConfig, SearchError
from kernels.candidate import Candidate
from kernels.conv_space import Context, ConvSpace, Plan, context, draw, kept_weights
from kernels.scheme import format_scheme, parse_scheme


def conv_context(problem: Problem) -> Context:
    if "conv" not in problem.space:
        raise SearchError(
            f"this strategy samples convolution schemes: the space needs a `conv:` section "
            f"(e.g. space=conv_all), got space {problem.space.get('name')!r}"
        )
    space = ConvSpace.from_config(problem.space["conv"])
    ctx = context(space, problem.workload, problem.target, problem.selected)
    ctx.chunk_bytes = problem.caches[1] if len(problem.caches) > 1 else 0  # §5.6: chunks of at least L2
    return ctx


def candidate(problem: Problem, ctx: Context, text: str) -> Candidate:
    """One spelling per scheme (so one key); the space's partial mode is a code-generation option, and so is
    keeping the weights' outermost pack across calls (``constant_weights``)."""
    options = {**problem.base_options, "partial": ctx.space.partial}
    if kept_weights(ctx, text):
        options["constant"] = "K"
    return Candidate("scheme", format_scheme(parse_scheme(text)), tuple(sorted(options.items())))


class Sampled:
    """Draws without replacement from a sampler of kernels.conv_space (seeded)."""

    def __init__(self, problem: Problem, cfg: SearchConfig, sampler: str):
        self.problem, self.cfg, self.sampler = problem, cfg, sampler
        self.ctx = conv_context(problem)
        self.rng = random.Random(cfg.seed)
        self.seen: set[str] = set()
        self.misses = 0  # consecutive duplicate draws: a small space is exhausted after many
        self.last_plan: Plan | None = None  # the plan of the last draw returned

    def next(self) -> Candidate | None:
        while self.misses < 200:
            text, plan = draw(self.ctx, self.sampler, self.rng)
            cand = candidate(self.problem, self.ctx, text)
            if cand.key not in self.seen:
                self.seen.add(cand.key)
                self.misses = 0
                self.last_plan = plan
                return cand
            self.misses += 1
        return None
