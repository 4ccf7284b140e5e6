"""Vendor libraries as candidates: a thin C wrapper with the kernel ABI around the library's own call.

Each library is data (:class:`Library`): where its file is, the prototypes, how to force one thread and
the call computing row-major ``C[i,j] += A[i,k] * B[k,j]``. Libraries are linked from their packages
(Debian's OpenBLAS, BLIS and libxsmm, the OpenBLAS that numpy ships, PyPI's MKL), never re-implemented,
and run single-threaded. One that is not installed raises :class:`BaselineUnavailable`, which the
harness records as an unsupported candidate rather than a failure. Prototypes are declared here, so no
header needs to be installed; the symbols and integer widths were checked with ``nm -D`` and the headers.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass

from kernels.candidate import Candidate, KernelSource, Workload


class BaselineUnavailable(RuntimeError):
    """The library is not installed on this machine (the reason names it and the files looked for)."""


@dataclass(frozen=True)
class Library:
    """How to reach one library's sgemm from the kernel ABI."""

    name: str
    patterns: tuple[str, ...]  # glob patterns of the .so or .a to link; the first that matches wins
    decls: str  # C prototypes of the symbols used
    once: str  # C statements run before the first call: force one thread, initialise
    call: str  # C statement(s) on a, b, c with the sizes {i}, {j}, {k} substituted
    extra: tuple[str, ...] = ()  # further files to link, "{dir}" being the library's directory
    link: tuple[str, ...] = ()  # further linker arguments (system libraries)


def _cblas(
    name: str,
    patterns: tuple[str, ...],
    sgemm: str,
    int_type: str,
    set_threads: str,
    threads_type: str = "int",
) -> Library:
    """A library with the CBLAS interface (row-major is native there)."""
    it = int_type
    return Library(
        name,
        patterns,
        decls=f"extern void {sgemm}(int order, int ta, int tb, {it} m, {it} n, {it} k, float alpha,\n"
        f"    const float *a, {it} lda, const float *b, {it} ldb, float beta, float *c, {it} ldc);\n"
        f"extern void {set_threads}({threads_type} n);",
        once=f"{set_threads}(1);",
        # 101 = CblasRowMajor, 111 = CblasNoTrans
        call=f"{sgemm}(101, 111, 111, {{i}}, {{j}}, {{k}}, 1.0f, a, {{k}}, b, {{j}}, 1.0f, c, {{j}});",
    )


def _numpy_libs() -> str:
    import numpy

    return os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")


_DEB = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

# libxsmm: Debian ships static archives only (LP64: libxsmm_blasint is int). Its interface is column-major
# Fortran-style, so row-major C = A B is computed as the column-major C^T = B^T A^T (m=J, n=I, k=K,
# first operand B with ld J, second A with ld K). libxsmm_sgemm JIT-compiles a kernel only up to
# m*n*k <= LIBXSMM_MAX_MNK (262144 in libxsmm_config.h) and otherwise calls the BLAS sgemm_;
# libxsmm_xgemm tiles larger products with its own JIT kernels. Linking libxsmmnoblas instead of a BLAS
# guarantees that no other library is ever timed under the libxsmm name. The sequential library
# (without libxsmmext) starts no threads.
_LIBXSMM = Library(
    "libxsmm",
    tuple(f"{d}/libxsmm.a" for d in _DEB),
    decls="typedef int xsmm_int;\n"
    "extern void libxsmm_init(void);\n"
    "extern void libxsmm_sgemm(const char *ta, const char *tb, const xsmm_int *m, const xsmm_int *n,\n"
    "    const xsmm_int *k, const float *alpha, const float *a, const xsmm_int *lda, const float *b,\n"
    "    const xsmm_int *ldb, const float *beta, float *c, const xsmm_int *ldc);\n"
    "/* iprec and oprec are the enum libxsmm_gemm_precision (int-sized); 1 = LIBXSMM_GEMM_PRECISION_F32 */\n"
    "extern void libxsmm_xgemm(int iprec, int oprec, const char *ta, const char *tb, const xsmm_int *m,\n"
    "    const xsmm_int *n, const xsmm_int *k, const void *alpha, const void *a, const xsmm_int *lda,\n"
    "    const void *b, const xsmm_int *ldb, const void *beta, void *c, const xsmm_int *ldc);",
    once="libxsmm_init();",
    call="const xsmm_int m = {j}, n = {i}, k = {k};\n"
    "  const float one = 1.0f;\n"
    "  if ((long long)m * n * k <= 262144) /* LIBXSMM_MAX_MNK: one JIT kernel */\n"
    '    libxsmm_sgemm("N", "N", &m, &n, &k, &one, b, &m, a, &k, &one, c, &m);\n'
    "  else /* libxsmm's own tiled GEMM */\n"
    '    libxsmm_xgemm(1, 1, "N", "N", &m, &n, &k, &one, b, &m, a, &k, &one, c, &m);',
    extra=("{dir}/libxsmmnoblas.a",),
    link=("-lpthread", "-ldl", "-lm"),
)

BLAS: dict[str, Library] = {
    "openblas": _cblas(
        "openblas",
        tuple(f"{d}/libopenblas.so.0" for d in _DEB),
        "cblas_sgemm",
        "int",
        "openblas_set_num_threads",
    ),
    # the OpenBLAS build numpy itself calls for float32 matmul (ILP64, suffixed symbols)
    "numpy": _cblas(
        "numpy",
        (os.path.join(_numpy_libs(), "libscipy_openblas64_*.so"),),
        "scipy_cblas_sgemm64_",
        "long long",
        "scipy_openblas_set_num_threads64_",
    ),
    "mkl": _cblas(
        "mkl",
        (os.path.join(sys.prefix, "lib", "libmkl_rt.so*"),),
        "cblas_sgemm",
        "int",
        "MKL_Set_Num_Threads",
    ),
    # Debian's BLIS (whichever flavour the alternatives select): 32-bit CBLAS integers, 64-bit dim_t
    "blis": _cblas(
        "blis",
        tuple(f"{d}/libblis.so.4" for d in _DEB),
        "cblas_sgemm",
        "int",
        "bli_thread_set_num_threads",
        "long long",
    ),
    "libxsmm": _LIBXSMM,
}


def find_library(lib: Library) -> str:
    """Path of the library's file (and check its extra files are beside it)."""
    hits = [hit for pattern in lib.patterns for hit in sorted(glob.glob(pattern))]
    if not hits:
        raise BaselineUnavailable(f"{lib.name} is not installed: no file matching {list(lib.patterns)}")
    path = hits[0]
    for extra in lib.extra:
        if not os.path.exists(extra.format(dir=os.path.dirname(path))):
            raise BaselineUnavailable(f"{lib.name} is incomplete: {path} found but not {extra}")
    return path


def _source(lib: Library, path: str, sizes: dict[str, int]) -> str:
    # The resolved file and its size are part of the source, so an upgraded library (static archives are
    # copied into the kernel) gets a fresh build and the row's source hash says which file was used.
    real = os.path.realpath(path)
    i, j, k = sizes["i"], sizes["j"], sizes["k"]
    return f"""/* baseline: {lib.name}, one thread, row-major C[i,j] += A[i,k] * B[k,j], {i}x{j}x{k} */
/* library: {real} ({os.path.getsize(real)} bytes) */
{lib.decls}

int kernel(float *const *tensors, void *workspace) {{
  static int ready = 0;
  float *c = tensors[0];
  const float *a = tensors[1], *b = tensors[2];
  (void)workspace;
  if (!ready) {{ {lib.once} ready = 1; }}
  {lib.call.format(**sizes)}
  return 0;
}}
"""


def render_baseline(candidate: Candidate, workload: Workload) -> KernelSource:
    name = candidate.text
    if name not in BLAS:
        raise ValueError(f"unknown baseline {name!r}; known: {sorted(BLAS)}")
    if workload.op.name != "matmul":
        raise BaselineUnavailable(f"baseline {name} implements matmul only, not {workload.op.name}")
    lib = BLAS[name]
    path = find_library(lib)
    libdir = os.path.dirname(path)
    files = [path, *(extra.format(dir=libdir) for extra in lib.extra)]
    # --no-as-needed keeps a shared library a dependency, and the rpath finds it outside the system paths
    libs = [f"-Wl,--no-as-needed,{f}" for f in files]
    if ".so" in os.path.basename(path):  # a static archive is copied into the kernel instead
        libs.append(f"-Wl,-rpath,{libdir}")
    libs += lib.link
    return KernelSource(code=_source(lib, path, workload.size), target="any", libs=tuple(libs))
