"""Microkernel enumeration (seed 000, §5.2) and λ_seq covers from selected sizes (§5.3).

A microkernel is the innermost unrolled suffix of a scheme: ``[U_{ui,i}, U_{uj,j}, V_j]`` for matmul,
``[U_{us,s}, U_{ur,r}, U_{uc,c}, U_{uw,w}, U_{uh,h}, U_{uk,k}, V_k]`` for convolution. Which of them are
worth benchmarking is decided by register-file constraints that are *data* per ISA
(``kernels/isa/<isa>.yaml``): lanes, vector registers, FMA units and latency, and the thesis's rules.

The thesis counts 3059 convolution microkernels but its four printed constraints do not give that number
under any literal reading, so each plausible reading is named in the yaml file and enumerated on demand
(``reading_counts``). Nothing here times anything: the isolated benchmark is ``harness.microbench``.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kernels.scheme import Atom

ISA_DIR = Path(__file__).resolve().parent / "isa"
OPS = ("conv2d", "matmul")
_OP_SECTION = {"conv2d": "conv", "matmul": "matmul"}


@functools.cache
def _load(isa: str) -> dict[str, Any]:
    path = ISA_DIR / f"{isa}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in ISA_DIR.glob("*.yaml"))
        raise ValueError(f"no microkernel data for ISA {isa!r} ({path} missing); known: {known}")
    with path.open() as fh:
        data = yaml.safe_load(fh)
    if data.get("isa") != isa:
        raise ValueError(f"{path}: 'isa' is {data.get('isa')!r}, expected {isa!r}")
    return data


def isa_data(isa: str) -> dict[str, Any]:
    """The parsed ``kernels/isa/<isa>.yaml`` (a copy: callers may modify it)."""
    return copy.deepcopy(_load(isa))


def bench_spec(isa: str, op: str) -> dict[str, Any]:
    """How the isolated benchmark wraps a microkernel: ``{reduction_dim, reduction_tile}``."""
    if op not in _OP_SECTION:
        raise ValueError(f"unknown microkernel operator {op!r}; known: {', '.join(OPS)}")
    return dict(_load(isa)[_OP_SECTION[op]]["bench"])


def min_accumulators(isa: str) -> int:
    """Independent accumulators needed to keep every FMA unit busy: latency x units (Eq. 5.1)."""
    data = _load(isa)
    explicit = data["matmul"].get("min_accumulators")
    return int(explicit) if explicit is not None else int(data["fma"]["latency"]) * int(data["fma"]["units"])


# -- the microkernel ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Microkernel:
    """An unrolled suffix: the unroll factor per dimension, outermost first, then ``V_<vector_dim>``.

    Sizes on the vector dimension count vectors (``U_{2,k}, V_k`` covers 2 x lanes elements of k).
    """

    op: str  # "conv2d" | "matmul"
    isa: str
    sizes: tuple[tuple[str, int], ...]
    vector_dim: str

    @property
    def size(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def lanes(self) -> int:
        return int(_load(self.isa)["lanes"])

    @property
    def atoms(self) -> list[str]:
        return [f"U_{{{n},{d}}}" for d, n in self.sizes] + [f"V_{self.vector_dim}"]

    @property
    def suffix(self) -> str:
        """Scheme suffix text, e.g. ``U_{3,s}, U_{3,r}, U_{1,c}, U_{2,w}, U_{1,h}, U_{2,k}, V_k``."""
        return ", ".join(self.atoms)

    def scheme(self, outer: Sequence[str] = ()) -> str:
        """A whole scheme: the ``outer`` atoms, then this suffix."""
        return "[" + ", ".join([*outer, *self.atoms]) + "]"

    def footprint(self, dim: str) -> int:
        """Elements of ``dim`` one application covers (lanes x vectors on the vector dimension)."""
        n = self.size.get(dim, 1)
        return n * self.lanes if dim == self.vector_dim else n

    @property
    def name(self) -> str:
        """A file-name-safe id: ``conv2d-avx2-s1r1c1w6h1k2``."""
        return f"{self.op}-{self.isa}-" + "".join(f"{d}{n}" for d, n in self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "isa": self.isa,
            "sizes": dict(self.sizes),
            "vector_dim": self.vector_dim,
            "suffix": self.suffix,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Microkernel:
        mk = cls(str(d["op"]), str(d["isa"]), tuple((str(k), int(v)) for k, v in d["sizes"].items()),
                 str(d["vector_dim"]))  # fmt: skip
        if "suffix" in d and d["suffix"] != mk.suffix:
            raise ValueError(f"microkernel record disagrees with itself: {d['suffix']!r} vs {mk.suffix!r}")
        return mk


def make_conv(isa: str, **sizes: int) -> Microkernel:
    """A convolution microkernel from unroll factors (missing ones are 1), in the yaml suffix order."""
    sec = _load(isa)["conv"]
    unknown = set(sizes) - set(sec["suffix"])
    if unknown:
        raise ValueError(f"conv microkernel has dimensions {sec['suffix']}, not {sorted(unknown)}")
    return Microkernel(
        "conv2d", isa, tuple((d, int(sizes.get(d, 1))) for d in sec["suffix"]), sec["vector_dim"]
    )


def make_matmul(isa: str, **sizes: int) -> Microkernel:
    sec = _load(isa)["matmul"]
    unknown = set(sizes) - set(sec["suffix"])
    if unknown:
        raise ValueError(f"matmul microkernel has dimensions {sec['suffix']}, not {sorted(unknown)}")
    return Microkernel(
        "matmul", isa, tuple((d, int(sizes.get(d, 1))) for d in sec["suffix"]), sec["vector_dim"]
    )


# -- convolution: readings of the thesis's constraints ---------------------------------------------------
def conv_readings(isa: str) -> list[str]:
    return list(_load(isa)["conv"]["readings"])


def default_reading(isa: str) -> str:
    return str(_load(isa)["conv"]["default_reading"])


def _reading(isa: str, reading: str | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    sec = _load(isa)["conv"]
    name = reading or sec["default_reading"]
    if name not in sec["readings"]:
        raise ValueError(f"unknown conv reading {name!r} for {isa}; known: {sorted(sec['readings'])}")
    return sec, sec["readings"][name], name


def rs_pairs(isa: str, reading: str | None = None) -> list[tuple[int, int]]:
    """The (ur, us) pairs a reading allows, in yaml order, without duplicates."""
    sec, rd, _ = _reading(isa, reading)
    pairs = [tuple(p) for group in rd["rs_pairs"] for p in sec["rs_pairs"][group]]
    return list(dict.fromkeys((int(r), int(s)) for r, s in pairs))


def _constrained_values(isa: str, rd: Mapping[str, Any], size: Mapping[str, int]) -> dict[str, int]:
    """The values the constraints see: k counts vectors, or elements under a ``k_unit: lanes`` reading."""
    values = {d: int(v) for d, v in size.items()}
    if rd.get("k_unit", "vectors") == "lanes":
        vd = _load(isa)["conv"]["vector_dim"]
        values[vd] = values[vd] * int(_load(isa)["lanes"])
    elif rd.get("k_unit", "vectors") != "vectors":
        raise ValueError(f"k_unit must be 'vectors' or 'lanes', got {rd.get('k_unit')!r}")
    return values


def conv_registers(mk: Microkernel, reading: str | None = None) -> tuple[int, int]:
    """(output, params) register terms of constraints 1-2 under ``reading``."""
    _, rd, _ = _reading(mk.isa, reading)
    sec = _load(mk.isa)["conv"]
    v = _constrained_values(mk.isa, rd, mk.size)
    return math.prod(v[d] for d in sec["output_term"]), math.prod(v[d] for d in rd["params_term"])


def conv_violations(mk: Microkernel, reading: str | None = None) -> list[str]:
    """Which constraints ``mk`` breaks under ``reading`` (empty: it is in the enumeration)."""
    sec, rd, name = _reading(mk.isa, reading)
    if mk.op != "conv2d":
        return [f"not a convolution microkernel ({mk.op})"]
    out: list[str] = []
    v = _constrained_values(mk.isa, rd, mk.size)
    for d, hi in sec["unroll_max"].items():
        if not 1 <= v[d] <= int(hi):
            out.append(f"unroll: 1 <= u{d} <= {hi} (u{d} = {v[d]})")
    if (mk.size["r"], mk.size["s"]) not in rs_pairs(mk.isa, name):
        out.append(f"(ur, us) = ({mk.size['r']}, {mk.size['s']}) not in the pairs of reading {name}")
    o, p = conv_registers(mk, name)
    lo, hi = sec["output_registers"]
    if not lo <= o <= hi:
        out.append(f"output: {lo} <= {o} <= {hi}")
    lo, hi = sec["total_registers"]
    if not lo <= o + p <= hi:
        out.append(f"total: {lo} <= {o} + {p} <= {hi}")
    return out


def enumerate_conv(isa: str, reading: str | None = None) -> list[Microkernel]:
    """Every convolution microkernel of ``reading`` (default: the yaml's ``default_reading``).

    Deterministic order: (ur, us) pairs in yaml order, then uc, uw, uh, uk increasing.
    """
    sec, rd, name = _reading(isa, reading)
    lanes = int(_load(isa)["lanes"])
    vd = sec["vector_dim"]
    scale = lanes if rd.get("k_unit", "vectors") == "lanes" else 1
    umax = {d: int(v) for d, v in sec["unroll_max"].items()}
    out_lo, out_hi = (int(x) for x in sec["output_registers"])
    tot_lo, tot_hi = (int(x) for x in sec["total_registers"])
    pairs = rs_pairs(isa, name)
    found = []
    # Plain arithmetic on the constrained values (the yaml's terms), then one Microkernel per hit;
    # conv_violations() states the same rules per microkernel (and the tests check one against the other).
    for (ur, us), uc in itertools.product(pairs, range(1, umax["c"] + 1)):
        for uw, uh in itertools.product(range(1, umax["w"] + 1), range(1, umax["h"] + 1)):
            if uw * uh > out_hi:  # the output term only grows with uk
                continue
            for uk in range(1, umax[vd] // scale + 1):
                v = {"s": us, "r": ur, "c": uc, "w": uw, "h": uh, vd: uk * scale}
                o = math.prod(v[d] for d in sec["output_term"])
                if o > out_hi:
                    break
                p = math.prod(v[d] for d in rd["params_term"])
                if out_lo <= o and tot_lo <= o + p <= tot_hi:
                    found.append(
                        Microkernel("conv2d", isa, tuple((d, (v[d] // scale if d == vd else v[d]))
                                                         for d in sec["suffix"]), vd)
                    )  # fmt: skip
    return found


def reading_counts(isa: str) -> dict[str, int]:
    """Number of convolution microkernels under each reading of the yaml file."""
    return {name: len(enumerate_conv(isa, name)) for name in conv_readings(isa)}


def fig5_2_slice(isa: str) -> list[Microkernel]:
    """The Fig 5.2 grid: uc = uh = ur = us = 1, uk x uw over the yaml's ``fig5_2`` triangle."""
    f = _load(isa)["conv"]["fig5_2"]
    return [
        make_conv(isa, w=uw, k=uk)
        for uw in range(1, int(f["max_w"]) + 1)
        for uk in range(1, int(f["max_k"]) + 1)
        if uk + uw <= int(f["max_sum"])
    ]


# -- matmul (Eq. 5.1) ------------------------------------------------------------------------------------
def matmul_violations(mk: Microkernel) -> list[str]:
    data = _load(mk.isa)
    sec = data["matmul"]
    ui, uj = mk.size["i"], mk.size["j"]
    out = []
    for d, hi in sec["unroll_max"].items():
        if not 1 <= mk.size[d] <= int(hi):
            out.append(f"unroll: 1 <= u{d} <= {hi}")
    n_r = int(data["vector_registers"]) - int(sec.get("extra_registers", 0))
    if ui * uj + uj > n_r:
        out.append(f"registers: ui*uj + uj = {ui * uj + uj} > {n_r}")
    if ui * uj < min_accumulators(mk.isa):
        out.append(f"latency: ui*uj = {ui * uj} < {min_accumulators(mk.isa)}")
    return out


def enumerate_matmul(isa: str) -> list[Microkernel]:
    """Every ``[U_{ui,i}, U_{uj,j}, V_j]`` with ui*uj + uj <= n_r and ui*uj >= latency x units."""
    umax = _load(isa)["matmul"]["unroll_max"]
    found = []
    for ui, uj in itertools.product(range(1, int(umax["i"]) + 1), range(1, int(umax["j"]) + 1)):
        mk = make_matmul(isa, i=ui, j=uj)
        if not matmul_violations(mk):
            found.append(mk)
    return found


def enumerate_microkernels(isa: str, op: str, reading: str | None = None) -> list[Microkernel]:
    if op == "conv2d":
        return enumerate_conv(isa, reading)
    if op == "matmul":
        return enumerate_matmul(isa)
    raise ValueError(f"unknown microkernel operator {op!r}; known: {', '.join(OPS)}")


# -- covers of a dimension by selected sizes (§5.3) ------------------------------------------------------
@dataclass(frozen=True)
class Cover:
    """``Σ repetitions x size = total``: one pair (a dividing size) or two (a λ_seq combination)."""

    pairs: tuple[tuple[int, int], ...]  # (repetitions, size), in λ_seq order

    @property
    def total(self) -> int:
        return sum(n * a for n, a in self.pairs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(a for _, a in self.pairs)


def _clean_sizes(sizes: Iterable[int]) -> list[int]:
    out = sorted({int(s) for s in sizes})
    if any(s < 1 for s in out):
        raise ValueError(f"microkernel sizes must be >= 1, got {out}")
    return out


def lambda_covers(D: int, sizes: Iterable[int]) -> list[Cover]:
    """Every ``n_a*a + n_b*b = D`` with n_a, n_b >= 1 and a < b taken from ``sizes`` (§5.3, λ_seq).

    Each unordered pair {a, b} appears once, smaller size first (the thesis's 128 = 12x6 + 8x7);
    ordered by (a, b, n_a).
    """
    if D < 1:
        raise ValueError(f"dimension size must be >= 1, got {D}")
    s = _clean_sizes(sizes)
    covers = []
    for a, b in itertools.combinations(s, 2):
        for n_a in range(1, (D - b) // a + 1):
            rest = D - n_a * a
            if rest >= b and rest % b == 0:
                covers.append(Cover(((n_a, a), (rest // b, b))))
    return covers


def divisors_cover(D: int, sizes: Iterable[int]) -> list[Cover]:
    """A single microkernel size repeated: every size of ``sizes`` that divides D, ``(D // a, a)``."""
    if D < 1:
        raise ValueError(f"dimension size must be >= 1, got {D}")
    return [Cover(((D // a, a),)) for a in _clean_sizes(sizes) if D % a == 0]


def lambda_seq_text(dim: str, cover: Cover, ascii_only: bool = False) -> str:
    """The λ_seq atom of a two-size cover: ``λ_seq_i.[(12,6),(8,7)]`` (pair with ``Uλ_i`` below it)."""
    if len(cover.pairs) < 2:
        raise ValueError(f"a λ_seq needs at least two (repetitions, size) pairs, got {cover.pairs}")
    return Atom("lambda_seq", dim, seq=cover.pairs).text(ascii_only)


def unroll_sizes(microkernels: Iterable[Microkernel], dim: str) -> list[int]:
    """Distinct unroll factors on ``dim`` among ``microkernels`` (the sizes a cover may use)."""
    return sorted({mk.size[dim] for mk in microkernels if dim in mk.size})
