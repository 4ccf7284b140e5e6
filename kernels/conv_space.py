"""Convolution optimization spaces of seed 000 chapters 5-6: the 23 layers, the microkernel plans and the
scheme samplers (random search of §5.4.5, the sampler of §6.5), plus the footprint model of §5.4.3.

A scheme is split, as in the thesis, into a *microkernel plan* (one selected microkernel, or a λ_seq
combination of two selected microkernels on one dimension) and the *tiling above it* (tile sizes and
their permutation). Every sampler returns scheme texts that are legal by construction and checked with
:func:`kernels.codegen.analyze_for` before they leave this module.

Space knobs (``conf/space/conv_*.yaml``, section ``conv``), the options of issue 5 item 2:
- ``microkernels``: ``selected`` (stored by ``harness microkernels`` on this machine, else ``fallback``),
  ``all`` (the fallback list plus the selection) or ``forced`` (``forced: ["U_{17,h}, V_k"]``);
- ``added``: microkernels added to that set, in the ``forced`` syntax (issue 32: register tiles across h
  and w, ``"U_{3,w}, U_{2,h}, U_{2,k}, V_k"``, which no w x k selection holds; with ``partial: masked``
  a tile that divides neither 7 nor 17 covers them with partial tiles);
- ``combination``: ``single`` | ``lambda`` | ``both`` (single microkernels, λ_seq combinations, or both);
- ``divisibility``: ``divisors`` (perfect nests above the microkernel) | ``free`` (Texct/Tvar tiles);
- ``partial``: ``none`` | ``masked`` | ``padded`` (a microkernel that does not divide h/w/k covers the
  remainder with a partial microkernel under an ``R`` loop);
- ``packing``: ``none`` | a tensor name (``I``, ``K``) | ``any`` (a ``Pack_X`` atom at a random legal place);
- ``permutation``: ``searched`` | ``fixed`` (level by level in ``fixed_order``, a BLIS-like heuristic
  standing in for IOOpt, which is not available);
- ``reduction_inner``: the probability (0 to 1) that a draw places the innermost tile of each reduction
  dimension (c, r, s, in a random order) right above the microkernel, so the output accumulators stay in
  registers across a whole reduction block, as oneDNN's kernels loop over kh, kw and an input-channel
  block. 0 (default) is the thesis's uniform permutation; issue 32 measured this prior on the stems
  (yolo9000_00: 50% of peak for the best of 100 uniform draws, 89% with c, r, s innermost);
- ``pack_weights``: the probability (0 to 1) that a draw packs the weights into microkernel panels
  (``PackT_K[k/kf,r,s,c,k]``) above its outermost h or w loop (0, default: the thesis's space; issue 32:
  +6 points on yolo9000_23 and yolo9000_18, whose weight rows are 113 KB and 4 KB apart);
- ``panels_partial_k``: those panels also for a microkernel whose k tile ends masked (``partial: masked``;
  the last panel's tail is never read). False (default): as the archived searches drew, so a resumed
  search draws what it drew; issue 32 measured it on resnet18_12 (7 x 3 vectors, K = 512 = 10 x 48 + 32)
  on an Intel Xeon: 64.0% of peak unpacked, 69.2% packed, oneDNN 3.2 69.8%.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from kernels.candidate import Workload
from kernels.microkernels import Cover, lambda_covers, lambda_seq_text
from kernels.scheme import SchemeError, parse_scheme
from kernels.targets import get_target

ROOT = Path(__file__).resolve().parent.parent
D, A = TypeVar("D"), TypeVar("A")  # a dimension and an atom (text or parsed) of reductions_inner
LAYERS_CSV = ROOT / "conf" / "workload" / "ttile_layers.csv"
CONV_DIMS = ("h", "w", "k", "r", "s", "c")
MK_ORDER = ("s", "r", "c", "w", "h", "k")  # unroll order of the thesis microkernel (reductions outermost)
PARTIAL_DIMS = ("h", "w", "k")  # a partial microkernel is generated on these only
REDUCTION_DIMS = ("c", "r", "s")

# Microkernels used when this machine has no stored selection (CI machines): register-tile shapes that
# satisfy the per-ISA constraints of kernels/isa/*.yaml (w x k accumulators, c = h = r = s = 1).
FALLBACK: dict[str, tuple[dict[str, int], ...]] = {
    "avx2": tuple({"w": w, "k": k} for w, k in ((3, 4), (4, 3), (6, 2), (5, 2), (3, 3), (4, 2))),
    "avx512": tuple({"w": w, "k": k} for w, k in ((12, 2), (14, 2), (8, 3), (7, 3), (6, 4), (9, 3))),
}


class ConvSpaceError(ValueError):
    """A space that cannot produce a candidate for a workload (names the knob to change)."""


# -- the 23 layers ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    name: str
    network: str
    index: int
    k: int  # as printed in the thesis table
    k_used: int  # after the erratum (Yolo9000-23 padded to a multiple of 16)
    c: int
    hw: int  # output height = width
    rs: int
    stride: int
    erratum: str

    @property
    def sizes(self) -> dict[str, int]:
        return {"h": self.hw, "w": self.hw, "k": self.k_used, "c": self.c, "r": self.rs, "s": self.rs}

    @property
    def macs(self) -> int:
        return self.k_used * self.c * self.hw * self.hw * self.rs * self.rs


def load_layers(path: Path = LAYERS_CSV) -> list[Layer]:
    """The thesis's Fig 6.1 table (comment lines carry the source and the errata)."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        out.append(Layer(r["name"], r["network"], int(r["index"]), int(r["k"]), int(r["k_used"]), int(r["c"]),
                         int(r["hw"]), int(r["rs"]), int(r["stride"]), r["erratum"] or ""))  # fmt: skip
    return out


def workload_yaml(layer: Layer) -> str:
    """The conf/workload file of one layer (kept in sync with the table by tests/test_conv_space.py)."""
    note = f"\n# Erratum: {layer.erratum}" if layer.erratum else ""
    star = "*" if layer.stride == 2 else ""
    return (
        f"# @package _global_\n# Seed 000 Fig 6.1, {layer.network} layer {layer.index}{star}: K={layer.k} "
        f"C={layer.c} H=W={layer.hw} (output size) R=S={layer.rs} stride {layer.stride}, batch 1.{note}\n"
        f"# Generated from conf/workload/ttile_layers.csv (kernels.conv_space.workload_yaml).\n"
        "defaults:\n  - override /op: conv2d\n"
        f"op:\n  stride: {layer.stride}\n"
        f"workload:\n  name: {layer.name}\n"
        f"  sizes: {{h: {layer.hw}, w: {layer.hw}, k: {layer.k_used}, c: {layer.c}, "
        f"r: {layer.rs}, s: {layer.rs}}}\n"
        f"  network: {layer.network}\n"
    )


# -- microkernel plans -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What sits below the tiling: a microkernel (unroll factors, k in vectors) and, for a combination,
    the λ_seq dimension and its cover ((repetitions, unroll), ...)."""

    unroll: tuple[tuple[str, int], ...]
    lam_dim: str | None = None
    cover: tuple[tuple[int, int], ...] = ()
    partial_dims: tuple[str, ...] = ()

    @property
    def size(self) -> dict[str, int]:
        return dict(self.unroll)

    @property
    def single(self) -> bool:
        return self.lam_dim is None

    def suffix(self) -> list[str]:
        atoms = []
        for d in MK_ORDER:
            if d == self.lam_dim:
                atoms.append(f"Uλ_{d}")
            elif (n := self.size.get(d, 1)) > 1 or d in ("w", "k"):
                atoms.append(f"U_{{{n},{d}}}")
        return [*atoms, "V_k"]

    def footprint(self, d: str, lanes: int) -> int:
        if d == self.lam_dim:
            return sum(r * a for r, a in self.cover)
        n = self.size.get(d, 1)
        return n * lanes if d == "k" else n


@dataclass(frozen=True)
class ConvSpace:
    microkernels: str = "selected"
    forced: tuple[str, ...] = ()
    added: tuple[str, ...] = ()  # microkernels added to the selected / all / forced set
    combination: str = "both"
    divisibility: str = "divisors"
    partial: str = "none"
    packing: str = "none"
    permutation: str = "searched"
    fixed_order: tuple[str, ...] = ("k", "h", "w", "c", "r", "s")
    lambda_dims: tuple[str, ...] = ("w", "h")
    # λ_seq also pairs a microkernel with a smaller remainder tile of the same other unrolls that is not
    # in the set (544 = 180x3 + 2x2 on w with k = 4 vectors): False is the thesis's §5.3 pairs
    lambda_remainder: bool = False
    max_levels: int = 4
    reduction_inner: float = 0.0  # probability of the reductions-innermost prior (0: the thesis's sampler)
    pack_weights: float = 0.0  # probability of packing the weights in microkernel panels (0: the thesis's)
    # those panels outermost and kept across calls (codegen option constant=K), as the baselines keep their
    # converted weights; False: above the outermost h/w loop, copied on every call
    constant_weights: bool = False
    panels_partial_k: bool = False  # the panels also when the k tile ends masked (False: the archived draws)
    parallel: int = 0  # threads of the §5.6/§6.2.1 rule (0: sequential): Tpar_{threads,d} outermost
    extra: tuple[tuple[str, int], ...] = field(default=())  # unused knobs kept for the record

    CHOICES = {
        "microkernels": ("selected", "all", "forced"),
        "combination": ("single", "lambda", "both"),
        "divisibility": ("divisors", "free"),
        "partial": ("none", "masked", "padded"),
        "packing": ("none", "I", "K", "any"),
        "permutation": ("searched", "fixed"),
    }

    @classmethod
    def from_config(cls, conf: Mapping[str, Any] | None) -> ConvSpace:
        conf = dict(conf or {})
        for key, allowed in cls.CHOICES.items():
            if key in conf and conf[key] not in allowed:
                raise ConvSpaceError(
                    f"space.conv.{key}={conf[key]!r} is not allowed; allowed: {', '.join(allowed)}"
                )
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        if unknown := set(conf) - known:
            raise ConvSpaceError(f"space.conv: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
        for key in ("forced", "added", "fixed_order", "lambda_dims"):
            if key in conf and conf[key] is not None:
                conf[key] = tuple(conf[key])
        par = conf.get("parallel", 0)
        if isinstance(par, bool) or not isinstance(par, int) or par < 0 or par == 1:
            raise ConvSpaceError(
                f"space.conv.parallel must be 0 (sequential) or a thread count >= 2, got {par!r}"
            )
        for knob in ("reduction_inner", "pack_weights"):
            p = conf.get(knob, 0.0)
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
                raise ConvSpaceError(f"space.conv.{knob} is a probability in [0, 1], got {p!r}")
        for knob in ("lambda_remainder", "constant_weights", "panels_partial_k"):
            if not isinstance(flag := conf.get(knob, False), bool):
                raise ConvSpaceError(f"space.conv.{knob} is true or false, got {flag!r}")
        if conf.get("constant_weights") and conf.get("parallel"):
            raise ConvSpaceError(
                "space.conv.constant_weights needs the weights' pack above every loop, and a parallel loop "
                "is outermost: use one of them"
            )
        if conf.get("microkernels") == "forced" and not conf.get("forced"):
            raise ConvSpaceError('space.conv.microkernels=forced needs space.conv.forced: ["U_{17,h}, V_k"]')
        for text in conf.get("added") or ():
            parse_microkernel(text, "space.conv.added")
        return cls(**{k: v for k, v in conf.items() if v is not None})


def parse_microkernel(text: str, key: str = "forced") -> dict[str, int]:
    """``U_{17,h}, V_k`` -> {h: 17, k: 1} (k counts vectors); errors name the config ``key``."""
    try:
        atoms = parse_scheme(text if text.strip().startswith("[") else f"[{text}]")
    except SchemeError as e:
        raise ConvSpaceError(f"{key} microkernel {text!r}: {e}") from e
    if not atoms or atoms[-1].kind != "V" or atoms[-1].dim != "k":
        raise ConvSpaceError(f"{key} microkernel {text!r} must end with V_k")
    out: dict[str, int] = {"k": 1}
    for a in atoms[:-1]:
        if a.kind != "U" or a.dim not in CONV_DIMS:
            raise ConvSpaceError(f"{key} microkernel {text!r}: only U atoms on {CONV_DIMS} then V_k")
        out[a.dim] = int(a.size or 1)
    return out


def microkernel_set(
    space: ConvSpace, isa: str, selected: Sequence[Mapping[str, int]] | None
) -> list[dict[str, int]]:
    """The unroll factors of the space's microkernels (k in vectors), then the ``added`` ones."""
    if space.microkernels == "forced":
        base = [parse_microkernel(t) for t in space.forced]
    else:
        base = [dict(m) for m in selected] if selected else [dict(m) for m in FALLBACK[isa]]
        if space.microkernels == "all":
            base += [dict(m) for m in FALLBACK[isa] if dict(m) not in base]
    out: list[dict[str, int]] = []
    for m in [*base, *(parse_microkernel(t, "space.conv.added") for t in space.added)]:
        m = {d: n for d, n in m.items() if n > 1 or d in ("w", "k")}
        if m not in out:
            out.append(m)
    return out


def plans(
    space: ConvSpace, sizes: Mapping[str, int], lanes: int, mks: Sequence[Mapping[str, int]]
) -> list[Plan]:
    """Every microkernel plan of the space on these sizes: single microkernels that divide the sizes
    (or leave a partial remainder on h/w/k when ``partial`` allows), and λ_seq pairs of two microkernels
    that differ only on one dimension of ``lambda_dims`` and cover it exactly (§5.3); with
    ``lambda_remainder``, also each microkernel that does not divide that dimension paired with every
    smaller remainder tile (see ``remainder_covers``)."""

    def fp(m: Mapping[str, int], d: str) -> int:
        return m.get(d, 1) * (lanes if d == "k" else 1)

    out: list[Plan] = []
    if space.combination in ("single", "both"):
        for m in mks:
            bad = [d for d in CONV_DIMS if sizes[d] % fp(m, d)]
            if any(fp(m, d) > sizes[d] for d in CONV_DIMS):
                continue
            if not bad:
                out.append(Plan(tuple(sorted(m.items()))))
            elif space.partial != "none" and set(bad) <= set(PARTIAL_DIMS):
                out.append(Plan(tuple(sorted(m.items())), partial_dims=tuple(bad)))
    if space.combination in ("lambda", "both"):
        for d in space.lambda_dims:
            groups: dict[tuple, set[int]] = {}
            for m in mks:
                rest = tuple(sorted((e, n) for e, n in m.items() if e != d))
                groups.setdefault(rest, set()).add(m.get(d, 1))
            for rest, us in sorted(groups.items()):
                if any(sizes[e] % fp(dict(rest), e) for e in CONV_DIMS if e != d):
                    continue
                covers = lambda_covers(sizes[d], us)
                if space.lambda_remainder:
                    covers += remainder_covers(sizes[d], us)
                for cov in covers:
                    unroll = tuple(sorted({**dict(rest), d: cov.pairs[0][1]}.items()))
                    out.append(Plan(unroll, d, cov.pairs))
    return out


def remainder_covers(D: int, sizes: Iterable[int]) -> list[Cover]:
    """For each size b of ``sizes`` that does not divide D, and each smaller size a not in ``sizes``,
    the cover ``n_a*a + n_b*b = D`` with the fewest a (at least one, at least one b), smaller size first
    as ``lambda_covers`` gives them: the register tile b on almost all of the dimension and a remainder
    tile of the same other unrolls on the rest, for sizes where no pair of the set covers D (the AVX2
    stem, w = 544 with only b = 3 at k = 4 vectors: 544 = 2x2 + 180x3 or 1x1 + 181x3)."""
    us = set(sizes)
    out = []
    for b in sorted(us):
        if D % b == 0 or b >= D:
            continue
        for a in range(1, b):
            if a in us:
                continue
            n_a = next((n for n in range(1, b + 1) if (D - n * a) % b == 0 and D - n * a >= b), None)
            if n_a is not None:
                out.append(Cover(((n_a, a), ((D - n_a * a) // b, b))))
    return out


# -- samplers --------------------------------------------------------------------------------------------
def divisors(n: int) -> list[int]:
    return [q for q in range(2, n + 1) if n % q == 0]


@lru_cache(maxsize=4096)
def factorizations(n: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Ordered factorizations of n into exactly ``parts`` factors, each >= 2 (n = 1: the empty one)."""
    if parts == 0:
        return ((),) if n == 1 else ()
    return tuple((q, *rest) for q in divisors(n) for rest in factorizations(n // q, parts - 1))


@dataclass
class Context:
    """What a sampler needs about the problem: sizes, lanes, the plans, the space and a validator."""

    space: ConvSpace
    workload: Workload
    target: str
    plans: list[Plan]
    chunk_bytes: int = 0  # §5.6: a parallel chunk's footprint should reach L2 (private caches); 0: no rule
    widened: bool = False  # no microkernel of the set fitted: k-only microkernels (w = 1) were added

    @property
    def sizes(self) -> dict[str, int]:
        return self.workload.size

    @property
    def lanes(self) -> int:
        return get_target(self.target).lanes

    def remaining(self, plan: Plan) -> dict[str, int]:
        """Trip counts left above the microkernel per dimension (1 on λ_seq and partial dimensions)."""
        out = {}
        for d in CONV_DIMS:
            if d == plan.lam_dim or d in plan.partial_dims:
                out[d] = 1
            else:
                out[d] = self.sizes[d] // plan.footprint(d, self.lanes)
        return out

    def whole_atoms(self, plan: Plan) -> dict[str, str]:
        """Atoms that cover a whole dimension at once: λ_seq, or R over a partial microkernel."""
        out = {}
        if plan.lam_dim:
            out[plan.lam_dim] = lambda_seq_text(plan.lam_dim, Cover(plan.cover))
        for d in plan.partial_dims:
            out[d] = f"R_{d}"
        return out

    def parallel_dims(self, plan: Plan) -> list[str]:
        """§6.2.1: output dimensions whose trip count above the microkernel is a multiple of the threads."""
        t = self.space.parallel
        rem = self.remaining(plan)
        return [d for d in PARTIAL_DIMS if t and rem[d] % t == 0 and rem[d] >= t]

    def chunk_ok(self, text: str) -> bool:
        """§5.6: the footprint of one parallel chunk (kernels.parallel) is at least ``chunk_bytes``, or the
        problem is too small for any chunk to reach it (then a chunk of 1/threads of it is enough)."""
        if not self.space.parallel or not self.chunk_bytes:
            return True
        from kernels.parallel import FLOAT_BYTES, parallel_chunk

        stride = int(dict(self.workload.op.params).get("stride", 1))
        whole = sum(conv_footprints(self.sizes, stride).values()) * FLOAT_BYTES
        chunk = parallel_chunk(text, self.workload, get_target(self.target), self.space.partial)
        return chunk.footprint_bytes >= min(self.chunk_bytes, whole / self.space.parallel)

    def legal(self, text: str) -> bool:
        from kernels.codegen import analyze_for

        try:
            analyze_for(text, self.workload, get_target(self.target), self.space.partial)
        except SchemeError:
            return False
        return True


def context(
    space: ConvSpace, workload: Workload, target: str, selected: Sequence[Mapping[str, int]] | None
) -> Context:
    if workload.op.name != "conv2d":
        raise ConvSpaceError(f"conv spaces need a conv2d workload, got {workload.op.name} ({workload.name})")
    lanes = get_target(target).lanes
    mks = microkernel_set(space, target, selected)
    ps = plans(space, workload.size, lanes, mks)
    widened = False
    if not ps and space.microkernels != "forced":
        # No selected microkernel (nor combination) covers the sizes, e.g. H = W = 7 or 17 with the
        # selection of this machine: as the thesis did for H = W = 17 (§6.4), fall back to microkernels
        # that unroll only k (w = 1 divides every size); recorded on the context.
        ps = plans(space, workload.size, lanes, [*mks, *({"w": 1, "k": u} for u in (4, 3, 2, 1))])
        widened = bool(ps)
    if space.parallel:  # §6.2.1: only plans leaving an output dimension divisible by the threads
        probe = Context(space, workload, target, ps)
        ps = [p for p in ps if probe.parallel_dims(p)]
    if not ps:
        raise ConvSpaceError(
            f"no microkernel plan of this space fits {workload.name} {workload.size}"
            + (f" with {space.parallel} threads on h, w or k" if space.parallel else "")
            + ": try "
            "space.conv.combination=both, space.conv.partial=masked or space.conv.microkernels=all"
        )
    return Context(space, workload, target, ps, widened=widened)


def _assemble(
    ctx: Context, plan: Plan, outer: list[tuple[str, str]], rng: random.Random, par: str | None = None
) -> str:
    """Outer atoms (dimension, atom text), outermost first, + packing + the microkernel suffix; a
    parallel loop ``par`` goes outermost (§6.2.1)."""
    if ctx.space.permutation == "fixed":
        outer = level_order(outer, ctx.space.fixed_order)
    elif ctx.space.reduction_inner and rng.random() < ctx.space.reduction_inner:
        outer = reductions_inner(outer, rng)
    head = [par] if par else []
    atoms = head + [a for _, a in outer]
    suffix = plan.suffix()
    packs = ctx.space.pack_weights and ctx.space.packing == "none" and rng.random() < ctx.space.pack_weights
    if packs and (text := _weights_in_panels(ctx, plan, outer, head, suffix)) is not None:
        return text
    if ctx.space.packing != "none":
        tensor = rng.choice(["I", "K"]) if ctx.space.packing == "any" else ctx.space.packing
        positions = list(range(1 if par else 0, len(atoms) + 1))
        rng.shuffle(positions)
        for p in positions:  # the first legal place in a random order
            text = "[" + ", ".join([*atoms[:p], f"Pack_{tensor}", *atoms[p:], *suffix]) + "]"
            if ctx.legal(text):
                return text
    return "[" + ", ".join([*atoms, *suffix]) + "]"


def _weights_in_panels(
    ctx: Context, plan: Plan, outer: list[tuple[str, str]], head: list[str], suffix: list[str]
) -> str | None:
    """The scheme with the weights packed in microkernel order, ``PackT_K[k/kf,r,s,c,k]`` (panels of the
    microkernel's kf output channels, each r x s x c x kf contiguous, as oneDNN's blocked weights), right
    above the outermost loop on h or w: the panels of the current k/c/r/s tile are copied once and read by
    every output row and column below. None when nothing on h or w loops above the microkernel (no reuse
    to pay for the copy), when k is partial (unless ``panels_partial_k``), or when the result is illegal."""
    at = panel_at(ctx, plan, [d for d, _ in outer])
    if at is None:
        return None
    pack = weights_panel(plan, ctx.lanes)
    atoms = [a for _, a in outer]
    if ctx.space.constant_weights:  # the whole tensor's panels, above every loop
        text = "[" + ", ".join([pack, *head, *atoms, *suffix]) + "]"
    else:
        text = "[" + ", ".join([*head, *atoms[:at], pack, *atoms[at:], *suffix]) + "]"
    return text if ctx.legal(text) else None


def panel_at(ctx: Context, plan: Plan, dims: Sequence[str | None]) -> int | None:
    """Where the space packs the weights in panels among the outer loops on ``dims`` (outermost first): above
    every loop when it keeps them across calls (``constant_weights``), else right above the outermost h or
    w loop (:func:`panel_place`). None without an h or w loop, or for a k tile that ends masked unless
    ``panels_partial_k``. The draws and refine's pack mutation place them by this one rule."""
    at = panel_place(dims)
    if at is None or ("k" in plan.partial_dims and not ctx.space.panels_partial_k):
        return None
    return 0 if ctx.space.constant_weights else at


def kept_weights(ctx: Context, text: str) -> bool:
    """Whether a drawn scheme's weights are kept across calls (codegen option constant=K): the space says
    so and the scheme packs them outermost."""
    if not ctx.space.constant_weights:
        return False
    first = parse_scheme(text)[0]
    return first.kind in ("Pack", "PackT") and first.tensor == "K"


def weights_panel(plan: Plan, lanes: int) -> str:
    """The atom packing the weights in panels of the microkernel's output channels (see below)."""
    return f"PackT_K[k/{plan.footprint('k', lanes)},r,s,c,k]"


def panel_place(dims: Sequence[str | None]) -> int | None:
    """Where the weights' panels go among the outer loops' dimensions (outermost first): right above the
    outermost loop on h or w, so every output row and column below reads the panels copied there."""
    return next((i for i, d in enumerate(dims) if d in ("h", "w")), None)


def reductions_inner(outer: Sequence[tuple[D, A]], rng: random.Random) -> list[tuple[D, A]]:
    """The innermost atom of each reduction dimension (c, r, s) moved right above the microkernel, in a
    random order; the other atoms keep theirs. ``outer`` is (dimension, atom) pairs, outermost first (a
    dimension of None is never moved): the draws' prior and the refined search's ``reduce`` mutation."""
    inner: list[tuple[D, A]] = []
    rest = list(outer)
    for d in REDUCTION_DIMS:
        at = [i for i, (e, _) in enumerate(rest) if e == d]
        if at:
            inner.append(rest.pop(at[-1]))
    rng.shuffle(inner)
    return rest + inner


def level_order(outer: list[tuple[str, str]], order: Sequence[str]) -> list[tuple[str, str]]:
    """Level by level (the n-th atom of each dimension from the inside), each level in ``order``."""
    levels: dict[str, list[str]] = {}
    for d, a in reversed(outer):
        levels.setdefault(d, []).append(a)
    depth = max((len(v) for v in levels.values()), default=0)
    inner_first: list[tuple[str, str]] = []
    for lv in range(depth):
        for d in reversed(order):
            if lv < len(levels.get(d, [])):
                inner_first.append((d, levels[d][lv]))
    return list(reversed(inner_first))


def sample_random(ctx: Context, rng: random.Random) -> tuple[str, Plan]:
    """§5.4.5: a plan uniformly, then tiling atoms from inner to outer, each uniformly among every
    (dimension, divisor != 1 of the size left) pair (plus the whole-dimension atoms), until every
    dimension is consumed."""
    plan = rng.choice(ctx.plans)
    rem = ctx.remaining(plan)
    whole = ctx.whole_atoms(plan)
    par = _parallel_atom(ctx, plan, rem, rng)
    inner_first: list[tuple[str, str]] = []
    while True:
        pairs = [(d, f"T_{{{q},{d}}}", q) for d in CONV_DIMS for q in divisors(rem[d])]
        pairs += [(d, a, 1) for d, a in whole.items()]
        if not pairs:
            break
        d, atom, q = rng.choice(pairs)
        inner_first.append((d, atom))
        if q == 1:
            del whole[d]
        else:
            rem[d] //= q
    return _assemble(ctx, plan, list(reversed(inner_first)), rng, par), plan


def _parallel_atom(ctx: Context, plan: Plan, rem: dict[str, int], rng: random.Random) -> str | None:
    """§6.2.1: a parallel output dimension (trip count a multiple of the threads) gets an outermost
    ``Tpar_{threads,d}``; the rest of its trip count is left to the sampler (``rem`` is updated)."""
    t = ctx.space.parallel
    if not t:
        return None
    d = rng.choice(ctx.parallel_dims(plan))
    rem[d] //= t
    return f"Tpar_{{{t},{d}}}"


def _free_levels(D: int, u: int, levels: int, rng: random.Random) -> list[int]:
    """Non-divisible tile sizes of §6.5: ``levels - 1`` sizes drawn uniformly in [2u, D), multiples of
    the granularity u (the microkernel's footprint), distinct, sorted decreasing."""
    choices = list(range(2 * u, D, u))
    n = min(levels - 1, len(choices))
    sizes = sorted(rng.sample(choices, n), reverse=True) if n > 0 else []
    return sizes


def free_chain(d: str, D: int, sizes: Sequence[int]) -> list[str]:
    """Loops on ``d`` (outermost first) for free tile sizes, chained as the Texct rules require
    (Fig 6.12: ``[R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}]``): no size -> ``R_d``; one ->
    ``Texct_{D,d}, Tvar_{s,d}``; more -> ``R_d, Texct_{s1,d}, Texctg_{s2,d}, ..., Tvar_{sm,d}``."""
    if not sizes:
        return [f"R_{d}"]
    if len(sizes) == 1:
        return [f"Texct_{{{D},{d}}}", f"Tvar_{{{sizes[0]},{d}}}"]
    mid = [f"Texctg_{{{s},{d}}}" for s in sizes[1:-1]]
    return [f"R_{d}", f"Texct_{{{sizes[0]},{d}}}", *mid, f"Tvar_{{{sizes[-1]},{d}}}"]


def sample_levels(ctx: Context, rng: random.Random) -> tuple[str, Plan]:
    """§6.5: per dimension a number of levels uniform in [1, max_levels]; divisible decompositions
    (a uniform ordered factorization) or, with ``divisibility=free``, sorted free sizes; the levels are
    then interleaved by uniform pops (each step pops one of the remaining (dimension, size) elements
    uniformly, so a dimension is chosen in proportion to its levels left; on a dimension the sizes are
    placed in their order, inner first), which gives the permutation."""
    plan = rng.choice(ctx.plans)
    rem = ctx.remaining(plan)
    whole = ctx.whole_atoms(plan)
    par = _parallel_atom(ctx, plan, rem, rng)
    stacks: dict[str, list[str]] = {}  # inner first
    for d in CONV_DIMS:
        if d in whole:
            stacks[d] = [whole[d]]
            continue
        if rem[d] == 1:
            continue
        levels = rng.randint(1, ctx.space.max_levels)
        if ctx.space.divisibility == "free" and not (par and par.endswith(f",{d}}}")):
            u = plan.footprint(d, ctx.lanes)
            outer_first = free_chain(d, ctx.sizes[d], _free_levels(ctx.sizes[d], u, levels, rng))
            stacks[d] = list(reversed(outer_first))
            continue
        options = []
        for lv in range(levels, 0, -1):  # the most levels the size allows, up to the drawn number
            if options := factorizations(rem[d], lv):
                break
        factors = rng.choice(options)  # inner first
        stacks[d] = [f"T_{{{q},{d}}}" for q in factors]
    inner_first: list[tuple[str, str]] = []
    while stacks:  # pop one of the remaining (dimension, size) elements uniformly
        d = rng.choice([e for e in sorted(stacks) for _ in stacks[e]])
        inner_first.append((d, stacks[d].pop(0)))
        if not stacks[d]:
            del stacks[d]
    return _assemble(ctx, plan, list(reversed(inner_first)), rng, par), plan


SAMPLERS = {"random": sample_random, "levels": sample_levels}


def draw(ctx: Context, sampler: str, rng: random.Random, tries: int = 50) -> tuple[str, Plan]:
    """One legal scheme from ``sampler`` (a sample failing the legality rules is drawn again; a sampler
    that keeps failing is a bug, reported with its last scheme)."""
    fn = SAMPLERS[sampler]
    text = ""
    for _ in range(tries):
        text, plan = fn(ctx, rng)
        if ctx.legal(text) and ctx.chunk_ok(text):
            return text, plan
    raise ConvSpaceError(f"sampler {sampler!r} produced no legal scheme in {tries} tries; last: {text}")


# -- the footprint model of §5.4.3 ------------------------------------------------------------------------
def suffix_sizes(scheme_text: str, sizes: Mapping[str, int], lanes: int) -> list[dict[str, int]]:
    """Per atom (outermost first), the size of each dimension covered by the suffix starting there
    (V: lanes; T/U: x size; λ_seq: its whole cover; Uλ: its largest unroll; R: the dimension;
    Texct/Tvar: their bound)."""
    atoms = parse_scheme(scheme_text)
    lam = {a.dim: a.seq for a in atoms if a.kind == "lambda_seq"}
    cur = {d: 1 for d in sizes}
    out: list[dict[str, int]] = []
    for a in reversed(atoms):
        d = a.dim
        if a.kind == "V":
            cur[d] *= lanes
        elif a.kind in ("T", "U"):
            cur[d] *= int(a.size or 1)
        elif a.kind == "Ul":
            cur[d] = max(u for _, u in lam[d])
        elif a.kind == "lambda_seq":
            cur[d] = sum(r * u for r, u in a.seq)
        elif a.kind == "R":
            cur[d] = sizes[d]
        elif a.kind in ("Texct", "Tvar", "Texctg"):
            cur[d] = min(int(a.size or 1), sizes[d])
        out.append(dict(cur))
    return list(reversed(out))


def conv_footprints(s: Mapping[str, int], stride: int = 1) -> dict[str, int]:
    """Elements of each tensor a tile of sizes ``s`` touches (§5.4.3, with the stride of the input)."""
    inp = s["c"] * ((s["w"] - 1) * stride + s["s"]) * ((s["h"] - 1) * stride + s["r"])
    return {"I": inp, "O": s["k"] * s["h"] * s["w"], "K": s["k"] * s["c"] * s["r"] * s["s"]}


def movement(
    scheme_text: str, sizes: Mapping[str, int], lanes: int, capacity: float, stride: int = 1
) -> float:
    """Floats moved into a cache of ``capacity`` floats: the shortest suffix whose footprint overflows
    it, loaded once per iteration of the atoms above it (IOOpt's lower bound; §5.4.3). A scheme that
    fits entirely moves its footprint once."""
    per_atom = suffix_sizes(scheme_text, sizes, lanes)
    full = sum(conv_footprints({**sizes}, stride).values())
    for i in range(len(per_atom) - 1, -1, -1):
        fp = sum(conv_footprints(per_atom[i], stride).values())
        if fp > capacity:
            trips = math.prod(math.ceil(sizes[d] / per_atom[i][d]) for d in sizes)
            return float(fp * trips)
    return float(full)


def model_metric(
    scheme_text: str, sizes: Mapping[str, int], lanes: int, capacities: Sequence[float],
    bandwidths: Sequence[float], stride: int = 1,
) -> float:  # fmt: skip
    """Σ_i movement(L_i) / bw_i (cycles if bw is in floats per cycle): the ECM-like metric of §5.4.3."""
    return sum(
        movement(scheme_text, sizes, lanes, c, stride) / bw
        for c, bw in zip(capacities, bandwidths, strict=True)
    )


def iter_unique(texts: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for t in texts:
        seen.setdefault(t, None)
    return list(seen)


def exhaustive_tilings(ctx: Context, limit: int) -> list[str]:
    """Every scheme of a small space in a fixed order: each plan x every ordered factorization per
    dimension (up to max_levels) x the fixed permutation; stops at ``limit``."""
    out: list[str] = []
    for plan in ctx.plans:
        rem = ctx.remaining(plan)
        whole = ctx.whole_atoms(plan)
        par = []
        if ctx.space.parallel:  # §6.2.1 on the first parallel dimension (h, w, k order)
            d = ctx.parallel_dims(plan)[0]
            rem[d] //= ctx.space.parallel
            par = [f"Tpar_{{{ctx.space.parallel},{d}}}"]
        per_dim = []
        for d in CONV_DIMS:
            opts: list[list[tuple[str, str]]] = []
            if d in whole:
                opts = [[(d, whole[d])]]
            elif rem[d] == 1:
                opts = [[]]
            else:
                for lv in range(1, ctx.space.max_levels + 1):
                    opts += [[(d, f"T_{{{q},{d}}}") for q in reversed(f)] for f in factorizations(rem[d], lv)]
            per_dim.append(opts)
        for combo in itertools.product(*per_dim):
            outer = level_order([a for part in combo for a in part], ctx.space.fixed_order)
            out.append("[" + ", ".join(par + [a for _, a in outer] + plan.suffix()) + "]")
            if len(out) >= limit:
                return out
    return out
