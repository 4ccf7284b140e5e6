"""Convolution algorithms built on GEMM pieces (seed 001, Korostelev, chapter 5): im2col + GEMM and YaConv.

A candidate of kind ``conv_algo`` names the algorithm in its text and its knobs in its options:

- ``im2col``: the Caffe-style patch matrix, then one GEMM (§5.1.1). ``gemm`` = ``blis`` (as the paper),
  ``openblas``, ``mkl``, ... (any library of :data:`kernels.baselines.BLAS`, linked the same way) or
  ``ours`` (a matmul scheme rendered by :mod:`kernels.codegen`, option ``gemm_scheme``).
- ``yaconv``: chapter 5 (§5.2): the image viewed as a [W*C] x [H] matrix, packed once into panels of
  ``NR`` image rows (zero-extended to a multiple of NR); the filter packed per filter row; for every filter
  row ``fh`` and output column ``ow`` one GEMM [H] x [Fw*C] x [M] whose B operand is a sub-range of the
  packed image (no patch copy); results scattered at stride W_out*M into the output rows ``h - fh + Ph``.
  ``ukr`` = ``blis`` (BLIS's own sgemm microkernel, taken from its context as the thesis does) or
  ``ours`` (a register-tiled scheme from the code generator, with the K loop bound made a run-time value).
  ``spill`` = ``margins`` (§5.2.1: an output buffer with (Fh-1-Ph) rows before and (H_extra+Fh-1-Ph)
  rows after the tensor, accumulated into the output at the end) or ``tile`` (default: rows outside the
  output go through one MR x NR temporary tile, so the workspace does not grow with the output).
  Blocking (§5.2.2): the filter is blocked by ``mc`` output channels and ``kc`` of Fw*C, the image by
  ``kc*nc/(W*C)`` rows (rounded to NR), from BLIS's context for ``ukr=blis`` and from options for ours.
- ``direct``: a convolution scheme (option ``scheme``) rendered by the code generator, so "YaConv vs
  im2col vs direct" is one choice in a space.

Layouts: ours is NHWC/HWIO already (``O[h][w][m] += I[h+r][w+s][c] * K[r][s][c][m]``, see
:mod:`kernels.operators`), the layout YaConv was designed for. For im2col the paper's Caffe code builds
the [Fh*Fw*C] x [Hout*Wout] patch matrix from NCHW; on NHWC we build its transpose [Hout*Wout] x
[Fh*Fw*C] row-major (= the same matrix column-major, K ordered (r, s, c)), so every patch row is Fh
memcpy's of Fw*C floats and the GEMM is O[P x M] += Patch[P x K] * Filter[K x M].

Padding: our operator has none (the input tensor is the padded image, ``h + r - 1`` rows), so a paper
layer (H, P) runs with Ph = Pw = 0 on the materialised padded image. The C function ``yaconv_conv`` takes
Ph, Pw anyway (skipped rows land in the spill space, edge columns call the microkernel with a shorter K);
the tests call it directly with padding.

Strides other than 1: YaConv is not applicable (the thesis's restriction); the renderer raises
:class:`NotApplicable`, which the harness records as ``unsupported`` with that reason.
"""

# ruff: noqa: E501  (C sources are kept as written: one statement per line)
from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernels.baselines import BLAS, BaselineUnavailable, render_baseline
from kernels.candidate import Candidate, KernelSource, Workload
from kernels.codegen import render_scheme
from kernels.targets import get_target

ALGOS = ("yaconv", "im2col", "direct")
FLOAT = 4
ALIGN_FLOATS = 256  # 1 KiB: every buffer of the workspace starts on its own page-ish boundary
# Our microkernel per ISA: (image rows per panel NR, channels per filter panel MR) = a scheme
# [R_k, U_{NR,j}, U_{MR/lanes,i}, V_i] on Out[j][i] += Img[k][j] * Filt[k][i] (as BLIS haswell 6x16 / skx 12x32)
OUR_UKR = {"avx2": (6, 16), "avx512": (12, 32)}
OUR_BLOCKS = {"mc": 144, "kc": 256, "nc": 4080}  # BLIS zen3 sgemm defaults, overridable per candidate
DEFAULT_DIRECT = "[R_k, R_h, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]"
DEFAULT_GEMM = "[R_i, R_k, R_j, U_{6,i}, U_{2,j}, V_j]"
_KSENT = 987653  # sentinel K of the rendered microkernel, replaced by the run-time K


class NotApplicable(BaselineUnavailable):
    """The algorithm does not apply to this layer (e.g. YaConv on a strided convolution)."""


@dataclass(frozen=True)
class Geometry:
    """A unit-batch NHWC convolution as YaConv sees it (H, W: input rows/columns, padding excluded)."""

    H: int
    W: int
    C: int
    FH: int
    FW: int
    M: int
    PH: int = 0
    PW: int = 0

    @property
    def OH(self) -> int:
        return self.H + 2 * self.PH - self.FH + 1

    @property
    def OW(self) -> int:
        return self.W + 2 * self.PW - self.FW + 1


@dataclass(frozen=True)
class Blocking:
    nr: int  # image rows per packed panel (the period of the H pattern)
    mr: int  # output channels per packed filter panel
    mc: int
    kc: int
    nc: int


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def geometry(workload: Workload) -> Geometry:
    """The YaConv view of a conv2d workload (unit stride; the input tensor is the padded image)."""
    if workload.op.name != "conv2d":
        raise NotApplicable(f"conv_algo needs a conv2d workload, not {workload.op.name}")
    s = workload.size
    return Geometry(s["h"] + s["r"] - 1, s["w"] + s["s"] - 1, s["c"], s["r"], s["s"], s["k"])


# -- buffer sizes (§5.2.1, §5.2.2) -------------------------------------------------------------------
def image_rows(g: Geometry, b: Blocking) -> int:
    """Rows of the packed image buffer: kc*nc floats worth of image rows, a multiple of NR, <= H padded."""
    rows = _round_up(max(1, b.kc * b.nc // (g.W * g.C)), b.nr)
    return min(rows, _round_up(g.H, b.nr))


def margin_rows(g: Geometry, b: Blocking) -> tuple[int, int]:
    """Output rows of spill space before and after the tensor (§5.2.1): (Fh-1-Ph, H_extra+Fh-1-Ph)."""
    h_extra = (b.nr - g.H % b.nr) % b.nr
    before = max(0, g.FH - 1 - g.PH)
    # the last panel row is round_up(H, NR) - 1, it lands on output row round_up(H,NR)-1+Ph; OH-1 is the last
    after = max(0, _round_up(g.H, b.nr) - 1 + g.PH - (g.OH - 1))
    assert after == max(0, h_extra + g.FH - 1 - g.PH)
    return before, after


def yaconv_buffers(g: Geometry, b: Blocking, spill: str) -> dict[str, int]:
    """Bytes of each temporary buffer of YaConv (the output tensor itself excluded)."""
    mc = min(max(b.mr, b.mc // b.mr * b.mr), _round_up(g.M, b.mr))  # as yaconv_conv rounds it
    kc = min(b.kc, g.FW * g.C)
    before, after = margin_rows(g, b)
    out = {
        "image": image_rows(g, b) * g.W * g.C * FLOAT,
        "filter": mc * kc * FLOAT,
        "tile": b.mr * b.nr * FLOAT,
        "b_copy": kc
        * b.nr
        * FLOAT,  # an aligned copy of an image sub-panel (BLIS kernels preferring columns)
        "margins": (before + after) * g.OW * g.M * FLOAT,
    }
    if spill == "margins":  # our ABI hands over a dense output, so the margin buffer holds a whole copy
        out["output_copy"] = g.OH * g.OW * g.M * FLOAT
    else:
        out["margins"] = 0
    return out


def im2col_buffers(workload: Workload) -> dict[str, int]:
    s = workload.size
    return {"patches": s["h"] * s["w"] * s["r"] * s["s"] * s["c"] * FLOAT}


def workspace_total(parts: dict[str, int]) -> int:
    """Total with every buffer on a 1 KiB boundary, plus 64 bytes for aligning the start."""
    return 64 + sum(_round_up(v, ALIGN_FLOATS * FLOAT) for v in parts.values())


# -- BLIS: header, library and its sgemm context -----------------------------------------------------
@functools.cache
def blis_paths() -> tuple[str, str, tuple[str, ...]]:
    """(library file, include directory, link args) of the BLIS the baselines link (same Library data)."""
    src = render_baseline(
        Candidate("baseline", "blis"), Workload.make("probe", "matmul", {"i": 1, "j": 1, "k": 1})
    )
    lib = os.path.realpath(next(a.split(",")[-1] for a in src.libs if "libblis" in a))
    flavour = os.path.basename(os.path.dirname(lib))  # e.g. blis-openmp, blis-pthread, blis-serial
    heads = sorted(glob.glob(f"/usr/include/*/{flavour}/blis.h")) + sorted(
        glob.glob("/usr/include/*/blis*/blis.h")
    )
    heads += sorted(glob.glob("/usr/include/blis/blis.h"))
    if not heads:
        raise BaselineUnavailable(f"BLIS headers (blis.h) not found for {lib}: install libblis-dev")
    return lib, os.path.dirname(heads[0]), src.libs


_PROBE = r"""
#include <blis.h>
#include <stdio.h>
int main(void) {
  bli_init();
  cntx_t *cx = bli_gks_query_cntx();
  printf("%ld %ld %ld %ld %ld %d %s\n", (long)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, cx),
         (long)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, cx), (long)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cx),
         (long)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cx), (long)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, cx),
         (int)bli_cntx_l3_vir_ukr_prefers_cols_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cx), bli_arch_string(bli_arch_query_id()));
  return 0;
}
"""


@functools.cache
def blis_context() -> dict[str, object]:
    """BLIS's sgemm block sizes, storage preference and sub-configuration on this machine (probed once)."""
    lib, inc, libs = blis_paths()
    with tempfile.TemporaryDirectory(prefix="blis-probe-") as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text(_PROBE)
        cmd = ["gcc", "-O1", str(src), f"-I{inc}", "-o", str(exe), *libs]
        built = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if built.returncode:
            raise BaselineUnavailable(f"cannot compile against BLIS ({inc}): {built.stderr.strip()[-300:]}")
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=30)
    mr, nr, mc, kc, nc, cols, arch = out.stdout.split()
    return {"mr": int(mr), "nr": int(nr), "mc": int(mc), "kc": int(kc), "nc": int(nc), "prefers_cols": cols == "1",
            "arch": arch}  # fmt: skip


# -- microkernels ------------------------------------------------------------------------------------
def ukr_shapes(target: str) -> list[tuple[int, int]]:
    """(image rows NR, channels MR) microkernels the register file holds: NR x MR/lanes accumulators plus
    MR/lanes filter vectors and one broadcast, with at least 8 accumulators (2 FMA pipes x 4 cycles)."""
    t = get_target(target)
    out = []
    for v in range(1, 7):
        for nr in range(1, t.registers):
            if nr * v >= 8 and nr * v + v + 1 <= t.registers:
                out.append((nr, v * t.lanes))
    return out


def shape_estimate(g: Geometry, nr: int, mr: int, window: bool = False) -> float:
    """Useful fraction of the microkernel's work on this layer: every filter-row pass runs round_up(H, NR)
    image rows of which OH produce output (the period-NR pattern of §5.3; with ``window``, round_up(OH, NR)
    rows), and round_up(M, MR) channels of which M are real."""
    rows = g.OH / _round_up(g.OH if window else g.H, nr)
    chans = g.M / _round_up(g.M, mr)
    return rows * chans


# Two factors of the shape score that the useful fraction and the load/FMA balance leave out, both
# measured on an AVX2 Zen 2 (experiment yaconv_shapes_avx2, docs/yaconv_losses.md):
# - accumulators in flight: two FMA pipes of latency 4-5 need 8-10 independent accumulators; below 10
#   a tile waits on its own FMAs (7 x 7, C = M = 512: 4 x 16, 8 accumulators, ran at 35% of peak where
#   4 x 24 with 12 ran at 56%);
# - image rows per streamed filter vector: in the thesis's order each filter panel comes from the L2 once
#   per output column and row panel, and feeds NR FMAs per vector loaded; below 4 rows the L2 stream, not
#   the FMAs, sets the pace (2 x 32 and 2 x 40 chosen for 14 x 14 and 7 x 7 images ran 4-14% behind
#   4 x 24 and 14 x 8).
ACCUMULATORS_IN_FLIGHT = 10
ROWS_PER_FILTER_LOAD = 4


def shape_score(g: Geometry, shape: tuple[int, int], target: str, window: bool = False) -> float:
    """``shape_estimate`` times what the tile's own throughput allows (1 = the FMA pipes' peak): the
    load/FMA balance (one k step issues NR*V FMAs and NR + V loads, V = MR/lanes, two of each per cycle),
    the accumulators in flight and the image rows per streamed filter vector (above)."""
    nr, mr = shape
    v = mr // get_target(target).lanes
    return (
        shape_estimate(g, nr, mr, window)
        * min(1.0, nr * v / (nr + v))
        * min(1.0, nr * v / ACCUMULATORS_IN_FLIGHT)
        * min(1.0, nr / ROWS_PER_FILTER_LOAD)
    )


def choose_shape(g: Geometry, target: str, margin: float = 1.08, window: bool = False) -> tuple[int, int]:
    """The shape of ``ukr_shapes`` with the best :func:`shape_score`, kept only if it beats the default
    shape by ``margin``: on the 73 layers small shapes chosen for a 3% gain (before the score counted the
    image rows per filter load) lost more than that (H = 56: x1.16 -> x1.01). At 1.08
    the 7 x 7 layers with 5 x 5 filters (11 padded rows, estimate x1.09) take the 11 x 32 tile, which ran
    6-10% faster than the default 12 x 32 there (Emerald Rapids, 2 interleaved rounds); no other of the 73
    layers changes between 1.10 and 1.08."""
    default = OUR_UKR[target]
    score = functools.partial(shape_score, g, target=target, window=window)
    best = max(ukr_shapes(target), key=lambda s: (round(score(s), 3), s[0] * s[1]))
    return best if score(best) >= margin * score(default) else default


def our_microkernel(target: str, shape: tuple[int, int] | None = None) -> tuple[str, int, int]:
    """C of ``ukr_ours(K, img_panel, filt_panel, c, ldc)``: C[j][i] (i contiguous, rows at ldc) += ...

    Rendered by the scheme code generator for Out[j][i] += Img[k][j] * Filt[k][i] (a contraction whose
    operands are exactly the packed panels), with the K loop bound and the output row stride turned into
    run-time arguments: the generator emits the sentinel K once as the loop bound and the hoisted output
    accumulators at constant offsets ``po + n`` of a dense [NR][MR] tile, which become ``po + (n/MR)*ldc
    + n%MR``. The tests compare the result with the reference, so a change in the generator's output
    that breaks this rewrite fails them.
    """
    nr, mr = shape or OUR_UKR[target]
    lanes = get_target(target).lanes
    w = Workload.make("ukr", "contraction", {"j": nr, "i": mr, "k": _KSENT}, spec="kj,ki->ji")
    scheme = f"[R_k, U_{{{nr},j}}, U_{{{mr // lanes},i}}, V_i]"
    code = render_scheme(Candidate("scheme", scheme, (("target", target),)), w).code
    body = [ln for ln in code.splitlines() if not ln.startswith("/*")]
    text = "\n".join(body)
    if text.count(str(_KSENT)) != 1:
        raise RuntimeError("code generator output changed: the K bound is not a single loop bound")
    text = text.replace(str(_KSENT), "kdim")
    text = text.replace(
        "int kernel(float *const *tensors, void *workspace) {",
        "static inline int ukr_ours(long kdim, const float *img, const float *filt, float *c, long ldc) {\n"
        "  float *const tensors[3] = {c, (float *)img, (float *)filt};",
    )
    text = text.replace("  (void)workspace;\n", "")

    def offset(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return f"po + {n // mr} * ldc + {n % mr}{m.group(2)}"

    text, count = re.subn(r"po \+ (\d+)([),])", offset, text)
    if count != 2 * nr * mr // lanes:  # one load and one store per accumulator
        raise RuntimeError(
            f"code generator output changed: {count} output accesses, expected {2 * nr * mr // lanes}"
        )
    return f"/* our microkernel: {scheme} from kernels.codegen, K and ldc at run time */\n{text}\n", nr, mr


_BLIS_UKR = r"""
#include <blis.h>
static float *yc_bcopy;  /* set by yaconv_conv: KC x NR floats, 64-byte aligned */
static sgemm_ukr_ft blis_ukr;
static cntx_t *blis_cntx;
static int blis_ready(void) {
  if (blis_ukr) return 0;
  bli_init();
  blis_cntx = bli_gks_query_cntx();
  if (bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, blis_cntx) != UKR_MR_BLIS ||
      bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, blis_cntx) != UKR_NR_BLIS) return 7;  /* other sub-config */
  blis_ukr = (sgemm_ukr_ft)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, blis_cntx);
  return 0;
}
/* tile C[j][i] (i: channels, contiguous; j: image rows at stride ldc) += img^T filt, as BLIS's MR x NR */
static inline int ukr_blis(long kdim, const float *img, const float *filt, float *c, long ldc) {
  float one = 1.0f;
  auxinfo_t aux;
  memset(&aux, 0, sizeof aux);
#if BLIS_PREFERS_COLS
  /* B = a sub-range of the image panel starting at s*NR floats, but BLIS's kernels load B with aligned
     moves (skx: 64 bytes): when s*NR*4 is not a multiple of 64 (C not a multiple of 4), copy it first */
  if ((uintptr_t)img % 64) { memcpy(yc_bcopy, img, sizeof(float) * (size_t)(kdim * UKR_NR_BLIS)); img = yc_bcopy; }
  /* A = filter panel (MR channels), B = image panel (NR rows): C column-stored, rs_c = 1, cs_c = ldc */
  bli_auxinfo_set_next_a((void *)filt, &aux); bli_auxinfo_set_next_b((void *)img, &aux);
  blis_ukr(UKR_MR_BLIS, UKR_NR_BLIS, kdim, &one, (float *)filt, (float *)img, &one, c, 1, ldc, &aux, blis_cntx);
#else
  /* A = image panel (MR rows), B = filter panel (NR channels): C row-stored, rs_c = ldc, cs_c = 1 */
  bli_auxinfo_set_next_a((void *)img, &aux); bli_auxinfo_set_next_b((void *)filt, &aux);
  blis_ukr(UKR_MR_BLIS, UKR_NR_BLIS, kdim, &one, (float *)img, (float *)filt, &one, c, ldc, 1, &aux, blis_cntx);
#endif
  return 0;
}
"""

# The algorithm of §5.2 (after the author's conv.c/yaconv.c), generic in the geometry so that the tests can
# call it with padding; kernel() below calls it with the workload's constants.
_YACONV = r"""
#define YC_ALIGN(x) ((((x) + 255) / 256) * 256)
/* O[oh][ow][m] += sum_{fh,fw,c} I[oh+fh-PH][ow+fw-PW][c] * F[fh][fw][c][m]  (I zero outside H x W) */
/* pack npan panels of NR image rows y0, y0 + 1, ...: element (k, r) of panel p at p*NR*WC + k*NR + r; rows
   outside 0..H-1 are zero */
static void yc_pack(float *imgbuf, const float *img, long y0, long npan, long H, long WC) {
  for (long p = 0; p < npan; p++) {
    float *dst = imgbuf + p * YC_NR * WC;
    const long first = y0 + p * YC_NR;
    if (first >= 0 && first + YC_NR <= H) {  /* a whole panel: NR rows read side by side, stores contiguous */
      const float *src = img + first * WC;   /* formed only in range (first < 0 in a window's top rows) */
      for (long k = 0; k < WC; k++)
        for (long r = 0; r < YC_NR; r++) dst[k * YC_NR + r] = src[r * WC + k];
      continue;
    }
    for (long r = 0; r < YC_NR; r++) {
      const long row = first + r;
      if (row >= 0 && row < H) { for (long k = 0; k < WC; k++) dst[k * YC_NR + r] = img[row * WC + k]; }
      else for (long k = 0; k < WC; k++) dst[k * YC_NR + r] = 0.0f;
    }
  }
}
/* window = 0: the thesis's §5.2, the image packed once per row block and every filter row's GEMMs run over
   all its rows (on a small image a share of them land outside the output: §5.3's waste); window = 1: per
   filter row, the rows that give output are packed (output row o reads image row o + fh - PH), so no
   GEMM row is wasted, for FH packings of the image instead of one (not with margins) */
int yaconv_conv(float *out, const float *img, const float *filt, long H, long W, long C, long FH, long FW, long M,
                long PH, long PW, long MCB, long KCB, long NCB, int margins, int window, int fpanel, float *ws) {
  const long OH = H + 2 * PH - FH + 1, OW = W + 2 * PW - FW + 1, WC = W * C, FWC = FW * C;
  if (OH <= 0 || OW <= 0) return 0;
  if (window && margins) return 9;
  const long ldc = OW * M;
  ws = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);  /* packed panels: 64-byte aligned (BLIS uses aligned loads) */
  const long KC = FWC < KCB ? FWC : KCB;
  long MC = (MCB / YC_MR) * YC_MR; if (MC < YC_MR) MC = YC_MR;
  if (MC > ((M + YC_MR - 1) / YC_MR) * YC_MR) MC = ((M + YC_MR - 1) / YC_MR) * YC_MR;
  const long HR = ((H + YC_NR - 1) / YC_NR) * YC_NR;
  long NCI = KCB * NCB / WC; if (NCI < 1) NCI = 1;
  NCI = ((NCI + YC_NR - 1) / YC_NR) * YC_NR; if (NCI > HR) NCI = HR;
  float *imgbuf = ws;                                  /* NCI x W*C, panels of NR image rows */
  float *filtbuf = imgbuf + YC_ALIGN(NCI * WC);        /* MC x KC, panels of MR channels */
  float *tile = filtbuf + YC_ALIGN(MC * KC);           /* one MR x NR tile for the edges */
  float *bcopy = tile + YC_ALIGN(YC_MR * YC_NR);       /* KC x NR: an aligned image sub-panel if needed */
  YC_SET_BCOPY(bcopy);
  const long before = FH - 1 - PH > 0 ? FH - 1 - PH : 0;
  const long after = HR - 1 + PH - (OH - 1) > 0 ? HR - 1 + PH - (OH - 1) : 0;
  float *obase = out;
  if (margins) {                                       /* §5.2.1: spill rows before and after the output */
    float *buf = bcopy + YC_ALIGN(KC * YC_NR);
    memset(buf, 0, sizeof(float) * (size_t)((before + OH + after) * ldc));
    obase = buf + before * ldc;
  }
  const long ROWS = window ? OH : H;                  /* the rows the blocks run over: output or image */
  for (long nc = 0; nc < ROWS; nc += NCI) {
    const long nh = ROWS - nc < NCI ? ROWS - nc : NCI, npan = (nh + YC_NR - 1) / YC_NR;
    if (!window) yc_pack(imgbuf, img, nc, npan, H, WC);  /* the image rows once, rows past H zero */
    for (long fh = 0; fh < FH; fh++) {
      if (window) yc_pack(imgbuf, img, nc + fh - PH, npan, H, WC);  /* the rows of output rows nc.. */
      for (long m0 = 0; m0 < M; m0 += MC) {
        const long mcb = M - m0 < MC ? M - m0 : MC, nq = (mcb + YC_MR - 1) / YC_MR;
        for (long kc = 0; kc < FWC; kc += KC) {
          const long kcb = FWC - kc < KC ? FWC - kc : KC;
          /* pack filter row fh, channels m0.., K range kc..: (k, i) of panel q at q*MR*KC + k*MR + i */
          for (long q = 0; q < nq; q++)
            for (long k = 0; k < kcb; k++) {
              const float *src = filt + (fh * FWC + kc + k) * M + m0 + q * YC_MR;
              float *dst = filtbuf + q * YC_MR * KC + k * YC_MR;
              const long w = mcb - q * YC_MR < YC_MR ? mcb - q * YC_MR : YC_MR;
              if (w == YC_MR) { for (long i = 0; i < YC_MR; i++) dst[i] = src[i]; continue; }  /* vector copies */
              for (long i = 0; i < w; i++) dst[i] = src[i];
              for (long i = w; i < YC_MR; i++) dst[i] = 0.0f;
            }
          for (long p = 0; p < npan; p++) {
            const long r0 = window ? nc + p * YC_NR : nc + p * YC_NR - fh + PH;  /* output row of its first row */
            const int inside = r0 >= 0 && r0 + YC_NR <= OH;
            if (!margins && (r0 >= OH || r0 + YC_NR <= 0)) continue;  /* whole tile in the spill space */
            /* order=column (the thesis): per output column every filter panel, the image sub-panel reused
               from L1; order=filter: per filter panel every output column, the panel reused from L1 (a
               short NR reuses each streamed filter float 2 x NR times only) */
            const long n1 = fpanel ? nq : OW, n2 = fpanel ? OW : nq;
            for (long a1 = 0; a1 < n1; a1++)
            for (long a2 = 0; a2 < n2; a2++) {
              const long ow = fpanel ? a2 : a1, q = fpanel ? a1 : a2;
              long s = (ow - PW) * C + kc, e = s + kcb, aoff = 0;
              if (s < 0) { aoff = -s; s = 0; }          /* left padding: skip the filter's first k rows */
              if (e > WC) e = WC;                       /* right padding: a shorter K */
              const long K = e - s;
              if (K <= 0) continue;
              const float *B = imgbuf + p * YC_NR * WC + s * YC_NR;
              float *Cp = obase + (r0 * OW + ow) * M + m0 + q * YC_MR;
              {
                const float *A = filtbuf + q * YC_MR * KC + aoff * YC_MR;
                const long w = mcb - q * YC_MR < YC_MR ? mcb - q * YC_MR : YC_MR;
                if (w == YC_MR && (margins || inside)) { if (YC_UKR(K, B, A, Cp, ldc)) return 8; continue; }
                memset(tile, 0, sizeof(float) * YC_MR * YC_NR);  /* M edge or rows outside the output */
                if (YC_UKR(K, B, A, tile, YC_MR)) return 8;
                for (long j = 0; j < YC_NR; j++) {
                  if (!margins && (r0 + j < 0 || r0 + j >= OH)) continue;
                  for (long i = 0; i < w; i++) Cp[j * ldc + i] += tile[j * YC_MR + i];
                }
              }
            }
          }
        }
      }
    }
  }
  if (margins) for (long i = 0; i < OH * ldc; i++) out[i] += obase[i];
  return 0;
}
"""


def rows_window(candidate: Candidate) -> bool:
    """Option ``rows``: ``all`` (the thesis: the image packed once, every filter row's GEMMs over all its
    rows) or ``window`` (per filter row, only the rows that give output; beyond the thesis, issue 33)."""
    rows = str(candidate.option("rows", "all"))
    if rows not in ("all", "window"):
        raise ValueError(f"conv_algo yaconv: rows={rows!r} is not allowed; allowed: all, window")
    return rows == "window"


ORDERS = ("column", "filter")


def filter_order(candidate: Candidate) -> bool:
    """Option ``order``: ``column`` (the thesis's loops: per output column, every filter panel of the
    block, each streamed from L2 for only 2 x NR flops per float) or ``filter`` (per filter panel, every
    output column: the panel stays in L1 and the image sub-panels stream; beyond the thesis, issue 33)."""
    order = str(candidate.option("order", "column"))
    if order not in ORDERS:
        raise ValueError(f"conv_algo yaconv: order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    return order == "filter"


def _shape(candidate: Candidate, g: Geometry, target: str) -> tuple[int, int]:
    """Our microkernel's (NR, MR): option shape = "auto" (choose_shape for this layer) or "NRxMR"."""
    text = str(candidate.option("shape", "x".join(map(str, OUR_UKR[target]))))
    if text == "auto":
        return choose_shape(g, target, window=rows_window(candidate))
    allowed = ukr_shapes(target)
    try:
        nr, mr = (int(v) for v in text.split("x"))
    except ValueError:
        nr = mr = 0
    if (nr, mr) not in allowed:
        shown = ", ".join(f"{a}x{b}" for a, b in allowed)
        raise ValueError(
            f"conv_algo yaconv: shape={text!r} is not a {target} microkernel; allowed: auto, {shown}"
        )
    return nr, mr


def _blocking(
    candidate: Candidate, g: Geometry
) -> tuple[str, Blocking, str, tuple[str, ...], tuple[str, ...], str]:
    """(ukr source name, blocking, C prelude, cflags, libs, target) of a YaConv candidate on a layer."""
    ukr = str(candidate.option("ukr", "blis"))
    target = str(candidate.option("target", "avx2"))
    if ukr == "blis":
        ctx = blis_context()
        lib, inc, libs = blis_paths()
        mr_b, nr_b = int(ctx["mr"]), int(ctx["nr"])  # type: ignore[call-overload]
        # the image side of the tile is BLIS's NR when the kernel prefers columns (skx 32x12), else its MR
        nr, mr = (nr_b, mr_b) if ctx["prefers_cols"] else (mr_b, nr_b)
        blk = Blocking(nr, mr, *(int(candidate.option(k, ctx[k])) for k in ("mc", "kc", "nc")))  # type: ignore[call-overload]
        pre = (
            f"/* BLIS sgemm microkernel ({ctx['arch']} at render time: MR={mr_b} NR={nr_b}), {lib} */\n"
            f"#define UKR_MR_BLIS {mr_b}\n#define UKR_NR_BLIS {nr_b}\n#define BLIS_PREFERS_COLS {int(bool(ctx['prefers_cols']))}\n"
            + _BLIS_UKR
            + "#define YC_UKR ukr_blis\n#define YC_SET_BCOPY(p) (yc_bcopy = (p))\n"
        )
        return ukr, blk, pre, (f"-I{inc}",), libs, "any"
    if ukr == "ours":
        if target not in OUR_UKR:
            raise ValueError(f"conv_algo ukr=ours: unknown target {target!r}; known: {sorted(OUR_UKR)}")
        code, nr, mr = our_microkernel(target, _shape(candidate, g, target))
        blk = Blocking(nr, mr, *(int(candidate.option(k, OUR_BLOCKS[k])) for k in ("mc", "kc", "nc")))  # type: ignore[call-overload]
        return (
            ukr,
            blk,
            "#include <immintrin.h>\n"
            + code
            + "#define YC_UKR ukr_ours\n#define YC_SET_BCOPY(p) ((void)(p))\n",
            (),
            (),
            target,
        )
    raise ValueError(f"conv_algo yaconv: unknown ukr {ukr!r}; known: blis, ours")


def render_yaconv(candidate: Candidate, workload: Workload) -> KernelSource:
    stride = int(dict(workload.op.params).get("stride", 1))  # type: ignore[call-overload]
    if stride != 1:
        raise NotApplicable(
            f"not applicable: YaConv supports unit stride only (thesis §5.2), this layer has stride {stride}"
        )
    g = geometry(workload)
    spill = str(candidate.option("spill", "tile"))
    if spill not in ("tile", "margins"):
        raise ValueError(f"conv_algo yaconv: spill={spill!r} is not allowed; allowed: tile, margins")
    window = rows_window(candidate)
    fpanel = filter_order(candidate)
    if window and spill == "margins":
        raise ValueError("conv_algo yaconv: rows=window packs only the rows that give output, so it has no "
                         "spill rows: use it with spill=tile (the default)")  # fmt: skip
    ukr, blk, pre, cflags, libs, target = _blocking(candidate, g)
    if any(v <= 0 for v in (blk.mc, blk.kc, blk.nc)):
        raise ValueError(f"conv_algo yaconv: mc, kc and nc must be positive, got {blk}")
    parts = yaconv_buffers(g, blk, spill)
    init = "  if (blis_ready()) return 7;\n" if ukr == "blis" else ""
    ready = "blis_ready()" if ukr == "blis" else "0"
    code = (
        f"/* YaConv (seed 001, §5.2): {g}, ukr={ukr} NR={blk.nr} MR={blk.mr} mc={blk.mc} kc={blk.kc} nc={blk.nc}, "
        f"spill={spill}{' rows=window' if window else ''}{' order=filter' if fpanel else ''} */\n#include <stdint.h>\n#include <string.h>\n{pre}#define YC_NR {blk.nr}\n#define YC_MR {blk.mr}\n{_YACONV}\n"
        f"int yaconv_init(void) {{ return {ready}; }}\n"
        "int kernel(float *const *tensors, void *workspace) {\n"
        f"{init}"
        f"  return yaconv_conv(tensors[0], tensors[1], tensors[2], {g.H}, {g.W}, {g.C}, {g.FH}, {g.FW}, {g.M}, 0, 0,\n"
        f"                     {blk.mc}, {blk.kc}, {blk.nc}, {int(spill == 'margins')}, {int(window)}, {int(fpanel)},\n"
        "                     (float *)workspace);\n}\n"
    )
    # one extra MR x NR tile of slack: the buffers are laid out with 1 KiB alignment each
    return KernelSource(
        code=code, target=target, cflags=cflags, libs=libs, workspace_bytes=workspace_total(parts)
    )


# -- im2col + GEMM -----------------------------------------------------------------------------------
_IM2COL = r"""
/* Patch[p][(r*FW + s)*C + c] = I[oh*ST + r][ow*ST + s][c], p = oh*OW + ow: each row is FH memcpy's */
static void im2col(float *patch, const float *img, long OH, long OW, long WI, long C, long FH, long FW, long ST) {
  const long K = FH * FW * C;
  for (long oh = 0; oh < OH; oh++)
    for (long ow = 0; ow < OW; ow++) {
      float *dst = patch + (oh * OW + ow) * K;
      for (long r = 0; r < FH; r++) memcpy(dst + r * FW * C, img + ((oh * ST + r) * WI + ow * ST) * C, sizeof(float) * FW * C);
    }
}
"""


def render_im2col(candidate: Candidate, workload: Workload) -> KernelSource:
    if workload.op.name != "conv2d":
        raise NotApplicable(f"conv_algo needs a conv2d workload, not {workload.op.name}")
    s = workload.size
    stride = int(dict(workload.op.params).get("stride", 1))  # type: ignore[call-overload]
    wi = (s["w"] - 1) * stride + s["s"]
    P, K, M = s["h"] * s["w"], s["r"] * s["s"] * s["c"], s["k"]
    gemm = str(candidate.option("gemm", "blis"))
    parts = im2col_buffers(workload)
    mm = Workload.make(f"{workload.name}_gemm", "matmul", {"i": P, "j": M, "k": K})
    call_im2col = (
        f"  im2col(patch, tensors[1], {s['h']}, {s['w']}, {wi}, {s['c']}, {s['r']}, {s['s']}, {stride});\n"
    )
    if gemm == "ours":
        target = str(candidate.option("target", "avx2"))
        scheme = str(candidate.option("gemm_scheme", DEFAULT_GEMM))
        g = render_scheme(Candidate("scheme", scheme, (("target", target), ("partial", "masked"))), mm)
        inner = g.code.replace(
            "int kernel(float *const *tensors", "static int gemm_kernel(float *const *tensors", 1
        )
        parts["gemm"] = g.workspace_bytes
        code = (
            f"/* im2col + our GEMM {scheme} ({P}x{M}x{K}), stride {stride} */\n#include <string.h>\n{inner}\n{_IM2COL}\n"
            "int kernel(float *const *tensors, void *workspace) {\n  float *patch = (float *)workspace;\n"
            f"{call_im2col}"
            f"  float *const t[3] = {{tensors[0], patch, tensors[2]}};\n"
            f"  return gemm_kernel(t, patch + {_round_up(parts['patches'] // FLOAT, ALIGN_FLOATS)});\n}}\n"
        )
        return KernelSource(
            code=code, target=g.target, cflags=g.cflags, workspace_bytes=workspace_total(parts)
        )
    if gemm not in BLAS:
        raise ValueError(f"conv_algo im2col: unknown gemm {gemm!r}; known: ours, {', '.join(sorted(BLAS))}")
    lib = BLAS[gemm]
    libs = render_baseline(Candidate("baseline", gemm), mm).libs  # the baselines' own lookup and linking
    call = lib.call.format(i=P, j=M, k=K)
    code = (
        f"/* im2col (Caffe-style, NHWC) + {gemm} sgemm ({P}x{M}x{K}), stride {stride}, one thread */\n"
        f"#include <string.h>\n{lib.decls}\n{_IM2COL}\n"
        "int kernel(float *const *tensors, void *workspace) {\n  static int ready = 0;\n"
        f"  if (!ready) {{ {lib.once.format(threads=1)} ready = 1; }}\n  float *patch = (float *)workspace;\n{call_im2col}"
        "  float *c = tensors[0];\n  const float *a = patch, *b = tensors[2];\n"
        f"  {call}\n  return 0;\n}}\n"
    )
    return KernelSource(code=code, target="any", libs=libs, workspace_bytes=workspace_total(parts))


def render_direct(candidate: Candidate, workload: Workload) -> KernelSource:
    scheme = str(candidate.option("scheme", DEFAULT_DIRECT))
    opts = {k: v for k, v in candidate.options if k not in ("scheme",)}
    opts.setdefault("partial", "masked")
    return render_scheme(Candidate("scheme", scheme, tuple(sorted(opts.items()))), workload)


def render_conv_algo(candidate: Candidate, workload: Workload) -> KernelSource:
    """C source of a ``conv_algo`` candidate (text: yaconv, im2col or direct)."""
    if candidate.text == "yaconv":
        return render_yaconv(candidate, workload)
    if candidate.text == "im2col":
        return render_im2col(candidate, workload)
    if candidate.text == "direct":
        return render_direct(candidate, workload)
    raise ValueError(f"unknown conv_algo {candidate.text!r}; known: {', '.join(ALGOS)}")


def workspace_parts(candidate: Candidate, workload: Workload) -> dict[str, int]:
    """Temporary-buffer bytes per buffer of a candidate (what the memory figure shows)."""
    if candidate.text == "im2col":
        return im2col_buffers(workload)
    if candidate.text == "yaconv":
        g = geometry(workload)
        _, blk, *_ = _blocking(candidate, g)
        return yaconv_buffers(g, blk, str(candidate.option("spill", "tile")))
    return {}
