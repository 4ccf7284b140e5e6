"""In-register square transposes for ``PackT`` (8x8 on AVX2, 16x16 on AVX-512), as data.

Each transpose is a list of register operations ``(dst, op, a, b, imm)`` over the rows ``r0..r{L-1}``
loaded from the source; after the list, register ``out[c]`` holds column ``c``. The same list is emitted
as C (:func:`c_function`) and executed on numpy arrays with the intrinsics' documented semantics
(:func:`simulate`), so the AVX-512 permutation is verified on hosts that cannot run AVX-512 code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Op = tuple[str, str, str, str, int]


@dataclass(frozen=True)
class Transpose:
    isa: str
    lanes: int
    vtype: str
    load: str
    store: str
    ops: tuple[Op, ...]
    out: tuple[str, ...]  # register holding column c after the ops

    @property
    def name(self) -> str:
        return f"ttile_transpose{self.lanes}x{self.lanes}"


def _avx2_ops() -> tuple[tuple[Op, ...], tuple[str, ...]]:
    ops: list[Op] = []
    for p in range(4):  # interleave row pairs within each 128-bit lane
        ops.append((f"t{2 * p}", "unpacklo", f"r{2 * p}", f"r{2 * p + 1}", 0))
        ops.append((f"t{2 * p + 1}", "unpackhi", f"r{2 * p}", f"r{2 * p + 1}", 0))
    for q in (0, 4):  # 4x4 transposes within each 128-bit lane
        for k in range(2):
            ops.append((f"u{q + 2 * k}", "shuffle", f"t{q + k}", f"t{q + k + 2}", 0x44))
            ops.append((f"u{q + 2 * k + 1}", "shuffle", f"t{q + k}", f"t{q + k + 2}", 0xEE))
    for c in range(4):  # swap the 128-bit halves between rows 0-3 and 4-7
        ops.append((f"d{c}", "permute2f128", f"u{c}", f"u{c + 4}", 0x20))
        ops.append((f"d{c + 4}", "permute2f128", f"u{c}", f"u{c + 4}", 0x31))
    return tuple(ops), tuple(f"d{c}" for c in range(8))


def _avx512_ops() -> tuple[tuple[Op, ...], tuple[str, ...]]:
    ops: list[Op] = []
    for p in range(8):
        ops.append((f"t{2 * p}", "unpacklo", f"r{2 * p}", f"r{2 * p + 1}", 0))
        ops.append((f"t{2 * p + 1}", "unpackhi", f"r{2 * p}", f"r{2 * p + 1}", 0))
    for q in range(0, 16, 4):  # 4x4 transposes within each 128-bit lane
        for k in range(2):
            ops.append((f"u{q + 2 * k}", "shuffle", f"t{q + k}", f"t{q + k + 2}", 0x44))
            ops.append((f"u{q + 2 * k + 1}", "shuffle", f"t{q + k}", f"t{q + k + 2}", 0xEE))
    for q in (0, 8):  # 128-bit lanes: even/odd lanes of row groups 4 apart
        for k in range(4):
            ops.append((f"v{q + k}", "shuffle_f32x4", f"u{q + k}", f"u{q + k + 4}", 0x88))
            ops.append((f"v{q + k + 4}", "shuffle_f32x4", f"u{q + k}", f"u{q + k + 4}", 0xDD))
    for k in range(8):
        ops.append((f"w{k}", "shuffle_f32x4", f"v{k}", f"v{k + 8}", 0x88))
        ops.append((f"w{k + 8}", "shuffle_f32x4", f"v{k}", f"v{k + 8}", 0xDD))
    return tuple(ops), tuple(f"w{c}" for c in range(16))


_INTRINSIC = {
    "avx2": {
        "unpacklo": "_mm256_unpacklo_ps",
        "unpackhi": "_mm256_unpackhi_ps",
        "shuffle": "_mm256_shuffle_ps",
        "permute2f128": "_mm256_permute2f128_ps",
    },
    "avx512": {
        "unpacklo": "_mm512_unpacklo_ps",
        "unpackhi": "_mm512_unpackhi_ps",
        "shuffle": "_mm512_shuffle_ps",
        "shuffle_f32x4": "_mm512_shuffle_f32x4",
    },
}

TRANSPOSES: dict[str, Transpose] = {
    "avx2": Transpose("avx2", 8, "__m256", "_mm256_loadu_ps", "_mm256_storeu_ps", *_avx2_ops()),
    "avx512": Transpose("avx512", 16, "__m512", "_mm512_loadu_ps", "_mm512_storeu_ps", *_avx512_ops()),
}


_ZERO = {"avx2": "_mm256_setzero_ps", "avx512": "_mm512_setzero_ps"}


def _body(tr: Transpose, n: int) -> list[str]:
    """The statements of d[c*ds + r] = s[r*ss + c]: rows r < n loaded (the rest zeros), the op list, every
    column c < L stored whole."""
    names = _INTRINSIC[tr.isa]
    body = [f"  const {tr.vtype} r{r} = {tr.load}(s + {r} * ss);" for r in range(n)]
    body += [f"  const {tr.vtype} r{r} = {_ZERO[tr.isa]}();" for r in range(n, tr.lanes)]
    for dst, op, a, b, imm in tr.ops:
        args = f"{a}, {b}" if op in ("unpacklo", "unpackhi") else f"{a}, {b}, 0x{imm:02X}"
        body.append(f"  const {tr.vtype} {dst} = {names[op]}({args});")
    return body + [f"  {tr.store}(d + {c} * ds, {reg});" for c, reg in enumerate(tr.out)]


def c_function(tr: Transpose) -> str:
    """``static inline void NAME(const float *s, long ss, float *d, long ds)``: d[c*ds + r] = s[r*ss + c]."""
    head = (
        f"/* {tr.lanes}x{tr.lanes} in-register transpose (PackT): d[c*ds + r] = s[r*ss + c] */\n"
        f"static inline void {tr.name}(const float *restrict s, long ss, float *restrict d, long ds) {{"
    )
    return "\n".join([head, *_body(tr, tr.lanes), "}"])


def panel_name(tr: Transpose, n: int) -> str:
    return f"ttile_panel{tr.lanes}x{n}"


def panel_function(tr: Transpose, n: int) -> str:
    """``static inline void NAME(const float *s, long ss, float *d, long ds)``: d[c*ds + r] = s[r*ss + c]
    for the n <= L rows r and the L columns c: n rows of a chunk of a micro-panel copy
    (``PackT_X[d/p, ..., c, d]`` whose source is contiguous along c; ds = p). The n rows are loaded, the
    rest are zeros, the square transpose's op list runs, and each column is stored whole at d + c*ds:
    with n < L a store spills L - n floats past the column's n, which the caller overwrites afterwards
    (the next column's first rows, the next chunk) or leaves room for."""
    if not 1 <= n <= tr.lanes:
        raise ValueError(f"a panel transpose takes 1 to {tr.lanes} rows, not {n}")
    spill = f"writes {tr.lanes - n} floats past row {n} of each column" if n < tr.lanes else "no spill"
    head = (
        f"/* {n} rows x {tr.lanes} columns of a micro-panel chunk: d[c*ds + r] = s[r*ss + c]; {spill} */\n"
        f"static inline void {panel_name(tr, n)}(const float *restrict s, long ss, float *d, long ds) {{"
    )
    return "\n".join([head, *_body(tr, n), "}"])


def panel_groups(lanes: int, p: int) -> list[tuple[int, int]]:
    """(first row, rows) of the calls that copy a chunk of a panel of p rows, in the order they must run:
    the partial group (p mod L rows, whose stores spill into the next column's first rows) before the
    whole groups of L rows, which overwrite those spills."""
    whole = [(g, lanes) for g in range(0, p - p % lanes, lanes)]
    return ([(p - p % lanes, p % lanes)] if p % lanes else []) + whole


def simulate_panel(tr: Transpose, p: int, rows: np.ndarray, out: np.ndarray) -> None:
    """Run the copy of one chunk of a panel of p rows (``rows``: (p, L)) into the flat buffer ``out`` (at
    least L*p + L floats), the groups' stores in the C code's order, so the spills are modelled too."""
    for g, n in panel_groups(tr.lanes, p):
        block = np.zeros((tr.lanes, tr.lanes), rows.dtype)
        block[:n] = rows[g : g + n]
        for c, col in enumerate(simulate(tr, block)):
            out[c * p + g : c * p + g + tr.lanes] = col


# -- numpy model of the intrinsics (Intel Intrinsics Guide semantics), for the AVX-512 check -----------
def _lanes128(v: np.ndarray) -> np.ndarray:
    return v.reshape(-1, 4)


def _apply(op: str, a: np.ndarray, b: np.ndarray, imm: int) -> np.ndarray:
    la, lb = _lanes128(a), _lanes128(b)
    if op == "unpacklo":
        return np.stack([la[:, 0], lb[:, 0], la[:, 1], lb[:, 1]], axis=1).reshape(-1)
    if op == "unpackhi":
        return np.stack([la[:, 2], lb[:, 2], la[:, 3], lb[:, 3]], axis=1).reshape(-1)
    if op == "shuffle":
        sel = [(imm >> s) & 3 for s in (0, 2, 4, 6)]
        return np.stack([la[:, sel[0]], la[:, sel[1]], lb[:, sel[2]], lb[:, sel[3]]], axis=1).reshape(-1)
    if op == "permute2f128":
        halves = [la[0], la[1], lb[0], lb[1]]
        out = []
        for h in (0, 1):
            ctrl = (imm >> (4 * h)) & 0xF
            out.append(np.zeros(4, a.dtype) if ctrl & 8 else halves[ctrl & 3])
        return np.concatenate(out)
    if op == "shuffle_f32x4":
        sel = [(imm >> s) & 3 for s in (0, 2, 4, 6)]
        return np.concatenate([la[sel[0]], la[sel[1]], lb[sel[2]], lb[sel[3]]])
    raise ValueError(f"unknown op {op}")


def simulate(tr: Transpose, block: np.ndarray) -> np.ndarray:
    """Run the op list on an (L, L) block of rows; returns the (L, L) block of output registers."""
    regs = {f"r{r}": np.asarray(block[r]) for r in range(tr.lanes)}
    for dst, op, a, b, imm in tr.ops:
        regs[dst] = _apply(op, regs[a], regs[b], imm)
    return np.stack([regs[o] for o in tr.out])
