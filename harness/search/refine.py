"""Refinement after random sampling (issue 32): the thesis's random draws first, then local search around
the best schemes found (mutate one of the top ``top`` measured so far), as Ansor refines its samples.

The first ``explore`` proposals are the draws of ``params.sampler`` with this seed, so they are the very
draws ``search=random`` (or ``levels``) makes with the same seed and space: a refined run and a random run
of the same budget share their first ``explore`` candidates, and differ only in what follows. After that,
each proposal is a mutation of a parent drawn uniformly among the best ``top`` measured so far (a share
``restart`` of them are fresh draws instead, so a poor start is not refined forever). A mutation stays in
the space (legal, same microkernel set, permutations only where the space searches them, packing only
where it packs), and is one of:

- ``swap``: two neighbouring loops exchanged;
- ``move``: one loop (or the packing) moved to another place in the nest;
- ``shift``: a prime factor of a tile size moved to another tile of the same dimension;
- ``split`` / ``merge``: a tile split in two (the new loop placed anywhere) / two tiles of a dimension merged;
- ``plan``: another microkernel plan of the space, each dimension's tiles refactored to its new trip count
  at the same places;
- ``pack``: the weights' panel packing added or removed (spaces with ``space.conv.pack_weights`` > 0);

With ``space.transfer_from`` (another search's best schemes on the *other* workloads, ``harness.winners``)
the run starts from those schemes mapped onto this workload (:func:`transfer`: the same register tile and
loop order, the tiles refactored to this layer's trip counts): what the other layers' searches learnt,
the layer's own results left out. With ``seeds: true`` the run starts from the schemes of its space
instead of fresh draws (with ``space.best_of`` those are another search's winners, e.g. the best 4 of
``ttile_conv_random_levers``): they are measured first, in this experiment, then ``explore`` draws, then
the mutations. The refined winner is so compared with the winners it started from in the same rounds, and
a 1000-draw search is not drawn again.

And two directed ones, off unless ``search.params.mutations`` lists them (the default list is the seven
above, so the archived refine runs draw the same proposals from the same seed):

- ``tile``: another *register tile* of the space, then one of its plans: ``plan`` draws uniformly among
  plans, and λ_seq covers multiply them (the AVX2 stem has 98 plans, 2 of them on the 3 x 4-vector tile
  that oneDNN uses there), so a tile with many covers crowds the others out;
- ``reduce``: the innermost loop of each reduction dimension (c, r, s) moved right above the microkernel
  in a random order, the draws' ``reduction_inner`` prior applied to a measured scheme (the stem's best
  hand-placed scheme has them there: 86% of peak against the search's 68% on a Zen 2).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from math import prod

from harness.search import Problem, SearchConfig, SearchError, Strategy
from harness.search._conv import Sampled, candidate
from kernels.candidate import Candidate
from kernels.conv_space import (
    CONV_DIMS,
    MK_ORDER,
    PARTIAL_DIMS,
    REDUCTION_DIMS,
    SAMPLERS,
    Context,
    Plan,
    divisors,
    factorizations,
    level_order,
    panel_at,
    reductions_inner,
    weights_panel,
)
from kernels.scheme import Atom, parse_scheme

PLAIN = ("merge", "move", "pack", "plan", "shift", "split", "swap")  # the mutations of the archived runs
DEFAULTS = {
    "sampler": "random", "explore": 50, "top": 4, "restart": 0.1, "mutations": list(PLAIN), "seeds": False,
}  # fmt: skip
LOOPS = ("T", "R", "lambda_seq")  # the loops a plan mutation refactors (and the whole-dimension atoms)
TILE = "T"  # the only tile kind a mutation resizes (Texct/Tvar chains of free sizes are moved, not resized)


@dataclass(frozen=True)
class Nest:
    """A scheme cut where mutations act: the parallel head, the outer loops (and packing), the plan."""

    plan: Plan
    head: tuple[Atom, ...]
    outer: tuple[Atom, ...]

    def text(self) -> str:
        atoms = [a.text() for a in (*self.head, *self.outer)] + self.plan.suffix()
        return "[" + ", ".join(atoms) + "]"

    @classmethod
    def of(cls, text: str, plan: Plan) -> Nest:
        atoms = parse_scheme(text)
        n_suffix = len(plan.suffix())
        body = atoms[: len(atoms) - n_suffix]
        head = tuple(a for a in body if a.kind == "Tpar")
        return cls(plan, head, tuple(a for a in body if a.kind != "Tpar"))


def _params(cfg: SearchConfig) -> dict:
    params = {**DEFAULTS, **cfg.params}
    if unknown := set(params) - set(DEFAULTS):
        raise SearchError(f"search.params: unknown key(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    if params["sampler"] not in SAMPLERS:
        raise SearchError(f"search.params.sampler={params['sampler']!r}; allowed: {', '.join(SAMPLERS)}")
    for key, low in (("explore", 0), ("top", 1)):
        v = params[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise SearchError(f"search.params.{key} must be an integer >= {low}, got {v!r}")
    ops = params["mutations"]
    if isinstance(ops, str) or not ops or any(op not in MUTATIONS for op in ops):
        raise SearchError(
            f"search.params.mutations must be a non-empty list of {', '.join(sorted(MUTATIONS))}; got {ops!r}"
        )
    params["mutations"] = [str(op) for op in ops]
    if not isinstance(params["seeds"], bool):
        raise SearchError(f"search.params.seeds is true or false, got {params['seeds']!r}")
    r = params["restart"]
    if isinstance(r, bool) or not isinstance(r, int | float) or not 0 <= r <= 1:
        raise SearchError(f"search.params.restart is a probability in [0, 1], got {r!r}")
    return params


# -- mutations: each returns a new nest or None when it does not apply ------------------------------------
def _tiles(nest: Nest, d: str | None = None) -> list[int]:
    return [i for i, a in enumerate(nest.outer) if a.kind == TILE and (d is None or a.dim == d)]


def _tiled_twice(nest: Nest) -> list[str]:
    """The dimensions with two tiles or more (what a shift or a merge acts on), sorted."""
    return sorted(d for d in {nest.outer[i].dim for i in _tiles(nest)} if len(_tiles(nest, d)) >= 2)


def _swap(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    if len(nest.outer) < 2:
        return None
    i = rng.randrange(len(nest.outer) - 1)
    o = list(nest.outer)
    o[i], o[i + 1] = o[i + 1], o[i]
    return replace(nest, outer=tuple(o))


def _move(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    if len(nest.outer) < 2:
        return None
    o = list(nest.outer)
    a = o.pop(rng.randrange(len(o)))
    o.insert(rng.randrange(len(o) + 1), a)
    return replace(nest, outer=tuple(o))


def _primes(n: int) -> list[int]:
    return [p for p in divisors(n) if all(p % q for q in range(2, p))]


def _shift(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    dims = _tiled_twice(nest)
    if not dims:
        return None
    src, dst = rng.sample(_tiles(nest, rng.choice(dims)), 2)
    o = list(nest.outer)
    p = rng.choice(_primes(o[src].size))
    o[dst] = replace(o[dst], size=o[dst].size * p)
    if o[src].size == p:
        del o[src]
    else:
        o[src] = replace(o[src], size=o[src].size // p)
    return replace(nest, outer=tuple(o))


def _split(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    big = [i for i in _tiles(nest) if len(divisors(nest.outer[i].size)) > 1]  # not prime
    if not big:
        return None
    i = rng.choice(big)
    a = nest.outer[i]
    q = rng.choice(divisors(a.size)[:-1])  # the new loop's trip count, a proper divisor
    o = list(nest.outer)
    o[i] = replace(a, size=a.size // q)
    o.insert(rng.randrange(len(o) + 1), replace(a, size=q))
    return replace(nest, outer=tuple(o))


def _merge(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    dims = _tiled_twice(nest)
    if not dims:
        return None
    keep, gone = rng.sample(_tiles(nest, rng.choice(dims)), 2)
    o = list(nest.outer)
    o[keep] = replace(o[keep], size=o[keep].size * o[gone].size)
    del o[gone]
    return replace(nest, outer=tuple(o))


def tile_of(plan: Plan) -> tuple:
    """The register tile(s) of a plan without its λ_seq cover: (unrolls, λ dimension, the paired sizes)."""
    return plan.unroll, plan.lam_dim, tuple(sorted({a for _, a in plan.cover}))


def _plan(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    """Another plan of the space, drawn uniformly (:func:`_replan`)."""
    others = [p for p in ctx.plans if p != nest.plan]
    return _replan(ctx, nest, rng.choice(others), rng) if others else None


def _tile(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    """Another register tile of the space drawn uniformly, then one of its plans (covers) uniformly."""
    tiles = sorted({tile_of(p) for p in ctx.plans} - {tile_of(nest.plan)}, key=repr)
    if not tiles:
        return None
    tile = rng.choice(tiles)
    return _replan(ctx, nest, rng.choice([p for p in ctx.plans if tile_of(p) == tile]), rng)


def _reduce(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    """The innermost loop of each reduction dimension right above the microkernel, in a random order (the
    draws' prior, :func:`kernels.conv_space.reductions_inner`; only loops move, not free tiles or packs)."""
    if not any(a.dim in REDUCTION_DIMS and a.kind in LOOPS for a in nest.outer):
        return None
    pairs = [(a.dim if a.kind in LOOPS else None, a) for a in nest.outer]
    return replace(nest, outer=tuple(a for _, a in reductions_inner(pairs, rng)))


def _replan(ctx: Context, nest: Nest, new: Plan, rng: random.Random) -> Nest | None:
    """``nest`` on the plan ``new``: each dimension's loops keep their places (innermost first), refactored
    to the new trip count above the microkernel; a whole-dimension atom (λ_seq, R of a partial dimension)
    takes the place of the dimension's innermost loop, or gives its place to a tile."""
    free = any(a.kind in ("Texct", "Texctg", "Tvar") for a in nest.outer)
    if free or nest.head:  # free sizes and a parallel head are kept as drawn
        return None
    rem, whole = ctx.remaining(new), ctx.whole_atoms(new)
    panel = parse_scheme(f"[{weights_panel(new, ctx.lanes)}]")[0]  # the panels follow the microkernel's k
    o: list[Atom | None] = [panel if _is_panel(a) else a for a in nest.outer]
    for d in rem:
        at = [i for i, a in enumerate(o) if a is not None and a.dim == d and a.kind in LOOPS]
        if d in whole:  # the whole atom at the innermost loop's place, the others gone
            atom = parse_scheme(f"[{whole[d]}]")[0]
            if at:
                o[at[-1]] = atom
                for i in at[:-1]:
                    o[i] = None
            else:
                o.insert(rng.randrange(len(o) + 1), atom)
            continue
        tiles = [i for i in at if o[i].kind == TILE]
        for i in at:
            if i not in tiles:  # a whole atom of the old plan: a tile of the new trip count takes its place
                o[i] = Atom(TILE, d, rem[d]) if rem[d] > 1 and not tiles else None
        if rem[d] == 1 or not tiles:
            for i in tiles:
                o[i] = None
            if rem[d] > 1 and not at:
                o.insert(rng.randrange(len(o) + 1), Atom(TILE, d, rem[d]))
            continue
        if rem[d] == prod(o[i].size for i in tiles):
            continue
        for levels in range(len(tiles), 0, -1):  # as many levels as before if the new count allows
            if options := factorizations(rem[d], levels):
                break
        factors = rng.choice(options)  # inner first
        for i, q in zip(reversed(tiles), factors, strict=False):
            o[i] = replace(o[i], size=q)
        for i in tiles[: len(tiles) - len(factors)]:
            o[i] = None
    return Nest(new, nest.head, tuple(a for a in o if a is not None))


def _pack(ctx: Context, nest: Nest, rng: random.Random) -> Nest | None:
    """Toggle the weights' panel packing where the space's draws put it (kernels.conv_space): above the
    outermost h or w loop, or above every loop with ``constant_weights``."""
    if any(_is_panel(a) for a in nest.outer):
        return replace(nest, outer=tuple(a for a in nest.outer if not _is_panel(a)))
    at = panel_at(ctx, nest.plan, [a.dim for a in nest.outer])
    if at is None:
        return None
    pack = parse_scheme(f"[{weights_panel(nest.plan, ctx.lanes)}]")[0]
    return replace(nest, outer=(*nest.outer[:at], pack, *nest.outer[at:]))


def _is_panel(a: Atom) -> bool:
    """The weights packed in panels (``pack_weights``; the space's own ``packing`` writes Pack_X atoms)."""
    return a.kind == "PackT" and a.tensor == "K"


Mutation = Callable[[Context, Nest, random.Random], "Nest | None"]
MUTATIONS: dict[str, Mutation] = {
    "swap": _swap, "move": _move, "shift": _shift, "split": _split, "merge": _merge, "plan": _plan,
    "pack": _pack, "tile": _tile, "reduce": _reduce,
}  # fmt: skip


def mutations(ctx: Context, names: Sequence[str] = PLAIN) -> dict[str, Mutation]:
    """The mutations of ``names`` that stay in ``ctx``'s space: a fixed permutation is not reordered, the
    weights' panels are packed only in a space that packs them."""
    off = {"swap", "move", "split", "reduce"} if ctx.space.permutation == "fixed" else set()
    if not ctx.space.pack_weights or ctx.space.packing != "none":
        off.add("pack")
    return {k: MUTATIONS[k] for k in names if k not in off}


def refixed(ctx: Context, nest: Nest) -> Nest | None:
    """In a fixed-permutation space, the loops put back level by level in the space's order (a mutation
    that changes a dimension's levels moves the others); None if packing would have to move too."""
    if ctx.space.permutation != "fixed":
        return nest
    if any(a.dim is None for a in nest.outer):
        return None
    order = level_order([(a.dim, a) for a in nest.outer], ctx.space.fixed_order)
    return replace(nest, outer=tuple(a for _, a in order))


def mutate(
    ctx: Context, text: str, plan: Plan, rng: random.Random, tries: int = 30, names: Sequence[str] = PLAIN
) -> tuple[str, Plan] | None:
    """A legal mutation of the scheme ``text`` (drawn on ``plan``) among ``names``: one mutation, a second
    with probability 1/3; None when ``tries`` attempts gave nothing legal."""
    ops = mutations(ctx, names)
    names = sorted(ops)
    parent = Nest.of(text, plan)
    for _ in range(tries):
        child: Nest | None = parent
        for _step in range(1 + (rng.random() < 1 / 3)):
            child = ops[rng.choice(names)](ctx, child, rng) if child is not None else None
        child = refixed(ctx, child) if child is not None else None
        if child is None:
            continue
        out = child.text()
        if out != text and ctx.legal(out) and ctx.chunk_ok(out):
            return out, child.plan
    return None


MICRO = ("U", "Ul", "V")  # the atoms of a scheme's microkernel suffix


def transfer(ctx: Context, text: str, rng: random.Random, tries: int = 10) -> tuple[str, Plan] | None:
    """Another workload's scheme on this one (``space.transfer_from``): a plan of this space on the same
    register tile (the same microkernel suffix, and the same λ_seq unrolls where the scheme has a cover,
    else any cover of that tile), the scheme's loops kept in their order and refactored to this workload's
    trip counts as a plan mutation does (:func:`_replan`). None when no plan of this space has that tile
    (14 x 2 vectors on a 7-wide layer) or no legal refactoring turns up in ``tries``."""
    atoms = parse_scheme(text)
    n = len(atoms)
    while n and atoms[n - 1].kind in MICRO:
        n -= 1
    suffix, body = [a.text() for a in atoms[n:]], atoms[:n]
    sizes = tuple(sorted({u for a in body if a.kind == "lambda_seq" for _, u in a.seq}))
    same = [p for p in ctx.plans if p.suffix() == suffix]
    plans = [p for p in same if tile_of(p)[2] == sizes] or same
    outer = tuple(a for a in body if a.kind != "Tpar")  # the parallel head is this space's to draw
    for _ in range(tries if plans else 0):
        new = rng.choice(plans)
        child = _replan(ctx, Nest(new, (), outer), new, rng)
        child = refixed(ctx, child) if child is not None else None
        if child is not None and ctx.legal(out := child.text()) and ctx.chunk_ok(out):
            return out, child.plan
    return None


def plan_of(ctx: Context, text: str) -> Plan | None:
    """The plan of the space a scheme was drawn on: its microkernel suffix (and λ_seq cover) read back from
    the text; failing that, the plan the text itself spells (a scheme of another microkernel set: another
    machine's selection, ``space.best_of.machine``), when it covers this workload. None when neither fits
    (not a drawn scheme)."""
    parsed = parse_scheme(text)
    atoms = [a.text() for a in parsed]
    for plan in [*ctx.plans, *_spelled(ctx, parsed)]:
        suffix = plan.suffix()
        if atoms[-len(suffix) :] != suffix:
            continue
        whole = ctx.whole_atoms(plan)
        if all(a in atoms for a in whole.values()):
            return plan
    return None


def _spelled(ctx: Context, parsed: Sequence[Atom]) -> list[Plan]:
    """The plan a scheme's own atoms describe: the unrolls of its microkernel suffix (U and Uλ atoms above
    V_k), the cover of its λ_seq atom, and as partial the dimensions its microkernel does not divide."""
    if not parsed or parsed[-1].text() != "V_k":
        return []
    unroll: dict[str, int] = {}
    lam = None
    for a in reversed(parsed[:-1]):
        if a.kind == "U" and a.dim in MK_ORDER and a.size:
            unroll[a.dim] = a.size
        elif a.kind == "Ul" and a.dim in MK_ORDER:
            lam = a.dim
        else:
            break
    cover: tuple[tuple[int, int], ...] = ()
    if lam is not None:
        seqs = [a.seq for a in parsed if a.kind == "lambda_seq" and a.dim == lam]
        if len(seqs) != 1 or sum(r * u for r, u in seqs[0]) != ctx.sizes[lam]:
            return []
        cover, unroll[lam] = seqs[0], seqs[0][0][1]
    plan = Plan(tuple(sorted(unroll.items())), lam, cover)
    partial = tuple(d for d in PARTIAL_DIMS if d != lam and ctx.sizes[d] % plan.footprint(d, ctx.lanes))
    rest = [d for d in CONV_DIMS if d not in (*PARTIAL_DIMS, lam)]
    if partial and ctx.space.partial == "none":
        return []
    if any(ctx.sizes[d] % plan.footprint(d, ctx.lanes) for d in rest):
        return []
    return [replace(plan, partial_dims=partial)]


class Refine(Strategy):
    """Random draws, then mutations of the best measured so far."""

    name = "refine"

    def __init__(self, problem: Problem, cfg: SearchConfig):
        super().__init__(problem, cfg)
        self.params = _params(cfg)
        self.draws = Sampled(problem, cfg, self.params["sampler"])
        self.ctx = self.draws.ctx
        self.rng = random.Random(f"refine-{cfg.seed}")  # apart from the draws' stream (same draws as random)
        self.proposed = 0
        self.plans: dict[str, tuple[str, Plan]] = {}  # key -> (scheme text, plan)
        self.perf: dict[str, float] = {}
        self.seeds: list[Candidate] = []  # the space's schemes to start from (params.seeds)
        if self.params["seeds"]:
            for c in problem.candidates:
                plan = plan_of(self.ctx, c.text) if c.kind == "scheme" else None
                if plan is not None and c.key not in self.draws.seen:
                    self.draws.seen.add(c.key)
                    self.plans[c.key] = (c.text, plan)
                    self.seeds.append(c)
            if not self.seeds:
                raise SearchError(
                    "search.params.seeds: the space has no scheme drawn on its own plans to start from (give "
                    "space.best_of another search of the same space, or space.schemes)"
                )
        for text in problem.transfer:  # other workloads' winners, mapped onto this one, after the own seeds
            got = transfer(self.ctx, text, self.rng)
            c = candidate(problem, self.ctx, got[0]) if got else None
            if c is not None and c.key not in self.draws.seen:
                self.draws.seen.add(c.key)
                self.plans[c.key] = (c.text, got[1])
                self.seeds.append(c)
        if problem.transfer and not self.seeds:
            raise SearchError(
                f"space.transfer_from: none of the {len(problem.transfer)} schemes of the other workloads "
                f"has a register tile of this space on {problem.workload.name} (or none refactors legally)"
            )
        self.n_seeds = len(self.seeds)

    def _draw(self) -> Candidate | None:
        c = self.draws.next()
        if c is not None:
            self.plans[c.key] = (c.text, self.draws.last_plan)
        return c

    def _child(self) -> Candidate | None:
        best = sorted(self.perf, key=lambda k: (-self.perf[k], k))[: self.params["top"]]
        if not best or self.rng.random() < self.params["restart"]:
            return self._draw()
        for _ in range(20):
            text, plan = self.plans[self.rng.choice(best)]
            got = mutate(self.ctx, text, plan, self.rng, names=self.params["mutations"])
            if got is None:
                continue
            c = candidate(self.problem, self.ctx, got[0])
            if c.key not in self.draws.seen:
                self.draws.seen.add(c.key)
                self.plans[c.key] = (c.text, got[1])
                return c
        return self._draw()  # the neighbourhood of the best is used up: explore

    def ask(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        for _ in range(n):
            if self.seeds:
                c: Candidate | None = self.seeds.pop(0)
            elif self.proposed < self.n_seeds + self.params["explore"]:
                c = self._draw()
            else:
                c = self._child()
            if c is None:
                break
            self.proposed += 1
            out.append(c)
        return out

    def tell(self, cand: Candidate, perf: float | None) -> None:
        if perf is not None and cand.key in self.plans:
            self.perf[cand.key] = float(perf)
