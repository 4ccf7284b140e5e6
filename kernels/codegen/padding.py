"""Padding (thesis §5.3.3): the microkernel always runs full, on zero-extended copies of the tensors its
tiles overrun; the output is copied back."""

from __future__ import annotations

import math

from kernels.candidate import Workload
from kernels.codegen.layout import row_major_strides
from kernels.scheme import Analysis, parse_scheme
from kernels.targets import Target


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
        src_strides, dst_strides = row_major_strides(shape), row_major_strides(pshape)
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
