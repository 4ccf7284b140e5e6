"""C code generation for TTiLE schemes (seed 000, §3.4 and §4.3).

The loop tree is emitted outermost first: loop atoms become ``for`` loops (MIN-bounded where the scheme
analysis says an inner extent is variable), λ_seq becomes a sequence of loop nests, one per (repetitions,
factor) pair, and the unrolled suffix (U, Uλ, V) becomes one straight-line basic block. Two switches
exist for the §4.3 ablation: ``fma`` (emit fused multiply-add intrinsics, or mul then add) and ``hoist``
(keep output accumulators in registers across the innermost reduction loops, or load/store them in
every block).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernels.candidate import Candidate, KernelSource, Workload
from kernels.operators import Access, Operator
from kernels.scheme import UNROLL_KINDS, Analysis, LoopStep, SchemeError, analyze, format_scheme, walk_dim
from kernels.targets import Target, get_target

LOOP_ATOMS = ("R", "T", "Texct", "Tvar", "Texctg")


def analyze_for(scheme_text: str | list, workload: Workload, target: Target) -> Analysis:
    """Legality of a scheme on a workload for a target (lanes decide the V footprint)."""
    op = workload.op
    stride1 = {d: [(t.tensor, t.stride1_dim()) for t in op.tensors if d in t.dims()] for d in op.dims}
    an = analyze(scheme_text, op.dims, workload.size, target.lanes, stride1, op.output.dims())
    if an.vector_dim is not None and an.vector_dim in op.reduction_dims:
        v = an.scheme[-1]
        raise SchemeError(
            "V-reduction",
            f"{an.vector_dim} is a reduction dimension; vectorizing it needs a horizontal sum, "
            "which is not generated: vectorize a dimension of the output",
            v,
            len(an.scheme) - 1,
        )
    return an


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _linear(acc: Access, strides: list[int], index: Mapping[str, str | int]) -> str:
    """Row-major offset of ``acc`` as a C expression; ``index`` maps dims to C expressions or ints."""
    terms: list[str] = []
    const = 0
    for axis, stride in zip(acc.axes, strides, strict=True):
        for d, coef in axis:
            v = index.get(d, 0)
            if isinstance(v, int):
                const += v * coef * stride
            elif v != "0":
                k = coef * stride
                if not v.isidentifier():
                    v = f"({v})"
                terms.append(v if k == 1 else f"{k} * {v}")
    if const or not terms:
        terms.append(str(const))
    return " + ".join(terms)


def _const_offset(acc: Access, strides: list[int], offsets: Mapping[str, int]) -> int:
    return sum(
        coef * offsets.get(d, 0) * s for axis, s in zip(acc.axes, strides, strict=True) for d, coef in axis
    )


@dataclass
class _Gen:
    an: Analysis
    op: Operator
    workload: Workload
    target: Target
    vectorized: bool
    hoist_at: int | None
    fma: bool
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    counters: dict[str, int] = field(default_factory=dict)
    acc_scope: dict[int, str] | None = None  # output offset -> accumulator name, when hoisted

    def __post_init__(self) -> None:
        self.strides = [_strides(t.shape(self.workload.size)) for t in self.op.tensors]
        self.walks: dict[tuple, dict[int, LoopStep]] = {}

    # -- helpers ---------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def fresh(self, dim: str) -> str:
        """Loop index ``i_0, i_1...``: the underscore keeps it apart from block names (p0, a0, acc0)."""
        n = self.counters.get(dim, 0)
        self.counters[dim] = n + 1
        return f"{dim}_{n}"

    def plan(self, pos: int, binding: Mapping[str, int]) -> LoopStep:
        d = self.an.scheme[pos].dim
        key = (d, tuple(sorted(binding.items())))
        if key not in self.walks:
            self.walks[key] = walk_dim(self.an, d, binding)  # type: ignore[arg-type]
        return self.walks[key][pos]

    @property
    def ctype(self) -> str:
        return self.target.vtype if self.vectorized else "float"

    def uses_vector(self, t: Access) -> bool:
        return self.vectorized and self.an.vector_dim in t.dims()

    # -- loop tree -------------------------------------------------------------------------------
    def emit(self, pos: int, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        if pos == self.hoist_at:
            self.emit_hoisted(pos, env, binding)
            return
        if pos >= self.an.unroll_start:
            self.emit_block(env, binding)
            return
        a = self.an.scheme[pos]
        if a.kind == "ScalP":
            self.emit(pos + 1, env, binding)
            return
        d = a.dim
        base, extent = env[d]  # type: ignore[index]
        if a.kind == "lambda_seq":
            gran = self.an.step(pos, binding)
            offset = 0
            for reps, factor in a.seq:
                inner = {**binding, d: factor}
                tile = factor * gran
                start = self._plus(base, offset)
                if reps == 1:
                    self.emit(pos + 1, {**env, d: (start, tile)}, inner)  # type: ignore[dict-item]
                else:
                    v = self.fresh(d)  # type: ignore[arg-type]
                    end = self._plus(base, offset + reps * tile)
                    self.line(f"for (int {v} = {start}; {v} < {end}; {v} += {tile}) {{")
                    self.depth += 1
                    self.emit(pos + 1, {**env, d: (v, tile)}, inner)  # type: ignore[dict-item]
                    self.depth -= 1
                    self.line("}")
                offset += reps * tile
            return
        step = self.plan(pos, binding)
        if isinstance(extent, int) and extent == step.step:
            self.emit(pos + 1, env, binding)
            return
        v = self.fresh(d)  # type: ignore[arg-type]
        bound = self._plus(base, extent)
        self.line(f"for (int {v} = {base}; {v} < {bound}; {v} += {step.step}) {{")
        self.depth += 1
        child_extent: int | str = step.step
        if step.child_variable:
            child_extent = f"e_{v}"
            self.line(f"const int {child_extent} = MIN({step.step}, {bound} - {v});")
        self.emit(pos + 1, {**env, d: (v, child_extent)}, binding)  # type: ignore[dict-item]
        self.depth -= 1
        self.line("}")

    @staticmethod
    def _plus(base: str, value: int | str) -> str:
        if base == "0":
            return str(value)
        if value == 0:
            return base
        return f"{base} + {value}"

    # -- basic block -----------------------------------------------------------------------------
    def unroll_combos(self, binding: Mapping[str, int]) -> list[dict[str, int]]:
        factors: list[tuple[str, list[int]]] = []
        for p in range(self.an.unroll_start, len(self.an.scheme)):
            a = self.an.scheme[p]
            if a.kind in UNROLL_KINDS:
                n = a.size if a.kind == "U" else binding[a.dim]  # type: ignore[index]
                step = self.an.step(p, binding)
                factors.append((a.dim, [u * step for u in range(n)]))  # type: ignore[arg-type]
        combos = []
        for values in itertools.product(*(vals for _, vals in factors)):
            off: dict[str, int] = {}
            for (d, _), v in zip(factors, values, strict=True):
                off[d] = off.get(d, 0) + v
            combos.append(off)
        return combos

    def output_offsets(self, binding: Mapping[str, int]) -> list[int]:
        out, strides = self.op.output, self.strides[0]
        seen: dict[int, None] = {}
        for off in self.unroll_combos(binding):
            seen[_const_offset(out, strides, off)] = None
        return list(seen)

    def declare_accumulators(
        self, env: Mapping[str, tuple[str, int | str]], binding: Mapping[str, int]
    ) -> dict[int, str]:
        out = self.op.output
        base = _linear(out, self.strides[0], {d: b for d, (b, _) in env.items()})
        self.line(f"float *restrict po = {out.tensor} + {base};")
        accs: dict[int, str] = {}
        for off in self.output_offsets(binding):
            name = f"acc{len(accs)}"
            accs[off] = name
            load = f"{self.target.load}(po + {off})" if self.uses_vector(out) else f"po[{off}]"
            self.line(f"{self.ctype} {name} = {load};")
        return accs

    def store_accumulators(self, accs: Mapping[int, str]) -> None:
        for off, name in accs.items():
            if self.uses_vector(self.op.output):
                self.line(f"{self.target.store}(po + {off}, {name});")
            else:
                self.line(f"po[{off}] = {name};")

    def emit_hoisted(self, pos: int, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        self.line("{  /* output accumulators kept in registers across the reduction loops below */")
        self.depth += 1
        accs = self.declare_accumulators(env, binding)
        self.acc_scope = accs
        hoist_at, self.hoist_at = self.hoist_at, None
        self.emit(pos, env, binding)
        self.hoist_at = hoist_at
        self.acc_scope = None
        self.store_accumulators(accs)
        self.depth -= 1
        self.line("}")

    def emit_block(self, env: Mapping[str, tuple[str, int | str]], binding: Mapping[str, int]) -> None:
        t = self.target
        self.line("{")
        self.depth += 1
        bases = {d: b for d, (b, _) in env.items()}
        accs = self.acc_scope
        if accs is None:
            accs = self.declare_accumulators(env, binding)
        ptrs = []
        for n, (acc, strides) in enumerate(zip(self.op.inputs, self.strides[1:], strict=True)):
            ptr = f"p{n}"
            self.line(f"const float *restrict {ptr} = {acc.tensor} + {_linear(acc, strides, bases)};")
            ptrs.append(ptr)
        # operands are loaded where first used, so live ranges stay short (the register file is small)
        operands: dict[tuple[int, int], str] = {}
        for off in self.unroll_combos(binding):
            names = []
            for n, (acc, strides) in enumerate(zip(self.op.inputs, self.strides[1:], strict=True)):
                key = (n, _const_offset(acc, strides, off))
                if key not in operands:
                    name = f"{'ab'[n]}{len([k for k in operands if k[0] == n])}"
                    if self.uses_vector(acc):
                        expr = f"{t.load}({ptrs[n]} + {key[1]})"
                    elif self.vectorized:
                        expr = f"{t.set1}({ptrs[n]}[{key[1]}])"
                    else:
                        expr = f"{ptrs[n]}[{key[1]}]"
                    self.line(f"const {self.ctype} {name} = {expr};")
                    operands[key] = name
                names.append(operands[key])
            acc_name = accs[_const_offset(self.op.output, self.strides[0], off)]
            a, b = names
            if not self.vectorized:
                self.line(f"{acc_name} += {a} * {b};")
            elif self.fma:
                self.line(f"{acc_name} = {t.fmadd}({a}, {b}, {acc_name});")
            else:
                self.line(f"{acc_name} = {t.add}({acc_name}, {t.mul}({a}, {b}));")
        if self.acc_scope is None:
            self.store_accumulators(accs)
        self.depth -= 1
        self.line("}")


def hoist_position(an: Analysis, op: Operator) -> int | None:
    """Where output accumulators go: at ScalP if given, else above the innermost reduction loops."""
    if an.scalp_position is not None:
        return an.scalp_position
    reduction = set(op.reduction_dims)
    pos = an.unroll_start
    while pos > 0:
        a = an.scheme[pos - 1]
        if a.kind == "ScalP" or (a.kind in LOOP_ATOMS and a.dim in reduction):
            pos -= 1
        else:
            break
    return pos if pos < an.unroll_start else None


def generate(
    an: Analysis, workload: Workload, target: Target, *, hoist: bool = True, fma: bool = True
) -> str:
    op = workload.op
    hoist_at = hoist_position(an, op) if (hoist or an.scalp_position is not None) else None
    gen = _Gen(an, op, workload, target, an.vector_dim is not None, hoist_at, fma)
    gen.depth = 1
    env: dict[str, tuple[str, int | str]] = {d: ("0", workload.size[d]) for d in op.dims}
    gen.emit(0, env, {})
    head = [
        f"/* operator : {op.text()} */",
        f"/* workload : {workload.name} {workload.size} */",
        f"/* scheme   : {format_scheme(an.scheme, ascii_only=True)} */",
        f"/* target   : {target.name} ({target.lanes} lanes), fma={fma}, hoist={hoist} */",
        "#include <immintrin.h>",
        "#define MIN(a, b) ((a) < (b) ? (a) : (b))",
        "",
        "int kernel(float *const *tensors, void *workspace) {",
        "  (void)workspace;",
    ]
    for n, t in enumerate(op.tensors):
        qual = "" if n == 0 else "const "
        head.append(f"  {qual}float *restrict {t.tensor} = tensors[{n}];")
    return "\n".join([*head, *gen.lines, "  return 0;", "}", ""])


def render_scheme(candidate: Candidate, workload: Workload) -> KernelSource:
    target = get_target(str(candidate.option("target", "avx2")))
    an = analyze_for(candidate.text, workload, target)
    fma = bool(candidate.option("fma", True))
    code = generate(an, workload, target, hoist=bool(candidate.option("hoist", True)), fma=fma)
    # without FMA emission gcc would fuse the mul + add again (-ffp-contract=fast is its C default)
    return KernelSource(code=code, target=target.name, cflags=() if fma else ("-ffp-contract=off",))
