"""The 720 loop orders of the six-loop direct convolution as schemes of R atoms (seed 004, Papaphilippou).

The thesis names the loops o (output channels), i (input channels), y, x (image rows, columns) and ky, kx
(kernel rows, columns), base order ``o, i, y, x, ky, kx``. Our ``conv2d`` operator names them k, c, h, w,
r, s (``O[h][w][k] += I[h+r][w+s][c] * K[r][s][c][k]``), so a loop order is the scheme
``[R_k, R_c, R_h, R_w, R_r, R_s]`` and needs nothing but the scheme generator: every permutation is a
plain candidate of kind ``scheme``.

Two variants of the thesis's chapter 3 map onto code-generation options:
- partial sums (§3.3: one accumulator per run of the innermost trailing reduction loops) is exactly what
  ``hoist=true`` generates (the output scalar is loaded before the innermost run of i/ky/kx loops and
  stored after it); ``hoist=false`` loads and stores the output at every MAC, the thesis's plain version;
- the OpenMP version (§3.4, parallel outermost loop) needs a parallel atom the scheme language does not
  have yet: it is simulated (``harness.cachesim``, static chunks of the outermost loop) but not generated.

Orders are numbered as the thesis numbers them: the index in ``itertools.permutations`` of the base
order (lexicographic). Figures plot them in Steinhaus-Johnson-Trotter order (:func:`sjt`), where
neighbours differ by one adjacent swap.

The ``permutation`` option other studies use (:func:`select_orders`):
- ``fixed``: one order (``order=`` a tuple of loop names, default the base order);
- ``searched``: all 720 in SJT order, or a seeded random sample of ``sample`` of them (§5.3.2);
- ``best-average``: the order with the best average speedup over the layers of a ranking (the
  simulation results of ``harness permutations``), else the thesis's winner (y, i, ky, o, x, kx).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence

from kernels.candidate import Candidate

LOOPS: tuple[str, ...] = ("o", "i", "y", "x", "ky", "kx")
#: thesis loop name -> conv2d dimension
DIM_OF: dict[str, str] = {"o": "k", "i": "c", "y": "h", "x": "w", "ky": "r", "kx": "s"}
LOOP_OF: dict[str, str] = {d: n for n, d in DIM_OF.items()}
#: loops that index the output: an outermost one of these makes parallel writes disjoint (§3.4)
OUTPUT_LOOPS: frozenset[str] = frozenset({"o", "y", "x"})
#: the thesis's 1-thread winners (§4.3, Fig 4.8)
THESIS_BEST_AVERAGE: tuple[str, ...] = ("y", "i", "ky", "o", "x", "kx")
THESIS_BEST_WORST: tuple[str, ...] = ("y", "ky", "o", "x", "i", "kx")
PERMUTATION_MODES: tuple[str, ...] = ("fixed", "searched", "best-average")

Order = tuple[str, ...]


class PermutationError(ValueError):
    """A malformed loop order or permutation option."""


def lexicographic(items: Sequence[str] = LOOPS) -> list[Order]:
    """All orders in ``itertools.permutations`` order: position = the thesis's permutation index."""
    return [tuple(p) for p in itertools.permutations(items)]


def sjt(items: Sequence[str] = LOOPS) -> list[Order]:
    """Steinhaus-Johnson-Trotter order (Even's speedup): each order differs from the previous one by one
    swap of adjacent positions; starts at ``items``."""
    n = len(items)
    perm = list(range(n))
    direction = [-1] * n  # every element looks left at first
    out = [tuple(items[k] for k in perm)]
    while True:
        # the largest mobile element: it looks at a smaller neighbour
        mobile, pos = -1, -1
        for p, v in enumerate(perm):
            q = p + direction[v]
            if 0 <= q < n and perm[q] < v and v > mobile:
                mobile, pos = v, p
        if mobile < 0:
            return out
        q = pos + direction[mobile]
        perm[pos], perm[q] = perm[q], perm[pos]
        for v in range(mobile + 1, n):
            direction[v] = -direction[v]
        out.append(tuple(items[k] for k in perm))


def parse_order(order: str | Iterable[str]) -> Order:
    """An order from ``"y,i,ky,o,x,kx"``, ``"(y, i, ky, o, x, kx)"`` or a sequence; conv2d dimension
    names (k, c, h, w, r, s) are accepted too."""
    if isinstance(order, str):
        names = [t for t in order.replace("(", " ").replace(")", " ").replace(",", " ").split() if t]
    else:
        names = [str(t) for t in order]
    names = [LOOP_OF.get(n, n) if n not in LOOPS else n for n in names]
    if sorted(names) != sorted(LOOPS):
        raise PermutationError(
            f"loop order {order!r} is not a permutation of {', '.join(LOOPS)} (or of k, c, h, w, r, s)"
        )
    return tuple(names)


def order_index(order: Sequence[str]) -> int:
    """The thesis's permutation index (lexicographic position) of ``order``."""
    rest = list(LOOPS)
    index = 0
    for k, name in enumerate(order):
        pos = rest.index(name)
        index += pos * _factorial(len(LOOPS) - 1 - k)
        rest.pop(pos)
    return index


def _factorial(n: int) -> int:
    out = 1
    for k in range(2, n + 1):
        out *= k
    return out


def order_text(order: Sequence[str]) -> str:
    return "(" + ", ".join(order) + ")"


def scheme_text(order: Sequence[str]) -> str:
    """The scheme of R atoms computing the convolution in ``order`` (outermost first)."""
    return "[" + ", ".join(f"R_{DIM_OF[n]}" for n in parse_order(order)) + "]"


def order_of_scheme(text: str) -> Order:
    """Inverse of :func:`scheme_text` (for rows read back from the store)."""
    dims = []
    for atom in _split_atoms(text.strip().strip("[]")):
        atom = atom.strip()
        if atom.startswith("Tpar_{"):  # the parallel version: Tpar_{n,d}
            atom = atom.removeprefix("Tpar_{").rstrip("}").split(",")[1]
        dims.append(atom.removeprefix("R_"))
    return parse_order(dims)


def _split_atoms(text: str) -> list[str]:
    """Split on the commas outside braces."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def candidate(order: Sequence[str], partial_sums: bool = True, target: str = "avx2") -> Candidate:
    """The scheme candidate of one loop order (partial sums = hoisted output accumulator)."""
    opts = {"target": target, "hoist": bool(partial_sums), "fma": True, "partial": "none"}
    return Candidate("scheme", scheme_text(order), tuple(sorted(opts.items())))


def parallel_scheme_text(order: Sequence[str], sizes: Mapping[str, int]) -> str:
    """The OpenMP version (§3.4): the outermost loop as ``Tpar`` (``omp parallel for schedule(static)``).

    Only when the outermost loop indexes the output (o, y, x): the thesis guarded the other orders'
    updates with ``omp atomic``, which the scheme generator does not emit (Tpar on a reduction dimension
    is illegal, rule par-reduction), so those 360 orders have no parallel kernel here."""
    order = parse_order(order)
    if order[0] not in OUTPUT_LOOPS:
        raise PermutationError(
            f"order {order_text(order)}: the outermost loop {order[0]} is a reduction; its parallel version "
            "needs omp atomic on the output, which is not generated"
        )
    d = DIM_OF[order[0]]
    return "[" + ", ".join([f"Tpar_{{{sizes[d]},{d}}}"] + [f"R_{DIM_OF[n]}" for n in order[1:]]) + "]"


def partial_sum_run(order: Sequence[str]) -> int:
    """How many innermost loops form the run of reduction loops a partial sum accumulates over."""
    n = 0
    for name in reversed(order):
        if name in OUTPUT_LOOPS:
            break
        n += 1
    return n


def select_orders(
    mode: str,
    order: str | Sequence[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    ranking: Mapping[Order, float] | None = None,
) -> list[Order]:
    """The ``permutation: fixed | searched | best-average`` option (see the module docstring).

    ``ranking`` maps an order to its average speedup over layers (higher is better), e.g.
    :func:`studies.permutations.study.average_speedups` of stored simulation results.
    """
    if mode not in PERMUTATION_MODES:
        raise PermutationError(
            f"permutation={mode!r} is not allowed; allowed: {', '.join(PERMUTATION_MODES)}"
        )
    if mode == "fixed":
        return [parse_order(order) if order is not None else LOOPS]
    if mode == "searched":
        orders = sjt()
        if sample is None:
            return orders
        if not 1 <= sample <= len(orders):
            raise PermutationError(f"permutation sample must be in 1..{len(orders)}, got {sample}")
        picked = set(random.Random(seed).sample(range(len(orders)), sample))
        return [o for k, o in enumerate(orders) if k in picked]
    if ranking:
        return [max(ranking, key=lambda o: (ranking[o], -order_index(o)))]
    return [THESIS_BEST_AVERAGE]


# -- workloads (seed 004, Tables 4.1-4.3) ----------------------------------------------------------------
# Sizes by conv2d dimension: k = Cout, c = Cin, h = H, w = W (the thesis's W x H is both the input and the
# output extent, the input having no halo; here it is the *output* extent and the input carries the halo
# (h + r - 1): the thesis's quirk is kept by the simulator's ``layout=thesis``), r = kH, s = kW.
TABLE_4_1: dict[str, tuple[int, int, int, int]] = {  # name: (Cout, Cin, W=H, k)
    "initial-conf": (256, 32, 28, 3),  # TinyDarknet layer 10
    "fire3-conv3x3-2": (64, 16, 55, 3),
    "fire4-conv1x1-1": (32, 128, 55, 1),
    "fire4-conv1x1-2": (128, 32, 55, 1),
    "fire7-conv1x1-1": (48, 384, 27, 1),
    "fire9-conv1x1-1": (64, 512, 13, 1),
    "fire9-conv3x3-2": (256, 64, 13, 3),
    "conv-final": (1000, 512, 13, 1),
}
TABLE_4_2_VALUES = (10, 50, 90, 130, 170, 210)  # Cin = Cout, W = H
TABLE_4_2_KERNELS = (1, 3, 5, 7, 9, 11)
TABLE_4_3_VALUES = (10, 90, 170)
TABLE_4_3_KERNELS = (1, 3, 9, 11)
# Small layers for the quick profile and the tests: all 720 orders simulate in well under a minute.
QUICK_LAYERS: dict[str, tuple[int, int, int, int]] = {
    "quick-3x3": (16, 16, 8, 3),
    "quick-1x1": (32, 32, 12, 1),
}


def layer_sizes(cout: int, cin: int, wh: int, k: int) -> dict[str, int]:
    return {"h": wh, "w": wh, "k": cout, "r": k, "s": k, "c": cin}


def layer_set(name: str) -> dict[str, dict[str, int]]:
    """Named layer sets: table4.1, table4.2 (216 synthetic), table4.3 (36 synthetic), quick, or one
    layer name (of Table 4.1 or quick) or a comma-separated list of them."""
    if name == "table4.1":
        return {n: layer_sizes(*v) for n, v in TABLE_4_1.items()}
    if name == "quick":
        return {n: layer_sizes(*v) for n, v in QUICK_LAYERS.items()}
    if name in ("table4.2", "table4.3"):
        vals, ks = (
            (TABLE_4_2_VALUES, TABLE_4_2_KERNELS)
            if name == "table4.2"
            else (TABLE_4_3_VALUES, TABLE_4_3_KERNELS)
        )
        return {f"syn-c{c}-w{w}-k{k}": layer_sizes(c, c, w, k) for c in vals for w in vals for k in ks}
    known = {**TABLE_4_1, **QUICK_LAYERS}
    out = {}
    for part in name.split(","):
        part = part.strip()
        if part in known:
            out[part] = layer_sizes(*known[part])
        elif part.startswith("syn-"):
            try:
                c, w, k = (int(t[1:]) for t in part.removeprefix("syn-").split("-"))
            except ValueError:
                raise PermutationError(f"synthetic layer {part!r} is not syn-c<C>-w<W>-k<K>") from None
            out[part] = layer_sizes(c, c, w, k)
        else:
            raise PermutationError(
                f"unknown layer or layer set {part!r}; allowed: table4.1, table4.2, table4.3, quick, "
                f"syn-c<C>-w<W>-k<K>, {', '.join(known)}"
            )
    return out
