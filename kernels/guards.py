"""Size guards (issue 37): a scheme whose code would be absurd is refused before anything is generated or
compiled, in well under a second, with one line naming the atom and the limit.

A legal scheme can still ask for code no compiler finishes: ``U_{100000,i}`` unrolls a microkernel body of
100 000 vector statements (and, with a masked remainder, a switch over every smaller one), ``U_{512,i},
U_{64,j}`` holds 32 768 accumulators in a register file of 16. Legality (kernels.scheme) says what the code
computes; these limits say what is worth generating. Each limit is a ``limits.*`` key of the run config,
and null lifts it for a researcher who wants to measure the scheme anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kernels.candidate import Candidate, Workload
from kernels.scheme import Analysis
from kernels.targets import Target

FLOAT_BYTES = 4


class SizeRefused(ValueError):
    """A scheme over a size limit (one line: the atoms, the number, the limit and how to lift it)."""


@dataclass(frozen=True)
class SizeLimits:
    unrolled: int | None = 4096  # vector statements of the unrolled microkernel body (product of its U's)
    accumulators: float | None = 4.0  # output vectors kept in registers, in register files (vector schemes)
    memory_bytes: int | None = None  # the tensors the kernel reads and writes (None: no limit)


def _unroll(a: object, an: Analysis) -> int:
    """How many copies an unroll atom makes: U_{n,d} n; Uλ_d the largest unroll of its λ_seq."""
    if a.kind == "U":  # type: ignore[attr-defined]
        return int(a.size or 1)  # type: ignore[attr-defined]
    seqs = [x.seq for x in an.scheme if x.kind == "lambda_seq" and x.dim == a.dim]  # type: ignore[attr-defined]
    return max((u for s in seqs for _, u in s), default=1)


def check_size(an: Analysis, workload: Workload, target: Target, limits: SizeLimits) -> None:
    """Raise :class:`SizeRefused` when the scheme ``an`` on ``workload`` is over one of ``limits``."""
    unrolls = [a for a in an.scheme if a.kind in ("U", "Ul")]
    factors = {a: _unroll(a, an) for a in unrolls}
    body = prod(factors.values())
    names = ", ".join(a.text() for a in unrolls if factors[a] > 1)
    if limits.unrolled is not None and body > limits.unrolled:
        raise SizeRefused(
            f"refused: {names} unroll the microkernel body to {body} vector statements (limit "
            f"limits.unrolled={limits.unrolled}; limits.unrolled=null generates it anyway)"
        )
    outputs = set(workload.op.output.dims())
    acc = prod(f for a, f in factors.items() if a.dim in outputs)
    vector = any(a.kind == "V" for a in an.scheme)  # a scalar micro-tile (seed 002's ablation) spills scalars
    if vector and limits.accumulators is not None and acc > limits.accumulators * target.registers:
        held = ", ".join(a.text() for a in unrolls if a.dim in outputs and factors[a] > 1)
        raise SizeRefused(
            f"refused: {held} hold {acc} output vectors in registers, {acc / target.registers:.1f}x the "
            f"{target.registers} of {target.name} (limit limits.accumulators={limits.accumulators:g} "
            "register files; limits.accumulators=null generates it anyway)"
        )


def check_memory(workload: Workload, limits: SizeLimits) -> None:
    """Raise :class:`SizeRefused` when the workload's tensors alone are over ``limits.memory_bytes``."""
    if limits.memory_bytes is None:
        return
    need = sum(prod(shape) for shape in workload.op.shapes(dict(workload.size))) * FLOAT_BYTES
    if need > limits.memory_bytes:
        raise SizeRefused(
            f"refused: the tensors of {workload.name} {dict(workload.size)} take {need / 2**30:.1f} GiB, "
            f"over the {limits.memory_bytes / 2**30:.1f} GiB of limits.memory_gib (null: 80% of this "
            "machine's RAM)"
        )


def check_candidate(cand: Candidate, workload: Workload, limits: SizeLimits) -> None:
    """The size limits of a scheme candidate (other kinds and illegal schemes pass: legality has its own
    error, reported where it is today)."""
    if cand.kind != "scheme":
        return
    from kernels.codegen import analyze_for
    from kernels.scheme import SchemeError
    from kernels.targets import get_target

    options = dict(cand.options)
    target = get_target(str(options.get("target", "avx2")))
    try:
        an = analyze_for(cand.text, workload, target, str(options.get("partial", "none")))
    except SchemeError:
        return
    check_size(an, workload, target, limits)
