"""A scheme's C kernel: the generator (the loop nest, packing and the microkernel together) run over the
analysed scheme, the file's head (includes, helpers, external declarations), and a candidate's source
with its flags, libraries and workspace."""

from __future__ import annotations

from kernels.candidate import Candidate, KernelSource, Workload
from kernels.codegen.legality import (
    analyze_for,
    constants,
    embedded_broadcast,
    external_atom,
    hoist_position,
    loops_above,
    prefetches,
)
from kernels.codegen.loops import LoopNest
from kernels.codegen.microkernel import Microkernel
from kernels.codegen.packing import Packing
from kernels.codegen.padding import padded_workload, wrap_padded
from kernels.external import link_args
from kernels.scheme import PAR_KINDS, Analysis, SchemeError, as_written, format_scheme
from kernels.targets import Target, get_target


class Generator(LoopNest, Packing, Microkernel):
    """The whole generator: :class:`~kernels.codegen.emitter.Emitter`'s state with the three concerns."""


def generate(
    an: Analysis,
    workload: Workload,
    target: Target,
    *,
    hoist: bool = True,
    fma: bool = True,
    prefetch: str | None = None,
    constant: str | None = None,
    broadcast: str | None = None,
) -> tuple[str, int]:
    """C source of the kernel and the workspace bytes its packing buffers need. ``prefetch``: the option's
    items (:func:`prefetches`); where the output tile is loaded into registers, the tiles of the next step
    along their dimensions are prefetched (needs the accumulators hoisted). ``constant``: the option's
    inputs (:func:`constants`), whose outermost pack is copied only on a call with a new buffer of them.
    ``broadcast``: ``embedded`` lets each FMA read its broadcast operand from memory
    (:func:`embedded_broadcast`)."""
    op = workload.op
    hoist_at = hoist_position(an, op) if (hoist or an.scalp_position is not None) else None
    ext = external_atom(an)
    if ext is not None:
        hoist_at = None  # the external microkernel loads and stores its own tile
    pairs = tuple(prefetches(prefetch, op, loops_above(an, hoist_at)))  # the rule's checks, before any code
    if pairs and hoist_at is None:
        raise SchemeError(
            "prefetch", "prefetch needs the output tile in registers (hoist=true, no external call)"
        )
    kept = constants(constant, op)
    embedded = embedded_broadcast(broadcast, target, fma)
    gen = Generator(
        an,
        op,
        workload,
        target,
        an.vector_dim is not None,
        hoist_at,
        fma,
        prefetch=pairs,
        constant=kept,
        embedded=embedded,
    )
    gen.depth = 1
    env: dict[str, tuple[str, int | str]] = {d: ("0", workload.size[d]) for d in op.dims}
    gen.emit(0, env, {})
    if unpacked := sorted(kept - gen.kept_packs):
        why = f"constant={constant}: no outermost pack of {', '.join(unpacked)} to keep across calls"
        raise SchemeError("constant", why)
    head = [
        f"/* operator : {op.text()} */",
        f"/* workload : {workload.name} {workload.size} */",
        f"/* scheme   : {format_scheme(an.scheme, ascii_only=True)} */",
        f"/* target   : {target.name} ({target.lanes} lanes), fma={fma}, hoist={hoist}"
        + (f", prefetch={prefetch}" if prefetch else "")
        + (f", constant={constant}" if constant else "")
        + (f", broadcast={broadcast}" if broadcast else "")
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
    if kept:
        # the buffers the kept packs were copied from, and the workspace they were copied into
        seen = [f"ttile_seen_{t}" for t in sorted(kept)]
        head += [
            f"  static const void *ttile_seen_ws, *{', *'.join(seen)};",
            "  const int ttile_fresh = workspace != ttile_seen_ws"
            + "".join(f" || (const void *){t} != ttile_seen_{t}" for t in sorted(kept))
            + ";",
        ]
        remember = "".join(f"  ttile_seen_{t} = {t};\n" for t in sorted(kept))
        ret = "  ttile_seen_ws = workspace;\n" + remember + ret
    return "\n".join([*head, *gen.lines, ret, "}", ""]), 4 * gen.workspace_floats


def render_scheme(candidate: Candidate, workload: Workload) -> KernelSource:
    target = get_target(str(candidate.option("target", "avx2")))
    partial = str(candidate.option("partial", "none"))
    fma = bool(candidate.option("fma", True))
    hoist = bool(candidate.option("hoist", True))
    prefetch = candidate.option("prefetch", None)
    constant = candidate.option("constant", None)
    broadcast = candidate.option("broadcast", None)
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
            an,
            padded,
            target,
            hoist=hoist,
            fma=fma,
            prefetch=None if prefetch is None else str(prefetch),
            constant=None if constant is None else str(constant),
            broadcast=None if broadcast is None else str(broadcast),
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
