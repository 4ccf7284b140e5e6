"""The GEMM family of seed 002 (Alaejos et al., TOMS 2024) as schemes: six blocked variants, one code path.

A variant "X3Y2Z0" keeps a block of X in L3, a block of Y in L2 and a micro-tile of Z in registers
(§3-4, Figs 1-3). Each is written here as a scheme of the one scheme language (kernels/scheme.py) with
``Pack``/``PackT`` at the levels where the paper packs, so the family is one more search space and every
member goes through the same generator, check and timing as any scheme. Matmul dimensions: m = i, n = j,
k = k (C[i,j] += A[i,k] * B[k,j], all row-major).

Blocks use the thesis's partial tiles: ``R_d, Texct_{b,d}`` is the block loop (a partial block at the
border) and ``Tvar_{b,d}`` walks inside it, so any (m, n, k) works; the microkernel takes remainders with
``codegen.partial=masked`` (masked lanes, a switch between smaller unrolled kernels).

Microkernels (§4, Fig 3), vector lanes L:
- resident C (B3A2C0, A3B2C0): ``U_{mr,i}, U_{nr/L,j}, V_j`` under the kc loop; the mr x nr tile of C is
  kept in registers across kc (codegen's accumulator hoisting), A broadcast, B loaded by vectors.
- resident B (A3C2B0, C3A2B0): ``U_{kr,k}, U_{nr/L,j}, V_j`` under a loop over i (L6): each step is a
  vector-matrix product updating one row of C (kr x nr of B reused across the rows).
- resident A (B3C2A0, C3B2A0): C is packed transposed (``PackT_C[j,i]``) so that columns of C are
  contiguous, and the tile is ``U_{kr,k}, U_{mr/L,i}, V_i`` under a loop over j (L6): each step is a
  matrix-vector product updating one column of C (mr x kr of A reused across the columns).

Packed buffers of the resident-C variants are the paper's micro-panels (Fig 4) by default
(``layout="panels"``): ``PackT_A[i/mr,k,i]`` (Ac as mc/mr panels, each kc x mr) and ``PackT_B[j/nr,k,j]``
(Bc as nc/nr panels, each kc x nr), so the microkernel streams both operands contiguously.
``layout="rows"`` keeps the block's row-major order (``PackT_A[k,i]``, ``Pack_B``: Br's rows nc apart),
the only layout the language had before panels; the "packed" stage of Fig 13 (scalar loops, no register
tile to align panels to) always uses it.

Where the language is coarser than the paper (said in the report and the final notes of issue 8):
- Resident A needs A's mr x kr tile contiguous along m; A is not packed in the paper (B3C2A0, C3B2A0), here
  the tile is copied per (pr, ir) step with ``PackT_A[k,i]`` placed at the register level.
- "Resident" inputs (A or B tiles kept in registers across L6) rely on the C compiler hoisting their
  loads out of the L6 loop; the language promotes only outputs to registers (``ScalP``, hoisting).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

from harness.machine import detect, register_count, vector_lanes
from kernels.candidate import Workload
from studies.gemm_family.model import (
    ROLES,
    RULES,
    Blocking,
    blocking,
    levels,
    register_tile,
    round_down,
    round_up,
)

VARIANTS: tuple[str, ...] = ("B3A2C0", "A3B2C0", "B3C2A0", "A3C2B0", "C3A2B0", "C3B2A0")
PACKINGS: tuple[str, ...] = ("both", "A", "B", "none")  # Fig 19 (resident C variants)
LAYOUTS: tuple[str, ...] = ("panels", "rows")  # packed buffers: micro-panels (Fig 4) or row-major blocks
STAGES: tuple[str, ...] = ("basic", "blocked", "packed", "ukernel", "optimized")  # Fig 13
# Order of the two register-tile loops inside a block (resident C; BLIS's loops 2 and 1, jr and ir):
# "paper" is the variant's own (B3A2C0: jr outer, a micro-panel of B in L1 across the A block in L2;
# A3B2C0: ir outer); "ir" walks the i tiles outer, so an mr x kc micro-panel of A stays in L1 across
# every j tile while the whole B block sits in L2 (beyond the paper: when n is small, B is a few
# micro-panels and the A block of the paper's order does not fit L1 beside them and the C block:
# n = 64 types t01, t02, t05 on a Zen 2, issue 33); "jr" the other way round.
WALKS: tuple[str, ...] = ("paper", "ir", "jr")
# loop order of the three block loops (§2.2 of the notes, the paper's Figs 1-2, 11-12)
OUTER_ORDER: dict[str, list[str]] = {
    "B3A2C0": ["j", "k", "i"],
    "A3B2C0": ["i", "k", "j"],
    "B3C2A0": ["j", "k", "i"],
    "A3C2B0": ["i", "k", "j"],
    "C3A2B0": ["j", "i", "k"],
    "C3B2A0": ["j", "i", "k"],
}
OPTIONS: dict[str, Any] = {"partial": "masked"}  # every family scheme takes remainders in its microkernel


@dataclass(frozen=True)
class Params:
    """Block and register-tile sizes of one family member (m, n, k blocks and the register tile)."""

    mc: int
    nc: int
    kc: int
    mr: int
    nr: int
    kr: int = 4


def resident(variant: str) -> str:
    """Which operand the microkernel keeps in registers: "C", "A" or "B" (the name's last letter)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown GEMM variant {variant!r}; known: {', '.join(VARIANTS)}")
    return variant[-2]


def default_tile(variant: str, target: str) -> tuple[int, int, int]:
    """(mr, nr, kr) used when an entry gives none: BLIS's register tiles (6 x 16 on AVX2, 12 x 32 on
    AVX-512 in our row-major orientation) for resident C; two vectors by kr = 4 for resident A/B."""
    lanes = vector_lanes(target)
    if resident(variant) == "C":
        return (6, 2 * lanes, 1) if lanes == 8 else (12, 2 * lanes, 1)
    return 2 * lanes, 2 * lanes, 4


def registers_needed(variant: str, mr: int, nr: int, kr: int, lanes: int) -> int:
    """Vector registers the microkernel needs: accumulators + reused operand vectors + one streamed."""
    res = resident(variant)
    if res == "C":  # mr x nr/L accumulators, nr/L vectors of B, one broadcast of A
        return mr * (nr // lanes) + nr // lanes + 1
    if res == "B":  # kr x nr/L of B, nr/L of one row of C, one broadcast of A
        return kr * (nr // lanes) + nr // lanes + 1
    return kr * (mr // lanes) + mr // lanes + 1  # resident A: kr x mr/L of A, mr/L of C, one broadcast


def microkernels(variant: str, target: str, max_mr: int = 16, max_vectors: int = 6) -> list[tuple[int, int]]:
    """Every resident-C (mr, nr) the register file holds without spilling (Fig 16's grid): nr a multiple
    of the vector length, up to ``max_vectors`` vectors, mr up to ``max_mr``."""
    lanes, regs = vector_lanes(target), register_count(target)
    return [
        (mr, v * lanes)
        for v, mr in product(range(1, max_vectors + 1), range(1, max_mr + 1))
        if registers_needed(variant, mr, v * lanes, 1, lanes) <= regs
    ]


def variant_scheme(
    variant: str,
    p: Params,
    lanes: int,
    pack: str = "both",
    stage: str = "optimized",
    layout: str = "panels",
    walk: str = "paper",
) -> str:
    """The scheme of ``variant`` with blocks (mc, nc, kc) and register tile (mr, nr, kr).

    ``pack`` (resident C variants only, Fig 19): which of A and B are packed ("both", "A", "B", "none").
    ``stage`` (resident C variants only, Fig 13): the paper's generator ladder (§5-6, Figs 5-9):
    ``basic`` (three loops i, j, k), ``blocked`` (the five block loops, scalar inner loops, no packing),
    ``packed`` (+ packing), ``ukernel`` (+ the mr x nr micro-tile, unrolled but scalar) and ``optimized``
    (+ vectorization: the variant's scheme). TVM's "prefetch" (cache_read) has no counterpart here.
    ``layout`` (resident C): packed A and B as micro-panels of mr / nr ("panels") or row-major ("rows").
    ``walk`` (resident C, optimized stage): the order of the register-tile loops in a block (:data:`WALKS`).
    """
    res = resident(variant)
    if walk not in WALKS:
        raise ValueError(f"walk={walk!r}; allowed: {', '.join(WALKS)}")
    if walk != "paper" and (res != "C" or stage != "optimized"):
        raise ValueError(f"walk={walk} applies to the optimized resident-C variants (B3A2C0, A3B2C0)")
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; allowed: {', '.join(LAYOUTS)}")
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; allowed: {', '.join(STAGES)}")
    if stage != "optimized" and res != "C":
        raise ValueError(f"stage={stage} applies to the resident-C variants, not {variant}")
    if stage == "basic":
        return "[R_i, R_j, R_k]"
    if stage in ("blocked", "packed", "ukernel"):
        # panels need the register tile's loops; the scalar "packed" stage packs row-major
        scheme = variant_scheme(variant, p, lanes, pack if stage != "blocked" else "none",
                                layout=layout if stage == "ukernel" else "rows")  # fmt: skip
        atoms = scheme.strip("[]").split(", ")
        cut = next(n for n, a in enumerate(atoms) if a.startswith("U_"))
        if stage == "ukernel":  # the micro-tile unrolled, scalar (nr elements instead of nr/L vectors)
            return "[" + ", ".join([*atoms[:cut], f"U_{{{p.mr},i}}", f"U_{{{p.nr},j}}"]) + "]"
        return "[" + ", ".join(atoms[:cut]) + "]"  # Tvar loops down to single elements
    if pack not in PACKINGS:
        raise ValueError(f"pack={pack!r}; allowed: {', '.join(PACKINGS)}")
    if pack != "both" and res != "C":
        raise ValueError(f"pack={pack} applies to the resident-C variants (B3A2C0, A3B2C0), not {variant}")
    vec_size = p.mr if res == "A" else p.nr  # the vectorized register-tile dimension
    if vec_size % lanes:
        raise ValueError(f"{variant}: {'mr' if res == 'A' else 'nr'}={vec_size} is not a multiple of {lanes}")
    block = {"i": p.mc, "j": p.nc, "k": p.kc}

    def outer(d: str) -> list[str]:  # the block loop: a partial block at the border
        return [f"R_{d}", f"Texct_{{{block[d]},{d}}}"]

    def inner(d: str) -> str:  # the loop inside a block
        return f"Tvar_{{{block[d]},{d}}}"

    pack_a = pack in ("both", "A")
    pack_b = pack in ("both", "B")
    # the packs of each resident kind (same layout: Pack_X; transposed: PackT_X[...])
    panels = layout == "panels"
    pack_as = f"PackT_A[i/{p.mr},k,i]" if panels else "PackT_A[k,i]"
    pack_bs = f"PackT_B[j/{p.nr},k,j]" if panels else "Pack_B"
    packs = {
        "C": {"A": [pack_as] if pack_a else [], "B": [pack_bs] if pack_b else []},
        "B": {"A": ["Pack_A"], "C": ["Pack_C"]},
        "A": {"B": ["Pack_B"], "C": ["PackT_C[j,i]"]},
    }[res]
    l3, l2 = variant[0], variant[2]
    outer_order = OUTER_ORDER[variant]
    atoms: list[str] = []
    placed: set[str] = set()
    for d in outer_order:
        atoms += outer(d)
        # a block is packed once the loops over all its dimensions are open
        for x in (l3, l2):
            dims = {"A": {"i", "k"}, "B": {"k", "j"}, "C": {"i", "j"}}[x]
            if x not in placed and dims <= set(outer_order[: outer_order.index(d) + 1]):
                atoms += packs.get(x, [])
                placed.add(x)
    if res == "C":  # jr, ir (or ir, jr for A3B2C0), then pr = L6 inside the microkernel
        micro_order = {"ir": ["i", "j"], "jr": ["j", "i"]}.get(
            walk, ["j", "i"] if variant == "B3A2C0" else ["i", "j"]
        )
        atoms += [inner(d) for d in micro_order] + [inner("k")]
        atoms += [f"U_{{{p.mr},i}}", f"U_{{{p.nr // lanes},j}}", "V_j"]
    elif res == "B":  # pr, jr then L6 over i (A3C2B0: pr, jr; C3A2B0: jr, pr)
        micro_order = ["k", "j"] if variant == "A3C2B0" else ["j", "k"]
        atoms += [inner(d) for d in micro_order] + [inner("i")]
        atoms += [f"U_{{{p.kr},k}}", f"U_{{{p.nr // lanes},j}}", "V_j"]
    else:  # resident A: pr, ir (C3B2A0: ir, pr), the A tile, then L6 over j
        micro_order = ["k", "i"] if variant == "B3C2A0" else ["i", "k"]
        atoms += [inner(d) for d in micro_order] + ["PackT_A[k,i]", inner("j")]
        atoms += [f"U_{{{p.kr},k}}", f"U_{{{p.mr // lanes},i}}", "V_i"]
    return "[" + ", ".join(atoms) + "]"


def parallel_scheme(
    variant: str,
    p: Params,
    lanes: int,
    threads: int,
    size: int,
    pack: str = "both",
    layout: str = "panels",
    walk: str = "paper",
) -> str:
    """``variant`` with its outermost block loop split across ``threads`` OpenMP threads (``Tpar``; Fig 20).

    ``size`` is the extent of that loop's dimension (n for jc in B3A2C0, m for ic in A3B2C0). The language
    allows parallel loops only outermost, so this is the paper's "jc" for the variants whose outermost
    loop is jc and "ic" for those whose outermost loop is ic; its inner choices (ic, jr, ir in B3A2C0)
    are below the reduction loop pc and a shared pack, which the language cannot parallelize. Each thread
    gets size/threads elements, split into blocks no larger than the model's (whole register tiles).
    """
    if resident(variant) != "C":
        raise ValueError(f"parallel loops are generated for the resident-C variants, not {variant}")
    d = "j" if variant == "B3A2C0" else "i"
    key, tile = ("nc", p.nr) if d == "j" else ("mc", p.mr)
    chunk, rest = divmod(size, threads)
    if rest or chunk % tile:
        raise ValueError(f"{variant}: {size} is not {threads} threads x whole {tile}-wide tiles")
    q = next(
        (q for q in range(1, chunk // tile + 1) if chunk % (q * tile) == 0 and chunk // q <= getattr(p, key)),
        0,
    )
    if not q:
        raise ValueError(f"{variant}: no block of {chunk} // q <= {key}={getattr(p, key)} in whole tiles")
    text = variant_scheme(
        variant, dataclasses.replace(p, **{key: chunk // q}), lanes, pack, layout=layout, walk=walk
    )
    head = f"Tpar_{{{threads},{d}}}" + (f", T_{{{q},{d}}}" if q > 1 else "")
    assert text.startswith(f"[R_{d}, ")
    return "[" + head + text[len(f"[R_{d}") :]


def microkernel_scheme(res: str, mr: int, nr: int, kr: int, stream: int, lanes: int) -> str:
    """The microkernel of a resident-``res`` variant alone, on a workload of one register tile streamed
    ``stream`` times (resident C: (mr, nr, stream=k); resident A: (mr, stream=n, kr); resident B:
    (stream=m, nr, kr)): the innermost part of :func:`variant_scheme`, for testing it in isolation."""
    if res == "C":
        return f"[T_{{{stream},k}}, U_{{{mr},i}}, U_{{{nr // lanes},j}}, V_j]"
    if res == "B":
        return f"[T_{{{stream},i}}, U_{{{kr},k}}, U_{{{nr // lanes},j}}, V_j]"
    if res == "A":
        return f"[PackT_C[j,i], PackT_A[k,i], T_{{{stream},j}}, U_{{{kr},k}}, U_{{{mr // lanes},i}}, V_i]"
    raise ValueError(f"resident must be C, A or B, not {res!r}")


def model_params(
    variant: str, target: str, sizes: Mapping[str, int], mr: int, nr: int, kr: int, rule: str = "low"
) -> tuple[Params, Blocking]:
    """(mc, nc, kc) of the cache model (``rule``: model.RULES) for this machine's caches, clipped to the
    matmul ``sizes``."""
    dims = {"m": sizes["i"], "n": sizes["j"], "k": sizes["k"]}
    b = blocking(variant, levels(detect()), mr, nr, kr, dims, rule=rule)
    return Params(b.mc, b.nc, b.kc, mr, nr, kr), b


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def space_entry(entry: Mapping[str, Any], workload: Workload, target: str) -> list[tuple[str, dict]]:
    """Schemes of a space entry ``{gemm_variant: ..., [mc, nc, kc, mr, nr, kr, pack, microkernels,
    scale]}`` (the EXPANDERS hook of kernels/space.py).

    - ``gemm_variant``: a variant, a list of them, or ``all``;
    - ``mr``, ``nr``, ``kr``: the register tile (default :func:`default_tile`); ``microkernels: all``
      (every (mr, nr) the registers hold) or a list of ``[mr, nr]`` pairs instead (Fig 16);
    - ``mc``, ``nc``, ``kc``: blocks (default: the cache model for this machine); a list sweeps them; a
      listed block is rounded down to a whole number of register tiles (nc 512 with nr 24: 504), as BLIS
      rounds its blocks, so one list serves tiles of every width (blocks that round alike run once);
    - ``model``: the cache model's rule, ``low`` (default: the paper's, Low et al.'s closed form) or
      ``exact`` (the same constraints solved exactly; beyond the paper, candidates carry ``gemm_model``),
      or a list of them;
      ``whole`` is the whole dimension (one block: kc = k reads and writes C once);
    - ``scale``: ``{mc: [0.5, 1, 2], ...}`` multiplies the model's blocks (the sweep around the model);
    - ``pack``: ``both`` (default), ``A``, ``B``, ``none`` or a list (Fig 19, resident C variants);
    - ``stage``: ``optimized`` (default) or a list of :data:`STAGES` (Fig 13's generator ladder);
    - ``layout``: ``panels`` (default) or ``rows`` or a list: the packed buffers' layout (resident C);
    - ``walk``: ``paper`` (default), ``ir`` or ``jr`` or a list: the order of the register-tile loops in a
      block (:data:`WALKS`; resident C, optimized stage);
    - ``threads``: > 1 splits the outermost block loop across that many threads (:func:`parallel_scheme`,
      Fig 20; resident-C variants; shapes that do not split into whole tiles per thread are skipped).
    - ``prefetch``: ``none`` (default), the code-generation option ``prefetch`` (``i``: the C tile of the
      next step along i; ``'i,A:i'``: and the unpacked A's next micro-panel) or a list of them; the
      paper's TVM has none, the libraries do;
    - ``allow_spill``: true measures register tiles the vector registers cannot hold (an error otherwise:
      such a tile spills its accumulators, which is not the microkernel the paper's Fig 16 describes).
    """
    if workload.op.name != "matmul":
        raise ValueError(f"gemm_variant entries need the matmul operator, not {workload.op.name}")
    entry = {key: v for key, v in entry.items() if v is not None}  # null (a config's default) = absent
    names = _as_list(entry["gemm_variant"])
    variants = list(VARIANTS) if names == ["all"] else [str(v) for v in names]
    lanes = vector_lanes(target)
    out: list[tuple[str, dict]] = []
    for variant in variants:
        dmr, dnr, dkr = default_tile(variant, target)
        if "microkernels" in entry:
            mk = entry["microkernels"]
            tiles = microkernels(variant, target) if mk == "all" else [(int(a), int(b)) for a, b in mk]
            tiles3 = [(a, b, int(entry.get("kr", dkr))) for a, b in tiles]
        else:
            tiles3 = list(
                product(
                    _as_list(entry.get("mr", dmr)),
                    _as_list(entry.get("nr", dnr)),
                    _as_list(entry.get("kr", dkr)),
                )
            )
        if not entry.get("allow_spill", False):
            for mr, nr, kr in tiles3:
                need = registers_needed(variant, int(mr), int(nr), int(kr), lanes)
                if need > register_count(target):
                    raise ValueError(
                        f"{variant} tile {mr}x{nr} (kr={kr}) needs {need} vector registers, {target} has "
                        f"{register_count(target)}: it would spill (allow_spill: true measures it anyway)"
                    )
        stages = _as_list(entry.get("stage", "optimized"))
        layouts = _as_list(entry.get("layout", "panels")) if resident(variant) == "C" else ["panels"]
        prefetches = [str(x) for x in _as_list(entry.get("prefetch", "none"))]
        rules = [str(x) for x in _as_list(entry.get("model", "low"))]
        for rule in rules:
            if rule not in RULES:
                raise ValueError(f"model: {rule!r} is not a cache-model rule; known: {', '.join(RULES)}")
        walks = [str(x) for x in _as_list(entry.get("walk", "paper"))]
        for (mr, nr, kr), pack, stage, layout, prefetch, rule, walk in product(
            tiles3, _as_list(entry.get("pack", "both")), stages, layouts, prefetches, rules, walks
        ):
            base, _ = model_params(variant, target, workload.size, int(mr), int(nr), int(kr), rule)
            scale = entry.get("scale") or {}
            blocks = {}
            steps = register_tile(variant, int(mr), int(nr), int(kr))
            for key, d in (("mc", "i"), ("nc", "j"), ("kc", "k")):
                step = steps[key[0]]
                whole = round_up(workload.size[d], step)  # the dimension, rounded up to the tile
                if key in entry:  # listed blocks: rounded down to whole tiles (BLIS's rule for nc and mc)
                    listed = [whole if v == "whole" else int(v) for v in _as_list(entry[key])]
                    blocks[key] = sorted({min(whole, round_down(v, step)) for v in listed})
                    continue
                # a scaled block stays a whole number of register tiles and within the problem
                factors = _as_list(scale.get(key, 1))
                blocks[key] = sorted(
                    {min(whole, max(step, round(getattr(base, key) * f / step) * step)) for f in factors}
                )
            for mc, nc, kc in product(blocks["mc"], blocks["nc"], blocks["kc"]):
                p = Params(mc, nc, kc, int(mr), int(nr), int(kr))
                threads = int(entry.get("threads", 1))
                if threads > 1:  # Fig 20: the outermost block loop in parallel
                    size = workload.size["j" if variant == "B3A2C0" else "i"]
                    try:
                        text = parallel_scheme(variant, p, lanes, threads, size, str(pack), str(layout), walk)
                    except ValueError:
                        continue  # this shape does not split into whole tiles per thread: not expressible
                else:
                    text = variant_scheme(variant, p, lanes, str(pack), str(stage), str(layout), walk)
                options = dict(OPTIONS) | ({"prefetch": prefetch} if prefetch != "none" else {})
                if rule != "low":  # beyond the paper: which model the blocks come from (codegen ignores it)
                    options["gemm_model"] = rule
                if (
                    "scale" in entry
                ):  # the model sweep: say in the label how far from the model (codegen ignores it)
                    options["gemm_blocks"] = blocks_label(p, base)
                if all((text, options) != x for x in out):  # "basic" ignores the blocks: once
                    out.append((text, options))
    return out


def blocks_label(p: Params, model: Params) -> str:
    """``model`` when (mc, nc, kc) are the model's, else each block's ratio to the model's ("mc*0.5 kc*2")."""
    ratios = {k: getattr(p, k) / getattr(model, k) for k in ("mc", "nc", "kc")}
    if all(r == 1 for r in ratios.values()):
        return "model"
    return " ".join(f"{k}*{r:.3g}" for k, r in ratios.items() if r != 1)


def roles_table() -> dict[str, dict[str, str]]:
    """For the report: per variant, what is in L3, L2, registers and which microkernel runs."""
    kind = {"C": "resident C", "A": "resident A", "B": "resident B"}
    return {
        v: {
            "L3": v[0],
            "L2": v[2],
            "registers": v[4],
            "microkernel": kind[resident(v)],
            "stream": {"m": "i", "n": "j", "k": "k"}[ROLES[v].stream],
        }
        for v in VARIANTS
    }


@functools.lru_cache(maxsize=65536)
def canon(text: str) -> str:
    """A scheme text in the form :func:`kernels.scheme.format_scheme` writes: :func:`identify` compares
    each text with the candidates it regenerates, and the study's report figures regenerate the same ones
    for every row of the same blocks (57 000 parses in the report of every archive, uncached)."""
    from kernels.scheme import format_scheme, parse_scheme

    return format_scheme(parse_scheme(text))


@functools.lru_cache(maxsize=4096)
def identify(text: str, lanes: int) -> dict[str, Any] | None:
    """Which family member, parameters, packing and stage a scheme text is (None if it is none of them):
    the inverse of :func:`variant_scheme`, found by regenerating the candidates and comparing canonical
    texts (reports read results back from their labels this way)."""
    import re

    try:
        target = canon(text)
    except ValueError:
        return None
    par = re.match(r"\[Tpar_\{(\d+),(\w)\}, (?:T_\{\d+,\2\}, )?", target)
    if par:  # a parallel_scheme: the sequential scheme with R_d for the parallel prefix
        info = identify(f"[R_{par.group(2)}, " + target[par.end() :], lanes)
        return None if info is None else {**info, "threads": int(par.group(1))}
    if target == canon("[R_i, R_j, R_k]"):
        return {"variant": "B3A2C0", "stage": "basic", "pack": "none"}
    blocks = {d: int(b) for b, d in re.findall(r"Texct_\{(\d+),(\w)\}", target)}
    unrolls = [(int(n), d) for n, d in re.findall(r"U_\{(\d+),(\w)\}", target)]
    if set(blocks) != {"i", "j", "k"}:
        return None
    u = dict((d, n) for n, d in unrolls)
    vec = 1 if "V_" not in target else lanes
    guesses = [
        (u.get("i", 1), u.get("j", 1) * vec, 1),  # resident C (ukernel stage: scalar, vec = 1)
        (1, u.get("j", 1) * vec, u.get("k", 1)),  # resident B
        (u.get("i", 1) * vec, 1, u.get("k", 1)),  # resident A
    ]
    order = re.findall(r"\bR_(\w)", target)
    for variant, pack, stage, layout in product(VARIANTS, PACKINGS, STAGES, LAYOUTS):
        if OUTER_ORDER[variant] != order:  # the block loops' order tells the family member apart
            continue
        if (pack != "both" or stage != "optimized" or layout != "panels") and resident(variant) != "C":
            continue
        if layout == "rows" and (pack == "none" or stage in ("basic", "blocked", "packed")):
            continue  # the same text as with panels: report it once, as the default
        if stage == "blocked" and pack != "none":  # "blocked" packs nothing whatever pack says
            continue
        walks = WALKS if resident(variant) == "C" and stage == "optimized" else ("paper",)
        for (mr, nr, kr), walk in product(guesses, walks):  # "paper" first: a walk equal to it is it
            p = Params(blocks["i"], blocks["j"], blocks["k"], max(mr, 1), max(nr, lanes), max(kr, 1))
            try:
                candidate = variant_scheme(variant, p, lanes, pack, stage, layout, walk)
            except ValueError:
                continue
            if canon(candidate) == target:
                info = {"variant": variant, "pack": pack, "stage": stage, "layout": layout, "threads": 1}
                return {**info, "walk": walk, **vars(p)}
    return None
