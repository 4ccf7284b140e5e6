"""The thesis's parallelisation rules (§5.6, §6.2.1) on top of the Tpar/Tfused atoms.

Legality (kernels/scheme.py) only asks that parallel loops be outermost and on output dimensions. Which
parallel schemes are worth running is a search-space question; the thesis's answers are here:

- §5.6: each parallel chunk (one iteration of the parallel loops) should have a footprint >= L2, since
  L1 and L2 are private to a core; candidates with fewer parallel iterations than threads are pruned.
- §6.2.1: pick a parallel dimension whose iteration count is a multiple of the thread count and put a
  tile of n_threads iterations at the outermost level (:func:`with_parallel_prefix`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels.candidate import Workload
from kernels.codegen import analyze_for
from kernels.scheme import PAR_KINDS, Atom, SchemeError, format_scheme, walk_dim
from kernels.targets import Target

FLOAT_BYTES = 4


@dataclass(frozen=True)
class ParallelChunk:
    iterations: int  # parallel iterations (product of the parallel loops' trip counts)
    extents: dict[str, int]  # per dimension, its extent inside one iteration
    footprint_bytes: int  # distinct bytes of all tensors one iteration touches

    def problems(self, l2_bytes: int, threads: int) -> list[str]:
        """The §5.6 / §6.2.1 conditions this chunking breaks ([] when it follows them)."""
        out = []
        if self.footprint_bytes < l2_bytes:
            out.append(f"chunk footprint {self.footprint_bytes} B < L2 ({l2_bytes} B)")
        if self.iterations < threads:
            out.append(f"{self.iterations} parallel iterations < {threads} threads")
        elif self.iterations % threads:
            out.append(f"{self.iterations} parallel iterations are not a multiple of {threads} threads")
        return out


def parallel_chunk(
    scheme_text: str, workload: Workload, target: Target, partial: str = "none"
) -> ParallelChunk:
    """Iterations and footprint of one chunk of the scheme's parallel prefix (the whole kernel if none)."""
    an = analyze_for(scheme_text, workload, target, partial)
    op = workload.op
    extents = dict(workload.size)
    iterations = 1
    for p, a in enumerate(an.scheme):
        if a.kind not in PAR_KINDS:
            break
        step = walk_dim(an, a.dim, {})[p].step  # type: ignore[arg-type]
        iterations *= extents[a.dim] // step  # type: ignore[index]
        extents[a.dim] = step  # type: ignore[index]
    footprint = 0
    for t in op.tensors:
        footprint += math.prod(sum(c * (extents[d] - 1) for d, c in axis) + 1 for axis in t.axes)
    return ParallelChunk(iterations, extents, FLOAT_BYTES * footprint)


def with_parallel_prefix(scheme_text: str, workload: Workload, target: Target, dim: str, threads: int) -> str:
    """§6.2.1: the scheme with ``Tpar_{threads,dim}`` outermost and its ``R_dim`` turned into the tile
    ``T_{m,dim}`` that leaves (m x the step of R_dim x threads = the size of dim). Raises SchemeError
    (rule ``par-threads``) when dim has no R or its iteration count is not a multiple of ``threads``."""
    an = analyze_for(scheme_text, workload, target)
    chain = an.chain(dim)
    if not chain or an.scheme[chain[0]].kind != "R":
        raise SchemeError("par-threads", f"{dim} has no R_{dim} to split across threads", dim=dim)
    p = chain[0]
    iters = workload.size[dim] // walk_dim(an, dim, {})[p].step
    if iters % threads:
        why = f"{dim} has {iters} iterations of R_{dim}, not a multiple of {threads} threads"
        raise SchemeError("par-threads", why, an.scheme[p], p)
    atoms = list(an.scheme)
    atoms[p] = Atom("T", dim, iters // threads)
    return format_scheme((Atom("Tpar", dim, threads), *atoms))
