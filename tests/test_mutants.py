"""Mutants: deliberately broken generated kernels that the semantic check must flag before any time counts.

``pytest -s tests/test_mutants.py`` prints the mutant x kernel table (also: ``python -m harness.mutants``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.check import CheckConfig, check_output, make_tensors, sample_points
from harness.mutants import (
    MUTANTS,
    MutationError,
    Outcome,
    apply_mutant,
    demo_kernels,
    detection_probability,
    evaluate,
    format_table,
    mutate,
    output_shape,
)
from kernels.candidate import Candidate, KernelSource, Workload, render
from tests.conftest import HOST_TARGET

KERNELS = demo_kernels(HOST_TARGET)
ONE_POINT = ("one_point_corner", "one_point_interior")
SPREAD = [n for n in MUTANTS if n not in ONE_POINT]  # mutants that spoil more than one output point
SEED = 0

TRIVIAL = "int kernel(float *const *t, void *ws) {\n  (void)t;\n  (void)ws;\n  return 0;\n}\n"


def _scalar_kernel(text: str) -> KernelSource:
    w = Workload.make("m8", "matmul", {"i": 8, "j": 8, "k": 4})
    return render(Candidate("scheme", text, (("target", HOST_TARGET),)), w)


def _changed_lines(before: str, after: str) -> tuple[set[str], set[str]]:
    a, b = set(before.splitlines()), set(after.splitlines())
    return {x.strip() for x in a - b}, {x.strip() for x in b - a}


@pytest.fixture(scope="module")
def outcomes(shared_cache: Path) -> dict[tuple[str, str], Outcome]:
    """Every mutant (and the un-mutated kernel, mutant "") x demo kernel: built, run once, checked."""
    res = evaluate(KERNELS, [None, *MUTANTS], shared_cache, seed=SEED)
    return {(o.mutant, o.kernel): o for o in res}


# -- the catalogue, as text --------------------------------------------------------------------------------
def test_catalogue_is_documented_and_covers_the_bug_classes() -> None:
    assert len(MUTANTS) >= 8
    for name, m in MUTANTS.items():
        assert m.name == name and m.description and m.models and callable(m.apply)
    for required in (
        "drop_last_iteration",  # off-by-one tail
        "wrong_input_stride",  # wrong stride
        "wrong_input_offset",  # wrong halo
        "drop_fma",  # dropped reduction step
        "zero_init_accumulators",  # overwrite instead of accumulate
        "fma_wrong_accumulator",
        "add_wrong_operand",
        "one_point_interior",
    ):
        assert required in MUTANTS


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_never_silently_a_noop(name: str) -> None:
    with pytest.raises(MutationError):
        MUTANTS[name].apply(TRIVIAL)
    with pytest.raises(MutationError):
        mutate(KernelSource(TRIVIAL, "any"), name)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutate_returns_a_new_kernel_source(name: str) -> None:
    for k in KERNELS:
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


def test_unknown_mutant_name() -> None:
    with pytest.raises(KeyError, match="unknown mutant"):
        mutate(KernelSource(TRIVIAL, "any"), "no_such_mutant")


def test_edits_on_the_blis_kernel_are_the_documented_ones() -> None:
    code = render(KERNELS[0].candidate, KERNELS[0].workload).code  # 6 x 2 vectors, T_{32,k}
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


def test_scalar_forms_and_what_a_naive_kernel_cannot_host() -> None:
    """Scalar code (`acc += a * b`, `po[n] = acc`) is mutated too; a kernel with one accumulator and one
    load per input has nothing for the register-tile mutants to misplace, and they say so."""
    naive = _scalar_kernel("[R_i, R_j, R_k]").code
    cannot = {"wrong_input_offset", "store_wrong_offset", "wrong_broadcast", "fma_wrong_accumulator",
              "add_wrong_operand"}  # fmt: skip
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


# -- through build, run_kernel and check_output --------------------------------------------------------------
@pytest.mark.parametrize("kernel", [k.label for k in KERNELS])
def test_unmutated_kernels_pass(outcomes: dict[tuple[str, str], Outcome], kernel: str) -> None:
    o = outcomes[("", kernel)]
    assert o.status == "ok", o.reason
    assert o.default is not None and o.full is not None
    assert o.default.mode == "sampled" and o.default.points == CheckConfig().points  # really sampled
    assert o.default.passed and o.full.passed and o.n_wrong == 0
    assert not o.detected


@pytest.mark.parametrize("kernel", [k.label for k in KERNELS])
@pytest.mark.parametrize("name", SPREAD)
def test_default_sampled_check_flags_the_mutant(
    outcomes: dict[tuple[str, str], Outcome], name: str, kernel: str
) -> None:
    o = outcomes[(name, kernel)]
    assert o.status == "ok", f"the mutant should run (all accesses in bounds) and be wrong: {o.reason}"
    assert o.default is not None and o.full is not None and o.n_wrong is not None
    assert o.default.mode == "sampled"
    assert not o.full.passed and o.n_wrong > 1
    assert not o.default.passed and o.detected, f"{name} on {kernel} slipped through the default check"
    assert o.p_detect is not None and o.p_detect > 1 - 1e-9


@pytest.mark.parametrize("kernel", [k.label for k in KERNELS])
def test_one_wrong_corner_is_always_caught(outcomes: dict[tuple[str, str], Outcome], kernel: str) -> None:
    o = outcomes[("one_point_corner", kernel)]
    k = next(k for k in KERNELS if k.label == kernel)
    shape = k.workload.shapes()[0]
    assert o.status == "ok" and o.full is not None and o.default is not None and o.output is not None
    assert o.n_wrong == 1 and o.full.first_bad == (0,) * len(shape)
    # boundary=True puts the corners in every sample: caught whatever the seed ...
    assert o.default.mode == "sampled" and not o.default.passed and o.default.first_bad == (0,) * len(shape)
    # ... while a purely random sample would catch it only with the analytic probability
    tensors = make_tensors(k.workload, SEED, CheckConfig())
    no_corners = CheckConfig(boundary=False)
    pts, _ = sample_points(shape, no_corners, SEED)
    in_sample = bool((pts == 0).all(axis=1).any())
    assert check_output(k.workload, tensors, o.output, no_corners, SEED).passed == (not in_sample)


@pytest.mark.parametrize("kernel", [k.label for k in KERNELS])
def test_one_wrong_interior_point_matches_the_analysis(
    outcomes: dict[tuple[str, str], Outcome], kernel: str
) -> None:
    o = outcomes[("one_point_interior", kernel)]
    k = next(k for k in KERNELS if k.label == kernel)
    shape = k.workload.shapes()[0]
    n = math.prod(shape)
    centre = tuple(s // 2 for s in shape)
    assert o.status == "ok" and o.full is not None and o.default is not None
    # the full check finds exactly the one wrong point
    assert o.full.mode == "full" and not o.full.passed and o.n_wrong == 1 and o.full.first_bad == centre
    # the sampled check catches it iff the point is among the sampled ones: with probability p
    pts, mode = sample_points(shape, CheckConfig(), SEED)
    assert mode == o.default.mode == "sampled"
    in_sample = bool((pts == np.array(centre)).all(axis=1).any())
    assert o.default.passed == (not in_sample)
    p = detection_probability(1, n, 1000)
    assert o.p_detect == p == pytest.approx(1 - (1 - 1 / n) ** 1000, rel=1e-12)
    assert 0.05 < p < 0.2  # a single interior fault is more likely missed than caught at N = 1000


def test_print_table(outcomes: dict[tuple[str, str], Outcome]) -> None:
    table = format_table(list(outcomes.values()))
    print("\n" + table)
    lines = table.splitlines()
    assert len(lines) == 2 + len(outcomes)
    assert all(k.label in table for k in KERNELS) and all(n in table for n in MUTANTS)
