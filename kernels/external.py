"""External microkernels for ``ExternalCall_{name,α,d}`` (thesis §3.5), as data.

An entry says how to declare, initialise, link and call one handcrafted microkernel that is flexible on
one dimension (its extent there is a runtime value in 1..α) and fixed on the others (the tile the
scheme's U atoms above the call give it). The first entry is libxsmm's JIT: ``libxsmm_smmdispatch``
generates (once per extent, cached in a per-call-site table) a small-matmul kernel for the host CPU.

The call template receives, for the matmul operator: ``{C} {A} {B}`` tile pointers, ``{ldc} {lda}
{ldb}`` row strides of the row-major views, ``{i} {j} {k}`` the tile extents (C expressions),
``{flex}`` the flexible extent, ``{alpha}`` the atom's size and ``{site}`` a number unique per call site.
A failing call sets ``ttile_rc`` (the kernel's return code) instead of returning, since a return may not
leave an OpenMP loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kernels.baselines import BaselineUnavailable, Library, find_library


@dataclass(frozen=True)
class External:
    name: str
    ops: tuple[str, ...]  # operators whose tile it computes
    flexible: tuple[str, ...]  # dimensions it may be flexible on
    library: Library  # the files and system libraries to link (found like a baseline's)
    decls: str  # C declarations (no header needed)
    init: str  # C statements run once per process before the first call
    site: str  # file-scope declarations per call site
    call: str  # C statements computing the tile C += A B
    max_extent: int = 256  # largest α (the per-site table has α + 1 entries)


# libxsmm is column-major: the row-major tile C[i,j] += A[i,k] B[k,j] is the column-major
# C^T = B^T A^T with m = j, n = i, k = k, first operand B (ld = B's row stride), second A. The Debian
# static archive is LP64 (libxsmm_blasint = int); libxsmmnoblas keeps any BLAS out of the kernel.
LIBXSMM = External(
    name="libxsmm",
    ops=("matmul",),
    flexible=("i", "j", "k"),
    library=Library(
        "libxsmm",
        tuple(
            f"{d}/libxsmm.a"
            for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
        ),
        decls="",
        once="",
        call="",
        extra=("{dir}/libxsmmnoblas.a",),
        link=("-lpthread", "-ldl", "-lm"),
    ),
    decls="typedef int ttile_xsmm_int;\n"
    "typedef void (*ttile_xsmm_fn)(const float *a, const float *b, float *c, ...);\n"
    "extern void libxsmm_init(void);\n"
    "extern ttile_xsmm_fn libxsmm_smmdispatch(ttile_xsmm_int m, ttile_xsmm_int n, ttile_xsmm_int k,\n"
    "    const ttile_xsmm_int *lda, const ttile_xsmm_int *ldb, const ttile_xsmm_int *ldc,\n"
    "    const float *alpha, const float *beta, const int *flags, const int *prefetch);",
    init="libxsmm_init();",
    site="static ttile_xsmm_fn ttile_xsmm{site}[{alpha} + 1];  /* JIT kernels by flexible extent */",
    call="{{\n"
    "  ttile_xsmm_fn f = ttile_xsmm{site}[{flex}];\n"
    "  if (!f) {{\n"
    "    const ttile_xsmm_int lda = {ldb}, ldb = {lda}, ldc = {ldc};\n"
    "    const float one = 1.0f;\n"
    "    f = libxsmm_smmdispatch({j}, {i}, {k}, &lda, &ldb, &ldc, &one, &one, NULL, NULL);\n"
    "    ttile_xsmm{site}[{flex}] = f;  /* a benign race under threads: the same kernel */\n"
    "  }}\n"
    "  if (f) {{\n"
    "    f({B}, {A}, {C});\n"
    "  }} else {{  /* libxsmm cannot JIT this shape: the kernel fails (no return inside OpenMP) */\n"
    "    #pragma omp atomic write\n"
    "    ttile_rc = 91;\n"
    "  }}\n"
    "}}",
)

EXTERNALS: dict[str, External] = {"libxsmm": LIBXSMM}


def link_args(ext: External) -> tuple[str, ...]:
    """Linker arguments for the entry's files; raises BaselineUnavailable when they are missing."""
    path = find_library(ext.library)
    files = [path, *(e.format(dir=os.path.dirname(path)) for e in ext.library.extra)]
    libs = [f"-Wl,--no-as-needed,{f}" for f in files]
    if ".so" in os.path.basename(path):
        libs.append(f"-Wl,-rpath,{os.path.dirname(path)}")
    return (*libs, *ext.library.link)


__all__ = ["EXTERNALS", "External", "BaselineUnavailable", "link_args"]
