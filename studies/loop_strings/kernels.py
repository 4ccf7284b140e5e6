"""PARLOOPER loop strings (seed 003, Georganas et al., §II) around a batch-reduce GEMM core.

A ``loop_spec_string`` names the logical loops with letters in declaration order (``a``, ``b``, ``c``...):
- leftmost = outermost; a letter may appear several times: occurrences - 1 = blocking levels. Occurrence
  0 of x runs over [start, end); occurrence j > 0 over [x_{j-1}, x_{j-1} + blocks[j-1]); a non-last
  occurrence steps by blocks[j], the last one by the loop's step; the body sees the last occurrence.
  Blockings must nest perfectly (each block a multiple of the next, the last a multiple of the step,
  the extent a multiple of the first block);
- an upper-case letter is parallel (PAR-MODE 1, OpenMP): the nest sits in one ``omp parallel`` region,
  lower-case loops outside run redundantly in every thread, the parallel loops become
  ``omp for collapse(k) nowait`` and must be consecutive; ``@clauses`` after the letters are appended to
  that ``omp for`` (e.g. ``@schedule(dynamic,1)``); ``|`` after a letter puts ``omp barrier`` after
  that loop closes. As in PARLOOPER, synchronisation is the string's: a reduction loop outside ``nowait``
  parallel loops is safe with a static schedule (each thread keeps its blocks from one step to the next)
  and races with a dynamic one unless a barrier follows the parallel loops;
- PAR-MODE 2: ``{R:n}``, ``{C:n}``, ``{L:n}`` after an upper-case letter split it into n contiguous
  blocks over the rows / columns / layers of an explicit thread grid (the capitals need not be adjacent).

Restrictions of ours (each an error naming it): a barrier inside a work-shared loop or in grid mode
(threads would not all reach it), a collapse over two levels of the same letter (not rectangular, which
OpenMP's collapse needs), ``@`` without an OpenMP parallel loop, mixing both modes.

GEMM (``C[i,j] += A[i,k] * B[k,j]``, the harness's row-major tensors): loops a = K blocks, b = M blocks,
c = N blocks (the paper's Listing 1), body = one BRGEMM of ``k_step`` blocks: C[bm x bn] += sum over the
batch of A[bm x bk] * B[bk x bn]. The tensors are addressed in place with leading dimensions (the
harness's ABI gives plain row-major tensors; the paper's blocked layouts would add a timed copy). Cores:
``libxsmm`` (``libxsmm_smmdispatch_reducebatch_strd`` from Debian's libxsmm 1.17, JIT) and ``c`` (an
AVX2 4x16 register-blocked microkernel of ours).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from harness.build import isa_flags
from kernels.candidate import Candidate, KernelSource, Workload

GRID_AXES = ("R", "C", "L")
CORES = ("libxsmm", "c")
LAYOUTS = ("plain", "blocked")  # GEMM operands: row-major in place, or packed into blocks in the call
_TOKEN = re.compile(r"([A-Za-z])(?:\{([^}]*)\})?(\|)?")


class LoopStringError(ValueError):
    """An illegal loop_spec_string or loop declaration; the message names the rule."""


@dataclass(frozen=True)
class Occurrence:
    letter: str  # lower case
    level: int  # 0 = outermost occurrence of this letter
    parallel: bool
    grid: str | None = None  # R | C | L (PAR-MODE 2)
    ways: int = 1
    barrier: bool = False


@dataclass(frozen=True)
class LoopSpec:
    """One logical loop: [start, end) by step, with the block list (outermost first)."""

    start: int
    end: int
    step: int
    blocks: tuple[int, ...] = ()


@dataclass(frozen=True)
class LoopString:
    text: str
    occurrences: tuple[Occurrence, ...]
    clauses: str  # after '@'
    letters: str  # the declared loops, in order

    @property
    def mode(self) -> str:
        """``serial``, ``omp`` (PAR-MODE 1) or ``grid`` (PAR-MODE 2)."""
        if any(o.grid for o in self.occurrences):
            return "grid"
        return "omp" if any(o.parallel for o in self.occurrences) else "serial"

    def count(self, letter: str) -> int:
        return sum(1 for o in self.occurrences if o.letter == letter)

    @property
    def grid_threads(self) -> int:
        return math.prod(o.ways for o in self.occurrences if o.grid) if self.mode == "grid" else 1


def _err(text: str, rule: str, why: str) -> LoopStringError:
    return LoopStringError(f"illegal loop string {text!r}: {why} [rule: {rule}]")


def parse_loop_string(text: str, letters: str = "abc") -> LoopString:
    """Parse and check a loop_spec_string for the declared loops ``letters`` (see the module doc)."""
    if not isinstance(text, str) or not text.strip():
        raise _err(str(text), "syntax", "empty loop string")
    body, sep, clauses = text.partition("@")
    if sep and ("@" in clauses or not clauses.strip()):
        raise _err(text, "directive", "one '@' followed by OpenMP clauses, e.g. @schedule(dynamic,1)")
    pos, occ, seen = 0, [], {}
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if not m:
            raise _err(text, "syntax", f"unexpected {body[pos]!r} at position {pos}")
        ch, grid, bar = m.groups()
        low = ch.lower()
        if low not in letters:
            raise _err(text, "unknown-loop", f"letter {ch!r} names no declared loop (declared: {letters})")
        g, ways = None, 1
        if grid is not None:
            gm = re.fullmatch(r"\s*([RCL])\s*:\s*(\d+)\s*", grid)
            if not gm:
                raise _err(text, "grid", f"{{{grid}}} is not {{R:n}}, {{C:n}} or {{L:n}}")
            if ch.islower():
                raise _err(
                    text, "grid", f"a thread grid {{{grid}}} needs a parallel (upper-case) loop, not {ch!r}"
                )
            g, ways = gm.group(1), int(gm.group(2))
            if ways < 1:
                raise _err(text, "grid", f"{{{grid}}}: a grid dimension needs at least one thread")
        level = seen.get(low, 0)
        seen[low] = level + 1
        occ.append(Occurrence(low, level, ch.isupper(), g, ways, bool(bar)))
        pos = m.end()
    missing = [x for x in letters if x not in seen]
    if missing:
        raise _err(text, "every-loop", f"loops {missing} do not appear (each declared loop needs a letter)")
    par = [k for k, o in enumerate(occ) if o.parallel]
    grids = [o for o in occ if o.grid]
    if grids and len(grids) != len(par):
        raise _err(text, "mode", "mixes grid-parallel ({R|C|L:n}) and OpenMP-parallel capitals")
    if grids:
        axes = [o.grid for o in grids]
        if len(set(axes)) != len(axes):
            raise _err(text, "grid", f"a grid axis is used twice: {axes}")
        if sep:
            raise _err(text, "directive", "'@' clauses apply to an OpenMP for (PAR-MODE 1), not to grids")
        if any(o.barrier for o in occ):
            raise _err(text, "barrier", "'|' in grid mode: threads do not all reach the barrier")
    elif par:
        if par != list(range(par[0], par[-1] + 1)):
            raise _err(text, "collapse", "parallel (upper-case) loops must be consecutive (one collapse)")
        group = [occ[k].letter for k in par]
        if len(set(group)) != len(group):
            raise _err(text, "collapse", "collapsing two levels of one loop is not rectangular")
        if any(o.barrier for o in occ[par[0] :]):
            raise _err(text, "barrier", "'|' inside a work-shared (parallel) loop: a barrier must be outside")
    elif sep:
        raise _err(text, "directive", "'@' clauses without a parallel (upper-case) loop")
    return LoopString(text, tuple(occ), clauses.strip(), letters)


def check_specs(ls: LoopString, specs: Mapping[str, LoopSpec]) -> None:
    """Perfect nesting of every blocked loop (PARLOOPER's POC requirement)."""
    for x in ls.letters:
        sp, n = specs[x], ls.count(x)
        if sp.step < 1 or sp.end <= sp.start:
            raise _err(ls.text, "spec", f"loop {x}: empty range or step < 1 ({sp})")
        if len(sp.blocks) < n - 1:
            raise _err(
                ls.text,
                "blocks",
                f"loop {x} appears {n} times: it needs {n - 1} block sizes, got {list(sp.blocks)}",
            )
        chain = [sp.end - sp.start, *sp.blocks[: n - 1], sp.step]
        for outer, inner in itertools.pairwise(chain):
            if inner < 1 or outer % inner:
                raise _err(
                    ls.text, "nesting", f"loop {x}: {outer} is not a multiple of {inner} (chain {chain})"
                )


# -- C generation ---------------------------------------------------------------------------------------
def _loop_header(o: Occurrence, ls: LoopString, sp: LoopSpec) -> tuple[str, str, str]:
    """(variable, lower bound, upper bound) and the step of one occurrence."""
    n = ls.count(o.letter)
    var = f"{o.letter}{o.level}"
    if o.level == 0:
        lo, hi = str(sp.start), str(sp.end)
    else:
        prev = f"{o.letter}{o.level - 1}"
        lo, hi = prev, f"{prev} + {sp.blocks[o.level - 1]}"
    step = sp.blocks[o.level] if o.level < n - 1 else sp.step
    return var, f"{lo}|{hi}", str(step)


def generate_nest(ls: LoopString, specs: Mapping[str, LoopSpec], body: str) -> str:
    """The C loop nest of ``ls`` around ``body`` (which reads ``ind_<letter>``, the last occurrences).

    The team size is the runtime's (``OMP_NUM_THREADS``, which the driver sets from ``timing.threads``);
    a grid of more positions than threads is covered by threads taking several positions in turn."""
    check_specs(ls, specs)
    lines: list[str] = []
    ind = "  "
    par = [o for o in ls.occurrences if o.parallel]
    first_par = next((k for k, o in enumerate(ls.occurrences) if o.parallel), None)
    closers: list[str] = []
    if ls.mode == "grid":
        nt = ls.grid_threads
        cols = {g: 1 for g in GRID_AXES}
        for o in par:
            cols[o.grid] = o.ways  # type: ignore[index]
        lines.append(f"{ind}#pragma omp parallel")
        lines.append(f"{ind}{{")
        lines.append(
            f"{ind}  for (int tid = omp_get_thread_num(); tid < {nt}; tid += omp_get_num_threads()) {{"
        )
        lines.append(f"{ind}    const int grid_R = tid / ({cols['C']} * {cols['L']});")
        lines.append(f"{ind}    const int grid_C = (tid / {cols['L']}) % {cols['C']};")
        lines.append(f"{ind}    const int grid_L = tid % {cols['L']};")
        lines.append(f"{ind}    (void)grid_R; (void)grid_C; (void)grid_L;")
        ind += "    "
        closers = ["  }", "  }"]
    elif ls.mode == "omp":
        lines.append(f"{ind}#pragma omp parallel")
        lines.append(f"{ind}{{")
        ind += "  "
        closers = ["  }"]
    depth_closers: list[str] = []
    for k, o in enumerate(ls.occurrences):
        sp = specs[o.letter]
        var, bounds, step = _loop_header(o, ls, sp)
        lo, hi = bounds.split("|")
        if ls.mode == "omp" and k == first_par:
            clause = f" {ls.clauses}" if ls.clauses else ""
            lines.append(f"{ind}#pragma omp for collapse({len(par)}){clause} nowait")
        if o.grid:
            # contiguous blocks of the iteration range, one per grid position on this axis
            cnt = f"(({hi}) - ({lo})) / {step}"
            lines.append(
                f"{ind}{{ const int n_{var} = {cnt}, ch_{var} = (n_{var} + {o.ways - 1}) / {o.ways};"
            )
            lines.append(
                f"{ind}  for (int {var} = ({lo}) + grid_{o.grid} * ch_{var} * {step}; "
                f"{var} < ({lo}) + MIN(n_{var}, (grid_{o.grid} + 1) * ch_{var}) * {step}; {var} += {step}) {{"
            )
            depth_closers.append(f"{ind}}} }}")
        else:
            lines.append(f"{ind}for (int {var} = {lo}; {var} < {hi}; {var} += {step}) {{")
            depth_closers.append(f"{ind}}}" + ("\n" + ind + "#pragma omp barrier" if o.barrier else ""))
        ind += "  "
    for x in ls.letters:
        lines.append(f"{ind}const int ind_{x} = {x}{ls.count(x) - 1};")
    lines += [ind + ln for ln in body.strip("\n").splitlines()]
    lines += reversed(depth_closers)
    lines += closers
    return "\n".join(lines)


@dataclass(frozen=True)
class GemmParams:
    bm: int = 32
    bn: int = 32
    bk: int = 32
    k_step: int = 1  # BRGEMM batch count (blocks of K per call)
    blocks: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((), (), ())  # a, b, c (block units)
    core: str = "c"
    layout: str = "plain"  # LAYOUTS


def gemm_params(candidate: Candidate) -> GemmParams:
    opt = dict(candidate.options)
    blocks = tuple(tuple(int(v) for v in opt.get(f"blocks_{x}", ()) or ()) for x in "abc")
    p = GemmParams(
        int(opt.get("bm", 32)), int(opt.get("bn", 32)), int(opt.get("bk", 32)), int(opt.get("k_step", 1)),
        blocks, str(opt.get("core", "c")), str(opt.get("layout", "plain")),
    )  # fmt: skip
    if p.core not in CORES:
        raise LoopStringError(f"core={p.core!r} unknown; allowed: {', '.join(CORES)}")
    if p.layout not in LAYOUTS:
        raise LoopStringError(f"layout={p.layout!r} unknown; allowed: {', '.join(LAYOUTS)}")
    return p


def gemm_specs(p: GemmParams, sizes: Mapping[str, int]) -> dict[str, LoopSpec]:
    m, n, k = sizes["i"], sizes["j"], sizes["k"]
    for dim, size, blk in (("M", m, p.bm), ("N", n, p.bn), ("K", k, p.bk)):
        if blk < 1 or size % blk:
            raise LoopStringError(f"{dim}={size} is not a multiple of its block {blk} [rule: blocking]")
    if p.core == "c" and p.bn % 16:
        raise LoopStringError(f"core c needs bn % 16 == 0 (two AVX2 vectors), got bn={p.bn} [rule: core]")
    return {
        "a": LoopSpec(0, k // p.bk, p.k_step, p.blocks[0]),
        "b": LoopSpec(0, m // p.bm, 1, p.blocks[1]),
        "c": LoopSpec(0, n // p.bn, 1, p.blocks[2]),
    }


_C_CORE = """
/* BRGEMM of ours: C[BM x BN] (ld LDC) += sum_t A_t[BM x BK] (ld LDA) * B_t[BK x BN] (ld LDB),
   A_t = a + t*A_STEP, B_t = b + t*B_STEP; 4x16 register blocks (8 accumulators), AVX2 FMA; rows left over
   when BM is not a multiple of 4 take a 1x16 block. */
#define ROWS(NR)                                                                                 \
  {                                                                                              \
    __m256 acc[NR][2];                                                                           \
    for (int r = 0; r < NR; ++r) {                                                               \
      acc[r][0] = _mm256_loadu_ps(c + (i + r) * LDC + j);                                        \
      acc[r][1] = _mm256_loadu_ps(c + (i + r) * LDC + j + 8);                                    \
    }                                                                                            \
    for (int t = 0; t < count; ++t) {                                                            \
      const float *at = a + (long)t * A_STEP + i * LDA;                                          \
      const float *bt = b + (long)t * B_STEP + j;                                                \
      for (int kk = 0; kk < BK; ++kk) {                                                          \
        const __m256 b0 = _mm256_loadu_ps(bt + kk * LDB), b1 = _mm256_loadu_ps(bt + kk * LDB + 8); \
        for (int r = 0; r < NR; ++r) {                                                           \
          const __m256 av = _mm256_broadcast_ss(at + r * LDA + kk);                              \
          acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);                                        \
          acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);                                        \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
    for (int r = 0; r < NR; ++r) {                                                               \
      _mm256_storeu_ps(c + (i + r) * LDC + j, acc[r][0]);                                        \
      _mm256_storeu_ps(c + (i + r) * LDC + j + 8, acc[r][1]);                                    \
    }                                                                                            \
  }
static inline void brgemm(const float *restrict a, const float *restrict b, float *restrict c, int count) {
  for (int j = 0; j < BN; j += 16) {
    int i = 0;
    for (; i + 4 <= BM; i += 4) ROWS(4)
    for (; i < BM; ++i) ROWS(1)
  }
}
"""

# PARLOOPER's tensors are stored blocked; ours arrive row-major, so the kernel packs them into the workspace
# inside the timed call (as oneDNN's matmul packs its operands): A as [M/BM][K/BK][BM][BK], B as
# [N/BN][K/BK][BK][BN], each BRGEMM batch then reads contiguous blocks (row-major blocks at a 4 KiB
# stride, e.g. N = 1024, fall into a few cache sets and run at half speed). C stays row-major.
_PACK_BLOCKED = """
  float *restrict Ab = (float *)workspace, *restrict Bb = Ab + (long)M * K;
  #pragma omp parallel for collapse(2) if (PACK_PARALLEL)
  for (int mb = 0; mb < M / BM; ++mb)
    for (int kb = 0; kb < KB; ++kb)
      for (int r = 0; r < BM; ++r)
        memcpy(Ab + (((long)mb * KB + kb) * BM + r) * BK, A + ((long)mb * BM + r) * K + kb * BK,
               BK * sizeof(float));
  #pragma omp parallel for collapse(2) if (PACK_PARALLEL)
  for (int nb = 0; nb < N / BN; ++nb)
    for (int kb = 0; kb < KB; ++kb)
      for (int r = 0; r < BK; ++r)
        memcpy(Bb + (((long)nb * KB + kb) * BK + r) * BN, B + ((long)kb * BK + r) * N + nb * BN,
               BN * sizeof(float));"""

_XSMM_CORE = """
/* libxsmm's batch-reduce GEMM (column-major): C^T[BN x BM] += sum_t B_t^T[BN x BK] * A_t^T[BK x BM],
   i.e. m = BN, n = BM, k = BK, first operand B (ld LDB), second A (ld LDA); batch strides in bytes. */
typedef int xsmm_int;
typedef void (*xsmm_brgemm)(const float *a, const float *b, float *c, const unsigned long long *count, ...);
extern void libxsmm_init(void);
extern xsmm_brgemm libxsmm_smmdispatch_reducebatch_strd(xsmm_int m, xsmm_int n, xsmm_int k, xsmm_int stride_a,
    xsmm_int stride_b, const xsmm_int *lda, const xsmm_int *ldb, const xsmm_int *ldc, const float *alpha,
    const float *beta, const int *flags, const int *prefetch);
static xsmm_brgemm xsmm_kernel;
static int brgemm_init(void) {
  const xsmm_int lda = LDB, ldb = LDA, ldc = LDC;
  const float one = 1.0f;
  libxsmm_init();
  xsmm_kernel = libxsmm_smmdispatch_reducebatch_strd(BN, BM, BK, (xsmm_int)(B_STEP * sizeof(float)),
      (xsmm_int)(A_STEP * sizeof(float)), &lda, &ldb, &ldc, &one, &one, 0, 0);
  return xsmm_kernel ? 0 : 1;
}
static inline void brgemm(const float *a, const float *b, float *c, int count) {
  const unsigned long long n = (unsigned long long)count;
  xsmm_kernel(b, a, c, &n);
}
"""


def _core(core: str) -> tuple[str, tuple[str, ...], str]:
    """(C code, libraries, per-call initialisation) of a BRGEMM core."""
    if core != "libxsmm":
        return _C_CORE, (), ""
    import os

    from kernels.baselines import BLAS, find_library

    lib = BLAS["libxsmm"]
    path = find_library(lib)
    # the archive and libxsmmnoblas (no BLAS is ever called under the libxsmm name), as the baseline
    files = [path, *(e.format(dir=os.path.dirname(path)) for e in lib.extra)]
    init = "  static int ready = 0;\n  if (!ready) { if (brgemm_init()) return 3; ready = 1; }\n"
    return _XSMM_CORE, (*(f"-Wl,--no-as-needed,{f}" for f in files), *lib.link), init


def _source(
    header: str, macros: Mapping[str, int], core: str, ls: LoopString, nest: str, tensors: str
) -> KernelSource:
    parallel = ls.mode != "serial"
    code_core, libs, init = _core(core)
    defs = "\n".join(f"#define {k} {v}" for k, v in macros.items())
    code = f"""/* {header} */
#include <immintrin.h>
#include <string.h>
#define PACK_PARALLEL {int(parallel)}
{"#include <omp.h>" if parallel else ""}
#define MIN(a, b) ((a) < (b) ? (a) : (b))
{defs}
{code_core}
int kernel(float *const *tensors, void *workspace) {{
  (void)workspace;
{tensors}
{init}{nest}
  return 0;
}}
"""
    libs = (*libs, "-lgomp") if parallel else libs
    omp = ("-fopenmp",) if parallel else ()
    if core == "libxsmm":
        # libxsmm's JIT picks its code path by CPUID (AVX-512 where there is one), as the library baselines
        # do: % of peak is of this machine's best ISA (target "any"), not of AVX2's, which read 150-160%
        # on an AVX-512 machine. The loops and packing around it are still compiled for AVX2.
        return KernelSource(code=code, target="any", cflags=(*isa_flags("avx2"), *omp), libs=libs)
    return KernelSource(code=code, target="avx2", cflags=omp, libs=libs)


def render_loop_string(candidate: Candidate, workload: Workload) -> KernelSource:
    """C of a loop-string GEMM or convolution (candidate text = the loop string, options = the params)."""
    if workload.op.name == "conv2d":
        return render_conv(candidate, workload)
    if workload.op.name != "matmul":
        raise LoopStringError(f"loop strings are generated for matmul and conv2d, not {workload.op.name}")
    p = gemm_params(candidate)
    ls = parse_loop_string(candidate.text, "abc")
    specs = gemm_specs(p, workload.size)
    m, n, k = (workload.size[d] for d in "ijk")
    layout = p.layout
    if layout == "blocked":
        body = (
            "brgemm(Ab + ((long)ind_b * KB + ind_a) * BM * BK, Bb + ((long)ind_c * KB + ind_a) * BK * BN,\n"
            f"       C + (long)ind_b * BM * LDC + ind_c * BN, {p.k_step});"
        )
    else:
        body = (
            "brgemm(A + (long)ind_b * BM * LDA + ind_a * BK, B + (long)ind_a * BK * LDB + ind_c * BN,\n"
            f"       C + (long)ind_b * BM * LDC + ind_c * BN, {p.k_step});"
        )
    lists = " ".join(f"{x}={list(b)}" for x, b in zip("abc", p.blocks, strict=True))
    header = (
        f"loop string {candidate.text!r} (PARLOOPER, seed 003): GEMM {m}x{n}x{k},\n   blocks bm={p.bm} "
        f"bn={p.bn} bk={p.bk}, k_step={p.k_step}, block lists {lists}, core {p.core}, mode {ls.mode}, "
        f"layout {layout}"
    )
    tensors = (
        "  float *restrict C = tensors[0];\n  const float *restrict A = tensors[1];\n"
        "  const float *restrict B = tensors[2];"
    )
    if layout == "plain":
        macros = {"BM": p.bm, "BN": p.bn, "BK": p.bk, "LDA": k, "LDB": n, "LDC": n, "A_STEP": p.bk,
                  "B_STEP": p.bk * n}  # fmt: skip
        return _source(header, macros, p.core, ls, generate_nest(ls, specs, body), tensors)
    macros = {"BM": p.bm, "BN": p.bn, "BK": p.bk, "LDA": p.bk, "LDB": p.bn, "LDC": n, "A_STEP": p.bm * p.bk,
              "B_STEP": p.bk * p.bn, "M": m, "N": n, "K": k, "KB": k // p.bk}  # fmt: skip
    src = _source(header, macros, p.core, ls, generate_nest(ls, specs, body), tensors + _PACK_BLOCKED)
    return replace(src, workspace_bytes=4 * (m * k + k * n))


# ResNet-50 v1.5 convolutions of the paper's Fig 7 [repo shapes], batch 1, no padding (our operator has
# none: the output extent is as listed, the input carries the halo): name -> (C, K, P=Q, R=S, stride).
RESNET50: dict[str, tuple[int, int, int, int, int]] = {
    "res2-1x1-64-256": (64, 256, 56, 1, 1), "res2-1x1-64-64": (64, 64, 56, 1, 1),
    "res2-3x3-64-64": (64, 64, 56, 3, 1), "res2-1x1-256-64": (256, 64, 56, 1, 1),
    "res3-1x1-256-512-s2": (256, 512, 28, 1, 2), "res3-1x1-256-128-s2": (256, 128, 28, 1, 2),
    "res3-3x3-128-128": (128, 128, 28, 3, 1), "res3-1x1-128-512": (128, 512, 28, 1, 1),
    "res3-1x1-512-128": (512, 128, 28, 1, 1), "res4-1x1-512-1024-s2": (512, 1024, 14, 1, 2),
    "res4-1x1-512-256-s2": (512, 256, 14, 1, 2), "res4-3x3-256-256": (256, 256, 14, 3, 1),
    "res4-1x1-256-1024": (256, 1024, 14, 1, 1), "res4-1x1-1024-256": (1024, 256, 14, 1, 1),
    "res5-1x1-1024-2048-s2": (1024, 2048, 7, 1, 2), "res5-1x1-1024-512-s2": (1024, 512, 7, 1, 2),
    "res5-3x3-512-512": (512, 512, 7, 3, 1), "res5-1x1-512-2048": (512, 2048, 7, 1, 1),
    "res5-1x1-2048-512": (2048, 512, 7, 1, 1),
}  # fmt: skip


def resnet50_layer(name: str) -> tuple[dict[str, int], int, ConvParams]:
    """Sizes, stride and default blocking (bc, bk <= 32 dividing C, K; bw the largest divisor of Q <= 14)."""
    c, k, q, r, st = RESNET50[name]
    bw = max(d for d in range(1, 15) if q % d == 0)
    sizes = {"h": q, "w": q, "k": k, "c": c, "r": r, "s": r}
    return sizes, st, ConvParams(bc=min(c, 32), bk=min(k, 32), bw=bw)


# -- convolution (the paper's Listing 4 on the harness's layouts) ----------------------------------------
# Loops: a = input-channel blocks (the BRGEMM batch), b = output-channel blocks, c = output rows (P),
# d = output-column blocks (Q), e = kernel rows (R), f = kernel columns (S); batch N = 1. One BRGEMM:
# O[p][q0:q0+bw][k0:k0+bk] += sum over c_step channel blocks of I[p*st+r][(q0..)*st+s][c0:c0+bc] *
# K[r][s][c0:c0+bc][k0:k0+bk]: M = bw (input rows st*C apart), N = bk, K = bc, stride-based batch.
CONV_LETTERS = "abcdef"


@dataclass(frozen=True)
class ConvParams:
    bc: int = 32
    bk: int = 32
    bw: int = 7
    c_step: int = 1
    blocks: tuple[tuple[int, ...], ...] = ((), (), (), (), (), ())
    core: str = "c"
    layout: str = "plain"  # LAYOUTS: the weights as given (HWIO), or in blocks kept across calls


def conv_params(candidate: Candidate) -> ConvParams:
    opt = dict(candidate.options)
    blocks = tuple(tuple(int(v) for v in opt.get(f"blocks_{x}", ()) or ()) for x in CONV_LETTERS)
    p = ConvParams(
        int(opt.get("bc", 32)), int(opt.get("bk", 32)), int(opt.get("bw", 7)), int(opt.get("c_step", 1)),
        blocks, str(opt.get("core", "c")), str(opt.get("layout", "plain")),
    )  # fmt: skip
    if p.core not in CORES:
        raise LoopStringError(f"core={p.core!r} unknown; allowed: {', '.join(CORES)}")
    if p.layout not in LAYOUTS:
        raise LoopStringError(f"layout={p.layout!r} unknown; allowed: {', '.join(LAYOUTS)}")
    return p


def conv_specs(p: ConvParams, sizes: Mapping[str, int]) -> dict[str, LoopSpec]:
    for dim, blk in (("c", p.bc), ("k", p.bk), ("w", p.bw)):
        if blk < 1 or sizes[dim] % blk:
            raise LoopStringError(f"{dim}={sizes[dim]} is not a multiple of its block {blk} [rule: blocking]")
    if p.core == "c" and p.bk % 16:
        raise LoopStringError(f"core c needs bk % 16 == 0 (two AVX2 vectors), got bk={p.bk} [rule: core]")
    trips = {"a": sizes["c"] // p.bc, "b": sizes["k"] // p.bk, "c": sizes["h"], "d": sizes["w"] // p.bw,
             "e": sizes["r"], "f": sizes["s"]}  # fmt: skip
    return {
        x: LoopSpec(0, trips[x], p.c_step if x == "a" else 1, p.blocks[k]) for k, x in enumerate(CONV_LETTERS)
    }


def conv_candidate(text: str, params: ConvParams) -> Candidate:
    opts: dict[str, object] = {
        "bc": params.bc, "bk": params.bk, "bw": params.bw, "c_step": params.c_step, "core": params.core,
        "target": "avx2",
        **{f"blocks_{x}": tuple(b) for x, b in zip(CONV_LETTERS, params.blocks, strict=True) if b},
        **({"layout": params.layout} if params.layout != "plain" else {}),
    }  # fmt: skip
    return Candidate("loop_string", text, tuple(sorted(opts.items())))


# The convolution's weights in PARLOOPER's blocked layout [K/bk][R][S][C/bc][bc][bk], reordered once per
# weights buffer (a call with the same weights and workspace reuses them), as oneDNN reorders constant
# weights once (the onednn-blocked baseline's conversions are untimed). In HWIO a bc x bk block's rows are
# K floats apart: 4-8 KiB for K = 1024-2048, so its 32 rows fall into the same few L1 sets.
_PACK_WEIGHTS = """
  static const void *seen_w, *seen_ws;
  float *restrict Wb = (float *)workspace;
  if ((const void *)Kw != seen_w || workspace != seen_ws) {
    #pragma omp parallel for collapse(2) if (PACK_PARALLEL)
    for (int kb = 0; kb < KO / BN; ++kb)
      for (int rs = 0; rs < SR * SS; ++rs)
        for (int cb = 0; cb < CI / BK; ++cb)
          for (int c = 0; c < BK; ++c)
            memcpy(Wb + (((long)kb * SR * SS + rs) * (CI / BK) + cb) * BK * BN + (long)c * BN,
                   Kw + ((long)rs * CI + cb * BK + c) * KO + kb * BN, BN * sizeof(float));
    seen_w = Kw;
    seen_ws = workspace;
  }"""


def render_conv(candidate: Candidate, workload: Workload) -> KernelSource:
    p = conv_params(candidate)
    ls = parse_loop_string(candidate.text, CONV_LETTERS)
    sz = workload.size
    specs = conv_specs(p, sz)
    st = int(dict(workload.op.params).get("stride", 1))
    wi = (sz["w"] - 1) * st + sz["s"]
    blocked = p.layout == "blocked"
    weights = (
        "Wb + (((long)ind_b * SR * SS + ind_e * SS + ind_f) * (CI / BK) + ind_a) * BK * BN"
        if blocked
        else "Kw + ((long)(ind_e * SS + ind_f) * CI + ind_a * BK) * KO + ind_b * BN"
    )
    body = (
        "brgemm(I + ((long)(ind_c * ST + ind_e) * WI + ind_d * BM * ST + ind_f) * CI + ind_a * BK,\n"
        f"       {weights},\n"
        f"       O + ((long)ind_c * WO + ind_d * BM) * KO + ind_b * BN, {p.c_step});"
    )
    header = (
        f"loop string {candidate.text!r} (PARLOOPER Listing 4, seed 003): conv {dict(sz)} stride {st},\n   "
        f"bc={p.bc} bk={p.bk} bw={p.bw} c_step={p.c_step}, core {p.core}, mode {ls.mode}, weights {p.layout}"
    )
    ldb = p.bk if blocked else sz["k"]
    macros = {"BM": p.bw, "BN": p.bk, "BK": p.bc, "LDA": st * sz["c"], "LDB": ldb, "LDC": sz["k"],
              "A_STEP": p.bc, "B_STEP": p.bc * ldb, "ST": st, "WI": wi, "WO": sz["w"], "CI": sz["c"],
              "KO": sz["k"], "SR": sz["r"], "SS": sz["s"]}  # fmt: skip
    tensors = (
        "  float *restrict O = tensors[0];\n  const float *restrict I = tensors[1];\n"
        "  const float *restrict Kw = tensors[2];"
    )
    src = _source(header, macros, p.core, ls, generate_nest(ls, specs, body),
                  tensors + (_PACK_WEIGHTS if blocked else ""))  # fmt: skip
    return replace(src, workspace_bytes=4 * sz["r"] * sz["s"] * sz["c"] * sz["k"]) if blocked else src


def enumerate_conv(
    sizes: Mapping[str, int],
    params: ConvParams,
    parallel: bool = False,
    limit: int | None = None,
    seed: int = 0,
) -> list[Candidate]:
    """Every order of the six loops (no extra blocking), batch over all or one channel block, and with
    ``parallel`` one or two consecutive output loops (b, c, d) upper case; a seeded sample of ``limit``."""
    import random

    cb = sizes["c"] // params.bc
    steps = sorted({1, cb})
    out: dict[str, Candidate] = {}
    for order in itertools.permutations(CONV_LETTERS):
        texts = ["".join(order)]
        if parallel:
            texts = []
            for start in range(6):
                for end in (start + 1, start + 2):
                    grp = order[start:end]
                    if end <= 6 and all(x in "bcd" for x in grp):
                        texts.append("".join(order[:start]) + "".join(grp).upper() + "".join(order[end:]))
        for step in steps:
            p = ConvParams(params.bc, params.bk, params.bw, step, params.blocks, params.core, params.layout)
            for t in texts:
                c = conv_candidate(t, p)
                out.setdefault(c.key, c)
    cands = list(out.values())
    if limit is not None and len(cands) > limit:
        cands = random.Random(seed).sample(cands, limit)
    return cands


def gemm_candidate(text: str, params: GemmParams) -> Candidate:
    opts: dict[str, object] = {
        "bm": params.bm, "bn": params.bn, "bk": params.bk, "k_step": params.k_step, "core": params.core,
        "target": "avx2",
        **{f"blocks_{x}": tuple(b) for x, b in zip("abc", params.blocks, strict=True) if b},
        **({"layout": params.layout} if params.layout != "plain" else {}),
    }  # fmt: skip
    return Candidate("loop_string", text, tuple(sorted(opts.items())))


# -- enumeration (§II-D) --------------------------------------------------------------------------------
def prime_factors(n: int) -> list[int]:
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out + ([n] if n > 1 else [])


def block_choices(trips: int, step: int, levels: int) -> list[tuple[int, ...]]:
    """Block lists of ``levels`` entries (outermost first) from prefix products of the prime factors of
    the trip count, times the step (the paper's constraint 2), perfectly nested and distinct."""
    if levels == 0:
        return [()]
    f = prime_factors(trips // step) if trips % step == 0 else []
    cands = sorted({step * math.prod(f[:j]) for j in range(1, len(f))})  # proper blocks: > step, < extent
    return [tuple(sorted(c, reverse=True)) for c in itertools.combinations(cands, levels)]


def enumerate_gemm(
    sizes: Mapping[str, int],
    params: GemmParams,
    max_a: int = 2,
    max_bc: int = 3,
    parallel: bool = False,
    limit: int | None = None,
    seed: int = 0,
) -> list[Candidate]:
    """Loop strings and block lists for a GEMM under the paper's constraints: a (K) blocked up to
    ``max_a`` occurrences, b and c (M, N) up to ``max_bc``, block sizes from prime-factor prefix products,
    every order of the letters; with ``parallel`` one run of consecutive b/c occurrences upper case.
    ``limit``: a seeded sample of that many (the paper tuned about 1000)."""
    import random

    specs = gemm_specs(params, sizes)
    out: dict[str, Candidate] = {}
    for na, nb, nc in itertools.product(range(1, max_a + 1), range(1, max_bc + 1), range(1, max_bc + 1)):
        choices = [block_choices(specs[x].end - specs[x].start, specs[x].step, cnt - 1) for x, cnt in
                   (("a", na), ("b", nb), ("c", nc))]  # fmt: skip
        if any(not c for c in choices):
            continue
        for order in sorted(set(itertools.permutations("a" * na + "b" * nb + "c" * nc))):
            texts = ["".join(order)]
            if parallel:
                texts = []
                for start in range(len(order)):
                    for end in range(start + 1, min(start + 2, len(order)) + 1):
                        grp = order[start:end]
                        if any(x == "a" for x in grp) or len(set(grp)) != len(grp):
                            continue
                        texts.append("".join(order[:start]) + "".join(grp).upper() + "".join(order[end:]))
            for blocks in itertools.product(*choices):
                p = replace(params, blocks=blocks)  # type: ignore[arg-type]
                for t in texts:
                    c = gemm_candidate(t, p)
                    out.setdefault(c.key, c)
    cands = list(out.values())
    if limit is not None and len(cands) > limit:
        cands = random.Random(seed).sample(cands, limit)
    return cands


def body_indices(ls: LoopString, specs: Mapping[str, LoopSpec]) -> Sequence[dict[str, int]]:
    """The body's (ind_a, ind_b, ...) in execution order of a serial run (for the model and tests)."""
    check_specs(ls, specs)
    out: list[dict[str, int]] = []

    def rec(k: int, env: dict[str, int]) -> None:
        if k == len(ls.occurrences):
            out.append({x: env[f"{x}{ls.count(x) - 1}"] for x in ls.letters})
            return
        o = ls.occurrences[k]
        sp = specs[o.letter]
        n = ls.count(o.letter)
        lo = sp.start if o.level == 0 else env[f"{o.letter}{o.level - 1}"]
        hi = sp.end if o.level == 0 else lo + sp.blocks[o.level - 1]
        step = sp.blocks[o.level] if o.level < n - 1 else sp.step
        for v in range(lo, hi, step):
            env[f"{o.letter}{o.level}"] = v
            rec(k + 1, env)

    rec(0, {})
    return out
