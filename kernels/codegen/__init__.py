"""C code generation for TTiLE schemes (seed 000, §3.4 and §4.3).

The loop tree is emitted outermost first: loop atoms become ``for`` loops (MIN-bounded where the scheme
analysis says an inner extent is variable), λ_seq becomes a sequence of loop nests, one per (repetitions,
factor) pair, and the unrolled suffix (U, Uλ, V) becomes one straight-line basic block. Two switches
exist for the §4.3 ablation: ``fma`` (emit fused multiply-add intrinsics, or mul then add) and ``hoist``
(keep output accumulators in registers across the innermost reduction loops, or load/store them in
every block).

The package, one module per concern: :mod:`.legality` (what is checked before any code),
:mod:`.layout` (addressing), :mod:`.emitter` (the shared state), :mod:`.loops`, :mod:`.packing`,
:mod:`.microkernel`, :mod:`.padding`, and :mod:`.generate` (the kernel and a candidate's source).
"""

from kernels.codegen.generate import Generator, generate, render_scheme
from kernels.codegen.legality import (
    LOOP_ATOMS,
    PARTIAL_MODES,
    analyze_for,
    constants,
    external_atom,
    hoist_position,
    prefetches,
)
from kernels.codegen.padding import padded_workload, wrap_padded

__all__ = [
    "LOOP_ATOMS",
    "PARTIAL_MODES",
    "Generator",
    "analyze_for",
    "constants",
    "external_atom",
    "generate",
    "hoist_position",
    "padded_workload",
    "prefetches",
    "render_scheme",
    "wrap_padded",
]
