"""The unrolled suffix of a scheme (U, Uλ, V) as one straight-line block: accumulators (hoisted above the
innermost reduction loops, §4.3, or loaded and stored in every block), operands loaded where first used,
FMAs (or mul then add, for the ablation; or with the broadcast operand read from memory, the option
broadcast=embedded); partial microkernels chosen outside the block (a switch per
extent, a masked vector remainder: thesis Fig 5.4); the prefetch of the next tiles; an external
microkernel's call in its place."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from kernels.codegen.emitter import Emitter
from kernels.codegen.legality import external_atom
from kernels.external import External
from kernels.operators import Access
from kernels.scheme import UNROLL_KINDS, SchemeError


class Microkernel(Emitter):
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
        for tensor, d, locality, stream in self.prefetch:
            if tensor == out.tensor:
                self.prefetch_output_tile(env, d, sorted({off for off, _ in accs}), locality)
            elif not stream:  # @stream: in the block, a line at a time (prefetch_input_stream)
                self.prefetch_input_tile(env, tensor, d, locality)
        return accs, masks

    def prefetch_output_tile(
        self, env: Mapping[str, tuple[str, int | str]], d: str, offsets: list[int], locality: int = 3
    ) -> None:
        """Ask for the output tile of the next step along ``d`` while this tile's reduction runs: one
        write-intent prefetch per cache line of the tile (16 floats), shifted by this tile's extent along
        d. A hint only (no fault past the end), so the kernel's results cannot change; it hides the
        memory latency of an output too large for the caches (a GEMM with a small k)."""
        base, extent = env[d]
        shifted = {x: b for x, (b, _) in env.items()} | {d: f"({base}) + ({extent})"}
        self.line(f"const float *pn = {self.views[0].address(self.op.output, shifted)};")
        for off in dict.fromkeys(off // 16 * 16 for off in offsets):
            self.line(f"__builtin_prefetch(pn + {off}, 1, {locality});")

    def prefetch_input_tile(
        self,
        env: Mapping[str, tuple[str, int | str]],
        tensor: str,
        d: str,
        locality: int = 3,
        fixed: str | None = None,
    ) -> None:
        """The part of input ``tensor`` the next step along ``d`` reads below this point (every index of
        its other dimensions in this region, e.g. the next micro-panel of an unpacked A: mr rows x kc),
        one read prefetch per 16 floats of its contiguous axis, in a loop nest with one loop per axis.
        An axis that sums dimensions (a convolution's ``h*stride + r``) is walked over the positions the
        region reads, once each: its terms other than the coefficient-1 one stay at their tile's start
        and that one runs over the span ``1 + sum((extent - 1) * coefficient)``, so a 3 x 3 window over
        9 pixels prefetches the 11 input columns, not 27 (legality.prefetches asks for such a term).
        ``fixed``: a condition on the contiguous axis's index; the lines it starts are prefetched only
        when it holds (the ``@stream`` form, :meth:`prefetch_input_stream`)."""
        n = next(k for k, t in enumerate(self.op.tensors) if t.tensor == tensor)
        acc, view = self.op.tensors[n], self.views[n]
        bases = {x: f"({b})" + (f" + ({e})" if x == d else "") for x, (b, e) in env.items()}
        self.line(f"{{  /* prefetch {tensor}: the tile of the next step along {d} */")
        self.depth += 1
        if fixed is not None:
            self.line(f"if ({fixed})")
        last = len(acc.axes) - 1
        for k, axis in enumerate(acc.axes):
            walker = next(x for x, c in axis if c == 1)
            if len(axis) == 1:
                span = str(env[walker][1])
            else:
                span = " + ".join(["1", *(f"(({env[x][1]}) - 1) * {c}" for x, c in axis)])
            step = 16 if k == last else 1
            bases[walker] = f"{bases[walker]} + pf{k}"
            self.line(f"for (int pf{k} = 0; pf{k} < {span}; pf{k} += {step})")
        self.line(f"  __builtin_prefetch({view.address(acc, bases)}, 0, {locality});")
        self.depth -= 1
        self.line("}")

    def prefetch_input_stream(self, env: Mapping[str, tuple[str, int | str]], tensor: str, d: str) -> None:
        """``@stream``: in the microkernel's block, the next tile's lines of ``tensor`` at this block's
        indices of its contiguous dimension v (a convolution's c), when v's index enters a new line of 16
        floats: over a reduction loop on v the next tile arrives one line per 16 steps, spread among the
        FMAs, where the whole tile at the hoisting point issued hundreds of prefetches at once
        (x0.96 on the Intel Xeon's winners, issue 32). A block stepping v by e triggers when v mod 16 < e."""
        v = next(t for t in self.op.tensors if t.tensor == tensor).stride1_dim()
        assert v is not None  # legality.prefetches refuses @stream otherwise
        base, extent = env[v]
        hit = f"(({base}) & 15) < {min(extent, 16)}" if isinstance(extent, int) else f"(({base}) & 15) == 0"
        self.prefetch_input_tile(env, tensor, d, 3, fixed=hit)

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
        for tensor, d, _, stream in self.prefetch:
            if stream:
                self.prefetch_input_stream(env, tensor, d)
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
                if self.embedded and self.vectorized and not self.uses_vector(acc):
                    names.append(f"&{ptrs[n]}[{key[1]}]")  # read by the FMA itself (option broadcast)
                    continue
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
            elif self.embedded and (a.startswith("&") or b.startswith("&")):
                vec, elem = (b, a) if a.startswith("&") else (a, b)
                self.helpers.setdefault(t.fmadd_bcst, t.fmadd_bcst_def)
                self.line(f"{acc_name} = {t.fmadd_bcst}({vec}, {elem}, {acc_name});")
            elif self.fma:
                self.line(f"{acc_name} = {t.fmadd}({a}, {b}, {acc_name});")
            else:
                self.line(f"{acc_name} = {t.add}({acc_name}, {t.mul}({a}, {b}));")
        if self.acc_scope is None:
            self.store_accumulators(accs)
        self.depth -= 1
        self.line("}")
