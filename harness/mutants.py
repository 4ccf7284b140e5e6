"""Deliberately broken kernels (mutants): the bugs the semantic check (harness/check.py) must catch.

"Correct before fast": a generated kernel's time only counts once its output matches the float64
reference. This module keeps the evidence that the check can fail: a catalogue of source-to-source
mutations applied to the C code that ``kernels/codegen.py`` renders, each modelling one class of
code-generation bug (off-by-one tail, wrong stride or halo, dropped reduction term, overwrite instead of
accumulate, misplaced store, wrong broadcast, FMA into the wrong register, one wrong point...).

Mutations are plain text edits of the rendered source. Every mutation that finds nothing to mutate raises
:class:`MutationError` (and so does one whose edit would leave the source unchanged), so a catalogue
entry can never silently turn into a no-op. All mutations keep every memory access inside the tensors
(they shrink loops, lower offsets or reuse existing ones), so a mutant computes a wrong answer rather
than crashing.

    python -m harness.mutants            # table: mutant x kernel, wrong points, detection probability
"""

from __future__ import annotations

import argparse
import ast
import math
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.build import CompilerConfig, build_many
from harness.check import CheckConfig, CheckResult, check_output, make_tensors
from harness.run import TimingConfig, run_kernel
from kernels.candidate import Candidate, KernelSource, Workload, render


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


_FMADD = re.compile(r"^(?P<fn>_mm\d*_fmadd_ps)\((?P<a>\w+), (?P<b>\w+), (?P<c>acc\d+)\)$")
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
    """A mutation adding 1 to exactly one output element after all stores (``where``: corner | centre).

    The fault is inserted once, just before the kernel's ``return 0;`` (after every store), rather than
    as an ``if`` on a block's base pointer inside the loop nest: which block bases exist depends on the
    scheme, and a guard that matches no block would make the mutant a silent no-op. The centre is
    ``(s // 2 for s in shape)``, read from the generated header comments.
    """
    if where not in ("corner", "centre"):
        raise ValueError(f"where must be 'corner' or 'centre', got {where!r}")

    def apply(code: str) -> str:
        out = _OUT_DECL.search(code)
        if out is None:
            raise MutationError("no output tensor declaration (float *restrict X = tensors[0];)")
        ret = _last(_RETURN, code, "'return 0;' at the end of the kernel")
        shape = output_shape(code)
        flat = 0 if where == "corner" else int(np.ravel_multi_index([s // 2 for s in shape], shape))
        fault = f"  {out['name']}[{flat}] += 1.0f;  /* mutant: one wrong output point */\n"
        return _splice(code, ret.start(), ret.start(), fault)

    return apply


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


# -- demonstration: mutants x a few generated kernels through build, run, check -------------------------
@dataclass(frozen=True)
class DemoKernel:
    label: str
    candidate: Candidate
    workload: Workload


def demo_kernels(target: str) -> list[DemoKernel]:
    """Three generated kernels whose outputs exceed CheckConfig().full_below, so the default check samples:
    a BLIS-like matmul, a conv microkernel and a stride-2 conv (mul+add, no hoisting)."""

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
    ]


FULL_CHECK = CheckConfig(full_below=10**9)
ONE_RUN = TimingConfig(mode="hot", warmup=0, min_reps=1, max_reps=1, max_seconds=1.0)


@dataclass(frozen=True)
class Outcome:
    mutant: str  # "" for the un-mutated kernel
    kernel: str
    status: str  # run status ("ok", "crash", ...) or "compile_error"
    reason: str
    n_points: int
    n_wrong: int | None  # output points that differ from the reference (full check); None if no output
    default: CheckResult | None  # the default (sampled) check
    full: CheckResult | None
    output: np.ndarray | None = field(default=None, repr=False, compare=False)  # the first run's output

    @property
    def p_detect(self) -> float | None:
        """Analytic probability that 1000 uniform samples hit a wrong point."""
        if self.n_wrong is None:
            return None
        return detection_probability(self.n_wrong, self.n_points, CheckConfig().points)

    @property
    def detected(self) -> bool:
        """Would run_experiment refuse this kernel's time (any non-ok run, or a failed default check)?"""
        return self.status != "ok" or self.default is None or not self.default.passed


def evaluate(
    kernels: Sequence[DemoKernel],
    mutants: Sequence[str | None],
    cache_dir: Path,
    check: CheckConfig | None = None,
    seed: int = 0,
) -> list[Outcome]:
    """Every (mutant, kernel) pair through build, run_kernel and check_output (``None``: un-mutated)."""
    check = check or CheckConfig()
    cache_dir = Path(cache_dir)
    jobs: list[tuple[str, DemoKernel, KernelSource]] = []
    for k in kernels:
        base = render(k.candidate, k.workload)
        for name in mutants:
            jobs.append((name or "", k, base if name is None else mutate(base, name)))
    builds = build_many([src for _, _, src in jobs], CompilerConfig(), cache_dir / "so")
    tensors = {k.label: make_tensors(k.workload, seed, check) for k in kernels}
    outcomes = []
    for (name, k, src), built in zip(jobs, builds, strict=True):
        n_points = int(np.prod(k.workload.shapes()[0]))
        if not built.ok or built.so_path is None:
            outcomes.append(Outcome(name, k.label, "compile_error", built.error, n_points, None, None, None))
            continue
        initial = tensors[k.label]
        res = run_kernel(built.so_path, initial, src.workspace_bytes, ONE_RUN, (), workdir=cache_dir)
        if res.status != "ok" or res.output is None:
            outcomes.append(Outcome(name, k.label, res.status, res.reason, n_points, None, None, None))
            continue
        default = check_output(k.workload, list(initial), res.output, check, seed)
        full = check_output(k.workload, list(initial), res.output, FULL_CHECK, seed)
        outcomes.append(Outcome(name, k.label, "ok", "", n_points, full.n_bad, default, full, res.output))
    return outcomes


def format_table(outcomes: Sequence[Outcome]) -> str:
    head = ("mutant", "kernel", "wrong / points", "P(N=1000)", "default check", "detected", "full check")
    rows = [head]
    for o in outcomes:
        wrong = "-" if o.n_wrong is None else f"{o.n_wrong} / {o.n_points}"
        p = "-" if o.p_detect is None else f"{o.p_detect:.4f}"
        mode = o.status if o.default is None else f"{o.default.mode} {o.default.n_bad}/{o.default.points} bad"
        full = "-" if o.full is None else ("fail" if not o.full.passed else "pass")
        rows.append((o.mutant or "(none)", o.kernel, wrong, p, mode, "yes" if o.detected else "no", full))
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from harness.machine import detect

    ap = argparse.ArgumentParser(prog="python -m harness.mutants", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="avx2 | avx512 (default: the best ISA of this CPU)")
    ap.add_argument("--cache", type=Path, default=None, help="build cache (default: a temporary directory)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = args.target or detect().best_isa or "avx2"
    names: list[str | None] = [None, *MUTANTS]
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        cache = args.cache or Path(tmp)
        outcomes = evaluate(demo_kernels(target), names, cache, seed=args.seed)
    print(format_table(outcomes))
    missed = [o for o in outcomes if o.mutant and not o.detected]
    bad_originals = [o.kernel for o in outcomes if not o.mutant and o.detected]
    print(
        f"\n{len(missed)} mutant run(s) not detected by the default check; "
        f"un-mutated kernels failing: {bad_originals or 'none'}"
    )
    return 1 if bad_originals else 0


if __name__ == "__main__":
    sys.exit(main())
