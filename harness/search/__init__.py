"""Search strategies behind one interface (seed 000 §5.4; the cut follows kernel_tuner's strategies).

A strategy proposes candidates (:meth:`Strategy.ask`) and is told how each performed
(:meth:`Strategy.tell`); :func:`harness.experiment.run_experiment` drives it within a budget. Every
strategy is seeded (``SearchConfig.seed``), so a rerun proposes the same sequence: a resumed search finds
its first candidates in the store, tells the strategy their stored performance without measuring them
again, and continues where it stopped.

Strategies (``search=<name>``, ``conf/search/*.yaml``), one module each:
- ``exhaustive``: every candidate of the space in a fixed order (conv spaces: every divisible tiling with
  the fixed permutation), up to the budget;
- ``random``: the random search of §5.4.5 (inner to outer, uniform over dimension x divisor);
- ``levels``: the sampler of §6.5 (levels per dimension, divisible or free sizes, uniform-pop permutation);
- ``model``: model-based filtering of §5.4.3 (a pool of samples sorted by the footprint/movement metric,
  the top ``budget`` run);
- ``tree``: the tree search of §5.4.4 (grow/reuse per cache level, threshold = cache / 2);
- ``optuna``: a black-box auto-tuner (Optuna's TPE sampler), the role Ansor plays in the thesis;
- ``refine``: random draws, then mutations of the best measured so far (local search; issue 32).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernels.candidate import Candidate, Workload

STRATEGIES: dict[str, str] = {
    "exhaustive": "harness.search.exhaustive:Exhaustive",
    "random": "harness.search.random_search:RandomSearch",
    "levels": "harness.search.random_search:LevelsSampler",
    "model": "harness.search.model:ModelFilter",
    "tree": "harness.search.tree:TreeSearch",
    "optuna": "harness.search.optuna_search:OptunaSearch",
    "refine": "harness.search.refine:Refine",
}


class SearchError(ValueError):
    """A bad search configuration (one line, names the key)."""


@dataclass(frozen=True)
class SearchConfig:
    strategy: str = "exhaustive"
    budget: int | None = None  # candidates proposed (None: the whole space for exhaustive)
    seed: int = 0
    batch: int = 4  # candidates compiled together (2 cores); adaptive strategies use 1
    params: Mapping[str, Any] = field(default_factory=dict)  # strategy-specific knobs
    confirm: int = 0  # with timing.rounds > 1: the best this many found are re-timed with the baselines
    # ... and so are the best ``confirm`` of each run's first N proposals, for each N here: the "best of
    # 100" a figure reports from a 1000-draw run must be a confirmed row too, not a draw timed once
    confirm_within: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, conf: Mapping[str, Any] | None) -> SearchConfig | None:
        if not conf or ("strategy" in conf and conf["strategy"] is None):  # conf/search/none.yaml
            return None
        conf = dict(conf)
        name = conf.get("strategy", "exhaustive")
        if name not in STRATEGIES:
            raise SearchError(f"search.strategy={name!r} is not allowed; allowed: {', '.join(STRATEGIES)}")
        budget = conf.get("budget")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise SearchError(f"search.budget must be a positive integer or null, got {budget!r}")
        batch = conf.get("batch", 4)
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise SearchError(f"search.batch must be a positive integer, got {batch!r}")
        seed = conf.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise SearchError(f"search.seed must be an integer, got {seed!r}")
        confirm = conf.get("confirm", 0)
        if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
            raise SearchError(f"search.confirm must be a non-negative integer, got {confirm!r}")
        within = conf.get("confirm_within") or ()
        if (
            isinstance(within, (str, bytes))
            or not isinstance(within, Sequence)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in within)
        ):
            raise SearchError(f"search.confirm_within must be a list of positive integers, got {within!r}")
        unknown = set(conf) - {"strategy", "budget", "seed", "batch", "params", "confirm", "confirm_within"}
        if unknown:
            raise SearchError(f"search: unknown key(s) {sorted(unknown)}")
        params = dict(conf.get("params") or {})
        return cls(name, budget, seed, batch, params, confirm, tuple(sorted(set(within))))


@dataclass
class Problem:
    """What a strategy searches: the workload, the space configuration and the code-generation options."""

    workload: Workload
    space: Mapping[str, Any]
    target: str
    base_options: Mapping[str, Any]
    candidates: list[Candidate]  # the space's static candidates (what exhaustive runs for non-conv spaces)
    selected: list[dict[str, int]] | None = None  # microkernels selected on this machine (k in vectors)
    caches: tuple[int, ...] = (32 * 1024, 512 * 1024, 32 * 1024 * 1024)  # bytes, L1..L3 of this machine
    # other workloads' best schemes (space.transfer_from): search=refine maps them onto this one to start
    transfer: list[str] = field(default_factory=list)


class Strategy(ABC):
    """Propose candidates; learn from their performance (% of peak, None when not ok)."""

    name = "base"
    adaptive = False  # True: needs tell() before the next ask() (batch of 1)

    def __init__(self, problem: Problem, cfg: SearchConfig):
        self.problem = problem
        self.cfg = cfg

    @abstractmethod
    def ask(self, n: int) -> list[Candidate]:
        """Up to ``n`` new candidates; an empty list when the space is exhausted."""

    def tell(self, cand: Candidate, perf: float | None) -> None:  # noqa: B027 (optional hook)
        """The measured (or stored) % of peak of a proposed candidate."""


def make_strategy(problem: Problem, cfg: SearchConfig) -> Strategy:
    module, cls = STRATEGIES[cfg.strategy].split(":")
    return getattr(importlib.import_module(module), cls)(problem, cfg)
