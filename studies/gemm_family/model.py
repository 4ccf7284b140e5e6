"""Cache-parameter model of the GEMM family (seed 002): (mc, nc, kc) from the caches and the microkernel.

Seed 002 (Alaejos et al., TOMS 2024) takes mc, nc, kc from an analytical model instead of searching them
(§8.2, "Analytical model": a 3-D search per microkernel costs too much) and defers the formulas to its
ref. [21], Low, Igual, Smith and Quintana-Ortí, "Analytical modeling is enough for high-performance BLIS",
TOMS 43(2), 2016. For the baseline B3A2C0 with an mr x nr resident-C microkernel, on a cache level of
W ways, N sets and C-byte lines (one "way" = N*C bytes), S bytes per element:

- L1 keeps the micro-panel Ar (mr x kc) of the L2 block and Br (kc x nr) of the L3 block, one way left
  for C's streaming: C_Ar = floor((W1 - 1) / (1 + nr/mr)) ways for Ar, so kc = C_Ar*N1*C1 / (mr*S);
- L2 keeps Ac (mc x kc) and one Br: C_Ac = W2 - 1 - ceil(kc*nr*S / (N2*C2)), mc = C_Ac*N2*C2 / (kc*S);
- L3 keeps Bc (kc x nc) and one Ac: C_Bc = W3 - 1 - ceil(mc*kc*S / (N3*C3)), nc = C_Bc*N3*C3 / (kc*S);
- each block is then clipped to the problem (kc <= k, mc <= m, nc <= n).

Beyond the paper (issue 33), ``rule="exact"`` keeps the same constraints (each level's blocks in W - 1 ways)
and solves them exactly instead of through the closed form: kc is the largest stream whose two L1 panels
fit W1 - 1 ways together, over every integer split of the ways (the closed form gives Ar floor(...) ways and
fills them, which on a 12 x 32 AVX-512 tile leaves three of seven ways empty: kc 85 where 160 fits), and
each block is clipped to the problem *before* the next level is sized from it (a k of 64 below the model's
kc leaves room for a taller Ac in L2).

The paper gives no model for the other members of the family (future work, §9). [derived] The same three
rules apply to every member once the roles are renamed: the L1 holds the micro-panels of the L2 and L3
blocks that the register tile streams through along the *stream* dimension (k for resident C, n for
resident A, m for resident B); the L2 rule sizes the L2 block's other dimension, the L3 rule the L3
block's. :data:`ROLES` lists, per variant, which dimensions play which part; for B3A2C0 it is exactly
Low et al.'s model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.machine import Machine

S_FP32 = 4
RULES = ("low", "exact")  # Low et al.'s closed form (the paper's model); the same constraints solved exactly


@dataclass(frozen=True)
class Level:
    """One cache level as the model sees it."""

    ways: int
    sets: int
    line: int

    @property
    def way_bytes(self) -> int:
        return self.sets * self.line

    def ways_for(self, nbytes: int) -> int:
        """Ways a contiguous block of ``nbytes`` occupies (a set-associative cache fills way by way)."""
        return math.ceil(nbytes / self.way_bytes)


@dataclass(frozen=True)
class Roles:
    """Which GEMM dimension ("m", "n", "k") plays which part of the model for one variant.

    ``a`` and ``b`` are the register-tile dimensions whose micro-panels share L1 (``a``: the panel of the
    L2 block, ``b``: the panel of the L3 block), ``stream`` the dimension the register tile streams along
    (sized by the L1 rule), ``l2`` the L2 block's other dimension, ``l3`` the L3 block's other dimension.
    """

    a: str
    b: str
    stream: str
    l2: str
    l3: str


# Register-tile dimensions: resident C is mr x nr (m, n); resident A is mr x kr (m, k); resident B is
# kr x nr (k, n). Names of the dimensions' block sizes: m -> mc, n -> nc, k -> kc.
ROLES: dict[str, Roles] = {
    "B3A2C0": Roles(a="m", b="n", stream="k", l2="m", l3="n"),  # Ar (mr x kc), Br (kc x nr); Ac, Bc
    "A3B2C0": Roles(a="n", b="m", stream="k", l2="n", l3="m"),  # Br, Ar; Bc in L2, Ac in L3
    "B3C2A0": Roles(a="m", b="k", stream="n", l2="m", l3="k"),  # Cc panel mr x nc, Bc panel kr x nc
    "A3C2B0": Roles(a="n", b="k", stream="m", l2="n", l3="k"),  # Cc panel mc x nr, Ac panel mc x kr
    "C3A2B0": Roles(a="k", b="n", stream="m", l2="k", l3="n"),  # Ac panel mc x kr, Cc panel mc x nr
    "C3B2A0": Roles(a="k", b="m", stream="n", l2="k", l3="m"),  # Bc panel kr x nc, Cc panel mr x nc
}


@dataclass(frozen=True)
class Blocking:
    """The model's choice and the cache ways each rule gave (kept so tests can check the constraints)."""

    mc: int
    nc: int
    kc: int
    ways_l1_a: int  # C_Ar of Low et al.
    ways_l2: int  # C_Ac
    ways_l3: int  # C_Bc
    unclipped: dict[str, int]  # the block sizes before the final clip to the problem (exact: each level
    # is sized from the clipped block below, so only the last level can exceed the problem)

    def as_dict(self) -> dict[str, int]:
        return {"mc": self.mc, "nc": self.nc, "kc": self.kc}


def levels(machine: Machine) -> dict[int, Level]:
    """L1d, L2, L3 of ``machine`` as model levels (a missing level becomes a copy of the one below it, so
    its rule does not constrain; a fully associative or unknown associativity counts as 16 ways)."""
    out: dict[int, Level] = {}
    for c in machine.caches:
        if c.type not in ("Data", "Unified") or c.level in out:
            continue
        ways = c.ways if c.ways > 1 else 16
        out[c.level] = Level(ways, max(1, c.size_bytes // (ways * c.line_bytes)), c.line_bytes)
    if 1 not in out:
        out[1] = Level(8, 64, 64)  # 32 KiB, 8-way: every x86 core of this project's decade
    for lvl in (2, 3):
        out.setdefault(lvl, out[lvl - 1])
    return out


def register_tile(variant: str, mr: int, nr: int, kr: int) -> dict[str, int]:
    """The register tile's extent per dimension: resident C is mr x nr (k streamed one rank-1 update at a
    time), resident A mr x kr (n streamed), resident B kr x nr (m streamed)."""
    resident = variant[-2]
    return {
        "C": {"m": mr, "n": nr, "k": 1},
        "A": {"m": mr, "n": 1, "k": kr},
        "B": {"m": 1, "n": nr, "k": kr},
    }[resident]


def round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def round_down(x: int, step: int) -> int:
    return max(step, x // step * step)


def blocking(
    variant: str,
    caches: dict[int, Level],
    mr: int,
    nr: int,
    kr: int = 1,
    sizes: dict[str, int] | None = None,
    elem_bytes: int = S_FP32,
    rule: str = "low",
) -> Blocking:
    """(mc, nc, kc) of ``variant`` for an (mr, nr, kr) register tile (Low et al. 2016, module docstring).

    ``sizes`` ({"m", "n", "k"}) clips the blocks to the problem, rounded up to the register tile (block
    sizes stay whole tiles, the scheme language's granularity rule; the microkernel masks the excess).
    kr only matters for resident A/B. ``rule``: ``low`` (the paper's closed form) or ``exact`` (the same
    constraints solved exactly, each level sized from the clipped block below; module docstring).
    """
    if variant not in ROLES:
        raise ValueError(f"unknown GEMM variant {variant!r}; known: {', '.join(ROLES)}")
    if rule not in RULES:
        raise ValueError(f"unknown cache-model rule {rule!r}; known: {', '.join(RULES)}")
    r = ROLES[variant]
    tile = register_tile(variant, mr, nr, kr)
    s = elem_bytes
    l1, l2, l3 = caches[1], caches[2], caches[3]
    a, b = tile[r.a], tile[r.b]

    def clip(d: str, v: int) -> int:  # the problem's extent, rounded up to the tile (exact rule only)
        return min(v, round_up(sizes[d], tile[d])) if sizes is not None and rule == "exact" else v

    if rule == "low":
        # L1: the a-panel gets C_1 ways, the b-panel (b/a times larger) the rest but one (Low et al. §4.2)
        c1 = max(1, (l1.ways - 1) * a // (a + b))  # floor((W-1) / (1 + b/a)) in integers
        # When b/a is so large that the formula gives 0 ways (a 4-way L1 with a 4 x 16 tile), the a-panel
        # keeps one way and the b-panel's ways (at least one) cap the stream instead: Table 2's Max% column.
        cb = max(1, l1.ways - 1 - c1)
        stream = round_down(min(c1 * l1.way_bytes // (a * s), cb * l1.way_bytes // (b * s)), tile[r.stream])
    else:  # the largest stream whose two panels fit W1 - 1 ways, over every split (c1, W1 - 1 - c1)
        splits = [(c, l1.ways - 1 - c) for c in range(1, l1.ways - 1)] or [(1, 1)]
        c1, stream = max(
            ((c, min(c * l1.way_bytes // (a * s), cb * l1.way_bytes // (b * s))) for c, cb in splits),
            key=lambda cs: cs[1],
        )
        stream = clip(r.stream, round_down(stream, tile[r.stream]))
    # L2: the L2 block (l2 x stream) beside one b-panel (stream x b)
    c2 = max(1, l2.ways - 1 - l2.ways_for(stream * b * s))
    d2 = clip(r.l2, round_down(c2 * l2.way_bytes // (stream * s), tile[r.l2]))
    # L3: the L3 block (l3 x stream) beside one L2 block
    c3 = max(1, l3.ways - 1 - l3.ways_for(d2 * stream * s))
    d3 = round_down(c3 * l3.way_bytes // (stream * s), tile[r.l3])
    block = {r.stream: stream, r.l2: d2, r.l3: d3}
    unclipped = {f"{d}c": v for d, v in block.items()}
    if sizes is not None:
        block = {d: min(v, round_up(sizes[d], tile[d])) for d, v in block.items()}
    return Blocking(block["m"], block["n"], block["k"], c1, c2, c3, unclipped)


def l1_max_pct(l1: Level, a: int, b: int) -> float:
    """The model's ceiling for the b-panel's share of L1 (Table 2's "Max%" column): the ways left to it,
    ``min(W1 - 1 - C_1, ceil(C_1 * b / a))`` out of W1 ([derived] in the notes: reproduces all 16 rows of
    Table 2 with Carmel's 4-way L1)."""
    c1 = max(1, (l1.ways - 1) * a // (a + b))
    return 100.0 * min(l1.ways - 1 - c1, math.ceil(c1 * b / a)) / l1.ways


def occupancy(
    variant: str, caches: dict[int, Level], mr: int, nr: int, kr: int, mc: int, nc: int, kc: int
) -> dict[str, float]:
    """Ways each level's blocks occupy for given (mc, nc, kc), and their share of the cache (Fig 17's
    L1 % and L2 %). The model's constraints are ``l1_ways <= W1 - 1``, ``l2_ways <= W2 - 1`` and
    ``l3_ways <= W3 - 1`` (one way left for the streamed operand)."""
    r = ROLES[variant]
    tile = register_tile(variant, mr, nr, kr)
    block = {"m": mc, "n": nc, "k": kc}
    l1, l2, l3 = caches[1], caches[2], caches[3]
    st = block[r.stream] * S_FP32
    a_panel, b_panel = st * tile[r.a], st * tile[r.b]
    l2_block, l3_block = st * block[r.l2], st * block[r.l3]
    return {
        "l1_ways": l1.ways_for(a_panel) + l1.ways_for(b_panel),
        "l2_ways": l2.ways_for(l2_block) + l2.ways_for(b_panel),
        "l3_ways": l3.ways_for(l3_block) + l3.ways_for(l2_block),
        "l1_pct_b": 100.0 * b_panel / (l1.ways * l1.way_bytes),
        "l2_pct": 100.0 * l2_block / (l2.ways * l2.way_bytes),
    }
