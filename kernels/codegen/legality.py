"""What code generation checks before it emits anything: the scheme's legality on a workload for a target
(thesis §3's rules plus those of the external microkernels and of vectorized reductions), where output
accumulators are hoisted, and the options ``prefetch``, ``constant`` and ``broadcast``."""

from __future__ import annotations

from kernels.candidate import Workload
from kernels.codegen.layout import plain_axes
from kernels.external import EXTERNALS, External
from kernels.operators import Operator
from kernels.scheme import EXTERNAL, Analysis, SchemeError, analyze, as_written
from kernels.targets import Target

LOOP_ATOMS = ("R", "T", "Texct", "Tvar", "Texctg")


PARTIAL_MODES = ("none", "masked", "padded")


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
        tensors={t.tensor: t.dims() if plain_axes(t) else None for t in op.tensors},
    )
    try:
        check_external_entry(an, op)
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


def check_external_entry(an: Analysis, op: Operator) -> None:
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


def constants(spec: str | None, op: Operator) -> frozenset[str]:
    """The input tensors of the option ``constant`` (comma-separated names, e.g. ``K``): their outermost
    pack is kept across calls (copied again only for a new buffer), as the baselines keep constant weights
    converted. The output, or a name the operator does not have, is refused."""
    names = [x.strip() for x in (spec or "").split(",") if x.strip()]
    tensors = [t.tensor for t in op.tensors]
    for name in names:
        if name not in tensors:
            raise SchemeError("constant", f"constant={spec!r}: no tensor {name!r} in {op.text()}")
        if name == tensors[0]:
            raise SchemeError("constant", f"constant={spec!r}: {name} is the output, written on every call")
    return frozenset(names)


def embedded_broadcast(spec: str | None, target: Target, fma: bool) -> bool:
    """The option ``broadcast``: unset, a broadcast operand is loaded once into a register (set1) and
    shared by the FMAs that use it; ``embedded``, every FMA reads it from memory itself (an AVX-512 FMA with
    an EVEX embedded broadcast: one register fewer per tile, one load per FMA)."""
    if spec is None:
        return False
    if spec != "embedded":
        why = f"broadcast={spec!r} is not allowed; allowed: embedded (unset: the broadcast in a register)"
        raise SchemeError("broadcast", why)
    if not target.fmadd_bcst:
        raise SchemeError("broadcast", f"broadcast=embedded needs AVX-512 (an EVEX FMA), not {target.name}")
    if not fma:
        raise SchemeError("broadcast", "broadcast=embedded is an FMA reading memory: it needs fma=true")
    return True


#: the cache level a prefetch item names (``@L1``, the default, or ``@L2``) -> __builtin_prefetch's locality;
#: ``@stream`` is L1 too, spread along the reduction loops (:func:`prefetches`)
PREFETCH_LEVELS = {"L1": 3, "L2": 2, "stream": 3}


def loops_above(an: Analysis, hoist_at: int | None) -> tuple[str, ...]:
    """The dimensions of the loops above the hoisted tile, innermost first (packs skipped): for each
    tensor, the first of them it is indexed by is the loop whose next step moves to its next tile (what
    the prefetch item ``next`` names)."""
    if hoist_at is None:
        return ()
    return tuple(a.dim for a in reversed(an.scheme[:hoist_at]) if a.kind in (*LOOP_ATOMS, "lambda_seq"))


def prefetches(
    spec: str | None, op: Operator, above: tuple[str, ...] = ()
) -> list[tuple[str, str, int, bool]]:
    """The (tensor, dimension, locality, stream) of each item of the option ``prefetch``: comma-separated
    items ``d`` (the output's tile along d) or ``X:d`` (tensor X's tile along d, e.g. ``C:i,A:i``, ``I:w``
    for a convolution's input), each with an optional cache level ``@L1`` (default) or ``@L2``
    (``I:h@L2``: a tile too large for L1 beside the one being computed, prefetcht1), or ``@stream`` (an
    input's next tile one cache line at a time as the reduction loops reach it: in the microkernel's
    block, when the index of the input's contiguous dimension enters a new line, instead of the whole
    tile where the accumulators are loaded; that dimension must be a plain one). d may be ``next``: the
    innermost loop above the hoisted tile on a dimension of the tensor (``above``, :func:`loops_above`; for a
    convolution's input the next pixels even when a k loop lies between), so one option fits every
    scheme of a search (``codegen.prefetch='next,I:next@L2'``). d must be one of the tensor's
    dimensions, and each axis of an input a plain dimension or a sum with a term of coefficient 1
    (``h*stride + r``: walked along r; ``2*h`` alone is refused)."""
    out = []
    tensors = {t.tensor: t for t in op.tensors}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        target, _, level = item.strip().partition("@")
        if level and level not in PREFETCH_LEVELS:
            why = f"prefetch={spec!r}: cache level {level!r} is not one of {sorted(PREFETCH_LEVELS)}"
            raise SchemeError("prefetch", why)
        tensor, _, d = target.rpartition(":")
        acc = tensors.get(tensor or op.output.tensor)
        if acc is None:
            raise SchemeError("prefetch", f"prefetch={spec!r}: no tensor {tensor!r} in {op.text()}")
        if d == "next":
            d = next((x for x in above if x in acc.dims()), "")
            if not d:
                why = f"prefetch={spec!r}: no loop on a dimension of {acc.tensor} above the tile in registers"
                raise SchemeError("prefetch", why)
        if d not in acc.dims():
            why = f"prefetch={spec!r}: {d!r} is not a dimension of {acc.tensor} {acc.dims()}"
            raise SchemeError("prefetch", why)
        if acc is not op.output and not all(any(c == 1 for _, c in axis) for axis in acc.axes):
            # an axis is walked along its coefficient-1 term (microkernel.prefetch_input_tile)
            why = f"prefetch={spec!r}: {acc.text()} has an axis without a dimension of coefficient 1"
            raise SchemeError("prefetch", why)
        stream = level == "stream"
        if stream and (acc is op.output or acc.stride1_dim() is None):
            why = f"prefetch={spec!r}: @stream is for an input whose contiguous axis is one dimension"
            raise SchemeError("prefetch", why)
        out.append((acc.tensor, d, PREFETCH_LEVELS[level or "L1"], stream))
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
