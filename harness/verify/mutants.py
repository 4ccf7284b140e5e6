"""Deliberately broken kernels (mutants): the bugs the semantic check (harness/check.py) must catch.

"Correct before fast": a generated kernel's time only counts once its output matches the float64
reference. This module keeps the evidence that the check can fail: a catalogue of source-to-source
mutations applied to the C code that ``kernels/codegen.py`` renders, each modelling one class of
code-generation bug (off-by-one tail, wrong loop step, wrong stride or halo, a strided convolution's
window, a Texct/Tvar partial tile against the wrong base, a λ_seq nest at the wrong offset, dropped or
duplicated reduction terms, overwrite instead of accumulate, misplaced or stale stores, a vector store
one lane off, a tail mask one lane short, a lost update (the data-race analogue), wrong broadcast, FMA
into the wrong register, one wrong point...). docs/checks.md describes the check and the detection table.

For each mutant x demo kernel, :func:`evaluate` builds and runs the kernel once, finds every wrong output
point (against the reference of the whole output), and reports the analytic probability that the
sampled check flags it (:func:`sampled_detection_probability`: 1 if a wrong point is one of the
always-sampled corners, else ``1 - (1 - w/n)^(N - 2^d)``) beside the empirical rate over 200 seeds of
the sampling alone (:func:`empirical_detection_rate`) and the verdict of the full check.

Mutations are plain text edits of the rendered source. Every mutation that finds nothing to mutate raises
:class:`MutationError` (and so does one whose edit would leave the source unchanged), so a catalogue
entry can never silently turn into a no-op. All mutations keep every memory access inside the tensors
(they shrink loops, lower offsets or reuse existing ones), so a mutant computes a wrong answer rather
than crashing.

    python -m harness.verify.mutants               # table: mutant x kernel, wrong points, P, rate, full
    python -m harness.verify.mutants --full-below 1000000000  # the same under check=full
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import math
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.build import CompilerConfig, build_many
from harness.check import CheckConfig, CheckResult, check_output, make_tensors, relative_error, sample_points
from harness.run import TimingConfig, run_kernel
from kernels.candidate import Candidate, KernelSource, Workload, render
from kernels.targets import TARGETS


class MutationError(ValueError):
    """The source has nothing this mutation can change (a mutant is never silently a no-op)."""


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str  # what the edit does to the generated C
    apply: Callable[[str], str]  # generated C source -> mutated C source; raises MutationError
    models: str = ""  # the class of code-generation bug it stands for


# -- patterns of the generated code (kernels/codegen.py) -------------------------------------------------
# for (int j0 = 0; j0 < 64; j0 += 16) {
_LOOP = re.compile(
    r"^[ \t]*for \(int (?P<var>\w+) = (?P<start>[^;]+); (?P=var) < (?P<bound>[^;]+); "
    r"(?P=var) \+= (?P<step>\d+)\) \{$",
    re.M,
)
# acc3 = _mm256_fmadd_ps(a1, b1, acc3);  acc3 = _mm256_add_ps(acc3, _mm256_mul_ps(a1, b1));  acc0 += a0 * b0;
_UPDATE = re.compile(r"^(?P<indent>[ \t]*)(?P<acc>acc\d+) (?P<op>\+?=) (?P<rhs>[^;\n]+);[ \t]*\n", re.M)
# __m256 acc0 = _mm256_loadu_ps(po + 0);  float acc0 = po[0];
_ACC_DECL = re.compile(r"^(?P<indent>[ \t]*)(?P<type>\w+) (?P<acc>acc\d+) = (?P<init>[^;\n]+);$", re.M)
_VEC_LOAD_PO = re.compile(r"^(?P<prefix>_mm\d*)_loadu?_ps\(po \+ \d+\)$")
_SCALAR_LOAD_PO = re.compile(r"^po\[\d+\]$")
# _mm256_storeu_ps(po + 8, acc1);  po[0] = acc0;
_STORE = re.compile(
    r"^[ \t]*(?:_mm\d*_storeu?_ps\(po \+ (?P<voff>\d+), (?P<vacc>acc\d+)\)"
    r"|po\[(?P<soff>\d+)\] = (?P<sacc>acc\d+));[ \t]*\n",
    re.M,
)
_PO_DECL = re.compile(r"^[ \t]*float \*restrict po = ", re.M)
# const float *restrict p0 = A + 32 * i0 + k0;
_PTR_DECL = re.compile(r"^[ \t]*const float \*restrict (?P<ptr>p\d+) = (?P<expr>[^;\n]+);$", re.M)
# p0[160] (scalar or broadcast operand) and _mm256_loadu_ps(p1 + 8) (vector operand)
_ELEM = re.compile(r"\b(?P<ptr>p\d+)\[(?P<off>\d+)\]")
_VEC_OPERAND = re.compile(r"_mm\d*_loadu?_ps\((?P<ptr>p\d+) \+ (?P<off>\d+)\)")
_OUT_DECL = re.compile(r"^[ \t]*float \*restrict (?P<name>\w+) = tensors\[0\];$", re.M)
_RETURN = re.compile(r"^  return 0;$", re.M)
_OPERATOR = re.compile(r"^/\* operator : (?P<out>\w+)(?P<axes>(?:\[[^\]]+\])+) \+=", re.M)
# /* operator : O[h][w][k] += I[h*2 + r][w*2 + s][c] * K[r][s][c][k] */
_OPERATOR_FULL = re.compile(
    r"^/\* operator : \w+(?P<out>(?:\[[^\]]+\])+) \+= \w+(?P<in0>(?:\[[^\]]+\])+) \* ", re.M
)
_WORKLOAD = re.compile(r"^/\* workload : \S+ (?P<sizes>\{[^}]*\}) \*/$", re.M)


def _splice(code: str, start: int, end: int, text: str) -> str:
    return code[:start] + text + code[end:]


def _block_start(code: str, pos: int) -> int:
    """Start of the block that holds ``pos``: its output pointer ``po`` declaration (0 if none)."""
    starts = [m.start() for m in _PO_DECL.finditer(code, 0, pos)]
    return starts[-1] if starts else 0


def _last(pattern: re.Pattern[str], code: str, what: str) -> re.Match[str]:
    matches = list(pattern.finditer(code))
    if not matches:
        raise MutationError(f"no {what} in the source")
    return matches[-1]


def _other_accumulator(code: str, update: re.Match[str]) -> str:
    """The accumulator of the closest earlier update in the same block that is not ``update``'s own."""
    start = _block_start(code, update.start())
    for m in reversed(list(_UPDATE.finditer(code, start, update.start()))):
        if m["acc"] != update["acc"]:
            return m["acc"]
    raise MutationError(f"the block of {update['acc']} updates no other accumulator")


# -- the mutations ------------------------------------------------------------------------------------
def drop_last_iteration(code: str) -> str:
    m = next(_LOOP.finditer(code), None)
    if m is None:
        raise MutationError("no for loop in the source")
    return _splice(code, m.start("bound"), m.end("bound"), f"{m['bound']} - {m['step']}")


def skip_first_iteration(code: str) -> str:
    m = _last(_LOOP, code, "for loop")  # the last loop header in the text is an innermost loop
    return _splice(code, m.start("start"), m.end("start"), f"{m['start']} + {m['step']}")


def wrong_input_offset(code: str) -> str:
    """The operand load of the first input with the largest constant offset reads one element lower
    (the second input's if every load of the first is at offset 0). Lowering keeps the access in bounds."""
    for ptr in ("p0", "p1"):
        loads = [m for pat in (_ELEM, _VEC_OPERAND) for m in pat.finditer(code) if m["ptr"] == ptr]
        loads = [m for m in loads if int(m["off"]) > 0]
        if loads:
            m = max(loads, key=lambda x: (int(x["off"]), -x.start()))
            return _splice(code, m.start("off"), m.end("off"), str(int(m["off"]) - 1))
    raise MutationError("no input operand load with a non-zero constant offset (nothing unrolled)")


_COEF_TERM = re.compile(r"\b(?P<coef>\d+) \* (?P<var>[A-Za-z_]\w*)")


def wrong_input_stride(code: str) -> str:
    """The first scaled index term of the first input pointer loses one element of stride."""
    for m in _PTR_DECL.finditer(code):
        if m["ptr"] != "p0":
            continue
        t = _COEF_TERM.search(m["expr"])
        if t is not None and int(t["coef"]) > 1:
            at = m.start("expr") + t.start("coef")
            return _splice(code, at, at + len(t["coef"]), str(int(t["coef"]) - 1))
    raise MutationError("no input pointer with a scaled index term (N * var, N > 1)")


def drop_fma(code: str) -> str:
    m = _last(_UPDATE, code, "accumulator update (FMA / mul+add)")
    return _splice(code, m.start(), m.end(), "")


def zero_init_accumulators(code: str) -> str:
    out, n = [], 0
    pos = 0
    for m in _ACC_DECL.finditer(code):
        init = m["init"]
        vec = _VEC_LOAD_PO.match(init)
        if vec is not None:
            zero = f"{vec['prefix']}_setzero_ps()"
        elif _SCALAR_LOAD_PO.match(init):
            zero = "0.0f"
        else:
            continue
        out.append(code[pos : m.start("init")] + zero)
        pos = m.end("init")
        n += 1
    if not n:
        raise MutationError("no accumulator loaded from the output")
    out.append(code[pos:])
    return "".join(out)


def _store_fields(m: re.Match[str]) -> tuple[str, int, int]:
    """(accumulator, offset, offset span start) of a store match."""
    if m["voff"] is not None:
        return m["vacc"], int(m["voff"]), m.start("voff")
    return m["sacc"], int(m["soff"]), m.start("soff")


def store_wrong_offset(code: str) -> str:
    """The last store of a block writes over the block's first stored slot."""
    last = _last(_STORE, code, "store of an accumulator")
    first = next(_STORE.finditer(code, _block_start(code, last.start()), last.start()), None)
    if first is None:
        raise MutationError("the last store's block stores only one accumulator")
    _, off, at = _store_fields(last)
    _, first_off, _ = _store_fields(first)
    if off == first_off:
        raise MutationError("the block's first and last stores go to the same offset")
    return _splice(code, at, at + len(str(off)), str(first_off))


def drop_store(code: str) -> str:
    m = _last(_STORE, code, "store of an accumulator")
    return _splice(code, m.start(), m.end(), "")


def wrong_broadcast(code: str) -> str:
    """The last scalar/broadcast operand of a block reads the element of the block's first one."""
    last = _last(_ELEM, code, "scalar or broadcast operand load (p<n>[off])")
    start = _block_start(code, last.start())
    for m in _ELEM.finditer(code, start, last.start()):
        if m["ptr"] == last["ptr"] and m["off"] != last["off"]:
            return _splice(code, last.start("off"), last.end("off"), m["off"])
    raise MutationError("the last broadcast's block broadcasts no other element of that input")


def fma_wrong_accumulator(code: str) -> str:
    """The last FMA of a block accumulates into a neighbouring accumulator."""
    m = _last(_UPDATE, code, "accumulator update (FMA / mul+add)")
    other = _other_accumulator(code, m)
    line = re.sub(rf"\b{m['acc']}\b", other, code[m.start() : m.end()])
    return _splice(code, m.start(), m.end(), line)


# acc3 = _mm256_fmadd_ps(a1, b1, acc3);  acc3 = ttile_fmadd_bcst(b1, &p0[512], acc3);  (broadcast=embedded)
_FMADD = re.compile(
    r"^(?P<fn>_mm\d*_fmadd_ps|ttile_fmadd_bcst)\((?P<a>\w+), (?P<b>&?\w+(?:\[\d+\])?), (?P<c>acc\d+)\)$"
)
_MULADD = re.compile(r"^(?P<add>_mm\d*_add_ps)\((?P<c>acc\d+), (?P<mul>_mm\d*_mul_ps\(\w+, \w+\))\)$")


def add_wrong_operand(code: str) -> str:
    """The add of the last mul+add (or FMA) adds the product to another accumulator's value."""
    m = _last(_UPDATE, code, "accumulator update (FMA / mul+add)")
    other = _other_accumulator(code, m)
    acc, rhs = m["acc"], m["rhs"]
    if m["op"] == "+=":
        new = f"{m['indent']}{acc} = {other} + {rhs};\n"
    elif (f := _FMADD.match(rhs)) is not None:
        new = f"{m['indent']}{acc} = {f['fn']}({f['a']}, {f['b']}, {other});\n"
    elif (f := _MULADD.match(rhs)) is not None:
        new = f"{m['indent']}{acc} = {f['add']}({other}, {f['mul']});\n"
    else:
        raise MutationError(f"unrecognised accumulator update {code[m.start() : m.end()].strip()!r}")
    return _splice(code, m.start(), m.end(), new)


def output_shape(code: str) -> tuple[int, ...]:
    """Shape of the output tensor, read from the ``operator`` and ``workload`` header comments."""
    op, wl = _OPERATOR.search(code), _WORKLOAD.search(code)
    if op is None or wl is None:
        raise MutationError(
            "no '/* operator : ... */' and '/* workload : ... */' header (not generated code)"
        )
    sizes = ast.literal_eval(wl["sizes"])
    dims = re.findall(r"\[([^\]]+)\]", op["axes"])
    try:
        return tuple(int(sizes[d.strip()]) for d in dims)
    except KeyError as exc:
        raise MutationError(f"output axis {exc} is not a plain dimension of the workload") from None


def one_wrong_point(where: str) -> Callable[[str], str]:
    """A mutation adding 1 to exactly one output element after all stores.

    ``where``: ``corner`` (element 0), ``centre`` (``s // 2`` on every axis: an interior point) or ``edge``
    (0 on the first axis, ``s // 2`` on the others: on the boundary of the output but not a corner, so
    the always-sampled corners do not cover it; needs an axis after the first of size >= 3).

    The fault is inserted once, just before the kernel's ``return 0;`` (after every store), rather than
    as an ``if`` on a block's base pointer inside the loop nest: which block bases exist depends on the
    scheme, and a guard that matches no block would make the mutant a silent no-op. The point is read
    from the generated header comments.
    """
    if where not in ("corner", "centre", "edge"):
        raise ValueError(f"where must be 'corner', 'centre' or 'edge', got {where!r}")

    def apply(code: str) -> str:
        out = _OUT_DECL.search(code)
        if out is None:
            raise MutationError("no output tensor declaration (float *restrict X = tensors[0];)")
        ret = _last(_RETURN, code, "'return 0;' at the end of the kernel")
        shape = output_shape(code)
        if where == "corner":
            point = [0] * len(shape)
        elif where == "centre":
            point = [s // 2 for s in shape]
        else:
            if not any(s >= 3 for s in shape[1:]):
                raise MutationError(f"an output of shape {shape} has no boundary point that is not a corner")
            point = [0, *(s // 2 for s in shape[1:])]
        flat = int(np.ravel_multi_index(point, shape))
        fault = f"  {out['name']}[{flat}] += 1.0f;  /* mutant: one wrong output point */\n"
        return _splice(code, ret.start(), ret.start(), fault)

    return apply


def _header(code: str) -> tuple[dict[str, int], list[list[tuple[str, int]]], list[list[tuple[str, int]]]]:
    """(workload sizes, output axes, first input axes) from the generated header comments; an axis is a
    list of (dimension, coefficient) terms, e.g. ``I[h*2 + r]...`` gives ``[("h", 2), ("r", 1)]``."""
    op, wl = _OPERATOR_FULL.search(code), _WORKLOAD.search(code)
    if op is None or wl is None:
        raise MutationError(
            "no '/* operator : ... */' and '/* workload : ... */' header (not generated code)"
        )

    def axes(text: str) -> list[list[tuple[str, int]]]:
        out = []
        for axis in re.findall(r"\[([^\]]+)\]", text):
            terms = []
            for term in axis.split(" + "):
                d, _, c = term.strip().partition("*")
                terms.append((d, int(c) if c else 1))
            out.append(terms)
        return out

    return ast.literal_eval(wl["sizes"]), axes(op["out"]), axes(op["in0"])


# const int e_i_1 = MIN(12, i_0 + e_i_0 - i_1);
_MIN_EXTENT = re.compile(
    r"^[ \t]*const int (?P<e>e_\w+) = MIN\((?P<tile>\d+), "
    r"(?P<base>[^;+]+?) \+ (?P<rest>[^;]+) - (?P<v>\w+)\);$",
    re.M,
)


def tvar_min_wrong_base(code: str) -> str:
    """The first variable extent computed relative to an enclosing tile, ``MIN(a, base + e - v)``, loses
    the base: ``MIN(a, e - v)``. Right in the first enclosing tile (base 0), too short (often <= 0: the
    loop below does not run) in every later one. A shorter extent only removes iterations: in bounds."""
    m = next(_MIN_EXTENT.finditer(code), None)
    if m is None:
        raise MutationError("no variable extent relative to an enclosing tile (MIN(a, base + e - v))")
    return _splice(code, m.start("base"), m.start("rest"), "")


def _loop_dim(var: str) -> str:
    return var.rsplit("_", 1)[0]


def _block_end(code: str, open_brace: int) -> int:
    """Position of the ``}`` that closes the ``{`` at ``open_brace``."""
    depth = 0
    for pos in range(open_brace, len(code)):
        if code[pos] == "{":
            depth += 1
        elif code[pos] == "}":
            depth -= 1
            if depth == 0:
                return pos
    raise MutationError("unbalanced braces")


def lambda_seq_wrong_offset(code: str) -> str:
    """The second loop nest of the first λ_seq starts and ends one element early.

    A λ_seq renders as consecutive sibling loops on one dimension, each starting where the previous one
    ends (``for (i_0 = 0; i_0 < 36; ...) {...} for (i_1 = 36; i_1 < 52; ...)``); the second becomes
    ``i_1 = 36 - 1; i_1 < 52 - 1``: the last point of the first nest is accumulated twice and the last
    point of the second nest never. (A nest of one repetition has no loop, so nothing to shift.)"""
    loops = list(_LOOP.finditer(code))
    for p, m in itertools.combinations(loops, 2):
        if (
            _loop_dim(p["var"]) == _loop_dim(m["var"])
            and m["start"].strip() == p["bound"].strip()
            and not code[_block_end(code, p.end() - 1) + 1 : m.start()].strip()  # m follows p's body
        ):
            code = _splice(code, m.start("bound"), m.end("bound"), f"{m['bound']} - 1")
            return _splice(code, m.start("start"), m.end("start"), f"{m['start']} - 1")
    raise MutationError("no λ_seq: no loop starting where a sibling loop on its dimension ends")


def strided_input_halo(code: str) -> str:
    """In every declaration of the first input's pointer, the term of a strided dimension (the last
    strided axis: w before h) is indexed with stride S - 1 instead of S: ``I[w*S + s]`` becomes
    ``I[w*(S-1) + s]`` for the tile origins, so every tile but the first reads a shifted input window.
    A lower coefficient keeps the access in bounds."""
    sizes, _, in_axes = _header(code)
    shape = [sum(c * (sizes[d] - 1) for d, c in axis) + 1 for axis in in_axes]
    strides = [math.prod(shape[a + 1 :]) for a in range(len(shape))]
    strided = [(d, c, strides[a]) for a, axis in enumerate(in_axes) for d, c in axis if c > 1]
    if not strided:
        raise MutationError("the first input has no strided axis (d*S with S > 1)")
    for d, c, stride in reversed(strided):
        term = re.compile(rf"\b{c * stride} \* (?P<v>{d}_\d+)\b")
        decls = [m for m in _PTR_DECL.finditer(code) if m["ptr"] == "p0" and term.search(m["expr"])]
        if not decls:
            continue
        for m in reversed(decls):
            expr = term.sub(rf"{(c - 1) * stride} * \g<v>", m["expr"])
            code = _splice(code, m.start("expr"), m.end("expr"), expr)
        return code
    raise MutationError("no input pointer term for a strided dimension (it is unrolled or has no loop)")


_SCHEME = re.compile(r"^/\* scheme   : (?P<atoms>.*) \*/$", re.M)
_UNROLL_ATOM = re.compile(r"\b(?:U_\{(?P<n>\d+),(?P<d>\w+)\}|Ul_(?P<ld>\w+))")


def drop_unrolled_reduction_step(code: str) -> str:
    """The first unroll ``U_{n,d}`` of a reduction dimension emits n - 1 copies: in every block, the
    updates of its last unrolled value (e.g. every ``s = 2`` term of ``U_{3,s}``) are deleted.

    Blocks list their updates in the order of ``itertools.product`` over the unroll atoms (the last
    varies fastest), so update ``t`` has index ``(t // inner) % n`` on that atom, ``inner`` being the
    product of the factors of the unroll atoms after it (which must be fixed ``U``s)."""
    sch = _SCHEME.search(code)
    if sch is None:
        raise MutationError("no '/* scheme : ... */' header (not generated code)")
    sizes, out_axes, _ = _header(code)
    reduction = set(sizes) - {d for axis in out_axes for d, _ in axis}
    atoms = [
        (int(a["n"]), a["d"]) if a["n"] else (None, a["ld"]) for a in _UNROLL_ATOM.finditer(sch["atoms"])
    ]
    for pos, (n, d) in enumerate(atoms):
        later = [f for f, _ in atoms[pos + 1 :]]
        if n is not None and n > 1 and d in reduction and None not in later:
            inner = math.prod(later)  # type: ignore[arg-type]
            break
    else:
        raise MutationError("no U_{n,d} (n > 1) on a reduction dimension with only fixed U's after it")
    blocks = [m.start() for m in _PTR_DECL.finditer(code) if m["ptr"] == "p0"]
    drops = []
    for b, start in enumerate(blocks):
        end = blocks[b + 1] if b + 1 < len(blocks) else len(code)
        updates = list(_UPDATE.finditer(code, start, end))
        if len(updates) % (n * inner):
            raise MutationError(f"a block has {len(updates)} updates, not a multiple of {n} x {inner}")
        drops += [u for t, u in enumerate(updates) if (t // inner) % n == n - 1]
    if not drops:
        raise MutationError("no accumulator update in the source")
    for u in reversed(drops):
        code = _splice(code, u.start(), u.end(), "")
    return code


_HOISTED = re.compile(r"^[ \t]*\{  /\* output accumulators kept in registers", re.M)


def store_before_last_update(code: str) -> str:
    """In the last hoisted region (accumulators kept in registers across the reduction loops) that
    writes back with plain (unmasked) stores, the region's last store is moved from after the reduction
    loops into the loop body, just before the first update of its accumulator: the value written is one
    block of updates stale (the last reduction step of that accumulator's outputs is lost)."""
    regions = list(_HOISTED.finditer(code))
    if not regions:
        raise MutationError("no hoisted accumulator region (hoist=true)")
    for region in reversed(regions):  # the last region with plain stores (a masked one has maskstores)
        stores: list[re.Match[str]] = []
        for s in _STORE.finditer(code, region.end()):
            if stores and s.start() != stores[-1].end():
                break
            stores.append(s)
        if stores and not any(r.start() > region.start() and r.start() < stores[0].start() for r in regions):
            break
    else:
        raise MutationError("no hoisted region stores its accumulators with plain stores")
    store = stores[-1]
    acc, _, _ = _store_fields(store)
    update = next(
        (u for u in _UPDATE.finditer(code, region.end(), stores[0].start()) if u["acc"] == acc), None
    )
    if update is None:
        raise MutationError(f"{acc} is not updated inside its hoisted region")
    line = code[store.start() : store.end()].lstrip(" \t")
    code = _splice(code, store.start(), store.end(), "")
    return _splice(code, update.start(), update.start(), update["indent"] + line)


def vector_store_shifted(code: str) -> str:
    """The last vector store at a non-zero offset writes one float lower (``po + 8`` -> ``po + 7``): the
    lane below the vector is clobbered and the vector's last lane is never written: a tail mask of one
    lane too many at one end and one too few at the other."""
    stores = [m for m in _STORE.finditer(code) if m["voff"] is not None and int(m["voff"]) > 0]
    if not stores:
        raise MutationError("no vector store at a non-zero offset (scalar code or a single vector)")
    m = stores[-1]
    return _splice(code, m.start("voff"), m.end("voff"), str(int(m["voff"]) - 1))


def _mask_patterns() -> list[re.Pattern[str]]:
    """``const <mask type> mkN = <mask_make with n lanes>;`` for every target, capturing n."""
    out = []
    for t in TARGETS.values():
        if not t.mask_make:
            continue
        head, _, tail = t.mask_make.partition("{n}")
        out.append(
            re.compile(
                rf"^[ \t]*const {re.escape(t.mask_type)} (?P<mk>mk\d+) = "
                rf"{re.escape(head)}(?P<n>.+){re.escape(tail)};$",
                re.M,
            )
        )
    return out


_MASKS = _mask_patterns()


def mask_one_lane_short(code: str) -> str:
    """Every mask of a partial vector tile (``codegen.partial=masked``) keeps one valid lane fewer:
    lane count ``n`` becomes ``(n) > 0 ? (n) - 1 : 0``. The last valid lane of each partial vector is
    then neither loaded nor stored (its output keeps its initial value). One lane *too many* is not
    generated: on the tensor's last row it would write past the end of the output."""
    found = sorted((m for pat in _MASKS for m in pat.finditer(code)), key=lambda m: m.start())
    if not found:
        raise MutationError("no mask of a partial vector tile (codegen.partial=masked)")
    for m in reversed(found):
        n = m["n"]
        code = _splice(code, m.start("n"), m.end("n"), f"(({n}) > 0 ? ({n}) - 1 : 0)")
    return code


def lost_update_race(code: str) -> str:
    """A lost update, as a data race in a parallel reduction would produce (the generator has no parallel
    loops yet): a second copy of the accumulator of the source's last update is read from the output at
    the same time as the accumulator (``raceN = accN``); that last update goes to the copy; the copy is
    stored *after* the accumulator, so the accumulator's other updates are overwritten (lost).

    Needs an accumulator updated at least twice between its load and its store (a reduction unroll):
    with one update there, the copy would hold the whole sum and the result would be right."""
    last = _last(_UPDATE, code, "accumulator update (FMA / mul+add)")
    acc = last["acc"]
    decl = [m for m in _ACC_DECL.finditer(code, 0, last.start()) if m["acc"] == acc]
    store = next((s for s in _STORE.finditer(code, last.end()) if _store_fields(s)[0] == acc), None)
    if not decl or store is None:
        raise MutationError(f"{acc} is not loaded before and stored after its last update")
    d = decl[-1]
    n_updates = sum(1 for u in _UPDATE.finditer(code, d.end(), store.start()) if u["acc"] == acc)
    if n_updates < 2:
        raise MutationError(
            f"{acc} is updated only once between its load and its store (no reduction unroll)"
        )
    race = "race" + acc[3:]
    word = re.compile(rf"\b{acc}\b")
    store_line = code[store.start() : store.end()]
    code = _splice(code, store.end(), store.end(), word.sub(race, store_line))
    code = _splice(code, last.start(), last.end(), word.sub(race, code[last.start() : last.end()]))
    copy = f"\n{d['indent']}{d['type']} {race} = {acc};  /* mutant: a second worker reads the same output */"
    return _splice(code, d.end(), d.end(), copy)


def wrong_loop_step(code: str) -> str:
    """The first (outermost) loop steps by twice its tile: ``v += s`` becomes ``v += 2 * s``, so every
    other tile is skipped. The iterations left are a subset of the right ones: in bounds."""
    m = next(_LOOP.finditer(code), None)
    if m is None:
        raise MutationError("no for loop in the source")
    return _splice(code, m.start("step"), m.end("step"), str(2 * int(m["step"])))


def duplicate_update(code: str) -> str:
    """The last accumulator update of the source is emitted twice (one product counted twice)."""
    m = _last(_UPDATE, code, "accumulator update (FMA / mul+add)")
    return _splice(code, m.end(), m.end(), code[m.start() : m.end()])


# const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);  (the in-register transpose of a PackT)
_TRANSPOSE_SHUFFLE = re.compile(r"= _mm\d*_shuffle_ps\((?P<a>\w+), (?P<b>\w+), (?P<imm>0x[0-9A-Fa-f]+)\);")


def packt_wrong_shuffle(code: str) -> str:
    """The first 4x4 shuffle of the PackT transpose (``kernels/transpose.py``) picks the other pair of
    elements (0x44 <-> 0xEE): every full transposed block of the buffer has two columns swapped in half
    of its 128-bit lanes. Only register contents change: every access stays in bounds."""
    m = next(_TRANSPOSE_SHUFFLE.finditer(code), None)
    if m is None:
        raise MutationError("no in-register transpose (PackT) shuffle in the source")
    imm = int(m["imm"], 16)
    swapped = {0x44: 0xEE, 0xEE: 0x44}.get(imm, imm ^ 0xFF)
    return _splice(code, m.start("imm"), m.end("imm"), f"0x{swapped:02X}")


# the two copies into a PackT_X[d/p,...] panel buffer: a partial last panel,
#   for (int pq1_i = 0; pq1_i < MIN(6, e_i_1 - pp1 * 6); pq1_i++)
# and a whole one, the constant p on the innermost loop right above the store into the buffer's panel pp
_PANEL_COPY = re.compile(r"< MIN\((?P<p>\d+), (?P<rest>[^;]*?) - (?P<pp>pp\d+) \* (?P=p)\);")
_PANEL_COPY_WHOLE = re.compile(
    r"for \(int (?P<v>pq\d+_\w+) = 0; (?P=v) < (?P<p>\d+); (?P=v)\+\+\)\n\s*buf\d+\[pp\d+ \* "
)


# the panel transpose's load of its last row (kernels/transpose.py panel_function), e.g.
#   const __m256 r5 = _mm256_loadu_ps(s + 5 * ss);   in   static inline void ttile_panel8x6(...)
_PANEL_LAST_ROW = re.compile(
    r"ttile_panel\d+x\d+\(const float[^{]*\{(?:\n[^\n]*)*?\n  const __m\d+ r\d+ = "
    r"(?P<load>(?P<isa>_mm\d*)_loadu_ps\(s \+ \d+ \* ss\));(?=\n  const __m\d+ r\d+ = _mm\d*_setzero)"
)


def panel_copy_short(code: str) -> str:
    """The copy into a panel buffer (``PackT_X[d/p,...,d]``) stops one row short of each panel: the
    last of the p values of every panel, whole or partial, is never written by the scalar copies (the
    microkernel reads what the workspace held before), and the panel transpose that copies the whole
    panels' chunks takes zeros for that row instead of loading it."""
    found = [*_PANEL_COPY.finditer(code), *_PANEL_COPY_WHOLE.finditer(code)]
    rows = list(_PANEL_LAST_ROW.finditer(code))
    if not found and not rows:
        raise MutationError("no copy into a panel buffer (PackT_X[d/p,...]) in the source")
    edits = [(m.start("p"), m.end("p"), str(int(m["p"]) - 1)) for m in found]
    edits += [(m.start("load"), m.end("load"), f"{m['isa']}_setzero_ps()") for m in rows]
    for start, end, text in sorted(edits, reverse=True):  # from the end, so offsets stay valid
        code = _splice(code, start, end, text)
    return code


def _entry(name: str, apply: Callable[[str], str], description: str, models: str) -> tuple[str, Mutant]:
    return name, Mutant(name, description, apply, models)


MUTANTS: dict[str, Mutant] = dict(
    [
        _entry(
            "drop_last_iteration", drop_last_iteration,
            "the first (outermost) loop stops one step early: `v < B` becomes `v < B - step`",
            "off-by-one tail: the last tile of a dimension is never computed (outputs keep initial values)",
        ),
        _entry(
            "skip_first_iteration", skip_first_iteration,
            "the last (innermost) loop starts one step late: `v = S` becomes `v = S + step`",
            "off-by-one head / lost peeled first iteration: with a reduction loop innermost (the usual "
            "case), one reduction step is missing from every output",
        ),
        _entry(
            "wrong_input_offset", wrong_input_offset,
            "the operand load of the first input with the largest constant offset reads one element lower",
            "wrong halo / neighbour offset in one unrolled load: a subset of outputs reads a wrong input",
        ),
        _entry(
            "wrong_input_stride", wrong_input_stride,
            "the first scaled term `N * v` of the first input's pointer becomes `(N-1) * v`",
            "wrong leading dimension / stride: correct for v = 0 (first row/tile), wrong elsewhere",
        ),
        _entry(
            "drop_fma", drop_fma,
            "the last accumulator update (FMA, mul+add or +=) of the source is deleted",
            "dropped reduction step: one product term missing from some outputs",
        ),
        _entry(
            "zero_init_accumulators", zero_init_accumulators,
            "accumulators start at zero (setzero / 0.0f) instead of being loaded from the output",
            "overwrite instead of accumulate: Out = In0*In1 rather than Out += In0*In1",
        ),
        _entry(
            "store_wrong_offset", store_wrong_offset,
            "the last accumulator store of a block goes to the block's first stored offset",
            "store to a wrong offset: one result lost, another slot overwritten",
        ),
        _entry(
            "drop_store", drop_store,
            "the last accumulator store of the source is deleted",
            "missing write-back: the computed tile is never stored",
        ),
        _entry(
            "wrong_broadcast", wrong_broadcast,
            "the last broadcast/scalar operand of a block reads the block's first broadcast element",
            "wrong broadcast element: a row of the register tile multiplies the wrong input value",
        ),
        _entry(
            "fma_wrong_accumulator", fma_wrong_accumulator,
            "the last FMA (or mul+add) accumulates into another accumulator of the block",
            "FMA into the wrong register: one output misses a term, another gets it twice",
        ),
        _entry(
            "add_wrong_operand", add_wrong_operand,
            "the add of the last mul+add/FMA adds the product to another accumulator's value",
            "wrong add operand: the running sum is replaced by a neighbour's, so the partial sum is lost",
        ),
        _entry(
            "one_point_corner", one_wrong_point("corner"),
            "after all stores, output element 0 (a corner) gets +1",
            "a fault confined to one output point on the boundary (caught: the check samples corners)",
        ),
        _entry(
            "one_point_interior", one_wrong_point("centre"),
            "after all stores, the output element at the centre of the output gets +1",
            "a fault confined to one interior output point (a sampled check catches it only by chance)",
        ),
        _entry(
            "one_point_edge", one_wrong_point("edge"),
            "after all stores, the output element (0, centre...) gets +1: on the boundary, not a corner",
            "a fault confined to one point of a tile border on the output's edge (the check's "
            "boundary option samples corners only, so this is caught only by chance too)",
        ),
        _entry(
            "tvar_min_wrong_base", tvar_min_wrong_base,
            "the first variable extent `MIN(a, base + e - v)` loses its tile base: `MIN(a, e - v)`",
            "partial-tile (Texct/Tvar) bound computed against the wrong base: absolute vs relative "
            "index (the thesis's own Fig 3.15/3.16 `var_i` slip); every tile after the first is cut short",
        ),
        _entry(
            "lambda_seq_wrong_offset", lambda_seq_wrong_offset,
            "the second loop nest of the first λ_seq starts and ends one element early",
            "λ_seq nest offset off by one: the seam point is computed twice, the last point never",
        ),
        _entry(
            "strided_input_halo", strided_input_halo,
            "the strided dimension's term of the input pointer uses stride S - 1: I[w*(S-1) + s]",
            "off-by-one halo / stride of a strided convolution window: every tile but the first reads "
            "a shifted input window",
        ),
        _entry(
            "drop_unrolled_reduction_step", drop_unrolled_reduction_step,
            "the first U_{n,d} on a reduction dimension emits n - 1 copies (its last r/s/k term deleted)",
            "dropped unrolled reduction term (e.g. the s = 2 tap of a 3-tap unroll): every output of the "
            "block misses that term",
        ),
        _entry(
            "store_before_last_update", store_before_last_update,
            "the last store of a hoisted region moves into the reduction loop, before its accumulator's "
            "first update",
            "accumulator hoisted but written back before the reduction loop ends: the stored value is "
            "one reduction step stale",
        ),
        _entry(
            "vector_store_shifted", vector_store_shifted,
            "the last vector store at a non-zero offset writes one float lower (po + 8 -> po + 7)",
            "vector tile one lane off (a tail or tile offset off by one): one lane clobbered below the "
            "vector, its last lane never written",
        ),
        _entry(
            "mask_one_lane_short", mask_one_lane_short,
            "every mask of a partial vector tile keeps one valid lane fewer (n -> n - 1)",
            "wrong tail mask: the last valid lane of every masked remainder is neither loaded nor stored",
        ),
        _entry(
            "lost_update_race", lost_update_race,
            "the last update of an accumulator goes to a second copy read with it; the copy is stored "
            "after it",
            "race in a parallel (split-)reduction analogue (no parallel loops are generated yet): two "
            "read-modify-writes of one output, the later store wins, the other's updates are lost",
        ),
        _entry(
            "wrong_loop_step", wrong_loop_step,
            "the first (outermost) loop steps by twice its tile: `v += s` becomes `v += 2 * s`",
            "wrong loop step / tile footprint: every other tile of a dimension is never computed",
        ),
        _entry(
            "duplicate_update", duplicate_update,
            "the last accumulator update of the source is emitted twice",
            "duplicated reduction term (overlapping unroll or tiles): one product counted twice",
        ),
        _entry(
            "packt_wrong_shuffle", packt_wrong_shuffle,
            "the first shuffle of the PackT in-register transpose uses the other immediate (0x44 <-> 0xEE)",
            "wrong shuffle in a vectorized transpose (PackT): the packed buffer holds a permuted block",
        ),
        _entry(
            "panel_copy_short", panel_copy_short,
            "the copy into a panel buffer (PackT_X[d/p,...]) writes p - 1 of the p rows of every panel (the "
            "panel transpose takes zeros for the last row)",
            "incomplete pack into micro-panels: stale workspace values are read as operands",
        ),
    ]
)  # fmt: skip


def apply_mutant(code: str, name: str) -> str:
    """The mutated source text; raises MutationError if the mutation finds nothing (or changes nothing)."""
    try:
        mutant = MUTANTS[name]
    except KeyError:
        raise KeyError(f"unknown mutant {name!r}; known: {sorted(MUTANTS)}") from None
    new = mutant.apply(code)
    if new == code:
        raise MutationError(f"mutant {name} left the source unchanged")
    return new


def mutate(src: KernelSource, name: str) -> KernelSource:
    """A copy of ``src`` with mutant ``name`` applied (a different source_hash: never shares a build)."""
    code = apply_mutant(src.code, name)
    return replace(src, code=f"/* mutant   : {name} */\n{code}")


def detection_probability(n_wrong_points: int, n_output_points: int, n_samples: int) -> float:
    """P(at least one of ``n_samples`` uniform draws, with replacement, hits one of the wrong points)
    = 1 - (1 - w/n)^N."""
    if n_output_points < 1 or not 0 <= n_wrong_points <= n_output_points or n_samples < 0:
        raise ValueError(
            f"need 0 <= wrong ({n_wrong_points}) <= points ({n_output_points}), points >= 1, "
            f"samples ({n_samples}) >= 0"
        )
    if n_samples == 0 or n_wrong_points == 0:
        return 0.0
    if n_wrong_points == n_output_points:
        return 1.0
    return -math.expm1(n_samples * math.log1p(-n_wrong_points / n_output_points))


def corners(shape: Sequence[int]) -> list[tuple[int, ...]]:
    """The output's corners, as ``harness.check.sample_points`` lists them (2^d, repeats for size-1 axes)."""
    return list(itertools.product(*[(0, s - 1) for s in shape]))


def sampled_detection_probability(wrong: np.ndarray, cfg: CheckConfig) -> float:
    """Analytic P(the check ``cfg`` flags an output whose wrong points are the True entries of ``wrong``).

    Outputs of at most ``full_below`` points are checked in full: 1 if any point is wrong. Otherwise
    ``sample_points`` draws ``points`` coordinates uniformly (with replacement) and, with ``boundary``,
    replaces the first 2^d draws by the 2^d corners: 1 if a corner is wrong, else
    ``detection_probability(w, n, points - 2^d)`` (the corners are then known right; the remaining draws
    are uniform over all n points, corners included)."""
    n, w = wrong.size, int(wrong.sum())
    if n <= cfg.full_below:
        return 1.0 if w else 0.0
    draws = cfg.points
    if cfg.boundary:
        cs = corners(wrong.shape)
        if any(wrong[c] for c in cs):
            return 1.0
        draws = max(cfg.points - len(cs), 0)
    return detection_probability(w, n, draws)


@functools.lru_cache(maxsize=64)
def _sample_indices(shape: tuple[int, ...], cfg: CheckConfig, seeds: tuple[int, ...]) -> tuple:
    return tuple(tuple(sample_points(shape, cfg, s)[0].T) for s in seeds)


def empirical_detection_rate(wrong: np.ndarray, cfg: CheckConfig, seeds: Sequence[int] = range(200)) -> float:
    """Fraction of ``seeds`` whose sample (``harness.check.sample_points``, exactly as ``check_output``
    draws it) contains at least one wrong point. The output is computed once; only the sampling varies."""
    idx = _sample_indices(tuple(wrong.shape), cfg, tuple(seeds))
    return sum(bool(wrong[i].any()) for i in idx) / len(idx)


# -- demonstration: mutants x a few generated kernels through build, run, check -------------------------
@dataclass(frozen=True)
class DemoKernel:
    label: str
    candidate: Candidate
    workload: Workload


def demo_kernels(target: str) -> list[DemoKernel]:
    """Generated kernels whose outputs exceed CheckConfig().full_below, so the default check samples:
    a BLIS-like matmul, a conv microkernel, a stride-2 conv (mul+add, no hoisting, a 3-tap s unroll), a
    matmul with Texct/Tvar partial tiles (90 = 48 + 42 rows, Tvar tiles of 12 and 6), a matmul whose
    124 columns end in a masked remainder (codegen.partial=masked: 12 = 8 + 4 lanes on AVX2, 28 = 16 +
    12 on AVX-512; with 108 the AVX-512 remainder of 12 left the tile's second vector fully masked, so a
    mutated update of that vector changed nothing), a λ_seq matmul (52 = 6x6 + 4x4 rows, with a k
    unroll) and a matmul whose A is transposed into a workspace buffer by PackT (k = 37: full
    in-register blocks and a scalar rest) and one whose A is packed in panels of 6 rows (70 = 11 x 6 +
    4: a partial last panel), and the BLIS-like matmul again with its next output tile prefetched; on
    AVX-512 the conv microkernel again with its broadcasts embedded in the FMAs (codegen.broadcast)."""

    def cand(text: str, **opts: object) -> Candidate:
        return Candidate("scheme", text, tuple(sorted({"target": target, **opts}.items())))

    return [
        DemoKernel(
            "matmul_blis",
            cand("[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]"),
            Workload.make("matmul_96x64x32", "matmul", {"i": 96, "j": 64, "k": 32}),
        ),
        DemoKernel(
            "conv_ukernel",
            cand("[R_k, R_h, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]"),
            Workload.make("conv_12", "conv2d", {"h": 12, "w": 12, "k": 64, "c": 64, "r": 3, "s": 3}),
        ),
        DemoKernel(
            "conv_s2_muladd",
            cand("[R_k, R_h, R_w, R_r, R_c, U_{3,s}, U_{2,w}, U_{2,k}, V_k]", fma=False, hoist=False),
            Workload.make(
                "conv_12_s2", "conv2d", {"h": 12, "w": 12, "k": 64, "c": 64, "r": 3, "s": 3}, stride=2
            ),
        ),
        DemoKernel(
            "matmul_texct",
            cand("[R_j, R_i, Texct_{48,i}, Tvar_{12,i}, R_k, U_{6,i}, U_{2,j}, V_j]"),
            Workload.make("matmul_90x64x32", "matmul", {"i": 90, "j": 64, "k": 32}),
        ),
        DemoKernel(
            "matmul_masked",
            cand("[R_i, R_j, R_k, U_{4,i}, U_{2,j}, V_j]", partial="masked"),
            Workload.make("matmul_64x124x16", "matmul", {"i": 64, "j": 124, "k": 16}),
        ),
        DemoKernel(
            "matmul_lambda",
            cand("[R_j, λ_seq_i.[(6,6),(4,4)], T_{16,k}, Uλ_i, U_{2,k}, U_{2,j}, V_j]"),
            Workload.make("matmul_52x96x32", "matmul", {"i": 52, "j": 96, "k": 32}),
        ),
        DemoKernel(
            "matmul_packt",
            cand("[PackT_A[k,i], R_j, R_i, R_k, U_{4,i}, U_{2,j}, V_j]"),
            Workload.make("matmul_64x96x37", "matmul", {"i": 64, "j": 96, "k": 37}),
        ),
        DemoKernel(
            "matmul_panels",
            cand(
                "[R_k, Texct_{24,k}, PackT_A[i/6,k,i], R_j, R_i, Tvar_{24,k}, U_{6,i}, U_{2,j}, V_j]",
                partial="masked",
            ),  # fmt: skip
            Workload.make("matmul_70x96x37", "matmul", {"i": 70, "j": 96, "k": 37}),
        ),
        DemoKernel(  # the next output tile prefetched (codegen option prefetch): a hint, never a result
            "matmul_prefetch",
            cand("[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]", prefetch="i"),
            Workload.make("matmul_96x64x32_pf", "matmul", {"i": 96, "j": 64, "k": 32}),
        ),
        DemoKernel(  # the next output tile and the next pixels' input windows prefetched (issue 32)
            "conv_prefetch",
            cand("[R_k, R_h, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]", prefetch="w,I:w,I:h@stream"),
            Workload.make("conv_12_pf", "conv2d", {"h": 12, "w": 12, "k": 64, "c": 64, "r": 3, "s": 3}),
        ),
        *(  # the conv microkernel with its FMAs reading the broadcast from memory (AVX-512 only)
            [
                DemoKernel(
                    "conv_embedded",
                    cand("[R_k, R_h, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]", broadcast="embedded"),
                    Workload.make(
                        "conv_12_eb", "conv2d", {"h": 12, "w": 12, "k": 64, "c": 64, "r": 3, "s": 3}
                    ),
                )
            ]
            if target == "avx512"
            else []
        ),
    ]


FULL_CHECK = CheckConfig(full_below=10**9)
ONE_RUN = TimingConfig(mode="hot", warmup=0, min_reps=1, max_reps=1, max_seconds=1.0)
SEEDS = range(200)


@dataclass(frozen=True)
class Outcome:
    mutant: str  # "" for the un-mutated kernel
    kernel: str
    status: str  # run status ("ok", "crash", ...) or "compile_error"
    reason: str
    n_points: int
    n_wrong: int | None  # output points that differ from the reference (full check); None if no output
    default: CheckResult | None  # the default (sampled) check, with the evaluation's seed
    full: CheckResult | None
    output: np.ndarray | None = field(default=None, repr=False, compare=False)  # the first run's output
    wrong: np.ndarray | None = field(default=None, repr=False, compare=False)  # bool, output shape
    p_detect: float | None = None  # analytic P(the check flags it), always-sampled corners included
    p_no_corners: float | None = None  # analytic P with boundary=False: all N draws uniform
    rate: float | None = None  # fraction of the sampling seeds whose default check flags it

    @property
    def detected(self) -> bool:
        """Would run_experiment refuse this kernel's time (any non-ok run, or a failed default check)?"""
        return self.status != "ok" or self.default is None or not self.default.passed

    @property
    def corner_wrong(self) -> bool:
        return self.wrong is not None and any(self.wrong[c] for c in corners(self.wrong.shape))


def applicable(kernels: Sequence[DemoKernel], name: str) -> list[str]:
    """Labels of the kernels mutant ``name`` finds something to mutate in."""
    out = []
    for k in kernels:
        try:
            apply_mutant(render(k.candidate, k.workload).code, name)
        except MutationError:
            continue
        out.append(k.label)
    return out


def evaluate(
    kernels: Sequence[DemoKernel],
    mutants: Sequence[str | None],
    cache_dir: Path,
    check: CheckConfig | None = None,
    seed: int = 0,
    seeds: Sequence[int] = SEEDS,
    select: Callable[[str, str], bool] | None = None,
) -> list[Outcome]:
    """Every (mutant, kernel) pair through build, run_kernel and check_output (``None``: un-mutated).

    Pairs where the mutation finds nothing to mutate (MutationError) are left out (see
    :func:`applicable`), and so are those ``select(mutant or "", kernel label)`` rejects. Each kernel
    runs once; the wrong points come from comparing its whole output with the reference; the empirical
    rate re-draws only the check's sample, for every seed in ``seeds``.
    """
    check = check or CheckConfig()
    cache_dir = Path(cache_dir)
    jobs: list[tuple[str, DemoKernel, KernelSource]] = []
    for k in kernels:
        base = render(k.candidate, k.workload)
        for name in mutants:
            if select is not None and not select(name or "", k.label):
                continue
            try:
                jobs.append((name or "", k, base if name is None else mutate(base, name)))
            except MutationError:
                continue
    builds = build_many([src for _, _, src in jobs], CompilerConfig(), cache_dir / "so")
    tensors = {k.label: make_tensors(k.workload, seed, check) for k in kernels}
    expected: dict[str, np.ndarray] = {}
    outcomes = []
    for (name, k, src), built in zip(jobs, builds, strict=True):
        shape = k.workload.shapes()[0]
        n_points = math.prod(shape)
        if not built.ok or built.so_path is None:
            outcomes.append(Outcome(name, k.label, "compile_error", built.error, n_points, None, None, None))
            continue
        initial = tensors[k.label]
        res = run_kernel(built.so_path, initial, src.workspace_bytes, ONE_RUN, (), workdir=cache_dir)
        if res.status != "ok" or res.output is None:
            outcomes.append(Outcome(name, k.label, res.status, res.reason, n_points, None, None, None))
            continue
        if k.label not in expected:
            every = np.stack(np.unravel_index(np.arange(n_points), shape), axis=1)
            expected[k.label] = k.workload.op.reference_points(initial, k.workload.size, every)
        output = np.asarray(res.output).reshape(shape)
        wrong = (relative_error(output.reshape(-1), expected[k.label]) > check.eps).reshape(shape)
        default = check_output(k.workload, list(initial), output, check, seed)
        full = check_output(k.workload, list(initial), output, FULL_CHECK, seed)
        p = sampled_detection_probability(wrong, check)
        p_uniform = sampled_detection_probability(wrong, replace(check, boundary=False))
        rate = empirical_detection_rate(wrong, check, seeds)
        outcomes.append(
            Outcome(
                name, k.label, "ok", "", n_points, int(wrong.sum()), default, full, output, wrong,
                p, p_uniform, rate,
            )
        )  # fmt: skip
    return outcomes


def _p_text(p: float | None, n_wrong: int | None, n_points: int, draws: int, full: bool) -> str:
    """P with 4 decimals; above 0.99995 as ``1-1eX``, X = log10 of the miss probability (1 - w/n)^draws,
    computed in logs so that it never rounds to 1 or underflows; ``1 (full)`` for a full check."""
    if p is None or n_wrong is None:
        return "-"
    if full and p == 1:
        return "1 (full)"
    if p < 0.99995 or n_wrong == n_points or draws <= 0:
        return f"{p:.4f}"
    return f"1-1e{round(draws * math.log1p(-n_wrong / n_points) / math.log(10))}"


def format_table(
    outcomes: Sequence[Outcome], n_seeds: int = len(SEEDS), check: CheckConfig | None = None
) -> str:
    """One row per outcome: mutant, kernel, wrong/total points, analytic P(detect) of the check ``check``
    (the default one unless given; ``1 (corner)`` when a wrong corner makes it certain), the same P
    without the corners (all N draws uniform), the empirical rate over ``n_seeds`` sampling seeds, the
    full check's verdict and the verdict of the check actually run (the evaluation's seed)."""
    check = check or CheckConfig()
    head = ("mutant", "kernel", "wrong/total", "analytic P", "P w/o corners", f"empirical ({n_seeds} seeds)",
            "full check", "check (seed)")  # fmt: skip
    rows = [head]
    for o in outcomes:
        wrong = "-" if o.n_wrong is None else f"{o.n_wrong}/{o.n_points}"
        rate = "-" if o.rate is None else f"{o.rate:.3f}"
        full = o.status if o.full is None else ("pass" if o.full.passed else "FAIL: caught")
        if o.default is None:
            mode = o.status
        else:
            mode = f"{'pass' if o.default.passed else 'FAIL'} {o.default.n_bad}/{o.default.points} bad"
            mode += "" if o.default.mode == "sampled" else f" ({o.default.mode})"
        n_corners = 2 ** (0 if o.wrong is None else o.wrong.ndim) if check.boundary else 0
        full_mode = o.n_points <= check.full_below
        if o.corner_wrong and o.p_detect == 1 and check.boundary and not full_mode:
            p = "1 (corner)"
        else:
            p = _p_text(o.p_detect, o.n_wrong, o.n_points, check.points - n_corners, full_mode)
        p0 = _p_text(o.p_no_corners, o.n_wrong, o.n_points, check.points, full_mode)
        rows.append((o.mutant or "(none)", o.kernel, wrong, p, p0, rate, full, mode))
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from harness.machine import detect

    ap = argparse.ArgumentParser(prog="python -m harness.verify.mutants", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="avx2 | avx512 (default: the best ISA of this CPU)")
    ap.add_argument("--cache", type=Path, default=None, help="build cache (default: a temporary directory)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the inputs and of the one real check")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="sampling seeds for the empirical rate")
    ap.add_argument("--points", type=int, default=None, help="check.points (default: CheckConfig's)")
    ap.add_argument("--full-below", type=int, default=None, help="check.full_below (10**9: check=full)")
    ap.add_argument("--no-boundary", action="store_true", help="check.boundary=false (no corners)")
    args = ap.parse_args(argv)
    cfg = CheckConfig()
    cfg = replace(
        cfg,
        points=args.points or cfg.points,
        full_below=cfg.full_below if args.full_below is None else args.full_below,
        boundary=not args.no_boundary,
    )
    target = args.target or detect().best_isa or "avx2"
    kernels = demo_kernels(target)
    names: list[str | None] = [None, *MUTANTS]
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        cache = args.cache or Path(tmp)
        outcomes = evaluate(kernels, names, cache, cfg, seed=args.seed, seeds=range(args.seeds))
    corner_rule = (
        "1 if a corner is wrong, else 1 - (1 - w/n)^(N - 2^d)" if cfg.boundary else "1 - (1 - w/n)^N"
    )
    print(
        f"check: N = {cfg.points} points, boundary={cfg.boundary} (the 2^d corners replace the first "
        f"2^d draws), outputs of <= {cfg.full_below} points checked in full; n = output points, w = wrong "
        f"ones; analytic P = {corner_rule}\n"
    )
    print(format_table(outcomes, args.seeds, cfg))
    ran = {(o.mutant, o.kernel) for o in outcomes}
    na = {n: [k.label for k in kernels if (n, k.label) not in ran] for n in MUTANTS}
    na = {n: ks for n, ks in na.items() if ks}
    print(f"\n{len(MUTANTS)} mutants, {sum(1 for o in outcomes if o.mutant)} mutant x kernel runs")
    never = [n for n, ks in na.items() if len(ks) == len(kernels)]
    if never:
        print(f"mutants applicable to no demo kernel: {never}")
    print("not applicable (nothing to mutate): " + "; ".join(f"{n}: {', '.join(ks)}" for n, ks in na.items()))
    misses = [
        o for o in outcomes if o.mutant and o.p_detect is not None and (o.p_detect < 0.999 or o.rate < 1)
    ]
    print(
        "the sampled check can miss (analytic P < 0.999 or a seed missed it): "
        + (", ".join(f"{o.mutant}@{o.kernel} (P={o.p_detect:.3f})" for o in misses) or "nothing")
    )
    escaped = [o for o in outcomes if o.mutant and o.full is not None and o.full.passed]
    bad_originals = [o.kernel for o in outcomes if not o.mutant and o.detected]
    print(
        f"mutants the full check does not catch: {[(o.mutant, o.kernel) for o in escaped] or 'none'}; "
        f"un-mutated kernels failing: {bad_originals or 'none'}"
    )
    return 1 if bad_originals or escaped else 0


if __name__ == "__main__":
    sys.exit(main())
