"""A black-box auto-tuner over the conv space: Optuna's TPE sampler (seeded), the role Ansor plays in the
thesis's comparisons (§6.1, Fig 6.2: 8 random samplings vs 8 auto-tuner runs).

Encoding of a scheme as Optuna parameters: the microkernel plan (categorical), per dimension the index of
an ordered factorization of the trip count left above the microkernel (up to ``max_levels`` factors;
parameter names carry the plan, so each parameter keeps one distribution), and the permutation as the
sequence of uniform pops of §6.5 driven by float parameters. Failed candidates count as 0% of peak.
"""

from __future__ import annotations

import logging

from harness.search import Problem, SearchConfig, SearchError, Strategy
from harness.search._conv import candidate, conv_context
from kernels.candidate import Candidate
from kernels.conv_space import CONV_DIMS, factorizations


class OptunaSearch(Strategy):
    name = "optuna"
    adaptive = True

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        import optuna

        optuna.logging.set_verbosity(logging.WARNING)
        self.ctx = conv_context(problem)
        if self.ctx.space.parallel:
            raise SearchError(
                "the Optuna search builds sequential schemes: with space.conv.parallel use "
                "search=random, levels or model"
            )
        startup = int(cfg.params.get("n_startup_trials", 10))
        sampler = optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=startup)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self.pending: dict[str, list] = {}
        self.known: dict[str, float] = {}

    def _splits(self, n: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for lv in range(1, self.ctx.space.max_levels + 1):
            out += list(factorizations(n, lv))
        return out or [()]

    def _scheme(self, trial) -> str:  # noqa: ANN001 (optuna.Trial)
        plans = self.ctx.plans
        pi = trial.suggest_categorical("plan", list(range(len(plans))))
        plan = plans[pi]
        rem = self.ctx.remaining(plan)
        whole = self.ctx.whole_atoms(plan)
        stacks: dict[str, list[str]] = {}
        for d in CONV_DIMS:
            if d in whole:
                stacks[d] = [whole[d]]
            elif rem[d] > 1:
                splits = self._splits(rem[d])
                i = trial.suggest_categorical(f"split_{d}_p{pi}", list(range(len(splits))))
                stacks[d] = [f"T_{{{q},{d}}}" for q in splits[i]]
        inner_first: list[str] = []
        step = 0
        while stacks:
            avail = sorted(stacks)
            x = trial.suggest_float(f"pop_{step}", 0.0, 1.0)
            d = avail[min(int(x * len(avail)), len(avail) - 1)]
            inner_first.append(stacks[d].pop(0))
            if not stacks[d]:
                del stacks[d]
            step += 1
        return "[" + ", ".join([*reversed(inner_first), *plan.suffix()]) + "]"

    def ask(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        for _ in range(200):  # duplicates are told their known value at once and re-asked
            if len(out) >= n:
                break
            trial = self.study.ask()
            cand = candidate(self.problem, self.ctx, self._scheme(trial))
            if cand.key in self.known:
                self.study.tell(trial, self.known[cand.key])
                continue
            self.pending.setdefault(cand.key, []).append(trial)
            if len(self.pending[cand.key]) == 1:
                out.append(cand)
        return out

    def tell(self, cand: Candidate, perf: float | None) -> None:
        value = float(perf) if perf is not None else 0.0
        self.known[cand.key] = value
        for trial in self.pending.pop(cand.key, []):
            self.study.tell(trial, value)
