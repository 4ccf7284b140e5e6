"""Mutants: deliberately broken generated kernels that the semantic check must flag before any time counts.

``pytest -s tests/test_mutants.py`` prints the mutant x kernel table of the pairs built here (the whole
catalogue on every demo kernel: ``python -m harness.verify.mutants``). Builds dominate the time (~0.5 s each),
so the original mutants run on the three original kernels and each newer mutant on one or two kernels
chosen to host it (``NEW_ON``); the text-level tests cover every applicable pair.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.check import CheckConfig, check_output, make_tensors, sample_points
from harness.machine import detect
from harness.verify.mutants import (
    FULL_CHECK,
    MUTANTS,
    MutationError,
    Outcome,
    applicable,
    apply_mutant,
    corners,
    demo_kernels,
    detection_probability,
    empirical_detection_rate,
    evaluate,
    format_table,
    mutate,
    output_shape,
    sampled_detection_probability,
)
from kernels.candidate import Candidate, KernelSource, Workload, render
from tests.conftest import HOST_TARGET

KERNELS = demo_kernels(HOST_TARGET)
BY_LABEL = {k.label: k for k in KERNELS}
# the original mutants run on the three original kernels, and on the BLIS-like matmul and the conv microkernel
# with their next tiles prefetched: a prefetch line (an address into an input) must not take a mutant meant
# for a load, nor hide it from the check (issues 33, 32); on AVX-512 also on the
# conv microkernel whose FMAs read their broadcast from memory (codegen.broadcast=embedded, issue 32)
ORIGINAL_KERNELS = (
    "matmul_blis", "conv_ukernel", "conv_s2_muladd", "matmul_prefetch", "conv_prefetch",
    *(k for k in ("conv_embedded",) if k in BY_LABEL),
)  # fmt: skip
ORIGINAL = (
    "drop_last_iteration", "skip_first_iteration", "wrong_input_offset", "wrong_input_stride", "drop_fma",
    "zero_init_accumulators", "store_wrong_offset", "drop_store", "wrong_broadcast", "fma_wrong_accumulator",
    "add_wrong_operand", "one_point_corner", "one_point_interior",
)  # fmt: skip
# the newer mutants, each on the kernels built for it here (every kernel it applies to: APPLIES_TO)
NEW_ON = {
    "one_point_edge": ("matmul_lambda",),
    "tvar_min_wrong_base": ("matmul_texct",),
    "lambda_seq_wrong_offset": ("matmul_lambda",),
    "strided_input_halo": ("conv_s2_muladd",),
    "drop_unrolled_reduction_step": ("conv_s2_muladd", "matmul_lambda"),  # U_{3,s} / U_{2,k} under Uλ
    "store_before_last_update": ("matmul_texct",),
    "vector_store_shifted": ("conv_s2_muladd",),  # not hoisted: the next block reloads the shifted data
    "mask_one_lane_short": ("matmul_masked",),
    "lost_update_race": ("conv_s2_muladd", "matmul_lambda"),  # per block / across the hoisted loop
    "wrong_loop_step": ("matmul_texct",),
    "duplicate_update": ("matmul_lambda",),
    "packt_wrong_shuffle": ("matmul_packt", "matmul_panels"),
    "panel_copy_short": ("matmul_panels",),
}
ALL_KERNELS = tuple(BY_LABEL)
APPLIES_TO = {
    **{n: ALL_KERNELS for n in ORIGINAL},
    # A's PackT buffer is addressed as `64 * (k_0 - (0))`: no plain `N * var` term to shrink
    "wrong_input_stride": tuple(k for k in ALL_KERNELS if k not in ("matmul_packt", "matmul_panels")),
    "one_point_edge": ALL_KERNELS,
    "tvar_min_wrong_base": ("matmul_texct", "matmul_panels"),
    "lambda_seq_wrong_offset": ("matmul_lambda",),
    "strided_input_halo": ("conv_s2_muladd",),
    "drop_unrolled_reduction_step": ("conv_s2_muladd", "matmul_lambda"),
    "store_before_last_update": tuple(k for k in ALL_KERNELS if k != "conv_s2_muladd"),  # hoisted ones
    "vector_store_shifted": ALL_KERNELS,
    "mask_one_lane_short": ("matmul_masked",),  # codegen.partial=masked
    "lost_update_race": ("conv_s2_muladd", "matmul_lambda"),  # an accumulator updated twice per block
    "wrong_loop_step": ALL_KERNELS,
    "duplicate_update": ALL_KERNELS,
    "packt_wrong_shuffle": ("matmul_packt", "matmul_panels"),  # an in-register transpose (PackT, panels)
    "panel_copy_short": ("matmul_panels",),  # a PackT_X[d/p,...] copy
}
PAIRS = [(n, k) for n in ORIGINAL for k in ORIGINAL_KERNELS] + [
    (n, k) for n, ks in NEW_ON.items() for k in ks
]
ONE_POINT = ("one_point_corner", "one_point_interior", "one_point_edge")
SEED = 0
N_SEEDS = 200

TRIVIAL = "int kernel(float *const *t, void *ws) {\n  (void)t;\n  (void)ws;\n  return 0;\n}\n"


def _scalar_kernel(text: str) -> KernelSource:
    w = Workload.make("m8", "matmul", {"i": 8, "j": 8, "k": 4})
    return render(Candidate("scheme", text, (("target", HOST_TARGET),)), w)


def _changed_lines(before: str, after: str) -> tuple[set[str], set[str]]:
    a, b = set(before.splitlines()), set(after.splitlines())
    return {x.strip() for x in a - b}, {x.strip() for x in b - a}


def _code(label: str) -> str:
    k = BY_LABEL[label]
    return render(k.candidate, k.workload).code


def _binomial_ok(rate: float, p: float, n: int) -> bool:
    """|rate - p| within 4 standard deviations of a binomial(n, p) proportion (and 1/n of slack)."""
    return abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1 / n


@pytest.fixture(scope="module")
def outcomes(shared_cache: Path) -> dict[tuple[str, str], Outcome]:
    """The un-mutated kernels (mutant "") and every pair of PAIRS: built, run once, checked."""
    wanted = {("", k) for k in ALL_KERNELS} | set(PAIRS)
    res = evaluate(
        KERNELS, [None, *MUTANTS], shared_cache, seed=SEED, seeds=range(N_SEEDS),
        select=lambda n, k: (n, k) in wanted,
    )  # fmt: skip
    out = {(o.mutant, o.kernel): o for o in res}
    assert set(out) == wanted
    return out


# -- the catalogue, as text --------------------------------------------------------------------------------
def test_catalogue_is_documented_and_covers_the_bug_classes() -> None:
    assert len(MUTANTS) >= 21
    assert set(MUTANTS) == set(ORIGINAL) | set(NEW_ON) == set(APPLIES_TO)
    for name, m in MUTANTS.items():
        assert m.name == name and m.description and m.models and callable(m.apply)
    models = [m.models for m in MUTANTS.values()]
    assert len(set(models)) == len(models)  # every entry stands for its own bug class


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_never_silently_a_noop(name: str) -> None:
    with pytest.raises(MutationError):
        MUTANTS[name].apply(TRIVIAL)
    with pytest.raises(MutationError):
        mutate(KernelSource(TRIVIAL, "any"), name)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_applies_to_the_documented_demo_kernels(name: str) -> None:
    assert applicable(KERNELS, name) == list(APPLIES_TO[name])
    for label in set(ALL_KERNELS) - set(APPLIES_TO[name]):
        with pytest.raises(MutationError):
            apply_mutant(_code(label), name)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutate_returns_a_new_kernel_source(name: str) -> None:
    for label in APPLIES_TO[name]:
        k = BY_LABEL[label]
        src = render(k.candidate, k.workload)
        assert MUTANTS[name].apply(src.code) != src.code  # the raw catalogue entry edits too
        out = mutate(src, name)
        assert isinstance(out, KernelSource) and out is not src
        assert out.source_hash != src.source_hash and out.code != src.code
        assert (out.target, out.cflags, out.libs, out.workspace_bytes) == (
            src.target, src.cflags, src.libs, src.workspace_bytes,
        )  # fmt: skip
        assert f"/* mutant   : {name} */" in out.code
        assert mutate(src, name) == out  # deterministic
        assert out.code.count("{") == out.code.count("}")


def test_the_original_mutants_edit_fmas_that_read_their_broadcast() -> None:
    """On any host (text only): every original mutant finds its edit in the conv microkernel whose FMAs read
    the broadcast element themselves (codegen.broadcast=embedded), and the FMA edits keep that form."""
    (k,) = [k for k in demo_kernels("avx512") if k.label == "conv_embedded"]
    code = render(k.candidate, k.workload).code
    assert "ttile_fmadd_bcst(b1, &p0[" in code and "_mm512_set1_ps" not in code
    for name in ORIGINAL:
        assert apply_mutant(code, name) != code
    removed, added = _changed_lines(code, apply_mutant(code, "wrong_broadcast"))
    assert len(removed) == len(added) == 1 and "ttile_fmadd_bcst" in added.pop()
    removed, added = _changed_lines(code, apply_mutant(code, "add_wrong_operand"))
    (old,), (new,) = removed, added
    assert re.fullmatch(r"(acc\d+) = ttile_fmadd_bcst\(b\d+, &p0\[\d+\], \1\);", old)
    assert re.fullmatch(r"(acc\d+) = ttile_fmadd_bcst\(b\d+, &p0\[\d+\], (?!\1\))acc\d+\);", new)


def test_unknown_mutant_name() -> None:
    with pytest.raises(KeyError, match="unknown mutant"):
        mutate(KernelSource(TRIVIAL, "any"), "no_such_mutant")


def test_edits_on_the_blis_kernel_are_the_documented_ones() -> None:
    code = _code("matmul_blis")  # 6 x 2 vectors, T_{32,k}
    v, vt = ("_mm512", "__m512") if HOST_TARGET == "avx512" else ("_mm256", "__m256")
    j_end, j_step = (64, 32) if HOST_TARGET == "avx512" else (64, 16)

    def diff(name: str) -> tuple[set[str], set[str]]:
        return _changed_lines(code, apply_mutant(code, name))

    gone, new = diff("drop_last_iteration")
    assert new == {f"for (int j_0 = 0; j_0 < {j_end} - {j_step}; j_0 += {j_step}) {{"}
    gone, new = diff("skip_first_iteration")
    assert new == {"for (int k_0 = 0 + 1; k_0 < 32; k_0 += 1) {"}
    gone, new = diff("wrong_input_offset")
    assert new == {f"const {vt} a5 = {v}_set1_ps(p0[159]);"}
    gone, new = diff("wrong_input_stride")
    assert new == {"const float *restrict p0 = A + 31 * i_0 + k_0;"}
    gone, new = diff("drop_fma")
    assert gone == {f"acc11 = {v}_fmadd_ps(a5, b1, acc11);"} and not new
    gone, new = diff("fma_wrong_accumulator")
    assert new == {f"acc10 = {v}_fmadd_ps(a5, b1, acc10);"}
    gone, new = diff("add_wrong_operand")
    assert new == {f"acc11 = {v}_fmadd_ps(a5, b1, acc10);"}
    gone, new = diff("wrong_broadcast")
    assert {x.split("(p0")[-1] for x in new} == {"[0]);"}
    gone, new = diff("zero_init_accumulators")
    assert len(gone) == len(new) == 12 and all(x.endswith(f"= {v}_setzero_ps();") for x in new)
    gone, new = diff("store_wrong_offset")
    assert new == {f"{v}_storeu_ps(po + 0, acc11);"}
    gone, new = diff("drop_store")
    assert len(gone) == 1 and not new
    gone, new = diff("one_point_corner")
    assert new == {"C[0] += 1.0f;  /* mutant: one wrong output point */"}
    centre = 48 * 64 + 32  # (i, j) = (48, 32) of a 96 x 64 output
    assert output_shape(code) == (96, 64)
    gone, new = diff("one_point_interior")
    assert new == {f"C[{centre}] += 1.0f;  /* mutant: one wrong output point */"}
    gone, new = diff("one_point_edge")
    assert new == {"C[32] += 1.0f;  /* mutant: one wrong output point */"}  # (0, 32): an edge, no corner
    # the newer mutants
    last = f"{v}_storeu_ps(po + {5 * 64 + j_step // 2}, acc11);"
    store_moved = apply_mutant(code, "store_before_last_update")
    assert store_moved.count(last) == 1 and code.count(last) == 1
    assert store_moved.index(last) < store_moved.index(f"acc11 = {v}_fmadd_ps(a5, b1, acc11);")
    assert store_moved.index(last) > store_moved.index("for (int k_0")  # inside the reduction loop
    gone, new = diff("vector_store_shifted")
    assert gone == {last} and new == {f"{v}_storeu_ps(po + {5 * 64 + j_step // 2 - 1}, acc11);"}
    gone, new = diff("wrong_loop_step")
    assert new == {f"for (int j_0 = 0; j_0 < {j_end}; j_0 += {2 * j_step}) {{"}
    dup = apply_mutant(code, "duplicate_update")
    assert dup.count(f"acc11 = {v}_fmadd_ps(a5, b1, acc11);") == 2
    for name in ("tvar_min_wrong_base", "lambda_seq_wrong_offset", "strided_input_halo",
                 "drop_unrolled_reduction_step", "lost_update_race", "mask_one_lane_short"):  # fmt: skip
        with pytest.raises(MutationError):
            apply_mutant(code, name)


def test_edits_on_the_partial_tile_masked_lambda_and_strided_kernels() -> None:
    v = "_mm512" if HOST_TARGET == "avx512" else "_mm256"
    lanes = 16 if HOST_TARGET == "avx512" else 8

    texct = _code("matmul_texct")
    gone, new = _changed_lines(texct, apply_mutant(texct, "tvar_min_wrong_base"))
    assert gone == {"const int e_i_1 = MIN(12, i_0 + e_i_0 - i_1);"}
    assert new == {"const int e_i_1 = MIN(12, e_i_0 - i_1);"}

    masked = _code("matmul_masked")  # 124 columns: a remainder of 12 (AVX2: 8 + 4) / 28 (AVX-512: 16 + 12)
    gone, new = _changed_lines(masked, apply_mutant(masked, "mask_one_lane_short"))
    assert len(gone) == len(new) == 2 and all(x.startswith("const ") and " mk" in x for x in gone | new)
    for g in gone:
        lanes_expr = f"MIN({lanes}, MAX(0, e_j_0 - {0 if ' mk0 ' in g else lanes}))"
        assert lanes_expr in g
        assert g.replace(lanes_expr, f"(({lanes_expr}) > 0 ? ({lanes_expr}) - 1 : 0)") in new

    lam = _code("matmul_lambda")
    gone, new = _changed_lines(lam, apply_mutant(lam, "lambda_seq_wrong_offset"))
    assert gone == {"for (int i_1 = 36; i_1 < 52; i_1 += 4) {"}
    assert new == {"for (int i_1 = 36 - 1; i_1 < 52 - 1; i_1 += 4) {"}
    # U_{2,k} under Uλ_i and over U_{2,j}: the k = 1 half of every block's updates goes
    dropped = apply_mutant(lam, "drop_unrolled_reduction_step")
    gone, new = _changed_lines(lam, dropped)
    assert not new and all(f"{v}_fmadd_ps" in x for x in gone)
    assert dropped.count("_fmadd_ps") == lam.count("_fmadd_ps") // 2

    conv = _code("conv_s2_muladd")  # O[h][w][k] += I[h*2 + r][w*2 + s][c] * K[r][s][c][k], I is 25x25x64
    gone, new = _changed_lines(conv, apply_mutant(conv, "strided_input_halo"))
    assert gone == {"const float *restrict p0 = I + 3200 * h_0 + 1600 * r_0 + 128 * w_0 + c_0;"}
    assert new == {"const float *restrict p0 = I + 3200 * h_0 + 1600 * r_0 + 64 * w_0 + c_0;"}
    gone, new = _changed_lines(conv, apply_mutant(conv, "drop_unrolled_reduction_step"))
    assert len(gone) == 4 and not new  # the s = 2 tap of U_{3,s}: 4 of the 12 updates
    assert all("b4" in x or "b5" in x for x in gone)  # the K loads at s = 2 (p1 + 8192...)
    last_update = f"acc3 = {v}_add_ps(acc3, {v}_mul_ps(a4, b5));"
    gone, new = _changed_lines(conv, apply_mutant(conv, "lost_update_race"))
    assert gone == {last_update}
    assert new == {
        "__m256 race3 = acc3;  /* mutant: a second worker reads the same output */".replace(
            "__m256", "__m512" if HOST_TARGET == "avx512" else "__m256"
        ),
        last_update.replace("acc3", "race3"),
        f"{v}_storeu_ps(po + {64 + lanes}, race3);",
    }
    raced = apply_mutant(conv, "lost_update_race")
    assert raced.index(f"{v}_storeu_ps(po + {64 + lanes}, acc3);") < raced.index(
        f"{v}_storeu_ps(po + {64 + lanes}, race3);"
    )  # the copy is stored last: the accumulator's other updates are lost


def test_scalar_forms_and_what_a_naive_kernel_cannot_host() -> None:
    """Scalar code (`acc += a * b`, `po[n] = acc`) is mutated too; a kernel with one accumulator and one
    load per input has nothing for the register-tile mutants to misplace, and they say so."""
    naive = _scalar_kernel("[R_i, R_j, R_k]").code
    cannot = {"wrong_input_offset", "store_wrong_offset", "wrong_broadcast", "fma_wrong_accumulator",
              "add_wrong_operand", "tvar_min_wrong_base", "lambda_seq_wrong_offset", "strided_input_halo",
              "drop_unrolled_reduction_step", "vector_store_shifted", "lost_update_race",
              "mask_one_lane_short", "packt_wrong_shuffle", "panel_copy_short"}  # fmt: skip
    for name in MUTANTS:
        if name in cannot:
            with pytest.raises(MutationError):
                apply_mutant(naive, name)
        else:
            assert apply_mutant(naive, name) != naive
    tiled = _scalar_kernel("[R_i, R_j, R_k, U_{2,i}]").code
    assert _changed_lines(tiled, apply_mutant(tiled, "add_wrong_operand"))[1] == {"acc1 = acc0 + a1 * b0;"}
    assert _changed_lines(tiled, apply_mutant(tiled, "zero_init_accumulators"))[1] == {
        "float acc0 = 0.0f;", "float acc1 = 0.0f;",
    }  # fmt: skip
    assert _changed_lines(tiled, apply_mutant(tiled, "store_wrong_offset"))[1] == {"po[0] = acc1;"}
    assert _changed_lines(tiled, apply_mutant(tiled, "wrong_input_offset"))[1] == {"const float a1 = p0[3];"}
    k_unrolled = _scalar_kernel("[R_i, R_j, T_{2,k}, U_{2,k}]").code
    assert _changed_lines(k_unrolled, apply_mutant(k_unrolled, "lost_update_race")) == (
        {"acc0 += a1 * b1;"},
        {"float race0 = acc0;  /* mutant: a second worker reads the same output */", "race0 += a1 * b1;",
         "po[0] = race0;"},
    )  # fmt: skip
    assert _changed_lines(k_unrolled, apply_mutant(k_unrolled, "drop_unrolled_reduction_step")) == (
        {"acc0 += a1 * b1;"}, set(),
    )  # fmt: skip


# -- the analysis ------------------------------------------------------------------------------------------
def test_detection_probability() -> None:
    for w, n, s in ((1, 6144, 1000), (1, 9216, 1000), (512, 6144, 1000), (3, 10, 2), (1, 2, 1)):
        assert detection_probability(w, n, s) == pytest.approx(1 - (1 - w / n) ** s, rel=1e-12)
    assert detection_probability(1, 6144, 1000) == pytest.approx(0.15021, abs=1e-4)
    assert detection_probability(1, 9216, 1000) == pytest.approx(0.10278, abs=1e-4)
    assert detection_probability(0, 100, 1000) == 0.0
    assert detection_probability(100, 100, 1) == 1.0
    assert detection_probability(5, 100, 0) == 0.0
    assert detection_probability(1, 1, 1) == 1.0
    assert detection_probability(1, 10**12, 1000) == pytest.approx(1e-9, rel=1e-6)  # no cancellation
    ps = [detection_probability(w, 1000, 50) for w in range(0, 1001, 50)]
    assert ps == sorted(ps)
    for bad in ((-1, 10, 1), (11, 10, 1), (0, 0, 1), (1, 10, -1)):
        with pytest.raises(ValueError):
            detection_probability(*bad)


def test_sampled_detection_probability_accounts_for_corners_and_full_checks() -> None:
    cfg = CheckConfig()
    wrong = np.zeros((96, 64), dtype=bool)
    assert sampled_detection_probability(wrong, cfg) == 0.0
    wrong[48, 32] = True  # interior: the 4 corners replace 4 of the 1000 uniform draws
    assert sampled_detection_probability(wrong, cfg) == detection_probability(1, 6144, 996)
    assert sampled_detection_probability(wrong, CheckConfig(boundary=False)) == detection_probability(
        1, 6144, 1000
    )
    assert sampled_detection_probability(wrong, FULL_CHECK) == 1.0
    assert sampled_detection_probability(wrong, CheckConfig(full_below=6144)) == 1.0
    wrong[0, 32] = True  # an edge point is no corner
    assert sampled_detection_probability(wrong, cfg) == detection_probability(2, 6144, 996)
    wrong[95, 63] = True  # a corner: always sampled
    assert sampled_detection_probability(wrong, cfg) == 1.0
    assert sampled_detection_probability(wrong, CheckConfig(boundary=False)) < 1.0
    small = np.zeros((10, 10), dtype=bool)  # <= full_below: checked in full
    assert sampled_detection_probability(small, cfg) == 0.0
    small[5, 5] = True
    assert sampled_detection_probability(small, cfg) == 1.0
    assert corners((3, 4, 5)) == [(a, b, c) for a in (0, 2) for b in (0, 3) for c in (0, 4)]
    few = np.zeros((100, 100), dtype=bool)
    few[50, 50] = True  # fewer points than corners: only the corners are checked
    assert sampled_detection_probability(few, CheckConfig(points=3)) == 0.0


def test_empirical_rate_redraws_exactly_the_checks_sample() -> None:
    shape, cfg = (96, 64), CheckConfig()
    rng = np.random.default_rng(1)
    wrong = rng.random(shape) < 0.002
    wrong[tuple(np.array(corners(shape)).T)] = False
    seeds = range(50)
    manual = sum(bool(wrong[tuple(sample_points(shape, cfg, s)[0].T)].any()) for s in seeds) / 50
    assert empirical_detection_rate(wrong, cfg, seeds) == manual
    single = np.zeros(shape, dtype=bool)
    single[48, 32] = True
    rate = empirical_detection_rate(single, cfg, range(N_SEEDS))
    assert _binomial_ok(rate, sampled_detection_probability(single, cfg), N_SEEDS)
    single[0, 0] = True
    assert empirical_detection_rate(single, cfg, range(N_SEEDS)) == 1.0


def test_sampled_check_hits_an_interior_point_as_often_as_the_analysis_says() -> None:
    """Over many seeds, the default sample contains a given interior point with probability
    1 - (1 - 1/n)^N, N = points minus the corners that replace the first random points."""
    shape = (12, 12, 64)
    n, cfg = math.prod(shape), CheckConfig()
    point = np.array([6, 6, 32])
    seeds = 3000
    hits = sum(bool((sample_points(shape, cfg, s)[0] == point).all(axis=1).any()) for s in range(seeds))
    p = detection_probability(1, n, cfg.points - 2 ** len(shape))
    assert abs(hits / seeds - p) < 4 * math.sqrt(p * (1 - p) / seeds)


def test_the_full_check_config_checks_every_point_of_the_demo_outputs() -> None:
    """conf/check/full.yaml (``check=full``), the remedy docs/checks.md gives, is FULL_CHECK."""
    conf = Path(__file__).resolve().parents[1] / "conf" / "check"
    full = CheckConfig(**yaml.safe_load((conf / "full.yaml").read_text()))
    sampled = CheckConfig(**yaml.safe_load((conf / "sampled.yaml").read_text()))
    assert sampled == CheckConfig()
    assert full.full_below >= FULL_CHECK.full_below
    for k in KERNELS:
        shape = k.workload.shapes()[0]
        assert math.prod(shape) > CheckConfig().full_below  # the default check really samples
        assert sample_points(shape, full, SEED)[1] == "full"


# -- through build, run_kernel and check_output --------------------------------------------------------------
@pytest.mark.parametrize("kernel", ALL_KERNELS)
def test_unmutated_kernels_pass(outcomes: dict[tuple[str, str], Outcome], kernel: str) -> None:
    o = outcomes[("", kernel)]
    assert o.status == "ok", o.reason
    assert o.default is not None and o.full is not None
    assert o.default.mode == "sampled" and o.default.points == CheckConfig().points  # really sampled
    assert o.default.passed and o.full.passed and o.n_wrong == 0
    assert not o.detected and o.p_detect == 0.0 and o.rate == 0.0


@pytest.mark.parametrize(("name", "kernel"), PAIRS)
def test_mutant_changes_the_output_and_the_checks_catch_it(
    outcomes: dict[tuple[str, str], Outcome], name: str, kernel: str
) -> None:
    o, clean = outcomes[(name, kernel)], outcomes[("", kernel)]
    assert o.status == "ok", f"the mutant should run (all accesses in bounds) and be wrong: {o.reason}"
    assert o.default is not None and o.full is not None and o.wrong is not None and o.output is not None
    assert o.default.mode == "sampled" and o.full.mode == "full"
    # (a) the output changes ...
    assert clean.output is not None and not np.array_equal(o.output, clean.output)
    assert o.n_wrong == int(o.wrong.sum()) >= 1
    # (b) ... and the full check sees every wrong point
    assert not o.full.passed and o.full.n_bad == o.n_wrong
    # (c) the sampled check catches it whenever the analysis says it (nearly) must
    assert o.p_detect is not None and o.p_no_corners is not None and o.rate is not None
    if o.p_detect >= 0.999:
        assert not o.default.passed and o.detected, f"{name} on {kernel} slipped through the default check"
    # the verdict of the check actually run is the one its sample implies
    pts, _ = sample_points(o.wrong.shape, CheckConfig(), SEED)
    assert o.default.n_bad == int(o.wrong[tuple(pts.T)].sum())
    # the analysis: P = 1 with a wrong corner, else the uniform draws minus the corners
    d = len(o.wrong.shape)
    if o.corner_wrong:
        assert o.p_detect == 1.0 and o.rate == 1.0
    else:
        assert o.p_detect == detection_probability(o.n_wrong, o.n_points, CheckConfig().points - 2**d)
    assert o.p_no_corners == detection_probability(o.n_wrong, o.n_points, CheckConfig().points)
    if name not in ONE_POINT:
        assert o.n_wrong > 1 and o.p_detect > 1 - 1e-9 and o.rate == 1.0


@pytest.mark.heavy  # every mutant of the catalogue built and run: 30-60 s per ISA
@pytest.mark.parametrize("isa", sorted(set(detect().isas) & {"avx2", "avx512"}))
def test_no_mutant_is_equivalent_on_a_demo_kernel_it_applies_to(isa: str, shared_cache: Path) -> None:
    """The whole catalogue, as `python -m harness.verify.mutants --target ISA` runs it, on each ISA this CPU
    executes: every applicable mutant changes the output and the full check sees it. (With 108 columns,
    matmul_masked's AVX-512 remainder of 12 left its second vector fully masked: four mutants of that
    vector's update changed nothing.)"""
    kernels = demo_kernels(isa)  # the embedded-broadcast kernel on AVX-512 only
    res = evaluate(kernels, [None, *MUTANTS], shared_cache, seed=SEED, seeds=range(1))
    clean = [o for o in res if not o.mutant]
    assert len(clean) == len(kernels) and all(o.status == "ok" and o.n_wrong == 0 for o in clean)
    unseen = [(o.mutant, o.kernel) for o in res if o.mutant and o.status == "ok" and not o.n_wrong]
    assert not unseen, f"equivalent mutants on {isa}: {unseen}"
    assert all(o.full is not None and not o.full.passed for o in res if o.mutant and o.status == "ok")
    labels = {k.label for k in kernels}
    assert {(o.mutant, o.kernel) for o in res if o.mutant} >= {(n, k) for n, k in PAIRS if k in labels}


@pytest.mark.parametrize("kernel", ORIGINAL_KERNELS)
def test_one_wrong_corner_is_always_caught(outcomes: dict[tuple[str, str], Outcome], kernel: str) -> None:
    o = outcomes[("one_point_corner", kernel)]
    k = BY_LABEL[kernel]
    shape = k.workload.shapes()[0]
    assert o.status == "ok" and o.full is not None and o.default is not None and o.output is not None
    assert o.n_wrong == 1 and o.full.first_bad == (0,) * len(shape)
    # boundary=True puts the corners in every sample: caught whatever the seed ...
    assert o.default.mode == "sampled" and not o.default.passed and o.default.first_bad == (0,) * len(shape)
    assert o.p_detect == 1.0 and o.rate == 1.0
    # ... while a purely random sample would catch it only with the analytic probability
    assert o.p_no_corners == detection_probability(1, math.prod(shape), 1000)
    tensors = make_tensors(k.workload, SEED, CheckConfig())
    no_corners = CheckConfig(boundary=False)
    pts, _ = sample_points(shape, no_corners, SEED)
    in_sample = bool((pts == 0).all(axis=1).any())
    assert check_output(k.workload, tensors, o.output, no_corners, SEED).passed == (not in_sample)


@pytest.mark.parametrize(
    ("name", "kernel"), [(n, k) for n, k in PAIRS if n in ("one_point_interior", "one_point_edge")]
)
def test_one_wrong_point_off_the_corners_matches_the_analysis(
    outcomes: dict[tuple[str, str], Outcome], name: str, kernel: str
) -> None:
    """A single wrong interior or edge point: the sampled check catches it with P = 1 - (1 - 1/n)^(N - 2^d)
    (~ N/n, 0.10 to 0.18 here), the empirical rate over the sampling seeds agrees within binomial
    tolerance, and only the full check is certain."""
    o = outcomes[(name, kernel)]
    shape = BY_LABEL[kernel].workload.shapes()[0]
    n, d = math.prod(shape), len(shape)
    point = (
        tuple(s // 2 for s in shape) if name == "one_point_interior" else (0, *(s // 2 for s in shape[1:]))
    )
    assert o.status == "ok" and o.full is not None and o.default is not None and o.wrong is not None
    assert o.full.mode == "full" and not o.full.passed and o.n_wrong == 1 and o.full.first_bad == point
    assert not o.corner_wrong
    # the sampled check catches it iff the point is among the sampled ones: with probability p
    pts, mode = sample_points(shape, CheckConfig(), SEED)
    assert mode == o.default.mode == "sampled"
    in_sample = bool((pts == np.array(point)).all(axis=1).any())
    assert o.default.passed == (not in_sample)
    p = detection_probability(1, n, 1000 - 2**d)
    assert o.p_detect == p == pytest.approx(1 - (1 - 1 / n) ** (1000 - 2**d), rel=1e-12)
    assert 0.05 < p < 0.2  # a single fault off the corners is more likely missed than caught at N = 1000
    assert o.rate is not None and _binomial_ok(o.rate, p, N_SEEDS), (o.rate, p)
    assert 0 < o.rate < 1


def test_print_table(outcomes: dict[tuple[str, str], Outcome]) -> None:
    table = format_table(list(outcomes.values()), N_SEEDS)
    print("\n" + table)
    lines = table.splitlines()
    assert len(lines) == 2 + len(outcomes)
    assert lines[0].split()[:4] == ["mutant", "kernel", "wrong/total", "analytic"]
    assert all(k in table for k in ALL_KERNELS) and all(n in table for n in MUTANTS)
    assert "1 (corner)" in table
