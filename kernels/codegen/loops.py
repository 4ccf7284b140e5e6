"""The loop nest (thesis §3.4): loop atoms become ``for`` loops (MIN-bounded where an inner extent is
variable), λ_seq a sequence of loop nests, and the outermost parallel atoms (§3.7, Tpar / Tfused) one
OpenMP loop nest with a workspace slice per thread."""

from __future__ import annotations

import math

from kernels.codegen.emitter import Emitter
from kernels.scheme import PACK_KINDS, PAR_KINDS, SchemeError

MAX_THREAD_SLICES = 64  # per-thread pack workspaces of a parallel kernel: at most this many threads


class LoopNest(Emitter):
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
