"""Vendor libraries as candidates: a thin C wrapper with the kernel ABI around the library's own call.

Each library is data (:class:`Library`): where its file is, the prototypes, how to force one thread and
the call computing row-major ``C[i,j] += A[i,k] * B[k,j]``. Libraries are linked from their packages,
never re-implemented, and run single-threaded: today's from PyPI (oneDNN 3.x, OpenBLAS 0.3.3x as
scipy-openblas32, MKL pinned in pyproject.toml), Debian 12's under versioned names (``onednn-2.6``,
``openblas-0.3.21``) beside its BLIS and libxsmm, and the OpenBLAS numpy ships. Every baseline row records
the library, its exact version and source (:func:`library_info`; the version is in the candidate's key,
:func:`versioned`). PyTorch is a baseline too (kernels.torch_baseline). oneDNN also serves the conv2d
operator with its direct convolution primitive (:func:`_onednn_conv_source`). One that is not installed raises
:class:`BaselineUnavailable`, which the harness records as an unsupported candidate rather than a
failure. Prototypes are declared here, so no header needs to be installed (except dnnl.h for the
convolution's types); the symbols and integer widths were checked with ``nm -D`` and the headers.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels import library_versions as versions
from kernels import torch_baseline
from kernels.candidate import BaselineUnavailable, Candidate, KernelSource, Workload
from kernels.library_versions import LibraryInfo


@dataclass(frozen=True)
class Library:
    """How to reach one library's sgemm from the kernel ABI."""

    name: str
    patterns: tuple[str, ...]  # glob patterns of the .so or .a to link; the first that matches wins
    decls: str  # C prototypes of the symbols used
    once: str  # C run before the first call: set the thread count ({threads}), initialise
    call: str  # C statement(s) on a, b, c with the sizes {i}, {j}, {k} substituted
    extra: tuple[str, ...] = ()  # further files to link, "{dir}" being the library's directory
    link: tuple[str, ...] = ()  # further linker arguments (system libraries)
    library: str = ""  # what it is (row column ``library``): openblas, mkl, onednn...; default: the name
    source: str = "debian"  # where it comes from: debian | pypi (row column ``library_source``)
    probe: tuple[str, ...] = ()  # kernels.library_versions probe and its arguments after the file's path
    include: tuple[str, ...] = ()  # header directories (oneDNN's convolution needs its dnnl.h)


def _cblas(
    name: str,
    patterns: tuple[str, ...],
    sgemm: str,
    int_type: str,
    set_threads: str,
    threads_type: str = "int",
    **about: object,
) -> Library:
    """A library with the CBLAS interface (row-major is native there); ``about``: its Library fields
    library, source, probe."""
    it = int_type
    return Library(
        name,
        patterns,
        decls=f"extern void {sgemm}(int order, int ta, int tb, {it} m, {it} n, {it} k, float alpha,\n"
        f"    const float *a, {it} lda, const float *b, {it} ldb, float beta, float *c, {it} ldc);\n"
        f"extern void {set_threads}({threads_type} n);",
        once=f"{set_threads}({{threads}});",
        # 101 = CblasRowMajor, 111 = CblasNoTrans
        call=f"{sgemm}(101, 111, 111, {{i}}, {{j}}, {{k}}, 1.0f, a, {{k}}, b, {{j}}, 1.0f, c, {{j}});",
        **about,  # type: ignore[arg-type]
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
    library="libxsmm",
)


# oneDNN: dnnl_sgemm is row-major (dnnl.h, the same in 2.x and 3.x) with 64-bit dnnl_dim_t and returns a
# dnnl_status_t (0 = success, passed on as the kernel's return code). Both builds use the GNU OpenMP runtime
# (DNNL_CPU_RUNTIME = DNNL_RUNTIME_OMP in dnnl_config.h; each .so links libgomp), so omp_set_num_threads(n)
# on the calling thread is what sets their thread count. Today's is PyPI's onednn-cpu-gomp (3.x; its
# headers come with onednn-devel-cpu-gomp into the environment's include/); PyPI's plain `onednn` wheels
# are SYCL builds whose CPU engine fails without a SYCL device. Debian 12's 2.6.3 stays as the thesis-era
# library under a versioned name.
def _onednn(name: str, patterns: tuple[str, ...], source: str, include: tuple[str, ...]) -> Library:
    return Library(
        name,
        patterns,
        decls="extern int dnnl_sgemm(char ta, char tb, long long m, long long n, long long k, float alpha,\n"
        "    const float *a, long long lda, const float *b, long long ldb, float beta, float *c,\n"
        "    long long ldc);\n"
        "extern void omp_set_num_threads(int n);",
        once="omp_set_num_threads({threads});",
        call="const int rc = dnnl_sgemm('N', 'N', {i}, {j}, {k}, 1.0f, a, {k}, b, {j}, 1.0f, c, {j});\n"
        "  if (rc) return 100 + rc; /* dnnl_status_t, offset so it is not mistaken for another code */",
        link=("-lgomp",),
        library="onednn",
        source=source,
        probe=("onednn",),
        include=include,
    )


def _scipy_openblas32() -> str:
    """Where PyPI's scipy-openblas32 keeps its library (DYNAMIC_ARCH, symbols prefixed ``scipy_``)."""
    import importlib.util

    spec = importlib.util.find_spec("scipy_openblas32")
    where = os.path.dirname(spec.origin) if spec and spec.origin else os.path.join(sys.prefix, "nowhere")
    return os.path.join(where, "lib", "libscipy_openblas.so")


def _openblas(
    name: str, patterns: tuple[str, ...], prefix: str, suffix: str, int_type: str, source: str
) -> Library:
    """An OpenBLAS build: builds differ in how they name their symbols (scipy's: ``scipy_`` prefix, and an
    ILP64 ``64_`` suffix), which the version probe follows too."""
    return _cblas(
        name,
        patterns,
        f"{prefix}cblas_sgemm{suffix}",
        int_type,
        f"{prefix}openblas_set_num_threads{suffix}",
        library="openblas",
        source=source,
        probe=("openblas", prefix, suffix),
    )


BLAS: dict[str, Library] = {
    # today's OpenBLAS: PyPI's scipy-openblas32 (LP64, every symbol prefixed scipy_)
    "openblas": _openblas("openblas", (_scipy_openblas32(),), "scipy_", "", "int", "pypi"),
    # Debian 12's OpenBLAS (0.3.21): it does not know CPUs newer than 2022 and falls back to old cores
    "openblas-0.3.21": _openblas(
        "openblas-0.3.21", tuple(f"{d}/libopenblas.so.0" for d in _DEB), "", "", "int", "debian"
    ),
    # the OpenBLAS build numpy itself calls for float32 matmul (ILP64, suffixed symbols)
    "numpy": _openblas(
        "numpy",
        (os.path.join(_numpy_libs(), "libscipy_openblas64_*.so"),),
        "scipy_",
        "64_",
        "long long",
        "pypi",
    ),
    # PyPI's MKL at the version pinned in pyproject.toml (extra "baselines")
    "mkl": _cblas(
        "mkl",
        (os.path.join(sys.prefix, "lib", "libmkl_rt.so*"),),
        "cblas_sgemm",
        "int",
        "MKL_Set_Num_Threads",
        library="mkl",
        source="pypi",
        probe=("mkl",),
    ),
    # Debian's BLIS (whichever flavour the alternatives select): 32-bit CBLAS integers, 64-bit dim_t
    "blis": _cblas(
        "blis",
        tuple(f"{d}/libblis.so.4" for d in _DEB),
        "cblas_sgemm",
        "int",
        "bli_thread_set_num_threads",
        "long long",
        library="blis",
        probe=("blis",),
    ),
    "libxsmm": _LIBXSMM,
    "onednn": _onednn(
        "onednn",
        (os.path.join(sys.prefix, "lib", "libdnnl.so.3"),),
        "pypi",
        (os.path.join(sys.prefix, "include"),),
    ),
    "onednn-2.6": _onednn(
        "onednn-2.6", tuple(f"{d}/libdnnl.so.2" for d in _DEB), "debian", ("/usr/include",)
    ),
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


def _source(lib: Library, path: str, sizes: dict[str, int], threads: int) -> str:
    # The resolved file and its size are part of the source, so an upgraded library (static archives are
    # copied into the kernel) gets a fresh build and the row's source hash says which file was used.
    real = os.path.realpath(path)
    i, j, k = sizes["i"], sizes["j"], sizes["k"]
    return f"""/* baseline: {lib.name}, {threads} thread(s), row-major C[i,j] += A[i,k] * B[k,j], {i}x{j}x{k}
   */
/* library: {real} ({os.path.getsize(real)} bytes) */
{lib.decls}

int kernel(float *const *tensors, void *workspace) {{
  static int ready = 0;
  float *c = tensors[0];
  const float *a = tensors[1], *b = tensors[2];
  (void)workspace;
  if (!ready) {{ {lib.once.format(threads=threads)} ready = 1; }}
  {lib.call.format(**sizes)}
  return 0;
}}
"""


# What differs between oneDNN 2.x and 3.x in the convolution's setup. 2.x: memory descriptors are structs
# passed by address, a convolution descriptor then a primitive descriptor; 3.x: descriptors are opaque
# handles (created, passed by value) and the primitive descriptor is created in one call.
_ONEDNN_API: dict[int, dict[str, str]] = {
    2: {
        "md_t": "const dnnl_memory_desc_t *",
        "ref": "&",
        "md_init": "dnnl_memory_desc_init_by_tag",
        "sum": "dnnl_post_ops_append_sum(po, 1.0f)",
        "desc_decl": "dnnl_convolution_desc_t cd;",
        "create": "TRY(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,\n"
        "      dnnl_convolution_direct, &src_want, &wei_want, NULL, &dst_want, strides, pad, pad));\n"
        "  TRY(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));",
    },
    3: {
        "md_t": "const_dnnl_memory_desc_t ",
        "ref": "",
        "md_init": "dnnl_memory_desc_create_with_tag",
        "sum": "dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef)",
        "desc_decl": "const dnnl_dims_t dilates = {0, 0};",
        "create": "TRY(dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference,\n"
        "      dnnl_convolution_direct, src_want, wei_want, NULL, dst_want, strides, dilates, pad, pad,\n"
        "      attr));",
    },
}


def _onednn_conv_source(
    path: str,
    sizes: dict[str, int],
    stride: int,
    threads: int = 1,
    blocked: bool = False,
    name: str = "onednn",
    major: int = 3,
) -> str:
    """oneDNN's direct convolution on our layouts: O[h][w][k] += I[h*stride+r][w*stride+s][c] * K[r][s][c][k].

    src and dst are NHWC (batch 1) and the weights HWIO, exactly our tensors, no padding. The primitive
    takes its weights in the format it prefers (blocked): given plain HWIO weights oneDNN 2.6 silently
    runs an im2col GEMM instead of a direct convolution. Our HWIO weights are reordered into that format
    once per weights buffer, as a framework does with constant weights and as benchdnn times a convolution
    (reordering on every call made small layers look 2-3x slower than oneDNN is: an unfair baseline). The
    driver never changes an input between calls, so the cached copy is always current; a new buffer (cold
    runs) is reordered again. The sum post-op makes it accumulate into O (dst = conv + dst), as our
    operator does. Threads as for dnnl_sgemm.

    ``blocked`` (baseline ``onednn-blocked``) lets oneDNN choose the activations' layouts too (e.g.
    nChw8c) and keeps them between calls, as benchdnn times a primitive and as seed 003 compares (both
    sides blocked): src is converted once per buffer like the weights; dst is loaded into oneDNN's layout
    and written back to NHWC on the first call with each output buffer (the call the driver checks), and
    later calls on that buffer accumulate in oneDNN's layout only. Its times therefore exclude every
    layout conversion, and the NHWC output is exact after the first call only. oneDNN's copies are not
    among the driver's tensors: a clflushopt cold run leaves them cached (use the sweep method).
    The implementation oneDNN chose goes to stderr (harness.run.IMPL_PREFIX), recorded in the row.
    ``major``: the oneDNN API the library speaks (2 or 3, :data:`_ONEDNN_API`); ``name``: the baseline's.
    """
    h, w, k, c, r, s = (sizes[d] for d in ("h", "w", "k", "c", "r", "s"))
    ih, iw = (h - 1) * stride + r, (w - 1) * stride + s
    real = os.path.realpath(path)
    act = "dnnl_format_tag_any" if blocked else "dnnl_nhwc"
    api = _ONEDNN_API[major]
    md_t, ref, md_init = api["md_t"], api["ref"], api["md_init"]
    layouts = "activations and weights in oneDNN's layouts" if blocked else "NHWC x HWIO -> NHWC"
    return f"""/* baseline: {name} direct convolution, {threads} thread(s), {layouts}, stride {stride} */
/* O[{h}][{w}][{k}] += I[{ih}][{iw}][{c}] * K[{r}][{s}][{c}][{k}] */
/* library: {real} ({os.path.getsize(real)} bytes) */
#include <dnnl.h>
#include <stdio.h>
extern void omp_set_num_threads(int n);

#define TRY(call) \\
  do {{ dnnl_status_t st_ = (call); if (st_ != dnnl_success) return 100 + (int)st_; }} while (0)

/* one tensor: our plain buffer (user), the primitive's memory (lib) and conversions between them
   (NULL when the primitive takes our layout) */
typedef struct {{ dnnl_memory_t user, lib; dnnl_primitive_t to_lib, to_user; const void *seen; }} tensor_t;

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static dnnl_primitive_t conv;
static tensor_t tsrc, tdst, twei;

static int reorder_pd({md_t}from, {md_t}to, dnnl_primitive_t *p) {{
  dnnl_primitive_desc_t rpd;
  TRY(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL));
  TRY(dnnl_primitive_create(p, rpd));
  dnnl_primitive_desc_destroy(rpd);
  return 0;
}}

static int bind(tensor_t *t, {md_t}user_md, {md_t}lib_md, void *data, int back) {{
  TRY(dnnl_memory_create(&t->user, user_md, eng, data));
  if (dnnl_memory_desc_equal(lib_md, user_md)) {{ t->lib = t->user; return 0; }}
  TRY(dnnl_memory_create(&t->lib, lib_md, eng, DNNL_MEMORY_ALLOCATE));
  int rc = reorder_pd(user_md, lib_md, &t->to_lib);
  if (!rc && back) rc = reorder_pd(lib_md, user_md, &t->to_user);
  return rc;
}}

static int convert(dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to) {{
  dnnl_exec_arg_t args[2] = {{{{DNNL_ARG_FROM, from}}, {{DNNL_ARG_TO, to}}}};
  TRY(dnnl_primitive_execute(p, strm, 2, args));
  return 0;
}}

static int setup(float *dst, const float *src, const float *wei) {{
  const dnnl_dims_t src_dims = {{1, {c}, {ih}, {iw}}}, wei_dims = {{{k}, {c}, {r}, {s}}};
  const dnnl_dims_t dst_dims = {{1, {k}, {h}, {w}}}, strides = {{{stride}, {stride}}}, pad = {{0, 0}};
  dnnl_memory_desc_t src_md, dst_md, wei_md, src_want, dst_want, wei_want;
  {api["desc_decl"]}
  dnnl_post_ops_t po;
  dnnl_primitive_attr_t attr;
  dnnl_primitive_desc_t pd = NULL;
  omp_set_num_threads({threads});
  TRY(dnnl_engine_create(&eng, dnnl_cpu, 0));
  TRY(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  TRY({md_init}(&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc));
  TRY({md_init}(&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc));
  TRY({md_init}(&wei_md, 4, wei_dims, dnnl_f32, dnnl_hwio));
  TRY({md_init}(&src_want, 4, src_dims, dnnl_f32, {act}));
  TRY({md_init}(&dst_want, 4, dst_dims, dnnl_f32, {act}));
  TRY({md_init}(&wei_want, 4, wei_dims, dnnl_f32, dnnl_format_tag_any));
  TRY(dnnl_post_ops_create(&po));
  TRY({api["sum"]});
  TRY(dnnl_primitive_attr_create(&attr));
  TRY(dnnl_primitive_attr_set_post_ops(attr, po));
  /* weights in oneDNN's preferred format: with plain HWIO weights oneDNN 2.6 answers "direct" with its
     im2col GEMM (x64:gemm:jit); with its blocked format it runs its direct JIT kernel (jit:avx2...) */
  {api["create"]}
#define LIB_MD(q) dnnl_primitive_desc_query_md(pd, q, 0)
  int rc = bind(&tsrc, {ref}src_md, LIB_MD(dnnl_query_src_md), (void *)src, 0);
  if (!rc) rc = bind(&twei, {ref}wei_md, LIB_MD(dnnl_query_weights_md), (void *)wei, 0);
  if (!rc) rc = bind(&tdst, {ref}dst_md, LIB_MD(dnnl_query_dst_md), dst, 1);
  if (rc) return rc;
  const char *impl = "?";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  fprintf(stderr, "harness-impl: {name} %s%s%s\\n", impl, tsrc.to_lib ? " (+ src in its layout)" : "",
          twei.to_lib ? " (+ weight reorder)" : "");
  TRY(dnnl_primitive_create(&conv, pd));
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  dnnl_post_ops_destroy(po);
  return 0;
}}

/* an input in the primitive's layout: converted when its buffer is new (the driver never changes an
   input between calls, so the converted copy stays current) */
static int input(tensor_t *t, const void *data) {{
  TRY(dnnl_memory_set_data_handle(t->user, (void *)data));
  if (t->to_lib && data != t->seen) {{ int rc = convert(t->to_lib, t->user, t->lib); if (rc) return rc; }}
  t->seen = data;
  return 0;
}}

int kernel(float *const *tensors, void *workspace) {{
  static int ready = 0;
  float *dst = tensors[0];
  const float *src = tensors[1], *wei = tensors[2];
  (void)workspace;
  if (!ready) {{ int rc = setup(dst, src, wei); if (rc) return rc; ready = 1; }}
  int rc = input(&tsrc, src);
  if (!rc) rc = input(&twei, wei);
  if (rc) return rc;
  TRY(dnnl_memory_set_data_handle(tdst.user, dst));
  int first = dst != tdst.seen;  /* a new output buffer: load it into oneDNN's layout, write it back */
  if (tdst.to_lib && first) {{ rc = convert(tdst.to_lib, tdst.user, tdst.lib); if (rc) return rc; }}
  tdst.seen = dst;
  dnnl_exec_arg_t args[3] = {{
      {{DNNL_ARG_SRC, tsrc.lib}}, {{DNNL_ARG_WEIGHTS, twei.lib}}, {{DNNL_ARG_DST, tdst.lib}}}};
  TRY(dnnl_primitive_execute(conv, strm, 3, args));
  if (tdst.to_user && first) {{ rc = convert(tdst.to_user, tdst.lib, tdst.user); if (rc) return rc; }}
  TRY(dnnl_stream_wait(strm));
  return 0;
}}
"""


def _render_onednn_conv(
    workload: Workload, library: str, threads: int = 1, blocked: bool = False
) -> KernelSource:
    """The convolution of oneDNN ``library`` (a key of :data:`BLAS`: onednn or onednn-2.6)."""
    lib = BLAS[library]
    path = find_library(lib)
    headers = [os.path.join(d, "dnnl.h") for d in lib.include]
    if not any(os.path.exists(h) for h in headers):
        raise BaselineUnavailable(f"{library} convolution needs its dnnl.h: none of {headers}")
    major = int(os.path.basename(os.path.realpath(path)).split(".so.")[1].split(".")[0])  # libdnnl.so.3.2
    stride = int(dict(workload.op.params).get("stride", 1))
    libdir = os.path.dirname(path)
    libs = (f"-Wl,--no-as-needed,{path}", f"-Wl,-rpath,{libdir}", *lib.link)
    name = f"{library}-blocked" if blocked else library
    code = _onednn_conv_source(path, workload.size, stride, threads, blocked, name, major)
    # the library's own headers first: Debian's 2.x dnnl.h sits in /usr/include, on every default path
    cflags = tuple(f"-I{d}" for d in lib.include)
    return KernelSource(code=code, target="any", cflags=cflags, libs=libs)


def _render_tvm_conv(candidate: Candidate, workload: Workload, threads: int) -> KernelSource:
    from kernels import tvm_conv

    module = candidate.option("module", None)
    if not module:
        raise ValueError("baseline tvm needs option module=<the .so harness tvm-tune exported>")
    if threads != 1:
        raise ValueError(f"baseline tvm is tuned for one core; threads={threads} is not supported")
    if reason := tvm_conv.unavailable():
        raise BaselineUnavailable(f"tvm: {reason}")
    if not os.path.exists(str(module)):
        raise BaselineUnavailable(f"tvm: no module {module} (harness tvm-tune exports it)")
    include, ffi = tvm_conv.ffi_paths()
    libs = tuple(f"-Wl,--no-as-needed,{f}" for f in (module, ffi)) + tuple(
        f"-Wl,-rpath,{os.path.dirname(os.path.realpath(str(f)))}" for f in (module, ffi)
    )
    code = tvm_conv.wrapper_source(Path(str(module)), workload)
    return KernelSource(code=code, target="any", cflags=(f"-I{include}",), libs=libs)


#: Baselines of the convolution only (not matmul libraries): oneDNN (3.x and Debian's 2.6) in the layouts it
#: chooses, a TVM module tuned for the layer (kernels.tvm_conv; option ``module``: the exported library),
#: and PyTorch with its weights pre-packed as inference after freezing holds them.
CONV_ONLY = ("onednn-blocked", "onednn-2.6-blocked", "tvm", "torch-packed")
#: PyTorch (kernels.torch_baseline): torch.mm on matmul, conv2d on channels_last tensors.
FRAMEWORKS = ("torch",)
#: The baselines kernels.torch_baseline renders (its NAMES).
TORCH = torch_baseline.NAMES
#: Every name a baseline candidate may have.
BASELINE_NAMES = (*sorted(BLAS), *FRAMEWORKS, *CONV_ONLY)
#: oneDNN's convolution baselines -> (library of BLAS, in oneDNN's own activation layouts)
_ONEDNN_CONV = {"onednn": ("onednn", False), "onednn-blocked": ("onednn", True),
                "onednn-2.6": ("onednn-2.6", False), "onednn-2.6-blocked": ("onednn-2.6", True)}  # fmt: skip


def check_name(name: str) -> None:
    """An unknown baseline name is bad input: ValueError listing the known ones."""
    if name not in BASELINE_NAMES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINE_NAMES)}")


def library_info(name: str) -> LibraryInfo:
    """Library, exact version (None: not installed here), source and code path of baseline ``name``."""
    check_name(name)
    # a library's other layouts are the same library: one probe each
    return _library_info(
        _ONEDNN_CONV[name][0] if name in _ONEDNN_CONV else "torch" if name in TORCH else name
    )


@functools.cache
def _library_info(name: str) -> LibraryInfo:
    if name == "torch":
        return LibraryInfo("torch", torch_baseline.version(), "pypi", "")
    if name == "tvm":
        return LibraryInfo("tvm", versions.package_version("apache-tvm"), "pypi")
    lib = BLAS[name]
    library = lib.library or name
    try:
        path = find_library(lib)
    except BaselineUnavailable:
        return LibraryInfo(library, None, lib.source)
    if name == "libxsmm":  # a static archive: its version is in its header
        header = "/usr/include/libxsmm_version.h"
        return LibraryInfo(library, versions.header_version(header, "LIBXSMM_CONFIG_VERSION"), lib.source)
    found = versions.probe(lib.probe[0], path, *lib.probe[1:])
    if "error" in found:
        return LibraryInfo(library, None, lib.source, found["error"])
    return LibraryInfo(library, found["version"], lib.source, found.get("impl", ""))


def versioned(candidate: Candidate) -> Candidate:
    """A baseline candidate with the installed library's version among its options, so the version is part
    of its key: a row of another version (an older oneDNN stored under the same name) is never reused."""
    gemm = candidate.option("gemm")
    if candidate.kind == "conv_algo" and gemm in BLAS and candidate.option("gemm_version") is None:
        # im2col + a library's sgemm: the library's version belongs to the candidate's key as well
        gemm_version = library_info(str(gemm)).version or "not installed"
        return Candidate(
            candidate.kind,
            candidate.text,
            tuple(sorted({**dict(candidate.options), "gemm_version": gemm_version}.items())),
        )
    if candidate.kind != "baseline" or candidate.option("version") is not None:
        return candidate
    version = library_info(candidate.text).version or "not installed"
    return Candidate(
        "baseline", candidate.text, tuple(sorted({**dict(candidate.options), "version": version}.items()))
    )


def render_baseline(candidate: Candidate, workload: Workload) -> KernelSource:
    name = candidate.text
    check_name(name)
    # threads: the library's own pool (1 unless the run is parallel: compare like with like)
    threads = int(candidate.option("threads", 1))  # type: ignore[call-overload]
    if threads < 1:
        raise ValueError(f"baseline {name}: threads must be >= 1, got {threads}")
    if name in _ONEDNN_CONV and workload.op.name == "conv2d":
        library, blocked = _ONEDNN_CONV[name]
        return _render_onednn_conv(workload, library, threads, blocked)
    if name == "tvm" and workload.op.name == "conv2d":
        return _render_tvm_conv(candidate, workload, threads)
    if name in TORCH:
        return torch_baseline.render_candidate(candidate, workload)
    if name in CONV_ONLY:
        raise BaselineUnavailable(f"baseline {name} is a convolution, not {workload.op.name}")
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
    return KernelSource(code=_source(lib, path, workload.size, threads), target="any", libs=tuple(libs))
