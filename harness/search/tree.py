"""Tree search of seed 000 §5.4.4 (Figs 5.9-5.10): the tiling is grown bottom-up, one cache level at a time.

Edges are (dimension, divisor != 1 of the size left); nodes are expanded level by level (L1, L2, L3):
- a dimension is used at most once per cache level;
- *grow* phase: the dimensions chosen at this level must all index one common tensor;
- when the footprint exceeds ``threshold = cache / 2`` the level switches to *reuse*: only dimensions
  absent from that tensor; a branch overflowing the cache during grow is aborted, an overflow during
  reuse is a checkpoint (the level is done);
- after each level the ``num_branches`` best partial schemes by the §5.4.3 metric are kept, per
  microkernel plan; below L1 a register level reuses the microkernel's output tile (c, r, s only).
Dimensions left after L3 become the outermost tiles. The plans' candidates are proposed in turn, each
plan's best metric first.
The thesis never fully evaluated this search (corner cases find no solution); here a level with no
checkpoint keeps its branches as they are, so small problems still get candidates.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from harness.search import Problem, SearchConfig, SearchError, Strategy
from harness.search._conv import candidate, conv_context
from harness.search.model import bandwidths, metric_for
from kernels.candidate import Candidate
from kernels.conv_space import CONV_DIMS, Plan, conv_footprints, divisors

TENSOR_DIMS = {"I": {"h", "w", "r", "s", "c"}, "O": {"h", "w", "k"}, "K": {"r", "s", "c", "k"}}


@dataclass(frozen=True)
class Node:
    plan: Plan
    rem: tuple[tuple[str, int], ...]  # trip counts left per dimension
    cover: tuple[tuple[str, int], ...]  # elements covered so far per dimension (the suffix's sizes)
    atoms: tuple[str, ...]  # inner first
    whole: tuple[tuple[str, str], ...]  # λ_seq / R atoms still to place (outermost)


class TreeSearch(Strategy):
    name = "tree"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        self.ctx = conv_context(problem)
        if self.ctx.space.parallel:
            raise SearchError(
                "the tree search builds sequential schemes: with space.conv.parallel use "
                "search=random, levels or model"
            )
        p = cfg.params
        self.branches = int(p.get("num_branches", 8))
        self.max_children = int(p.get("max_children", 64))
        self.bws = bandwidths(p)
        self.rng = random.Random(cfg.seed)
        self.stride = int(dict(problem.workload.op.params).get("stride", 1))
        seen: dict[str, Candidate] = {}
        for t in self.search():
            c = candidate(problem, self.ctx, t)
            seen.setdefault(c.key, c)
        self.todo = list(seen.values())

    # -- the tree ----------------------------------------------------------------------------------------
    def roots(self) -> list[Node]:
        out = []
        lanes = self.ctx.lanes
        for plan in self.ctx.plans:
            rem = self.ctx.remaining(plan)
            cover = {d: min(plan.footprint(d, lanes), self.ctx.sizes[d]) for d in CONV_DIMS}
            for d in plan.partial_dims:
                cover[d] = plan.footprint(d, lanes)
            out.append(Node(plan, tuple(rem.items()), tuple(cover.items()),
                            (), tuple(self.ctx.whole_atoms(plan).items())))  # fmt: skip
        return out

    def footprint(self, cover: dict[str, int]) -> int:
        return sum(conv_footprints(cover, self.stride).values())

    def expand_level(self, node: Node, capacity: float, first: bool = False) -> list[Node]:
        """Every way to tile one cache level above ``node`` (grow, then reuse, until a checkpoint).

        ``first``: the register level. The microkernel has grown the output tile in registers, so the level
        is in reuse of it from the start: only c, r, s (the reduction), and the registers never overflow by
        them, so each gets a tile. The §5.4.3 metric counts cache traffic only; without this level the tree
        put h or w right above the microkernel, where every accumulator is loaded and stored around each FMA
        step (26% of peak on resnet18_07, random search 83%)."""
        done: list[Node] = []
        start = (frozenset({"O"}), "reuse") if first else (None, "grow")
        frontier = [(node, frozenset(), *start)]  # (node, dims used, grown tensors, phase)
        while frontier and len(done) < self.max_children:
            cur, used, common, phase = frontier.pop()
            rem, cover = dict(cur.rem), dict(cur.cover)
            moves = []
            for d in CONV_DIMS:
                if d in used:
                    continue
                tensors = {t for t, ds in TENSOR_DIMS.items() if d in ds}
                if phase == "grow":
                    inter = tensors if common is None else common & tensors
                    if not inter:
                        continue
                else:
                    inter = common
                    if any(d in TENSOR_DIMS[t] for t in common):
                        continue
                for q in divisors(rem[d]):
                    moves.append((d, q, inter))
            if not moves:
                done.append(cur)
                continue
            self.rng.shuffle(moves)
            for d, q, inter in moves[: self.max_children]:
                new_cover = {**cover, d: cover[d] * q}
                fp = self.footprint(new_cover)
                child = Node(cur.plan, tuple({**rem, d: rem[d] // q}.items()), tuple(new_cover.items()),
                             (*cur.atoms, f"T_{{{q},{d}}}"), cur.whole)  # fmt: skip
                if phase == "grow" and fp > capacity:
                    continue  # aborted branch
                if phase == "reuse" and fp > capacity:
                    done.append(child)  # checkpoint
                    continue
                next_phase = "reuse" if fp > capacity / 2 else phase
                frontier.append((child, used | {d}, inter, next_phase))
        return done or [node]

    def complete(self, node: Node) -> str:
        """The node's scheme: its atoms, then what is left as outermost tiles, then the whole atoms."""
        inner = list(node.atoms)
        inner += [f"T_{{{n},{d}}}" for d, n in node.rem if n > 1]
        inner += [a for _, a in node.whole]
        return "[" + ", ".join([*reversed(inner), *node.plan.suffix()]) + "]"

    def search(self) -> list[str]:
        """Each microkernel plan grows its own tree and the plans' leaves are proposed in turn, each plan's
        best metric first: the metric cannot compare microkernels (it sees no register traffic) and across
        plans it preferred the one-accumulator fallback U_{1,w} U_{1,k} V_k (3% of peak on resnet18_12)."""
        roots = self.roots()
        final = max(self.branches, -(-(self.cfg.budget or self.branches) // len(roots)))
        per_plan = []
        levels = [math.inf, *(c / 4 for c in self.problem.caches)]  # registers, then L1..L3 in floats
        for root in roots:
            nodes = [root]
            for level, capacity in enumerate(levels):
                keep = final if level == len(levels) - 1 else self.branches
                children = [c for n in nodes for c in self.expand_level(n, capacity, first=level == 0)]
                nodes = sorted(children, key=lambda n: (metric_for(self.problem, self.complete(n), self.bws),
                                                        n.atoms))[:keep]  # fmt: skip
            per_plan.append([self.complete(n) for n in nodes])
        texts = [t for turn in itertools.zip_longest(*per_plan) for t in turn if t is not None]
        return [t for t in dict.fromkeys(texts) if self.ctx.legal(t)]

    def ask(self, n: int) -> list[Candidate]:
        out, self.todo = self.todo[:n], self.todo[n:]
        return out
