"""Vendor libraries as candidates: a thin C wrapper with the kernel ABI around the library's own call.

Libraries are linked from their packages (Debian's libopenblas, the OpenBLAS that numpy ships, PyPI's
mkl), single-threaded. A library that is not installed raises :class:`BaselineUnavailable`, which the
harness records as an unavailable candidate rather than a failure.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys
from dataclasses import dataclass

from kernels.candidate import Candidate, KernelSource, Workload


class BaselineUnavailable(RuntimeError):
    """The library is not installed on this machine (the reason says which file was looked for)."""


@dataclass(frozen=True)
class Blas:
    """How to reach a CBLAS sgemm: the shared object, the symbol names and the integer width."""

    name: str
    patterns: tuple[str, ...]  # glob patterns for the shared object, first match wins
    sgemm: str
    set_threads: str
    int_type: str  # the library's integer type for sizes


def _numpy_libs() -> str:
    import numpy

    return os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")


BLAS: dict[str, Blas] = {
    "openblas": Blas(
        "openblas",
        ("/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "/usr/lib64/libopenblas.so.0"),
        "cblas_sgemm",
        "openblas_set_num_threads",
        "int",
    ),
    "numpy": Blas(  # the OpenBLAS build numpy itself calls for float32 matmul
        "numpy",
        (os.path.join(_numpy_libs(), "libscipy_openblas64_*.so"),),
        "scipy_cblas_sgemm64_",
        "scipy_openblas_set_num_threads64_",
        "long long",
    ),
    "mkl": Blas(
        "mkl",
        (os.path.join(sys.prefix, "lib", "libmkl_rt.so*"),),
        "cblas_sgemm",
        "MKL_Set_Num_Threads",
        "int",
    ),
}


def find_library(blas: Blas) -> str:
    for pattern in blas.patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    found = ctypes.util.find_library(blas.name)
    if found and os.path.isabs(found):
        return found
    raise BaselineUnavailable(f"{blas.name}: no shared library matching {list(blas.patterns)}")


def _sgemm_source(blas: Blas, m: int, n: int, k: int) -> str:
    it = blas.int_type
    return f"""/* baseline: {blas.name} sgemm, single thread, C[i,j] += A[i,k] * B[k,j] row-major */
extern void {blas.sgemm}(int order, int ta, int tb, {it} m, {it} n, {it} k, float alpha,
                         const float *a, {it} lda, const float *b, {it} ldb, float beta, float *c, {it} ldc);
extern void {blas.set_threads}(int n);

int kernel(float *const *tensors, void *workspace) {{
  static int single = 0;
  (void)workspace;
  if (!single) {{ {blas.set_threads}(1); single = 1; }}
  /* 101 = CblasRowMajor, 111 = CblasNoTrans */
  {blas.sgemm}(101, 111, 111, {m}, {n}, {k}, 1.0f, tensors[1], {k}, tensors[2], {n}, 1.0f, tensors[0], {n});
  return 0;
}}
"""


def render_baseline(candidate: Candidate, workload: Workload) -> KernelSource:
    name = candidate.text
    if name not in BLAS:
        raise ValueError(f"unknown baseline {name!r}; known: {sorted(BLAS)}")
    if workload.op.name != "matmul":
        raise BaselineUnavailable(f"baseline {name} implements matmul only, not {workload.op.name}")
    blas = BLAS[name]
    path = find_library(blas)
    s = workload.size
    libdir = os.path.dirname(path)
    return KernelSource(
        code=_sgemm_source(blas, s["i"], s["j"], s["k"]),
        target="any",
        libs=(f"-Wl,--no-as-needed,{path}", f"-Wl,-rpath,{libdir}"),
    )
