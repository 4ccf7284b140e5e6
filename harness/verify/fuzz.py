"""Scheme fuzzing (issue "Reliability", item 1): every generated scheme is rejected cleanly or runs right.

For random atom lists over random small shapes of matmul, conv2d (stride 1..3) and random contractions,
each scheme must EITHER be rejected with a :class:`SchemeError` whose message names the atom, its
position, its dimension and the rule (``[rule: ...]``), OR render to C that compiles, runs and passes the
*full* semantic check. Anything else (another exception, a compile error, a crash, a timeout, a wrong
result, an imprecise message) is a failure.

The generators are written once against a tiny :class:`Draw` interface, so the same code serves
Hypothesis (:func:`workloads`, :func:`schemes`, :func:`cases`, via ``st.composite``) and a plain seeded
``random.Random`` (:func:`random_case`, used by :func:`fuzz`). A scheme is a *near-legal* one built from
divisors of the sizes (register tile of U's, optional V, λ_seq/Uλ, Texct/Texctg/Tvar chains, ScalP,
Pack/PackT, a Tpar/Tfused parallel prefix; with ``codegen.partial`` masked or padded also ragged tiles;
for matmul also schemes ending in ``ExternalCall_{libxsmm,a,d}``), and, often, a few random mutations
of it (swap, drop, resize, duplicate, redimension, insert, change kind, move V, add a pack). Legal
parallel kernels run on two OpenMP threads where the process may use two CPUs.
Each case also draws its codegen options (fma, hoist, partial) and is classified through
:func:`kernels.candidate.render`, the path every experiment takes.

    python -m harness.verify.fuzz --n 10000 --seed 0          # table on stdout; exits 1 if any failure
    # a failing example "#123" is case random_case(seed, 123, target)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

from harness.build import CompilerConfig, build_many
from harness.check import CheckConfig, check_output, make_tensors
from harness.machine import detect
from harness.run import RunLimits, TimingConfig, run_kernel
from kernels.baselines import BaselineUnavailable
from kernels.candidate import Candidate, KernelSource, Workload, render
from kernels.external import EXTERNALS
from kernels.scheme import Atom, SchemeError, expand, format_scheme, fused_atoms
from kernels.targets import get_target

T = TypeVar("T")

FULL_CHECK = CheckConfig(full_below=10**9)
FAST_TIMING = TimingConfig(mode="hot", warmup=0, min_reps=1, max_reps=1, max_seconds=1.0)
RULES = frozenset(
    {
        "syntax", "positive-size", "unknown-dimension", "single-V", "V-innermost", "V-stride1",
        "V-reduction", "unroll-innermost", "R-once", "R-outermost", "texct-chain", "lambda-pair",
        "lambda-seq", "granularity", "divisibility", "coverage", "scalp-output", "scalp-scope",
        "scalp-once", "unknown-tensor", "packt-dims", "par-outermost", "par-reduction",
        "external-innermost", "external-once", "external-V", "external-suffix", "external-scalp",
        "external-unknown", "external-operator", "external-dimension", "external-size",
        "external-flexible", "external-layout",
    }
)  # fmt: skip
OK = "ok"
REJECTED = "rejected"
# outcomes that break the property (a rejection with an imprecise message is one too)
FAILURES = ("compile_error", "crash", "timeout", "run_error", "wrong", "unexpected", "bad_message")
MUTATE_P = 0.7  # with ~40% of mutants still legal, about half of all schemes are legal
UNROLL_BUDGET = 48  # near-legal schemes keep at most this many FMAs per unrolled block
EXTERNAL_OPS = tuple(sorted({op for e in EXTERNALS.values() for op in e.ops}))
PARALLEL_P = 0.15  # near-legal schemes with a parallel prefix (Tpar / Tfused)
EXTERNAL_P = 0.2  # near-legal matmul schemes ending in an ExternalCall
PARTIAL = ("none", "masked", "padded")  # codegen.partial modes
LETTERS = "abcdefghijklmnopqrstuvwxyz"


# -- one source of randomness for both Hypothesis and random.Random ---------------------------------------
class Draw(Protocol):
    def int(self, lo: int, hi: int) -> int: ...
    def pick(self, seq: Sequence[T]) -> T: ...
    def coin(self, p: float) -> bool: ...


class RandomDraw:
    """:class:`Draw` over a seeded ``random.Random``."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, max(lo, hi))

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.rng.randrange(len(seq))]

    def coin(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisDraw:
    """:class:`Draw` over the ``draw`` callable of ``st.composite`` (so examples shrink)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]):
        self.draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, max(lo, hi)))

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.draw(st.integers(0, len(seq) - 1))]

    def coin(self, p: float) -> bool:
        return self.draw(st.integers(0, 999)) < round(p * 1000)


# -- workloads ------------------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def vector_candidates(workload: Workload, reduction: bool = False) -> list[str]:
    """Output dimensions that are the stride-1 dimension of every tensor they index (legal V dims); with
    ``reduction``, such reduction dimensions instead (V on them breaks only the V-reduction rule)."""
    op = workload.op
    dims = op.reduction_dims if reduction else op.output.dims()
    return [d for d in dims if all(t.stride1_dim() == d for t in op.tensors if d in t.dims())]


def _size(draw: Draw, lanes: int, vector: bool, hi: int = 12) -> int:
    if vector and draw.coin(0.55):
        return lanes * draw.pick((1, 1, 2, 3)) if lanes <= 8 else lanes * draw.pick((1, 1, 2))
    return draw.int(1, hi)


def gen_workload(draw: Draw, lanes: int = 8) -> Workload:
    """A small matmul, conv2d (stride 1..3) or random contraction; some vector dims are multiples of the
    lane count (8 or 16), the rest 1..12, so every kernel runs in microseconds."""
    kind = draw.pick(("matmul", "conv2d", "contraction"))
    if kind == "matmul":
        sizes = {"i": draw.int(1, 12), "j": _size(draw, lanes, True), "k": draw.int(1, 12)}
        return Workload.make("fz-matmul", "matmul", sizes)
    if kind == "conv2d":
        sizes = {
            "h": draw.int(1, 5), "w": draw.int(1, 8), "k": _size(draw, lanes, True, 10),
            "r": draw.int(1, 3), "s": draw.int(1, 3), "c": draw.int(1, 6),
        }  # fmt: skip
        return Workload.make("fz-conv2d", "conv2d", sizes, stride=draw.int(1, 3))
    n_letters = draw.int(2, 5)
    pool = list(LETTERS)
    letters: list[str] = []
    for _ in range(n_letters):
        letters.append(pool.pop(draw.int(0, len(pool) - 1)))

    def subset(lo: int, hi: int, from_: list[str]) -> list[str]:
        rest = list(from_)
        out = []
        for _ in range(min(len(rest), draw.int(lo, hi))):
            out.append(rest.pop(draw.int(0, len(rest) - 1)))
        return out

    left = subset(2, 4, letters)
    right = subset(2, 4, letters)
    missing = [d for d in letters if d not in left and d not in right]
    right += missing[: max(0, 4 - len(right))]
    used = list(dict.fromkeys(left + right))
    out = subset(1, 3, used)
    spec = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    sizes: dict[str, int] = {}
    for d in dict.fromkeys(out + left + right):
        last = all(t[-1] == d for t in (out, left, right) if d in t)  # stride-1 wherever it appears
        sizes[d] = _size(draw, lanes, last, 6 if len(used) > 3 else 10)
    return Workload.make("fz-contraction", "contraction", sizes, spec=spec)


def describe(workload: Workload) -> str:
    params = "".join(f"{k}={v}" for k, v in workload.op.params)
    sizes = ",".join(f"{d}={n}" for d, n in workload.sizes)
    return f"{workload.op.name}({params})[{sizes}]" if params else f"{workload.op.name}[{sizes}]"


# -- near-legal schemes ---------------------------------------------------------------------------------
@dataclass
class _Chain:
    """One dimension's atoms: loop part (outer -> inner) and unrolled suffix part."""

    loops: list[Atom] = field(default_factory=list)
    unrolls: list[Atom] = field(default_factory=list)


def _pick_divisor(draw: Draw, n: int, budget: int) -> int:
    options = [x for x in _divisors(n) if x <= max(1, budget)]
    return draw.pick(options)


def _lambda_pairs(draw: Draw, m: int, max_factor: int) -> tuple[tuple[int, int], ...] | None:
    """Two or three (repetitions, factor) pairs whose Σ r x a is ``m`` (None if impossible)."""
    n_pairs = 3 if draw.coin(0.2) else 2
    for _ in range(6):
        pairs: list[tuple[int, int]] = []
        rest = m
        for k in range(n_pairs - 1):
            left = n_pairs - 1 - k  # pairs still to place after this one need >= 1 element each
            a = draw.int(1, max(1, min(max_factor, rest - left)))
            r = draw.int(1, max(1, (rest - left) // a))
            if r * a > rest - left:
                break
            pairs.append((r, a))
            rest -= r * a
        else:
            fits = [a for a in _divisors(rest) if a <= max_factor]
            if fits:
                a = draw.pick(fits)
                pairs.append((rest // a, a))
                return tuple(pairs)
    return None


def _ragged_chain(draw: Draw, d: str, size: int, unit: int, budget: int, partial: str) -> tuple[_Chain, int]:
    """With partial microkernels: tiles that need not divide the dimension (R over a U/V that takes the
    remainder, a single microkernel larger than the dimension, or, padded, any tiles under R)."""
    c = _Chain()
    n = -(-size // unit)
    u = draw.int(1, max(1, min(budget, n + 1)))
    if u > 1 or draw.coin(0.2):
        c.unrolls.append(Atom("U", d, u))
    tile = u * unit
    if partial == "padded" and draw.coin(0.4):
        t = draw.int(1, 3)
        c.loops.append(Atom("T", d, t))
        tile *= t
    top_ok = tile >= size and (partial == "padded" or not c.loops) and (c.loops or c.unrolls or unit > 1)
    if not (top_ok and draw.coin(0.4)):
        c.loops.insert(0, Atom("R", d))
    return c, u


def _chain(
    draw: Draw, d: str, size: int, unit: int, budget: int, allow_lambda: bool, partial: str = "none"
) -> tuple[_Chain, int]:
    """A legal chain for dimension ``d`` (``unit`` = lanes when d carries V); returns it and the unroll
    factor (FMAs per block) it uses.

    Styles: ``plain`` (R / T tiles / U), ``lambda`` (λ_seq + Uλ, optionally under R or T and over a U),
    ``texct`` (R? Texct Texctg? Tvar, sometimes a second Texct/Tvar pair, over T/U or over a λ_seq).
    """
    if partial != "none" and (size % unit or draw.coin(0.4)):
        return _ragged_chain(draw, d, size, unit, budget, partial)
    c = _Chain()
    n = size // unit  # units to cover
    style = draw.pick(("plain", "plain", "plain", "texct", "lambda" if allow_lambda else "plain"))
    if style == "lambda" and n >= 2:
        t = draw.pick(_divisors(n)) if draw.coin(0.4) else 1
        u = _pick_divisor(draw, n // t, 2) if draw.coin(0.2) else 1
        pairs = _lambda_pairs(draw, n // (t * u), max(1, min(6, budget // u)))
        if pairs is not None:
            if t > 1 or draw.coin(0.3):
                c.loops.append(Atom("R", d) if draw.coin(0.5) or t == 1 else Atom("T", d, t))
            c.loops.append(Atom("lambda_seq", d, seq=pairs))
            c.unrolls.append(Atom("Ul", d))
            if u > 1:
                c.unrolls.append(Atom("U", d, u))
            return c, u * max(a for _, a in pairs)
    if style == "texct" and n >= 2:
        used = 1
        inner: list[Atom] = []
        m = draw.pick([x for x in _divisors(n) if x >= 2 and x < n] or [n]) if allow_lambda else 1
        pairs = _lambda_pairs(draw, m, max(1, min(6, budget))) if m >= 2 and draw.coin(0.3) else None
        if pairs is not None:  # the static tile under the variable ones is a λ sequence
            inner = [Atom("lambda_seq", d, seq=pairs)]
            c.unrolls.append(Atom("Ul", d))
            used = max(a for _, a in pairs)
            g_units = m
        else:
            u = _pick_divisor(draw, n, budget) if draw.coin(0.7) else 1
            t = _pick_divisor(draw, n // u, n) if draw.coin(0.3) else 1
            if u > 1 or draw.coin(0.1):
                c.unrolls.append(Atom("U", d, u))
            inner = [Atom("T", d, t)] if t > 1 or draw.coin(0.1) else []
            used, g_units = u, u * t
        g = unit * g_units  # every variable size is a multiple of this static tile
        k = n // g_units  # size = k x g
        chain: list[Atom] = []
        if draw.coin(0.6):  # under R: any Texct size, the border tile is partial
            chain.append(Atom("R", d))
            a = g * draw.int(1, k + 1)
        else:  # a top Texct must cover the dimension
            a = g * draw.int(k, k + 1)
        chain.append(Atom("Texct", d, a))
        for _ in range(draw.pick((0, 0, 1, 2))):
            chain.append(Atom("Texctg", d, g * draw.int(1, k)))
        chain.append(Atom("Tvar", d, g * draw.int(1, max(1, k - 1))))
        if draw.coin(0.15):  # a second partial-tile pair under the first
            chain += [Atom("Texct", d, g * draw.int(1, k)), Atom("Tvar", d, g * draw.int(1, k))]
        c.loops = chain + inner
        return c, used
    u = _pick_divisor(draw, n, budget) if draw.coin(0.7) else 1
    if u > 1 or draw.coin(0.05):
        c.unrolls.append(Atom("U", d, u))
    rest = n // u
    loops: list[Atom] = []
    for _ in range(draw.int(0, 2)):
        if rest > 1 or draw.coin(0.1):
            t = draw.pick(_divisors(rest))
            loops.append(Atom("T", d, t))
            rest //= t
    if rest > 1 or draw.coin(0.3):
        top = Atom("R", d) if rest == 1 or draw.coin(0.6) else Atom("T", d, rest)
        loops.insert(0, top)
    c.loops = loops
    return c, u


def _interleave(draw: Draw, lists: list[list[Atom]]) -> list[Atom]:
    """A random merge keeping each list's order."""
    lists = [list(x) for x in lists if x]
    out: list[Atom] = []
    while lists:
        k = draw.int(0, len(lists) - 1)
        out.append(lists[k].pop(0))
        if not lists[k]:
            lists.pop(k)
    return out


def _packt_dims(draw: Draw, dims: Sequence[str], last: str | None) -> tuple[str, ...]:
    """A random order of ``dims``; ``last`` (the V dimension) stays innermost when present."""
    rest = [d for d in dims if d != last]
    order = []
    while rest:
        order.append(rest.pop(draw.int(0, len(rest) - 1)))
    return tuple(order + ([last] if last in dims else []))


def _static_footprint(atoms: Sequence[Atom], vdim: str | None, lanes: int) -> int | None:
    """Footprint of a chain made only of T/U/V atoms (None if it has anything else)."""
    fp = 1
    for a in atoms:
        if a.kind in ("T", "U") and a.size:
            fp *= a.size
        elif a.kind == "V":
            fp *= lanes
        else:
            return None
    return fp


def _parallel_prefix(
    draw: Draw, chains: dict[str, _Chain], workload: Workload, vdim: str | None, lanes: int
) -> list[Atom]:
    """Turn the top loop of one or two output dimensions into parallel atoms (Tpar, or one Tfused): a
    top T_{t,d} becomes Tpar_{t,d}; a top R_d over static tiles becomes Tpar_{size/footprint,d}. The
    chains lose those atoms; the returned prefix goes above everything."""
    convertible: list[tuple[str, int]] = []
    for d in workload.op.output.dims():
        loops = chains[d].loops
        if not loops:
            continue
        top = loops[0]
        if top.kind == "T" and top.size:
            convertible.append((d, top.size))
        elif top.kind == "R":
            below = [*loops[1:], *chains[d].unrolls, *([Atom("V", d)] if d == vdim else [])]
            fp = _static_footprint(below, vdim, lanes)
            if fp and workload.size[d] % fp == 0:
                convertible.append((d, workload.size[d] // fp))
    if not convertible:
        return []
    picked = [convertible.pop(draw.int(0, len(convertible) - 1))]
    if convertible and draw.coin(0.5):
        picked.append(convertible.pop(draw.int(0, len(convertible) - 1)))
    for d, _ in picked:
        chains[d].loops.pop(0)
    if len(picked) == 2 and draw.coin(0.6):
        return list(fused_atoms(picked))
    return [Atom("Tpar", d, t) for d, t in picked]


def external_scheme(draw: Draw, workload: Workload, lanes: int) -> tuple[Atom, ...]:
    """A near-legal matmul scheme ending in ``ExternalCall_{libxsmm,a,d}``: on the flexible dimension
    R_d (maybe over a Texct) steps by a, any remainder going to the call; the other dimensions get plain
    chains whose U atoms (the call's fixed tile) sit just above the call."""
    op = workload.op
    sizes = workload.size
    d = draw.pick(list(op.dims))
    alpha = draw.int(1, sizes[d] + 2)
    flex: list[Atom] = [Atom("R", d)]
    if draw.coin(0.4):
        flex.append(Atom("Texct", d, alpha * draw.int(1, 3) + draw.int(0, alpha - 1)))
    chains = [flex]
    unrolls: list[list[Atom]] = []
    budget = 64
    for e in op.dims:
        if e == d:
            continue
        ch, used = _chain(draw, e, sizes[e], 1, budget, False)
        budget = max(1, budget // max(1, used))
        chains.append(ch.loops)
        unrolls.append(ch.unrolls)
    loops = _interleave(draw, chains)
    prefix: list[Atom] = []
    if draw.coin(0.3):  # a parallel loop above, on an output dimension other than d
        outs = [e for e in op.output.dims() if e != d and loops and any(a.dim == e for a in loops)]
        if outs:
            e = draw.pick(outs)
            top = next(p for p, a in enumerate(loops) if a.dim == e)
            if loops[top].kind == "T":
                prefix = [Atom("Tpar", e, loops.pop(top).size)]
    name = draw.pick(sorted(EXTERNALS)) if draw.coin(0.95) else "nosuchkernel"
    return tuple(prefix + loops + _interleave(draw, unrolls) + [Atom("ExternalCall", d, alpha, name=name)])


def near_legal_scheme(draw: Draw, workload: Workload, lanes: int, partial: str = "none") -> tuple[Atom, ...]:
    """A scheme meant to be legal: per-dimension chains built from divisors (with ``partial``, also
    ragged ones), merged in a random order, with optional ScalP and Pack/PackT atoms."""
    op = workload.op
    sizes = workload.size

    def fits(d: str) -> bool:
        return partial != "none" or sizes[d] % lanes == 0

    vcands = [d for d in vector_candidates(workload) if fits(d)]
    vred = [d for d in vector_candidates(workload, reduction=True) if fits(d)]
    plain = {t.tensor: t for t in op.tensors if all(len(ax) == 1 and ax[0][1] == 1 for ax in t.axes)}
    # output dims that become stride-1 everywhere once the tensors that disagree are transposed (PackT)
    vpack = [
        d
        for d in op.output.dims()
        if fits(d) and all(t.stride1_dim() == d or t.tensor in plain for t in op.tensors if d in t.dims())
    ]
    need_packt = False
    if vred and draw.coin(0.1):
        vcands = vred  # legal but for V-reduction
    elif vpack and draw.coin(0.15):
        vcands, need_packt = vpack, True
    vdim = draw.pick(vcands) if vcands and draw.coin(0.75) else None
    budget = UNROLL_BUDGET
    chains: dict[str, _Chain] = {}
    n_lambda = 0
    dims = list(op.dims)
    order = _interleave(draw, [[d] for d in dims])  # random order in which dims spend the budget
    for d in order:
        unit = lanes if d == vdim else 1
        ch, used = _chain(draw, d, sizes[d], unit, budget, n_lambda < 2, partial)
        n_lambda += any(a.kind == "lambda_seq" for a in ch.loops)
        budget = max(1, budget // used)
        chains[d] = ch
    prefix = _parallel_prefix(draw, chains, workload, vdim, lanes) if draw.coin(PARALLEL_P) else []
    loops = _interleave(draw, [chains[d].loops for d in dims])
    unrolls = _interleave(draw, [chains[d].unrolls for d in dims])
    reduction = set(op.reduction_dims)
    limit = len(loops)  # packs go above ScalP
    if reduction and draw.coin(0.25):
        k = len(loops)
        while k > 0 and loops[k - 1].dim in reduction and loops[k - 1].kind != "lambda_seq":
            k -= 1
        at = draw.int(k, len(loops))
        listed = list(dict.fromkeys(a.dim for a in loops[at:] if a.dim))
        extra = [d for d in op.reduction_dims if d not in listed]
        if extra and (not listed or draw.coin(0.2)):
            listed.append(draw.pick(extra))
        loops.insert(at, Atom("ScalP", dims=tuple(listed)))  # type: ignore[arg-type]
        limit = at
    packs: list[Atom] = []
    if need_packt and vdim is not None:
        for t in op.tensors:
            if vdim in t.dims() and t.stride1_dim() != vdim:
                packs.append(Atom("PackT", tensor=t.tensor, dims=_packt_dims(draw, t.dims(), vdim)))
    if draw.coin(0.25):
        for _ in range(draw.pick((1, 1, 2))):
            t = draw.pick(op.tensors)
            if t.tensor in plain and draw.coin(0.5):
                packs.append(Atom("PackT", tensor=t.tensor, dims=_packt_dims(draw, t.dims(), vdim)))
            elif not any(p.tensor == t.tensor and p.kind == "PackT" for p in packs):
                packs.append(Atom("Pack", tensor=t.tensor))
    at = 0
    for p in packs:  # in order, so a later pack of the same tensor sits below an earlier one
        at = draw.int(at, limit)
        loops.insert(at, p)
        at += 1
        limit += 1
    return tuple(prefix + loops + unrolls + ([Atom("V", vdim)] if vdim else []))


# -- mutations ------------------------------------------------------------------------------------------
def _foreign_dim(draw: Draw, dims: Sequence[str]) -> str:
    return draw.pick([x for x in "xyzqA" if x not in dims] or ["Q"])


def _new_size(draw: Draw, size: int) -> int:
    return draw.pick((0, -1, size + 1, max(1, size - 1), 2 * size, max(1, size // 2), draw.int(1, 24)))


def _random_pack(draw: Draw, tensors: Sequence[tuple[str, tuple[str, ...]]]) -> Atom:
    """Pack_X or PackT_X[...] of a random tensor (sometimes an unknown one, or wrong dimensions)."""
    name, tdims = draw.pick(list(tensors))
    if draw.coin(0.1):
        name = draw.pick(("Z", "X", "W"))
    if draw.coin(0.4):
        return Atom("Pack", tensor=name)
    order = list(_packt_dims(draw, tdims, None))
    if draw.coin(0.2) and order:
        order.pop(draw.int(0, len(order) - 1)) if draw.coin(0.5) else order.append(draw.pick(order))
    return Atom("PackT", tensor=name, dims=tuple(order) or tdims)


def _random_atom(
    draw: Draw,
    dims: Sequence[str],
    sizes: dict[str, int],
    lanes: int,
    tensors: Sequence[tuple[str, tuple[str, ...]]],
) -> Atom:
    kind = draw.pick(
        ("R", "T", "U", "V", "Ul", "lambda_seq", "Texct", "Tvar", "Texctg", "ScalP", "Pack", "Tpar", "Tfused",
         "ExternalCall")
    )  # fmt: skip
    d = draw.pick(list(dims))
    if kind == "Tfused":
        other = draw.pick(list(dims))
        pairs = [(d, draw.int(1, 4))] + ([(other, draw.int(1, 4))] if other != d else [])
        return fused_atoms(pairs)[0]
    if kind == "ExternalCall":
        name = draw.pick([*sorted(EXTERNALS), "nosuchkernel"])
        return Atom(kind, d, draw.int(1, sizes[d] + 2), name=name)
    if kind == "Pack":
        return _random_pack(draw, tensors)
    if kind == "ScalP":
        return Atom("ScalP", dims=(d,))
    if kind in ("R", "V", "Ul"):
        return Atom(kind, d)
    if kind == "lambda_seq":
        return Atom(kind, d, seq=((draw.int(1, 3), draw.int(1, 4)), (draw.int(1, 3), draw.int(1, 4))))
    size = draw.pick(_divisors(sizes[d])) if kind in ("T", "U", "Tpar") else draw.int(1, sizes[d] + lanes)
    return Atom(kind, d, size)


def mutate(draw: Draw, atoms: tuple[Atom, ...], workload: Workload, lanes: int) -> tuple[Atom, ...]:
    """One random mutation: swap, drop, resize, duplicate, redimension, insert, change kind, or move the
    vectorization to another dimension."""
    s = list(atoms)
    dims = list(workload.op.dims)
    tensors = [(t.tensor, t.dims()) for t in workload.op.tensors]
    what = draw.pick(("swap", "drop", "size", "size", "dup", "dim", "insert", "kind", "vector", "pack"))
    if not s:
        what = "insert"
    p = draw.int(0, len(s) - 1) if s else 0
    if what == "swap" and len(s) >= 2:
        q = draw.int(0, len(s) - 1)
        s[p], s[q] = s[q], s[p]
    elif what == "drop":
        s.pop(p)
    elif what == "size":
        a = s[p]
        if a.kind == "Tfused":
            pairs = list(a.fused)
            k = draw.int(0, len(pairs) - 1)
            pairs[k] = (pairs[k][0], _new_size(draw, pairs[k][1]))
            s[p] = fused_atoms(pairs)[0]
        elif a.size is not None:
            s[p] = Atom(a.kind, a.dim, _new_size(draw, a.size), name=a.name)
        elif a.kind == "lambda_seq":
            seq = list(a.seq)
            k = draw.int(0, len(seq) - 1)
            r, f = seq[k]
            how = draw.pick(("r", "a", "drop", "add"))
            if how == "r":
                seq[k] = (_new_size(draw, r), f)
            elif how == "a":
                seq[k] = (r, _new_size(draw, f))
            elif how == "drop":
                seq.pop(k)
            else:
                seq.insert(k, (draw.int(1, 3), draw.int(1, 5)))
            s[p] = Atom(a.kind, a.dim, seq=tuple(seq))
        elif a.kind == "ScalP":
            s[p] = Atom("ScalP", dims=(*a.dims, draw.pick(dims)) if draw.coin(0.6) else a.dims[1:])
        elif a.kind in ("Pack", "PackT"):
            s[p] = _random_pack(draw, tensors)
        else:
            s.insert(p, _random_atom(draw, dims, workload.size, lanes, tensors))
    elif what == "dup":
        s.insert(draw.int(0, len(s)), s[p])
    elif what == "dim":
        a = s[p]
        d = _foreign_dim(draw, dims) if draw.coin(0.15) else draw.pick(dims)
        if a.kind == "ScalP":
            s[p] = Atom("ScalP", dims=(d,))
        elif a.kind == "PackT" and a.dims:
            k = draw.int(0, len(a.dims) - 1)
            s[p] = Atom("PackT", tensor=a.tensor, dims=(*a.dims[:k], d, *a.dims[k + 1 :]))
        elif a.kind == "Pack":
            s[p] = Atom("Pack", tensor=draw.pick([*(t for t, _ in tensors), "Z"]))
        elif a.kind == "Tfused":
            pairs = list(a.fused)
            k = draw.int(0, len(pairs) - 1)
            pairs[k] = (d, pairs[k][1])
            s[p] = fused_atoms(pairs)[0]
        else:
            s[p] = Atom(a.kind, d, a.size, a.seq, name=a.name)
    elif what == "insert":
        s.insert(draw.int(0, len(s)), _random_atom(draw, dims, workload.size, lanes, tensors))
    elif what == "vector":
        s = [a for a in s if a.kind != "V"] + [Atom("V", draw.pick(dims))]
    elif what == "pack":
        s.insert(draw.int(0, len(s)), _random_pack(draw, tensors))
    elif what == "kind":
        a = s[p]
        if a.kind in ("T", "U", "Texct", "Tvar", "Texctg", "Tpar", "Tfused"):
            s[p] = Atom(draw.pick(("T", "U", "Texct", "Tvar", "Texctg", "Tpar")), a.dim, a.size)
        elif a.kind == "ExternalCall":
            s[p] = Atom(draw.pick(("U", "Tvar")), a.dim, a.size)
        elif a.kind in ("R", "V", "Ul"):
            s[p] = Atom(draw.pick(("R", "V", "Ul")), a.dim)
        elif a.kind in ("Pack", "PackT"):
            t = next((dd for name, dd in tensors if name == a.tensor), a.dims)
            s[p] = (
                Atom("PackT", tensor=a.tensor, dims=t) if a.kind == "Pack" else Atom("Pack", tensor=a.tensor)
            )
    return normalize(tuple(s))


def normalize(atoms: Sequence[Atom]) -> tuple[Atom, ...]:
    """The atoms as their text reads back: a Tfused is its first pair's atom (which carries the list)
    followed by the others, wherever a mutation moved or dropped its parts."""
    written = [a for a in atoms if not (a.kind == "Tfused" and a.part > 0)]
    fixed = [fused_atoms(a.fused or ((a.dim, a.size),))[0] if a.kind == "Tfused" else a for a in written]
    return expand(fixed)  # type: ignore[arg-type]


def gen_scheme(draw: Draw, workload: Workload, lanes: int, partial: str = "none") -> tuple[Atom, ...]:
    """A near-legal scheme, then (with probability MUTATE_P) one to three mutations of it."""
    if workload.op.name in EXTERNAL_OPS and partial == "none" and draw.coin(EXTERNAL_P):
        atoms = external_scheme(draw, workload, lanes)
    else:
        atoms = near_legal_scheme(draw, workload, lanes, partial)
    if draw.coin(MUTATE_P):
        for _ in range(draw.pick((1, 1, 1, 2, 3))):
            atoms = mutate(draw, atoms, workload, lanes)
    return atoms


@dataclass(frozen=True)
class FuzzCase:
    workload: Workload
    atoms: tuple[Atom, ...]
    options: tuple[tuple[str, object], ...]  # codegen options (target, hoist, fma)

    @property
    def text(self) -> str:
        return format_scheme(self.atoms)

    @property
    def candidate(self) -> Candidate:
        return Candidate("scheme", self.text, self.options)

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.options if k != "target")
        return f"{self.text} ({extra})" if extra else self.text


def gen_options(draw: Draw, target: str) -> tuple[tuple[str, object], ...]:
    """Codegen options: fma, hoist, partial (none / masked / padded) and the target."""
    partial = draw.pick(("none", "none", "none", "masked", "padded"))
    opts: list[tuple[str, object]] = [("fma", draw.coin(0.8)), ("hoist", draw.coin(0.7))]
    if partial != "none" or draw.coin(0.1):
        opts.append(("partial", partial))
    return (*opts, ("target", target))


def gen_case(draw: Draw, target: str) -> FuzzCase:
    lanes = get_target(target).lanes
    workload = gen_workload(draw, lanes)
    options = gen_options(draw, target)
    atoms = gen_scheme(draw, workload, lanes, str(dict(options).get("partial", "none")))
    return FuzzCase(workload, atoms, options)


def random_case(seed: int, index: int, target: str) -> FuzzCase:
    """Case ``index`` of the seeded batch ``seed`` (each case has its own RNG: reproducible alone)."""
    return gen_case(RandomDraw(random.Random(f"fuzz:{seed}:{index}")), target)


# -- Hypothesis strategies ------------------------------------------------------------------------------
@st.composite
def workloads(draw: Callable[[st.SearchStrategy[Any]], Any], lanes: int = 8) -> Workload:
    return gen_workload(HypothesisDraw(draw), lanes)


@st.composite
def schemes(
    draw: Callable[[st.SearchStrategy[Any]], Any], workload: Workload, lanes: int, partial: str = "none"
) -> tuple[Atom, ...]:
    return gen_scheme(HypothesisDraw(draw), workload, lanes, partial)


@st.composite
def cases(draw: Callable[[st.SearchStrategy[Any]], Any], target: str) -> FuzzCase:
    return gen_case(HypothesisDraw(draw), target)


# -- the property ---------------------------------------------------------------------------------------
def message_problems(exc: SchemeError, atoms: Sequence[Atom]) -> list[str]:
    """What the message of ``exc`` (raised on ``atoms``) misses of its contract; [] when precise."""
    msg = str(exc)
    problems = []
    atoms = [a for a in atoms if not (a.kind == "Tfused" and a.part > 0)]  # positions count atoms as written
    if exc.rule not in RULES:
        problems.append(f"unknown rule {exc.rule!r}")
    if f"[rule: {exc.rule}]" not in msg:
        problems.append("no [rule: ...]")
    if exc.atom is None:
        if exc.rule == "coverage":  # a dimension that has no atom at all: the dimension is what is named
            if exc.dim is None or f"(dimension {exc.dim})" not in msg:
                problems.append("names neither an atom nor the uncovered dimension")
            return problems
        # an atom the parser refuses: its position, and its text as written
        pos = exc.position
        if pos is None or f"at position {pos}" not in msg:
            problems.append("names no atom and no position")
        elif not (0 <= pos < len(atoms)) or atoms[pos].text() not in msg:
            problems.append(f"does not name atom {atoms[pos].text() if 0 <= pos < len(atoms) else '?'}")
        return problems
    if f"atom {exc.atom.text()}" not in msg:
        problems.append(f"does not name atom {exc.atom.text()}")
    if exc.position is None or f"at position {exc.position}" not in msg:
        problems.append("no position")
    elif not (0 <= exc.position < len(atoms)) or atoms[exc.position].text() != exc.atom.text():
        problems.append(f"position {exc.position} is not where {exc.atom.text()} is")
    if exc.atom.dim is not None and f"(dimension {exc.atom.dim})" not in msg:
        problems.append(f"no (dimension {exc.atom.dim})")
    if exc.dim is not None and f"(dimension {exc.dim})" not in msg:
        problems.append(f"no (dimension {exc.dim})")
    return problems


@dataclass
class Verdict:
    """``outcome`` is ``rejected``, ``ok`` or one of :data:`FAILURES` (``unsupported`` if the host
    cannot execute the target: compiled only)."""

    outcome: str
    rule: str | None = None
    reason: str = ""
    source: KernelSource | None = None


def classify(case: FuzzCase) -> Verdict:
    """Legality and rendering through :func:`kernels.candidate.render` (no compilation): rejected,
    bad_message, unexpected, or ``legal`` with the kernel source."""
    try:
        src = render(case.candidate, case.workload)
    except SchemeError as exc:
        problems = message_problems(exc, case.atoms)
        if problems:
            return Verdict("bad_message", exc.rule, f"{'; '.join(problems)}: {exc}")
        return Verdict(REJECTED, exc.rule, str(exc))
    except BaselineUnavailable as exc:  # an ExternalCall whose library is not installed here
        return Verdict("unsupported", None, str(exc))
    except Exception as exc:  # noqa: BLE001 - anything else breaks the property
        return Verdict("unexpected", None, f"render: {type(exc).__name__}: {exc}")
    return Verdict("legal", source=src)


def execute(
    case: FuzzCase,
    so_path: Path,
    cache_dir: Path,
    limits: RunLimits,
    workspace_bytes: int = 0,
    seed: int = 0,
    threads: int = 1,
) -> Verdict:
    """Run a compiled legal case once (with the workspace its source asks for, on ``threads`` OpenMP
    threads), check every point."""
    try:
        tensors = make_tensors(case.workload, seed, FULL_CHECK)
        timing = FAST_TIMING if threads == 1 else replace(FAST_TIMING, threads=threads)
        res = run_kernel(so_path, tensors, workspace_bytes, timing, (), limits, cache_dir)
        if res.status != "ok" or res.output is None:
            outcome = {"crash": "crash", "timeout": "timeout"}.get(res.status, "run_error")
            return Verdict(outcome, reason=f"{res.status}: {res.reason}")
        chk = check_output(case.workload, tensors, res.output, FULL_CHECK, seed)
    except Exception as exc:  # noqa: BLE001
        return Verdict("unexpected", reason=f"run/check: {type(exc).__name__}: {exc}")
    if not chk.passed or chk.mode != "full":
        return Verdict(
            "wrong",
            reason=f"{chk.n_bad}/{chk.points} points off ({chk.mode}), max rel. err {chk.max_err:.3g}, "
            f"first at {chk.first_bad}",
        )
    return Verdict(OK)


def check_cases(
    batch: Sequence[FuzzCase],
    cache_dir: Path,
    jobs: int | None = None,
    compiler: CompilerConfig | None = None,
    limits: RunLimits | None = None,
    runnable: Sequence[str] | None = None,
) -> list[Verdict]:
    """The whole property on a batch: classify, compile the legal ones in parallel, run, full-check."""
    compiler = compiler or CompilerConfig()
    limits = limits or RunLimits(timeout_s=30.0)
    runnable = detect().isas if runnable is None else runnable
    verdicts = [classify(c) for c in batch]
    legal = [n for n, v in enumerate(verdicts) if v.outcome == "legal"]
    sources = [verdicts[n].source for n in legal]
    builds = build_many(sources, compiler, Path(cache_dir) / "so", jobs)  # type: ignore[arg-type]
    to_run: list[tuple[int, Path, int, int]] = []
    threads = min(2, len(os.sched_getaffinity(0)))  # parallel kernels run on two cores where there are
    for n, src, built in zip(legal, sources, builds, strict=True):
        if not built.ok or built.so_path is None:
            verdicts[n] = Verdict("compile_error", reason=built.error[-1500:])
        elif src.target not in ("any", *runnable):  # type: ignore[union-attr]
            verdicts[n] = Verdict("unsupported", reason="compiled only: this CPU cannot run it")
        else:
            par = threads if "-fopenmp" in src.cflags else 1  # type: ignore[union-attr]
            to_run.append((n, built.so_path, src.workspace_bytes, par))  # type: ignore[union-attr]
    if to_run:
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            done = list(
                pool.map(
                    lambda it: execute(batch[it[0]], it[1], cache_dir, limits, it[2], threads=it[3]), to_run
                )
            )
        for (n, _, _, _), v in zip(to_run, done, strict=True):
            verdicts[n] = v
    return verdicts


# -- the seeded fuzzer ----------------------------------------------------------------------------------
Example = tuple[str, str, str]  # (workload, scheme text with options, reason)


@dataclass
class FuzzReport:
    n: int
    seed: int
    target: str
    outcomes: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    by_op: dict[str, Counter[str]] = field(default_factory=dict)
    examples: dict[str, list[Example]] = field(default_factory=dict)
    seconds: float = 0.0
    keep: int = 5

    def add(self, index: int, case: FuzzCase, v: Verdict) -> None:
        self.outcomes[v.outcome] += 1
        if v.outcome == REJECTED and v.rule:
            self.rules[v.rule] += 1
        op = self.by_op.setdefault(case.workload.op.name, Counter())
        op["n"] += 1
        op["legal"] += v.outcome not in (REJECTED, "bad_message")
        op[v.outcome] += 1
        if v.outcome in FAILURES:
            kept = self.examples.setdefault(v.outcome, [])
            if len(kept) < self.keep:
                kept.append((describe(case.workload), f"#{index} {case.label()}", v.reason))

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    @property
    def legal(self) -> int:
        return self.done - self.outcomes[REJECTED] - self.outcomes["bad_message"]

    @property
    def failures(self) -> int:
        return sum(self.outcomes[k] for k in FAILURES)

    @property
    def ok(self) -> bool:
        return self.failures == 0

    def table(self) -> str:
        done = max(1, self.done)
        lines = [
            f"scheme fuzz: {self.done} schemes, seed {self.seed}, target {self.target}, "
            f"{self.seconds:.0f} s wall",
            f"legal fraction: {self.legal}/{self.done} = {100 * self.legal / done:.1f}%",
            "",
            f"{'outcome':<20}{'count':>8}{'share':>9}",
        ]
        for k in (REJECTED, OK, "unsupported", *FAILURES):
            lines.append(f"{k:<20}{self.outcomes[k]:>8}{100 * self.outcomes[k] / done:>8.1f}%")
        lines += ["", f"{'rejected by rule':<20}{'count':>8}"]
        for rule, c in sorted(self.rules.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {rule:<18}{c:>8}")
        lines += ["", f"{'operator':<14}{'n':>7}{'legal':>7}{'ok':>7}{'failed':>8}"]
        for op, c in sorted(self.by_op.items()):
            failed = sum(c[k] for k in FAILURES)
            lines.append(f"{op:<14}{c['n']:>7}{c['legal']:>7}{c[OK]:>7}{failed:>8}")
        for outcome, kept in self.examples.items():
            lines += ["", f"first {outcome} examples:"]
            for w, text, reason in kept:
                lines.append(f"  {w}  {text}\n      {reason[:600]}")
        return "\n".join(lines)


def fuzz(
    n: int,
    seed: int = 0,
    target: str | None = None,
    cache_dir: Path | None = None,
    jobs: int | None = None,
    batch: int = 100,
    progress: Callable[[str], None] | None = None,
    keep: int = 5,
) -> FuzzReport:
    """Generate ``n`` seeded cases and check the property on each; a progress line every ``batch``;
    the first ``keep`` examples of each failure are kept (``#index`` reproduces one: random_case)."""
    target = target or detect().best_isa or "avx2"
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    tmp = None
    if cache_dir is None:
        tmp = tempfile.mkdtemp(prefix="scheme-fuzz-")
        cache_dir = Path(tmp)
    report = FuzzReport(n, seed, target, keep=keep)
    start = time.perf_counter()
    try:
        for lo in range(0, n, batch):
            idx = range(lo, min(n, lo + batch))
            chunk = [random_case(seed, i, target) for i in idx]
            for i, case, v in zip(idx, chunk, check_cases(chunk, Path(cache_dir), jobs), strict=True):
                report.add(i, case, v)
            elapsed = time.perf_counter() - start
            eta = elapsed / report.done * (n - report.done)
            say(
                f"fuzz: {report.done}/{n} legal={report.legal} failures={report.failures} "
                f"elapsed={elapsed:.0f}s ETA={eta:.0f}s"
            )
    finally:
        report.seconds = time.perf_counter() - start
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.verify.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="schemes to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default=None, help="avx2 or avx512 (default: best ISA of this CPU)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="compiled kernels (default: a temp dir)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compilers and runs (default: CPUs)")
    ap.add_argument("--keep", type=int, default=5, help="examples kept per failure outcome")
    args = ap.parse_args(argv)
    report = fuzz(args.n, args.seed, args.target, args.cache_dir, args.jobs, keep=args.keep)
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
