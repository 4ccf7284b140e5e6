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
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kernels.candidate import Candidate, KernelSource, Workload
from kernels.external import EXTERNALS, External, link_args
from kernels.operators import Access, Operator
from kernels.scheme import (
    EXTERNAL,
    PACK_KINDS,
    PAR_KINDS,
    UNROLL_KINDS,
    Analysis,
    LoopStep,
    SchemeError,
    analyze,
    as_written,
    format_scheme,
    pack_layout,
    parse_scheme,
    walk_dim,
)
from kernels.targets import Target, get_target
from kernels.transpose import TRANSPOSES, Transpose, c_function

LOOP_ATOMS = ("R", "T", "Texct", "Tvar", "Texctg")
MAX_THREAD_SLICES = 64  # per-thread pack workspaces of a parallel kernel: at most this many threads


PARTIAL_MODES = ("none", "masked", "padded")


def _plain_axes(t: Access) -> bool:
    return all(len(ax) == 1 and ax[0][1] == 1 for ax in t.axes)


def analyze_for(
    scheme_text: str | list, workload: Workload, target: Target, partial: str = "none"
) -> Analysis:
    """Legality of a scheme on a workload for a target (lanes decide the V footprint).

    ``partial="masked"`` lets the microkernel (U, V) take a remainder: masked lanes on the vector
    dimension, a switch between complete smaller microkernels on the others.
    """
    if partial not in PARTIAL_MODES:
        raise ValueError(f"codegen.partial={partial!r} is not allowed; allowed: {', '.join(PARTIAL_MODES)}")
    op = workload.op
    stride1 = {d: [(t.tensor, t.stride1_dim()) for t in op.tensors if d in t.dims()] for d in op.dims}
    if partial == "padded":  # legality is checked on the padded shape (see render_padded)
        partial = "none"
    an = analyze(
        scheme_text,
        op.dims,
        workload.size,
        target.lanes,
        stride1,
        op.output.dims(),
        partial=partial == "masked",
        tensors={t.tensor: t.dims() if _plain_axes(t) else None for t in op.tensors},
    )
    try:
        _check_external_entry(an, op)
    except SchemeError as exc:
        raise as_written(exc, an.scheme) from None
    if an.vector_dim is not None and an.vector_dim in op.reduction_dims:
        v = an.scheme[-1]
        raise as_written(
            SchemeError(
                "V-reduction",
                f"{an.vector_dim} is a reduction dimension; vectorizing it needs a horizontal sum, "
                "which is not generated: vectorize a dimension of the output",
                v,
                len(an.scheme) - 1,
            ),
            an.scheme,
        )
    return an


def external_atom(an: Analysis) -> tuple[int, External] | None:
    """Position and registry entry of the scheme's ExternalCall, if any (checked by analyze_for)."""
    p = len(an.scheme) - 1
    if p >= 0 and an.scheme[p].kind == EXTERNAL:
        return p, EXTERNALS[an.scheme[p].name]  # type: ignore[index]
    return None


def _check_external_entry(an: Analysis, op: Operator) -> None:
    """The registry side of ExternalCall: a known name, an operator and dimension it serves."""
    for p, a in enumerate(an.scheme):
        if a.kind != EXTERNAL:
            continue
        ext = EXTERNALS.get(a.name)  # type: ignore[arg-type]
        if ext is None:
            why = f"unknown external microkernel {a.name!r}; known: {', '.join(sorted(EXTERNALS))}"
            raise SchemeError("external-unknown", why, a, p)
        if op.name not in ext.ops:
            why = f"{ext.name} computes {', '.join(ext.ops)}, not {op.name}"
            raise SchemeError("external-operator", why, a, p)
        if a.dim not in ext.flexible:
            why = f"{ext.name} is flexible on {', '.join(ext.flexible)} only"
            raise SchemeError("external-dimension", why, a, p)
        if a.size > ext.max_extent:  # type: ignore[operator]
            why = f"{ext.name} takes extents up to {ext.max_extent} on its flexible dimension"
            raise SchemeError("external-size", why, a, p)


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


@dataclass(frozen=True)
class View:
    """Where a tensor lives: a pointer, the stride of each of the tensor's axes, and the index each
    dimension starts at (a packed buffer starts at the tile's origin)."""

    ptr: str
    strides: list[int]
    origin: dict[str, str]
    # a buffer in panels (PackT_X[d/p, ..., d]): loop indices on d are whole panels from the origin, so
    # they move by ``strides`` (one panel of p per p elements), while the unrolled offsets inside a tile
    # (below p) move by ``inner`` (1 along d)
    inner: list[int] | None = None
    split: tuple[str, int] | None = None

    def address(self, acc: Access, bases: Mapping[str, str]) -> str:
        rel = {d: (b if d not in self.origin else f"{b} - ({self.origin[d]})") for d, b in bases.items()}
        return f"{self.ptr} + {_linear(acc, self.strides, rel)}"

    def offset(self, acc: Access, offsets: Mapping[str, int]) -> int:
        if self.split is not None:
            d, p = self.split
            if not 0 <= offsets.get(d, 0) < p:
                why = f"the microkernel reaches {d} + {offsets[d]}, past a panel of {p} of the packed buffer"
                raise SchemeError("pack-split", why + f": the tile along {d} must be at most {p}", dim=d)
        return _const_offset(acc, self.inner or self.strides, offsets)


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
    acc_scope: dict[tuple[int, str | None], tuple[str, int]] | None = None  # (offset, mask) -> (acc, voff)
    masks: dict[int, str] = field(default_factory=dict)  # vector offset -> mask of a partial vector tile
    masks_used: bool = False
    split: set[str] = field(default_factory=set)  # variable vector extents already split full/remainder
    helpers: dict[str, str] = field(default_factory=dict)  # static functions the kernel calls (by name)
    ws_base: str = "(float *)workspace"  # where pack buffers start (per thread under a parallel loop)
    parallel: bool = False
    external_sites: list[str] = field(default_factory=list)  # file-scope declarations of the call sites
    prefetch: tuple[tuple[str, str], ...] = ()  # (tensor, dimension) pairs of the option prefetch

    def __post_init__(self) -> None:
        # how each tensor (ABI order) is addressed here: itself, or the buffer of an enclosing Pack
        self.views = [View(t.tensor, _strides(t.shape(self.workload.size)), {}) for t in self.op.tensors]
        self.nominal: dict[str, int] = {}  # variable extent -> its largest value
        self.workspace_floats = 0
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
        if a.kind in PACK_KINDS:
            self.emit_pack(pos, env, binding)
            return
        if a.kind in PAR_KINDS:
            self.emit_parallel(pos, env, binding)
            return
        d = a.dim
        base, extent = env[d]  # type: ignore[index]
        if a.kind == "lambda_seq":
            gran = self.an.step(pos, binding)
            offset = 0
            for reps, factor in a.seq:
                inner = {**binding, d: factor}
                tile = factor * gran
                self.check_panels(d, tile)  # type: ignore[arg-type]
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
        self.check_panels(d, step.step)  # type: ignore[arg-type]
        if isinstance(extent, int) and extent == step.step:
            self.emit(pos + 1, env, binding)
            return
        v = self.fresh(d)  # type: ignore[arg-type]
        bound = self._plus(base, extent)
        if self.acc_scope is not None and len(self.acc_scope) > self.target.registers // 2:
            self.line("#pragma GCC unroll 1")  # see emit_hoisted
        self.line(f"for (int {v} = {base}; {v} < {bound}; {v} += {step.step}) {{")
        self.depth += 1
        child_extent: int | str = step.step
        if step.child_variable:
            child_extent = f"e_{v}"
            self.nominal[child_extent] = step.step
            self.line(f"const int {child_extent} = MIN({step.step}, {bound} - {v});")
        self.emit(pos + 1, {**env, d: (v, child_extent)}, binding)  # type: ignore[dict-item]
        self.depth -= 1
        self.line("}")

    def check_panels(self, d: str, step: int) -> None:
        """A loop on a dimension split into panels by an enclosing pack must move by whole panels, or its
        indices would land inside a panel, where the buffer's layout is not linear."""
        for v in self.views:
            if v.split is not None and v.split[0] == d and step % v.split[1]:
                why = f"a loop on {d} steps by {step} under a buffer in panels of {v.split[1]} along {d}"
                raise SchemeError("pack-split", why + " (the step must be a multiple of the panel)", dim=d)

    @staticmethod
    def _plus(base: str, value: int | str) -> str:
        if base == "0":
            return str(value)
        if value == 0:
            return base
        return f"{base} + {value}"

    # -- parallel loops (thesis §3.7): Tpar / Tfused -------------------------------------------------
    def emit_parallel(self, pos: int, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        """The run of parallel atoms starting at ``pos`` (the scheme's outermost ones, by the legality
        rules) as one OpenMP loop nest: zero-based rectangular counters collapsed together, the tile
        indices derived from them inside the body, so each iteration is independent. Pack buffers below
        get one workspace slice per thread."""
        run = pos
        while run < self.an.unroll_start and self.an.scheme[run].kind in PAR_KINDS:
            run += 1
        env = dict(env)
        counters: list[tuple[str, int]] = []
        derived: list[str] = []
        for p in range(pos, run):
            a = self.an.scheme[p]
            d = a.dim
            base, extent = env[d]  # type: ignore[index]
            step = self.plan(p, binding).step
            if not isinstance(extent, int) or extent % step:  # excluded by the rules (outermost, exact)
                raise SchemeError("par-outermost", "a parallel loop needs a static extent", a, p)
            if extent == step:
                continue  # one iteration: no loop
            v = self.fresh(d)  # type: ignore[arg-type]
            q = f"q{len(counters)}_{v}"
            counters.append((q, extent // step))
            derived.append(f"const int {v} = {self._plus(base, f'{q} * {step}')};")
            env[d] = (v, step)  # type: ignore[index]
        if not counters:
            self.emit(run, env, binding)
            return
        self.parallel = True
        trips = math.prod(n for _, n in counters)
        collapse = f" collapse({len(counters)})" if len(counters) > 1 else ""
        pragma_at = len(self.lines)
        self.line(f"#pragma omp parallel for{collapse} schedule(static)")
        for q, n in counters:
            self.line(f"for (int {q} = 0; {q} < {n}; {q}++)")
        self.line("{")
        self.depth += 1
        for text in derived:
            self.line(text)
        ws_at, ws_start, outer_base = len(self.lines), self.workspace_floats, self.ws_base
        self.line("")  # placeholder: this thread's workspace slice, if a pack below needs one
        self.ws_base, self.workspace_floats = "ws_t", 0
        self.emit(run, env, binding)
        per_thread, self.ws_base = self.workspace_floats, outer_base
        if per_thread:
            # one slice per thread, never more threads than slices (the workspace size is fixed here)
            cap = min(trips, MAX_THREAD_SLICES)
            self.lines[pragma_at] += f" num_threads(MIN(omp_get_max_threads(), {cap}))"
            self.lines[ws_at] = (
                "  " * self.depth
                + f"float *const ws_t = {outer_base} + {ws_start} + omp_get_thread_num() * {per_thread};"
            )
            self.workspace_floats = ws_start + cap * per_thread
        else:
            del self.lines[ws_at]
            self.workspace_floats = ws_start
        self.depth -= 1
        self.line("}")

    # -- packing (thesis §3.6) -------------------------------------------------------------------
    def emit_pack(self, pos: int, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        """Copy the tensor's footprint under ``pos`` into a workspace buffer (laid out in the PackT order),
        address it there below ``pos``, and copy it back if it is the output."""
        a = self.an.scheme[pos]
        n = next(i for i, t in enumerate(self.op.tensors) if t.tensor == a.tensor)
        acc, src = self.op.tensors[n], self.views[n]
        if src.split is not None:
            why = f"{a.tensor} is already in panels here; pack it once"
            raise SchemeError("pack-split", why, a, pos)
        nominal = {d: e if isinstance(e, int) else self.nominal[e] for d, (_, e) in env.items()}
        # buffer axes, innermost last: the layout the tensor has here (a PackT above may have transposed
        # it), or one per dimension in this PackT's order
        if a.kind == "Pack":
            order = sorted(range(len(acc.axes)), key=lambda ax: -src.strides[ax])
        else:
            plain, split = pack_layout(a)
            order = [acc.dims().index(d) for d in plain]
            if split is not None:
                self.emit_panel_pack(pos, n, order, split, nominal, env, binding)
                return

        def extent(axis: int, ext: Mapping[str, int | str]) -> int | str:
            terms = [(c, ext[d]) for d, c in acc.axes[axis]]
            if all(isinstance(e, int) for _, e in terms):
                return sum(c * (e - 1) for c, e in terms) + 1  # type: ignore[operator]
            return " + ".join(f"{c} * ({e} - 1)" for c, e in terms) + " + 1"

        sizes = [extent(ax, nominal) for ax in order]
        buf_strides = _strides(tuple(sizes))  # type: ignore[arg-type]
        strides = [0] * len(acc.axes)
        for pos_in_buf, ax in enumerate(order):
            strides[ax] = buf_strides[pos_in_buf]
        total = buf_strides[0] * sizes[0]  # type: ignore[operator]
        buf = self.open_buffer(f"{a.text()}: {' x '.join(map(str, sizes))} floats", total)  # type: ignore[arg-type]
        bases = {d: b for d, (b, _) in env.items()}
        origin = {d: bases[d] for d in acc.dims()}
        loops = [f"pq{n}_{k}" for k in range(len(order))]
        src_index = {ax: loops[order.index(ax)] for ax in range(len(acc.axes))}
        src_addr = src.address(acc, bases)
        src_off = " + ".join(f"{src_index[ax]} * {src.strides[ax]}" for ax in range(len(acc.axes)))
        buf_off = " + ".join(f"{loops[k]} * {buf_strides[k]}" for k in range(len(order)))
        actual = [extent(ax, {d: e for d, (_, e) in env.items()}) for ax in order]

        def copy(assign: str) -> None:
            for k, v in enumerate(loops):
                self.line(f"for (int {v} = 0; {v} < {actual[k]}; {v}++)")
                self.depth += 1
            self.line(assign)
            self.depth -= len(loops)

        # a PackT that moves the contiguous axis is a transposition: square blocks go through registers
        tr = TRANSPOSES.get(self.target.name) if a.kind == "PackT" else None
        inner_src = [ax for ax in range(len(acc.axes)) if src.strides[ax] == 1]
        transposed = None
        if tr is not None and inner_src and src.strides[order[-1]] != 1:
            k_a, k_b = len(order) - 1, order.index(inner_src[-1])
            small = any(isinstance(actual[k], int) and actual[k] < tr.lanes for k in (k_a, k_b))
            transposed = None if small else (tr, k_a, k_b)

        def copy_in() -> None:
            if transposed is None:
                copy(f"{buf}[{buf_off}] = ({src_addr})[{src_off}];")
            else:
                self.copy_transposed(transposed, loops, actual, f"({src_addr}) + {src_off}",
                                     f"{buf} + {buf_off}", src.strides[order[-1]],
                                     buf_strides[transposed[2]], back=False)  # fmt: skip

        def copy_out() -> None:
            if transposed is None:
                copy(f"({src_addr})[{src_off}] = {buf}[{buf_off}];")
            else:
                self.copy_transposed(transposed, loops, actual, f"({src_addr}) + {src_off}",
                                     f"{buf} + {buf_off}", src.strides[order[-1]],
                                     buf_strides[transposed[2]], back=True)  # fmt: skip

        copy_in()
        self.views[n] = View(buf, strides, origin)
        self.emit(pos + 1, env, binding)
        self.views[n] = src
        if n == 0:
            copy_out()
        self.depth -= 1
        self.line("}")

    def open_buffer(self, comment: str, floats: int) -> str:
        """Open a block holding the next workspace buffer of ``floats`` floats (64-byte aligned buffers,
        one after the other) and return its name; the caller closes the block."""
        buf = f"buf{self.counters.get('#buf', 0)}"
        self.counters["#buf"] = self.counters.get("#buf", 0) + 1
        self.line(f"{{  /* {comment} */")
        self.depth += 1
        self.line(f"float *restrict {buf} = {self.ws_base} + {self.workspace_floats};")
        self.workspace_floats += -(-floats // 16) * 16
        return buf

    def emit_panel_pack(
        self,
        pos: int,
        n: int,
        order: list[int],
        split: tuple[str, int],
        nominal: Mapping[str, int],
        env: dict[str, tuple[str, int | str]],
        binding: dict[str, int],
    ) -> None:
        """PackT_X[d/p, ..., d]: the footprint as panels of p along d, each panel row-major in the listed
        order with d innermost (BLIS's micro-panels: a k x mr panel of A is contiguous). The copy reads
        the source along its contiguous axis; a partial last panel leaves its tail unwritten (the
        microkernel's remainder never reads it)."""
        a = self.an.scheme[pos]
        acc, src = self.op.tensors[n], self.views[n]
        d, p = split
        if n == 0:
            why = f"the output {a.tensor} cannot be packed in panels (inputs only)"
            raise SchemeError("pack-split", why, a, pos, d)
        if not _plain_axes(acc):
            raise SchemeError("pack-split", f"{a.tensor} has a compound axis: no panels", a, pos, d)
        ax_d = acc.dims().index(d)
        actual = {x: e for x, (_, e) in env.items()}
        sizes = [nominal[acc.dims()[ax]] for ax in order]
        sizes[-1] = p  # the panel's own extent along d
        panels = -(-nominal[d] // p)
        per_panel = math.prod(sizes)
        inner = _strides(tuple(sizes))
        strides, inner_strides = [0] * len(acc.axes), [0] * len(acc.axes)
        for k, ax in enumerate(order):
            strides[ax] = inner_strides[ax] = inner[k]
        strides[ax_d] = per_panel // p  # d moves by whole panels: p elements = one panel
        buf = self.open_buffer(f"{a.text()}: {panels} panels of {' x '.join(map(str, sizes))} floats",
                               panels * per_panel)  # fmt: skip
        bases = {x: b for x, (b, _) in env.items()}
        v_out, v_in = f"pp{n}", f"pq{n}_{d}"
        ext_d = actual[d]
        self.line(f"for (int {v_out} = 0; {v_out} * {p} < {ext_d}; {v_out}++)")
        self.depth += 1
        # source axes outer to inner by source stride, so the innermost copy loop reads contiguously
        loops = {ax: (v_in if ax == ax_d else f"pq{n}_{acc.dims()[ax]}") for ax in range(len(acc.axes))}
        opened = 0
        for ax in sorted(range(len(acc.axes)), key=lambda x: -src.strides[x]):
            bound = f"MIN({p}, {ext_d} - {v_out} * {p})" if ax == ax_d else actual[acc.dims()[ax]]
            self.line(f"for (int {loops[ax]} = 0; {loops[ax]} < {bound}; {loops[ax]}++)")
            self.depth += 1
            opened += 1
        buf_off = " + ".join(
            [f"{v_out} * {per_panel}"] + [f"{loops[ax]} * {inner_strides[ax]}" for ax in order]
        )
        src_index = {ax: loops[ax] for ax in range(len(acc.axes))}
        src_index[ax_d] = f"({v_out} * {p} + {v_in})"
        src_off = " + ".join(f"{src_index[ax]} * {src.strides[ax]}" for ax in range(len(acc.axes)))
        self.line(f"{buf}[{buf_off}] = ({src.address(acc, bases)})[{src_off}];")
        self.depth -= opened + 1
        origin = {x: bases[x] for x in acc.dims()}
        self.views[n] = View(buf, strides, origin, inner_strides, split)
        self.emit(pos + 1, env, binding)
        self.views[n] = src
        self.depth -= 1
        self.line("}")

    def copy_transposed(
        self,
        plan: tuple[Transpose, int, int],
        loops: list[str],
        actual: list[int | str],
        src_ptr: str,
        buf_ptr: str,
        src_row: int,
        buf_row: int,
        back: bool,
    ) -> None:
        """Copy between a tensor whose contiguous axis is ``b`` (buffer position k_b) and a buffer whose
        contiguous axis is ``a`` (position k_a): L x L blocks by the in-register transpose, the rest of
        both extents (a non-multiple of L) by the scalar copy."""
        tr, k_a, k_b = plan
        lanes, va, vb = tr.lanes, loops[k_a], loops[k_b]
        self.helpers[tr.name] = c_function(tr)
        opened = 0
        for k, v in enumerate(loops):
            if k not in (k_a, k_b):
                self.line(f"for (int {v} = 0; {v} < {actual[k]}; {v}++)")
                self.depth += 1
                opened += 1
        self.line("{")
        self.depth += 1
        fa, fb = f"{va}_end", f"{vb}_end"
        self.line(f"const int {fa} = ({actual[k_a]}) / {lanes} * {lanes};")
        self.line(f"const int {fb} = ({actual[k_b]}) / {lanes} * {lanes};")
        self.line(f"for (int {vb} = 0; {vb} < {fb}; {vb} += {lanes})")
        self.line(f"  for (int {va} = 0; {va} < {fa}; {va} += {lanes})")
        if back:  # buffer rows run along b (stride buf_row), contiguous along a
            self.line(f"    {tr.name}({buf_ptr}, {buf_row}, {src_ptr}, {src_row});")
        else:  # tensor rows run along a (stride src_row), contiguous along b
            self.line(f"    {tr.name}({src_ptr}, {src_row}, {buf_ptr}, {buf_row});")
        self.line(f"for (int {vb} = 0; {vb} < {actual[k_b]}; {vb}++)")
        self.line(f"  for (int {va} = {vb} < {fb} ? {fa} : 0; {va} < {actual[k_a]}; {va}++)")
        if back:
            self.line(f"    *({src_ptr}) = *({buf_ptr});")
        else:
            self.line(f"    *({buf_ptr}) = *({src_ptr});")
        self.depth -= 1
        self.line("}")
        self.depth -= opened

    # -- basic block -----------------------------------------------------------------------------
    def unroll_combos(
        self, binding: Mapping[str, int], env: Mapping[str, tuple[str, int | str]]
    ) -> list[dict[str, int]]:
        """Offsets of every unrolled copy, without the copies a static partial extent leaves out."""
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
            if all(not isinstance(env[d][1], int) or v < env[d][1] for d, v in off.items()):
                combos.append(off)
        return combos

    def unroll_footprint(self, d: str, binding: Mapping[str, int]) -> int:
        """Elements of ``d`` one full microkernel covers (1 if d is not unrolled)."""
        pos = [p for p in range(self.an.unroll_start, len(self.an.scheme)) if self.an.scheme[p].dim == d]
        return self.an.footprint(pos[0], binding) if pos else 1

    def with_static_extents(
        self,
        env: dict[str, tuple[str, int | str]],
        binding: dict[str, int],
        dims: list[str],
        then: Callable[[dict[str, tuple[str, int | str]]], None],
    ) -> None:
        """Partial microkernels, selected outside the block so blocks stay branch-free (thesis Fig 5.4):
        on an unrolled dimension one straight-line version per possible extent (a switch); on the
        vector dimension a full version and a masked one."""
        vdim = self.an.vector_dim
        if vdim in dims and isinstance(env[vdim][1], str) and env[vdim][1] not in self.split:
            # the common full tile runs unmasked; only the remainder pays for masked loads and stores
            base, extent = env[vdim]
            self.split.add(extent)  # the else branch below is the remainder: no second test inside it
            full = self.unroll_footprint(vdim, binding)
            rest = [d for d in dims if d != vdim]
            self.line(f"if ({extent} == {full}) {{")
            self.depth += 1
            self.with_static_extents({**env, vdim: (base, full)}, binding, rest, then)
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.with_static_extents(env, binding, rest, then)
            self.depth -= 1
            self.line("}")
            return
        todo = [d for d in dims if isinstance(env[d][1], str) and d != vdim]
        if not todo:
            then(env)
            return
        d = todo[0]
        base, extent = env[d]
        self.line(f"switch ({extent}) {{")
        for k in range(1, self.unroll_footprint(d, binding) + 1):
            self.line(f"case {k}: {{")
            self.depth += 1
            self.with_static_extents({**env, d: (base, k)}, binding, todo[1:], then)
            self.depth -= 1
            self.line("} break;")
        self.line("}")

    def unrolled_dims(self) -> list[str]:
        return list(dict.fromkeys(a.dim for a in self.an.scheme[self.an.unroll_start :] if a.dim))  # type: ignore[misc]

    def open_region(
        self, env: Mapping[str, tuple[str, int | str]], binding: Mapping[str, int]
    ) -> tuple[dict[tuple[int, str | None], tuple[str, int]], dict[int, str]]:
        """Output pointer, masks of a partial vector tile, and one accumulator per output vector."""
        t, out = self.target, self.op.output
        self.line(f"float *restrict po = {self.views[0].address(out, {d: b for d, (b, _) in env.items()})};")
        combos = self.unroll_combos(binding, env)
        masks: dict[int, str] = {}
        vdim = self.an.vector_dim
        if self.vectorized and vdim is not None:
            extent = env[vdim][1]
            for voff in dict.fromkeys(c.get(vdim, 0) for c in combos):
                if isinstance(extent, int) and extent - voff >= t.lanes:
                    continue
                valid = (
                    str(min(t.lanes, extent - voff))
                    if isinstance(extent, int)
                    else f"MIN({t.lanes}, MAX(0, {extent} - {voff}))"
                )
                masks[voff] = f"mk{len(masks)}"
                self.line(f"const {t.mask_type} {masks[voff]} = {t.mask_make.format(n=valid)};")
        self.masks = masks
        self.masks_used = self.masks_used or bool(masks)
        accs: dict[tuple[int, str | None], tuple[str, int]] = {}
        for off in combos:
            key = self.acc_key(off)
            if key in accs:
                continue
            name = f"acc{len(accs)}"
            accs[key] = (name, off.get(vdim, 0) if vdim else 0)  # type: ignore[arg-type]
            load = self.load(out, "po", key[0], accs[key][1])
            self.line(f"{self.ctype} {name} = {load};")
        for tensor, d in self.prefetch:
            if tensor == out.tensor:
                self.prefetch_output_tile(env, d, sorted({off for off, _ in accs}))
            else:
                self.prefetch_input_tile(env, tensor, d)
        return accs, masks

    def prefetch_output_tile(
        self, env: Mapping[str, tuple[str, int | str]], d: str, offsets: list[int]
    ) -> None:
        """Ask for the output tile of the next step along ``d`` while this tile's reduction runs: one
        write-intent prefetch per cache line of the tile (16 floats), shifted by this tile's extent along
        d. A hint only (no fault past the end), so the kernel's results cannot change; it hides the
        memory latency of an output too large for the caches (a GEMM with a small k)."""
        base, extent = env[d]
        shifted = {x: b for x, (b, _) in env.items()} | {d: f"({base}) + ({extent})"}
        self.line(f"const float *pn = {self.views[0].address(self.op.output, shifted)};")
        for off in dict.fromkeys(off // 16 * 16 for off in offsets):
            self.line(f"__builtin_prefetch(pn + {off}, 1, 3);")

    def prefetch_input_tile(self, env: Mapping[str, tuple[str, int | str]], tensor: str, d: str) -> None:
        """The part of input ``tensor`` the next step along ``d`` reads below this point (every index of
        its other dimensions in this region, e.g. the next micro-panel of an unpacked A: mr rows x kc),
        one read prefetch per 16 floats of its contiguous axis, in a loop nest."""
        n = next(k for k, t in enumerate(self.op.tensors) if t.tensor == tensor)
        acc, view = self.op.tensors[n], self.views[n]
        dims = acc.dims()
        bases = {x: b for x, (b, _) in env.items()}
        self.line(f"{{  /* prefetch {tensor}: the tile of the next step along {d} */")
        self.depth += 1
        for k, x in enumerate(dims):
            base, extent = env[x]
            step = 16 if x == dims[-1] else 1
            shift = f" + ({extent})" if x == d else ""
            bases[x] = f"({base}){shift} + pf{k}"
            self.line(f"for (int pf{k} = 0; pf{k} < {extent}; pf{k} += {step})")
        self.line(f"  __builtin_prefetch({view.address(acc, bases)}, 0, 3);")
        self.depth -= 1
        self.line("}")

    def acc_key(self, off: Mapping[str, int]) -> tuple[int, str | None]:
        """An output vector: its offset, and its mask, since a partial vector past the extent may share
        its address with another row's full vector."""
        vdim = self.an.vector_dim
        voff = off.get(vdim, 0) if vdim else 0  # type: ignore[arg-type]
        mask = self.masks.get(voff) if self.uses_vector(self.op.output) else None
        return self.views[0].offset(self.op.output, off), mask

    def load(self, acc: Access, ptr: str, offset: int, voff: int) -> str:
        t = self.target
        if self.uses_vector(acc):
            if voff in self.masks:
                return t.masked_load.format(p=f"{ptr} + {offset}", m=self.masks[voff])
            return f"{t.load}({ptr} + {offset})"
        if self.vectorized:
            return f"{t.set1}({ptr}[{offset}])"
        return f"{ptr}[{offset}]"

    def store_accumulators(self, accs: Mapping[tuple[int, str | None], tuple[str, int]]) -> None:
        t = self.target
        for (off, _), (name, voff) in accs.items():
            if not self.uses_vector(self.op.output):
                self.line(f"po[{off}] = {name};")
            elif voff in self.masks:
                self.line(t.masked_store.format(p=f"po + {off}", m=self.masks[voff], v=name) + ";")
            else:
                self.line(f"{t.store}(po + {off}, {name});")

    def emit_hoisted(self, pos: int, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        out_dims = [d for d in self.unrolled_dims() if d in self.op.output.dims()]

        def region(env: dict[str, tuple[str, int | str]]) -> None:
            self.line("{  /* output accumulators kept in registers across the reduction loops below */")
            self.depth += 1
            accs, masks = self.open_region(env, binding)
            self.acc_scope = accs
            hoist_at, self.hoist_at = self.hoist_at, None
            # Reduction loops below keep their accumulators in registers, and stay rolled when those take
            # more than half the register file (emit). gcc -O3 unrolls a short one (r, s or c of 3)
            # completely and hoists the next steps' loads above the FMAs: such a tile spills (yolo9000_00,
            # w = 14 x k = 2 on AVX-512: 44% of peak unrolled, 78% rolled), while small register tiles gain
            # from the unrolling (w = 6-7: 88% unrolled, 82% rolled): issue 32, measured on an Emerald Rapids.
            self.emit(pos, env, binding)
            self.hoist_at = hoist_at
            self.acc_scope, self.masks = None, masks
            self.store_accumulators(accs)
            self.depth -= 1
            self.line("}")

        self.with_static_extents(env, binding, out_dims, region)

    def emit_block(self, env: dict[str, tuple[str, int | str]], binding: dict[str, int]) -> None:
        if (ext := external_atom(self.an)) is not None:
            self.emit_external(ext[0], ext[1], env)
            return
        self.with_static_extents(
            env, binding, self.unrolled_dims(), lambda e: self.emit_static_block(e, binding)
        )

    def emit_external(self, pos: int, ext: External, env: Mapping[str, tuple[str, int | str]]) -> None:
        """One call of the external microkernel on the tile under the loops: flexible extent on the
        atom's dimension, the static extents of the U atoms (or the loops' steps) on the others."""
        a = self.an.scheme[pos]
        extents = {}
        for d, (_, e) in env.items():
            if d != a.dim and not isinstance(e, int):
                why = (
                    f"{ext.name} is flexible on {a.dim} only; dimension {d} has a variable extent ({e}) here"
                )
                raise SchemeError("external-flexible", why, a, pos)
            extents[d] = str(e)
        bases = {d: b for d, (b, _) in env.items()}
        names, rows = {}, {}
        for n, acc in enumerate(self.op.tensors):
            view = self.views[n]
            if view.strides[-1] != 1 or view.split is not None:
                why = f"{ext.name} needs {acc.tensor} row-major (last axis contiguous), not a PackT layout"
                raise SchemeError("external-layout", why, a, pos)
            names[acc.tensor] = view.address(acc, bases)
            rows["ld" + acc.tensor.lower()] = view.strides[0]
        site = len(self.external_sites)
        self.external_sites.append(ext.site.format(site=site, alpha=a.size))
        fields = {**extents, **names, **rows, "flex": extents[a.dim], "alpha": a.size, "site": site}  # type: ignore[index]
        for text in ext.call.format(**fields).splitlines():
            self.line(text)

    def emit_static_block(self, env: Mapping[str, tuple[str, int | str]], binding: Mapping[str, int]) -> None:
        t = self.target
        self.line("{")
        self.depth += 1
        bases = {d: b for d, (b, _) in env.items()}
        accs = self.acc_scope
        if accs is None:
            accs, _ = self.open_region(env, binding)
        ptrs = []
        for n, acc in enumerate(self.op.inputs):
            ptr = f"p{n}"
            self.line(f"const float *restrict {ptr} = {self.views[n + 1].address(acc, bases)};")
            ptrs.append(ptr)
        vdim = self.an.vector_dim
        # operands are loaded where first used, so live ranges stay short (the register file is small)
        operands: dict[tuple[int, int, str | None], str] = {}
        for off in self.unroll_combos(binding, env):
            names = []
            for n, acc in enumerate(self.op.inputs):
                voff = off.get(vdim, 0) if vdim else 0  # type: ignore[arg-type]
                # a partial vector past the extent may alias another operand's address: the mask is
                # part of what was loaded
                mask = self.masks.get(voff) if self.uses_vector(acc) else None
                key = (n, self.views[n + 1].offset(acc, off), mask)
                if key not in operands:
                    name = f"{'ab'[n]}{len([k for k in operands if k[0] == n])}"
                    expr = self.load(acc, ptrs[n], key[1], voff)
                    self.line(f"const {self.ctype} {name} = {expr};")
                    operands[key] = name
                names.append(operands[key])
            acc_name = accs[self.acc_key(off)][0]
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


def prefetches(spec: str | None, op: Operator) -> list[tuple[str, str]]:
    """The (tensor, dimension) pairs of the option ``prefetch``: comma-separated items ``d`` (the output's
    tile along d) or ``X:d`` (tensor X's tile along d, e.g. ``C:i,A:i``). An input must be indexed by plain
    dimensions (not ``h*stride + r``) and d must be one of its dimensions."""
    out = []
    tensors = {t.tensor: t for t in op.tensors}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        tensor, _, d = item.strip().rpartition(":")
        acc = tensors.get(tensor or op.output.tensor)
        if acc is None:
            raise SchemeError("prefetch", f"prefetch={spec!r}: no tensor {tensor!r} in {op.text()}")
        if d not in acc.dims():
            why = f"prefetch={spec!r}: {d!r} is not a dimension of {acc.tensor} {acc.dims()}"
            raise SchemeError("prefetch", why)
        if acc is not op.output and any(len(axis) != 1 or axis[0][1] != 1 for axis in acc.axes):
            raise SchemeError("prefetch", f"prefetch={spec!r}: {acc.text()} has a compound index")
        out.append((acc.tensor, d))
    return out


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
    an: Analysis,
    workload: Workload,
    target: Target,
    *,
    hoist: bool = True,
    fma: bool = True,
    prefetch: str | None = None,
) -> tuple[str, int]:
    """C source of the kernel and the workspace bytes its packing buffers need. ``prefetch``: the option's
    items (:func:`prefetches`); where the output tile is loaded into registers, the tiles of the next step
    along their dimensions are prefetched (needs the accumulators hoisted)."""
    op = workload.op
    hoist_at = hoist_position(an, op) if (hoist or an.scalp_position is not None) else None
    ext = external_atom(an)
    if ext is not None:
        hoist_at = None  # the external microkernel loads and stores its own tile
    pairs = tuple(prefetches(prefetch, op))  # the rule's checks, before any code
    if pairs and hoist_at is None:
        raise SchemeError(
            "prefetch", "prefetch needs the output tile in registers (hoist=true, no external call)"
        )
    gen = _Gen(an, op, workload, target, an.vector_dim is not None, hoist_at, fma, prefetch=pairs)
    gen.depth = 1
    env: dict[str, tuple[str, int | str]] = {d: ("0", workload.size[d]) for d in op.dims}
    gen.emit(0, env, {})
    head = [
        f"/* operator : {op.text()} */",
        f"/* workload : {workload.name} {workload.size} */",
        f"/* scheme   : {format_scheme(an.scheme, ascii_only=True)} */",
        f"/* target   : {target.name} ({target.lanes} lanes), fma={fma}, hoist={hoist}"
        + (f", prefetch={prefetch}" if prefetch else "")
        + " */",
        "#include <immintrin.h>",
        *(["#include <omp.h>"] if gen.parallel else []),
        "#define MIN(a, b) ((a) < (b) ? (a) : (b))",
        "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
        *([target.prelude] if gen.masks_used and target.prelude else []),
        *gen.helpers.values(),
        *([ext[1].decls, *gen.external_sites] if ext is not None else []),
        "",
        "int kernel(float *const *tensors, void *workspace) {",
        "  (void)workspace;",
    ]
    if ext is not None:
        head += [
            "  static int ready = 0;",
            f"  if (!ready) {{ {ext[1].init} ready = 1; }}",
            "  int ttile_rc = 0;  /* set by a failing external call */",
        ]
    for n, t in enumerate(op.tensors):
        qual = "" if n == 0 else "const "
        head.append(f"  {qual}float *restrict {t.tensor} = tensors[{n}];")
    ret = "  return ttile_rc;" if ext is not None else "  return 0;"
    return "\n".join([*head, *gen.lines, ret, "}", ""]), 4 * gen.workspace_floats


def render_scheme(candidate: Candidate, workload: Workload) -> KernelSource:
    target = get_target(str(candidate.option("target", "avx2")))
    partial = str(candidate.option("partial", "none"))
    fma = bool(candidate.option("fma", True))
    hoist = bool(candidate.option("hoist", True))
    prefetch = candidate.option("prefetch", None)
    padded = workload
    if partial == "padded":
        try:
            padded = padded_workload(candidate.text, workload, target)
        except KeyError:
            # footprints of an ill-formed scheme (a Uλ without its λ_seq): report the rule it breaks
            analyze_for(candidate.text, workload, target, "masked")
            raise
    an = analyze_for(candidate.text, padded, target, partial)
    try:
        code, workspace = generate(
            an, padded, target, hoist=hoist, fma=fma, prefetch=None if prefetch is None else str(prefetch)
        )
    except SchemeError as exc:  # a rule only code generation can check (external-flexible, ...)
        raise as_written(exc, an.scheme) from None
    parallel = any(a.kind in PAR_KINDS for a in an.scheme)
    if padded is not workload:
        code, workspace = wrap_padded(code, workspace, workload, padded)
    # without FMA emission gcc would fuse the mul + add again (-ffp-contract=fast is its C default)
    flags = (() if fma else ("-ffp-contract=off",)) + (("-fopenmp",) if parallel else ())
    ext = external_atom(an)
    libs = link_args(ext[1]) if ext is not None else ()  # BaselineUnavailable when not installed
    return KernelSource(code=code, target=target.name, cflags=flags, libs=libs, workspace_bytes=workspace)


# -- padding (thesis §5.3.3): the microkernel always runs full, on zero-extended copies ------------------
def padded_workload(scheme_text: str, workload: Workload, target: Target) -> Workload:
    """The workload with every dimension rounded up to what the scheme's tiles cover."""
    scheme = parse_scheme(scheme_text)
    vdim = next((a.dim for a in scheme if a.kind == "V"), None)
    shape = Analysis(scheme, workload.size, target.lanes, vdim, len(scheme), None)
    sizes = {}
    for d, n in workload.size.items():
        chain = shape.chain(d)
        if not chain:
            sizes[d] = n
        elif scheme[chain[0]].kind == "R":
            tile = shape.step(chain[0], {})
            sizes[d] = -(-n // tile) * tile
        else:
            sizes[d] = max(n, shape.footprint(chain[0], {}))
    return Workload(workload.name, workload.op, tuple((d, sizes[d]) for d in workload.op.dims))


def wrap_padded(code: str, workspace: int, workload: Workload, padded: Workload) -> tuple[str, int]:
    """Turn the padded kernel into a helper and call it on zero-padded copies of the tensors it needs."""
    inner = code.replace(
        "int kernel(float *const *tensors", "static int padded_kernel(float *const *tensors", 1
    )
    lines = [
        "",
        "/* padding: zero-extended copies of the tensors the tiles overrun; the output is copied back */",
        "int kernel(float *const *tensors, void *workspace) {",
        "  float *ws = (float *)workspace;",
    ]
    offset = 0
    copies = []
    for n, (t, shape, pshape) in enumerate(
        zip(workload.op.tensors, workload.shapes(), padded.shapes(), strict=True)
    ):
        if shape == pshape:
            lines.append(f"  float *t{n} = tensors[{n}];")
            continue
        size = math.prod(pshape)
        lines.append(f"  float *t{n} = ws + {offset};  /* {t.tensor}: {list(shape)} -> {list(pshape)} */")
        lines.append(f"  memset(t{n}, 0, {4 * size});")
        copies.append((n, shape, pshape))
        offset += -(-size // 16) * 16

    def copy(n: int, shape: tuple[int, ...], pshape: tuple[int, ...], out: bool) -> list[str]:
        src_strides, dst_strides = _strides(shape), _strides(pshape)
        idx = [f"x{k}" for k in range(len(shape) - 1)]
        orig = " + ".join([f"{v} * {s}" for v, s in zip(idx, src_strides, strict=False)] or ["0"])
        pad = " + ".join([f"{v} * {s}" for v, s in zip(idx, dst_strides, strict=False)] or ["0"])
        a, b = (
            (f"tensors[{n}] + {orig}", f"t{n} + {pad}")
            if out
            else (f"t{n} + {pad}", f"tensors[{n}] + {orig}")
        )
        body = [
            f"{'  ' * (k + 1)}for (int {v} = 0; {v} < {e}; {v}++)"
            for k, (v, e) in enumerate(zip(idx, shape, strict=False))
        ]
        return [*body, f"{'  ' * len(shape)}memcpy({a}, {b}, {4 * shape[-1]});"]

    for n, shape, pshape in copies:
        lines += copy(n, shape, pshape, out=False)
    names = ", ".join(f"t{n}" for n in range(len(workload.op.tensors)))
    lines.append(f"  float *const padded[{len(workload.op.tensors)}] = {{{names}}};")
    lines.append(f"  const int rc = padded_kernel(padded, ws + {offset});")
    for n, shape, pshape in copies:
        if n == 0:
            lines += copy(n, shape, pshape, out=True)
    lines += ["  return rc;", "}", ""]
    return "#include <string.h>\n" + inner + "\n".join(lines), 4 * offset + workspace
