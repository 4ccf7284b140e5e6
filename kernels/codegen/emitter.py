"""The state every part of the generator shares: the analysed scheme, the operator and target, the lines
emitted so far, the views of the tensors, the accumulators in scope, the workspace used. The generator is
this state plus three concerns, one module each: the loop nest (:mod:`.loops`), packing
(:mod:`.packing`) and the unrolled microkernel (:mod:`.microkernel`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kernels.candidate import Workload
from kernels.codegen.layout import View, row_major_strides
from kernels.operators import Access, Operator
from kernels.scheme import Analysis, LoopStep, walk_dim
from kernels.targets import Target


@dataclass
class Emitter:
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
    # the option prefetch: (tensor, dimension, locality, stream) of each item (legality.prefetches)
    prefetch: tuple[tuple[str, str, int, bool], ...] = ()
    constant: frozenset[str] = frozenset()  # inputs of the option constant: their outermost pack is kept
    embedded: bool = False  # option broadcast=embedded: FMAs read their broadcast operand from memory

    def __post_init__(self) -> None:
        # how each tensor (ABI order) is addressed here: itself, or the buffer of an enclosing Pack
        self.views = [
            View(t.tensor, row_major_strides(t.shape(self.workload.size)), {}) for t in self.op.tensors
        ]
        self.nominal: dict[str, int] = {}  # variable extent -> its largest value
        self.workspace_floats = 0
        self.walks: dict[tuple, dict[int, LoopStep]] = {}
        self.kept_packs: set[str] = set()  # tensors of the option constant whose pack was kept

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

    @staticmethod
    def _plus(base: str, value: int | str) -> str:
        if base == "0":
            return str(value)
        if value == 0:
            return base
        return f"{base} + {value}"
