"""Packing (thesis §3.6): Pack and PackT copy a tensor's footprint into a workspace buffer (in panels for
PackT_X[d/p, ...], BLIS's micro-panels; square blocks through an in-register transpose when the copy
moves the contiguous axis), the code below addresses the buffer, and an output is copied back."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping

from kernels.codegen.emitter import Emitter
from kernels.codegen.layout import View, plain_axes, row_major_strides
from kernels.scheme import SchemeError, pack_layout
from kernels.transpose import TRANSPOSES, Transpose, c_function, panel_function, panel_groups, panel_name


class Packing(Emitter):
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
        buf_strides = row_major_strides(tuple(sizes))  # type: ignore[arg-type]
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

        with self.kept(pos):
            copy_in()
        self.views[n] = View(buf, strides, origin)
        self.emit(pos + 1, env, binding)
        self.views[n] = src
        if n == 0:
            copy_out()
        self.depth -= 1
        self.line("}")

    @contextlib.contextmanager
    def kept(self, pos: int) -> Iterator[None]:
        """The copy of a pack emitted inside: run on every call, or, for a tensor of the option
        ``constant``, only on a call with a new buffer of it (or a new workspace) as the baselines convert
        constant weights once per weights buffer; such a pack must be outermost (its buffer then holds the
        whole tensor, and nothing above it changes between calls). The output is refused before any code
        (:func:`kernels.codegen.legality.constants`)."""
        a = self.an.scheme[pos]
        if a.tensor not in self.constant:
            yield
            return
        if any(b.kind not in ("Pack", "PackT") for b in self.an.scheme[:pos]):
            why = f"constant={a.tensor}: its pack must be outermost (above every loop) to be kept"
            raise SchemeError("constant", why, a, pos)
        self.kept_packs.add(a.tensor)
        self.line("if (ttile_fresh) {  /* a new buffer of a constant input (or a new workspace): copy it */")
        self.depth += 1
        yield
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
        if not plain_axes(acc):
            raise SchemeError("pack-split", f"{a.tensor} has a compound axis: no panels", a, pos, d)
        ax_d = acc.dims().index(d)
        actual = {x: e for x, (_, e) in env.items()}
        sizes = [nominal[acc.dims()[ax]] for ax in order]
        sizes[-1] = p  # the panel's own extent along d
        panels = -(-nominal[d] // p)
        per_panel = math.prod(sizes)
        inner = row_major_strides(tuple(sizes))
        strides, inner_strides = [0] * len(acc.axes), [0] * len(acc.axes)
        for k, ax in enumerate(order):
            strides[ax] = inner_strides[ax] = inner[k]
        strides[ax_d] = per_panel // p  # d moves by whole panels: p elements = one panel
        # a source contiguous along the panel's next axis (A's k for PackT_A[i/6,k,i]) is read L values of
        # each of the p rows at a time and transposed in registers, at most L rows per call (the scalar
        # copy of p short rows was 3.5% of a 1000^3 call on a Zen 2, cpu-clock samples); a call of fewer
        # than L rows spills past them, so the buffer keeps L floats more
        tr = TRANSPOSES.get(self.target.name)
        ax_c = order[-2] if len(order) > 1 else None
        c_ext = None if ax_c is None else actual[acc.dims()[ax_c]]
        chunked = (
            tr is not None
            and ax_c is not None
            and p > 1
            and src.strides[ax_c] == 1
            and not (isinstance(c_ext, int) and c_ext < tr.lanes)
        )
        slack = tr.lanes if chunked else 0  # type: ignore[union-attr]
        buf = self.open_buffer(f"{a.text()}: {panels} panels of {' x '.join(map(str, sizes))} floats",
                               panels * per_panel + slack)  # fmt: skip
        bases = {x: b for x, (b, _) in env.items()}
        v_out, v_in = f"pp{n}", f"pq{n}_{d}"
        ext_d = actual[d]
        loops = {ax: (v_in if ax == ax_d else f"pq{n}_{acc.dims()[ax]}") for ax in range(len(acc.axes))}
        buf_off = " + ".join(
            [f"{v_out} * {per_panel}"] + [f"{loops[ax]} * {inner_strides[ax]}" for ax in order]
        )
        src_index = {ax: loops[ax] for ax in range(len(acc.axes))}
        src_index[ax_d] = f"({v_out} * {p} + {v_in})"
        src_off = " + ".join(f"{src_index[ax]} * {src.strides[ax]}" for ax in range(len(acc.axes)))
        assign = f"{buf}[{buf_off}] = ({src.address(acc, bases)})[{src_off}];"

        def copy(axes: list[int], d_bound: str) -> None:
            for ax in axes:
                bound = d_bound if ax == ax_d else actual[acc.dims()[ax]]
                self.line(f"for (int {loops[ax]} = 0; {loops[ax]} < {bound}; {loops[ax]}++)")
                self.depth += 1
            self.line(assign)
            self.depth -= len(axes)

        def copy_whole() -> None:
            if not chunked:
                copy(order, str(p))
                return
            assert tr is not None and ax_c is not None
            lanes, vc = tr.lanes, loops[ax_c]
            for ax in order[:-2]:
                self.line(f"for (int {loops[ax]} = 0; {loops[ax]} < {actual[acc.dims()[ax]]}; {loops[ax]}++)")
                self.depth += 1
            self.line("{")
            self.depth += 1
            self.line(f"int {vc} = 0;")
            self.line(f"for (; {vc} + {lanes} <= {c_ext}; {vc} += {lanes}) {{")
            self.line(f"  const int {v_in} = 0;")
            row, first = src.strides[ax_d], f"&({src.address(acc, bases)})[{src_off}]"
            for g, rows in panel_groups(lanes, p):
                name = panel_name(tr, rows)
                self.helpers[name] = panel_function(tr, rows)
                self.line(f"  {name}({first} + {g * row}, {row}, &{buf}[{buf_off}] + {g}, {p});")
            self.line("}")
            self.line(f"for (; {vc} < {c_ext}; {vc}++)")
            self.line(f"  for (int {v_in} = 0; {v_in} < {p}; {v_in}++)")
            self.line(f"    {assign}")
            self.depth -= 1
            self.line("}")
            self.depth -= len(order) - 2

        with self.kept(pos):
            self.line(f"for (int {v_out} = 0; {v_out} * {p} < {ext_d}; {v_out}++)")
            self.depth += 1
            # A whole panel is written in the buffer's own order, d innermost with the constant bound p:
            # contiguous stores the compiler vectorizes (B's panels), or chunks of the panel transpose above
            # (A's panels; p short rows read side by side where k is below L). On 1000^3 (B3A2C0, 12 x 2
            # vectors, AVX-512, Emerald Rapids) the
            # packs took about 10% of the call in the source order below; this order made the call 2.7%
            # faster (8 interleaved runs). A partial last panel keeps the general loops (source order:
            # contiguous reads, the bound from MIN).
            if isinstance(ext_d, int) and ext_d % p == 0:  # every panel whole
                copy_whole()
            else:
                by_src = sorted(range(len(acc.axes)), key=lambda x: -src.strides[x])
                self.line(f"if ({ext_d} - {v_out} * {p} >= {p}) {{")
                self.depth += 1
                copy_whole()
                self.depth -= 1
                self.line("} else {")
                self.depth += 1
                copy(by_src, f"MIN({p}, {ext_d} - {v_out} * {p})")
                self.depth -= 1
                self.line("}")
            self.depth -= 1
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
