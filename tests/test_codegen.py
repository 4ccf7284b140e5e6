"""Generated C kernels against the float64 reference, through the real pipeline (render, build, run, check).

Schemes run on ``HOST_TARGET`` (AVX2 here, AVX-512 elsewhere). Where a V dimension is unrolled, sizes are
chosen from the host's lane count ``L`` so that every scheme is legal whatever the machine.
"""

from __future__ import annotations

import ctypes
import math
import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.build import CompilerConfig, build, compile_only, isa_flags
from harness.check import CheckConfig
from harness.machine import detect
from kernels.candidate import Candidate, Workload, render
from kernels.codegen import analyze_for
from kernels.scheme import SchemeError
from kernels.targets import get_target
from kernels.transpose import panel_groups
from tests.conftest import HOST_TARGET, run_candidates, scheme

L = get_target(HOST_TARGET).lanes
FULL = CheckConfig(full_below=10**9)  # every output point is compared


def mm(i: int, j: int, k: int) -> Workload:
    return Workload.make("mm", "matmul", {"i": i, "j": j, "k": k})


def conv(stride: int, **sizes: int) -> Workload:
    return Workload.make(f"cv{stride}", "conv2d", sizes, stride=stride)


def assert_all_ok(
    candidates: list[Candidate], workload: Workload, tmp_path: Path, cache: Path, seed: int = 0
) -> None:
    rows = run_candidates(candidates, workload, tmp_path / "results", cache, check=FULL, seed=seed)
    assert len(rows) == len(candidates)
    bad = [(r["label"], r["status"], r["reason"][:500]) for r in rows if r["status"] != "ok"]
    assert not bad, bad
    for r in rows:
        assert r["check_passed"] is True and r["check_mode"] == "full"
        assert r["check_points"] == math.prod(workload.shapes()[0])


# -- matmul ---------------------------------------------------------------------------------------------
def test_matmul_scalar_vector_and_register_tiles(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(24, 4 * L, 16)
    texts = [
        "[R_i, R_j, R_k]",
        "[R_k, R_j, R_i]",  # Fig 3.1
        "[R_k, R_j, R_i, V_j]",  # Fig 3.2
        "[R_k, R_j, R_i, U_{2,k}]",  # Fig 3.3
        "[R_k, R_j, R_i, T_{8,k}]",  # Fig 3.4 (T_{32,k} scaled to k = 16)
        "[R_j, R_k, R_i, T_{2,j}, T_{2,i}, T_{8,k}, U_{6,i}, U_{2,j}, V_j]",  # BLIS-like 6 x 2 vectors
        "[R_i, R_j, R_k, U_{3,i}, U_{2,k}, U_{2,j}, V_j]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_microkernels(stride: int, tmp_path: Path, shared_cache: Path) -> None:
    w = conv(stride, h=3, w=6, k=2 * L, r=3, s=3, c=4)
    texts = [
        "[R_h, R_w, R_k, R_r, R_s, R_c]",
        "[R_h, R_k, R_r, R_s, R_c, R_w, V_k]",
        "[R_h, R_w, R_k, R_c, U_{3,r}, U_{3,s}]",  # scalar, unrolled r/s
        "[R_h, R_c, T_{2,w}, U_{3,r}, U_{3,s}, U_{3,w}, U_{2,k}, V_k]",  # §5.2 microkernel family
        "[R_h, T_{2,w}, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]",  # accumulators hoisted over r, s, c
        "[R_w, R_h, R_r, ScalP[s,c], R_s, R_c, U_{3,h}, U_{2,k}, V_k]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


# -- λ_seq microkernel combinations ----------------------------------------------------------------------
def test_lambda_one_dimension(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(43, 2 * L, 8)  # 43 = 2x11 + 3x7
    texts = [
        "[λ_seq_i.[(2,11);(3,7)]; T_{8,k}; Uλ_i; U_{2,j}; V_j]",
        "[R_j, λ_seq_i.[(2,11),(3,7)], R_k, Uλ_i, V_j]",
        "[λ_seq_i.[(1,3),(2,5),(5,6)], R_j, R_k, Uλ_i]",  # three pairs, scalar
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


def test_lambda_remainder_tile_on_conv(tmp_path: Path, shared_cache: Path) -> None:
    """The remainder covers of space.conv.lambda_remainder: a 3 x 4-vector tile with a 1- or 2-wide
    remainder on w (17 = 1x2 + 5x3 = 2x1 + 5x3), reductions innermost, weights in panels or not."""
    w = conv(1, h=2, w=17, k=4 * L, c=3, r=3, s=3)
    texts = [
        "[R_h, λ_seq_w.[(1,2),(5,3)], R_c, R_r, R_s, Uλ_w, U_{4,k}, V_k]",
        "[R_h, λ_seq_w.[(2,1),(5,3)], R_s, R_c, R_r, Uλ_w, U_{4,k}, V_k]",
        f"[PackT_K[k/{4 * L},r,s,c,k], " + "R_h, λ_seq_w.[(1,2),(5,3)], R_c, R_r, R_s, Uλ_w, U_{4,k}, V_k]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


def test_lambda_fig_3_7(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(128, 4 * L, 8)  # 128 = 12x6 + 8x7
    text = "[R_j, λ_seq_i.[(12,6),(8,7)], T_{8,k}, Uλ_i, U_{2,j}, V_j]"
    assert_all_ok([scheme(text), scheme(text, hoist=False)], w, tmp_path, shared_cache)


def test_lambda_two_dimensions(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(43, 3 * L, 4)  # i = 7x4 + 3x5, j = (1x2 + 1x1) vectors
    texts = [
        "[λ_seq_i.[(7,4),(3,5)], λ_seq_j.[(1,2),(1,1)], R_k, Uλ_i, Uλ_j, V_j]",
        "[λ_seq_j.[(1,2),(1,1)], R_k, λ_seq_i.[(7,4),(3,5)], Uλ_j, Uλ_i, V_j]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)
    w2 = mm(7, 6, 2)
    assert_all_ok(
        [scheme("[λ_seq_i.[(2,2),(1,3)], λ_seq_j.[(1,2),(1,4)], R_k, Uλ_i, Uλ_j]")],
        w2,
        tmp_path / "b",
        shared_cache,
    )


def test_lambda_under_outer_loop_on_same_dim(tmp_path: Path, shared_cache: Path) -> None:
    texts = [
        "[R_i, λ_seq_i.[(2,2),(1,3)], R_j, R_k, Uλ_i]",  # i = 14 = 2 x (2x2 + 1x3)
        "[T_{2,i}, λ_seq_i.[(1,3),(1,4)], R_j, R_k, Uλ_i]",
    ]
    assert_all_ok([scheme(t) for t in texts], mm(14, 3, 2), tmp_path, shared_cache)


# -- partial tiles: Texct / Tvar / Texctg ----------------------------------------------------------------
def test_texct_tvar_texctg_partial_tiles(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(260, 4, 32)
    texts = [
        "[Texct_{260,i}, T_{4,j}, Texctg_{120,i}, Tvar_{32,i}, T_{32,k}]",  # Fig 3.16 (j = 4)
        "[Texct_{260,i}, R_j, Tvar_{32,i}, R_k]",
        "[R_i, Texct_{120,i}, R_j, Tvar_{32,i}, R_k]",  # border tile under R: 260 = 2x120 + 20
        "[R_i, Texct_{100,i}, Texctg_{60,i}, Texctg_{24,i}, Tvar_{10,i}, R_k, U_{2,i}, U_{4,j}]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


def test_fig_3_15_exact(tmp_path: Path, shared_cache: Path) -> None:
    assert_all_ok(
        [scheme("[Texct_{120,i}, T_{64,j}, Tvar_{32,i}, T_{32,k}]")], mm(120, 64, 32), tmp_path, shared_cache
    )


def test_partial_tiles_on_vector_dimension(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(5, 6 * L, 3)  # 6L = 4L + 2L: a border tile of 2 vectors
    texts = [
        f"[R_i, R_k, R_j, Texct_{{{4 * L},j}}, Tvar_{{{2 * L},j}}, V_j]",
        f"[R_k, R_j, Texct_{{{4 * L},j}}, R_i, Tvar_{{{3 * L},j}}, V_j]",
        f"[R_k, Texct_{{{6 * L},j}}, Tvar_{{{4 * L},j}}, T_{{5,i}}, U_{{2,j}}, V_j]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


def test_non_divisible_outer_level_conv_w33(tmp_path: Path, shared_cache: Path) -> None:
    w = conv(1, h=2, w=33, k=L, r=2, s=1, c=3)
    texts = [
        "[R_h, R_k, R_r, R_s, R_c, R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}]",
        "[R_h, R_w, Texct_{9,w}, R_r, R_s, R_c, Tvar_{6,w}, U_{3,w}, V_k]",
    ]
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


# -- ScalP, contractions, hoist and fma switches ---------------------------------------------------------
def test_scalp(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(4, 3, 64)
    texts = [
        "[R_k, R_j, R_i, ScalP[k], T_{32,k}, U_{2,i}]",  # Fig 3.6
        "[R_i, R_j, ScalP[k], R_k]",
        "[R_i, R_j, R_k, ScalP[k]]",
        "[R_i, R_j, ScalP[k], R_k, Texct_{40,k}, Tvar_{16,k}, U_{2,k}]",
    ]
    assert_all_ok([scheme(t) for t in texts] + [scheme(texts[0], hoist=False)], w, tmp_path, shared_cache)


def test_scalp_above_lambda_on_reduction(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(3, 2, 7)  # k = 2x2 + 1x3
    text = "[R_i, R_j, ScalP[k], λ_seq_k.[(2,2),(1,3)], Uλ_k]"
    rows = run_candidates([scheme(text)], w, tmp_path / "results", shared_cache, check=FULL)
    # either a correct kernel or a clean rejection naming the rule
    assert rows[0]["status"] == "ok" or (rows[0]["status"] == "error" and "[rule:" in rows[0]["reason"])


def test_contractions(tmp_path: Path, shared_cache: Path) -> None:
    # the thesis example Out[l1,r1,l2] += Left[l2,k1,k2,l1] * Right[r1,k2,k1]
    w = Workload.make("ct", "contraction", {"a": 3, "r": 2, "b": 5, "k": 3, "m": 4}, spec="bkma,rmk->arb")
    assert_all_ok(
        [scheme("[R_a, R_r, R_b, R_k, R_m]"), scheme("[R_k, R_a, R_m, R_r, U_{5,b}]")],
        w,
        tmp_path / "a",
        shared_cache,
    )
    wb = Workload.make("bt", "contraction", {"b": 2, "i": 3, "k": 5, "j": 2 * L}, spec="bik,bkj->bij")
    assert_all_ok(
        [scheme("[R_b, R_i, R_k, R_j, V_j]"), scheme("[R_b, R_k, U_{3,i}, U_{2,j}, V_j]")],
        wb,
        tmp_path / "b",
        shared_cache,
    )


def test_contraction_dimension_named_p(tmp_path: Path, shared_cache: Path) -> None:
    w = Workload.make("ctp", "contraction", {"p": 3, "k": 4, "j": 5}, spec="pk,kj->pj")
    assert_all_ok([scheme("[R_p, R_j, R_k]")], w, tmp_path, shared_cache)


@pytest.mark.parametrize("hoist", [True, False])
@pytest.mark.parametrize("fma", [True, False])
def test_hoist_and_fma_switches_are_correct(
    hoist: bool, fma: bool, tmp_path: Path, shared_cache: Path
) -> None:
    texts = ["[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "[R_j, R_i, T_{2,k}, T_{4,k}, U_{2,i}, V_j]"]
    assert_all_ok([scheme(t, hoist=hoist, fma=fma) for t in texts], mm(6, 2 * L, 8), tmp_path, shared_cache)


# -- randomized legal schemes ----------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _random_scheme(rng: random.Random, sizes: dict[str, int], vdim: str | None) -> str:
    """A legal scheme by construction: per dimension an unroll, then R / T / Texct-Tvar / λ_seq loops."""
    loops: list[list[str]] = []
    unrolls: list[str] = []
    for d, n in sizes.items():
        m = n // L if d == vdim else n
        gran = n // m
        lam = [
            (r1, a1, r2, a2)
            for a1 in range(1, 5)
            for a2 in range(a1 + 1, 5)
            for r1 in range(1, 4)
            for r2 in range(1, 4)
            if r1 * a1 + r2 * a2 == m
        ]
        if lam and rng.random() < 0.25:
            r1, a1, r2, a2 = rng.choice(lam)
            loops.append([f"lambda_seq_{d}.[({r1},{a1}),({r2},{a2})]"])
            unrolls.append(f"Ul_{d}")
            continue
        u = rng.choice([x for x in _divisors(m) if x <= 4])
        if u > 1:
            unrolls.append(f"U_{{{u},{d}}}")
        m //= u
        gran *= u
        choice = rng.random()
        if m > 2 and choice < 0.25:
            a = rng.randint(1, m)
            b = rng.randint(1, a)
            loops.append([f"R_{d}", f"Texct_{{{a * gran},{d}}}", f"Tvar_{{{b * gran},{d}}}"])
        elif m > 1 and choice < 0.6:
            t = rng.choice(_divisors(m))
            loops.append(
                [f"R_{d}", f"T_{{{t},{d}}}"]
                if rng.random() < 0.5
                else [f"T_{{{m // t},{d}}}", f"T_{{{t},{d}}}"]
            )
        elif m > 1 or rng.random() < 0.5:
            loops.append([f"R_{d}"])
    order: list[str] = []
    while any(loops):
        pick = rng.choice([chain for chain in loops if chain])
        order.append(pick.pop(0))
    rng.shuffle(unrolls)
    return "[" + ", ".join(order + unrolls + ([f"V_{vdim}"] if vdim else [])) + "]"


@pytest.mark.parametrize("op", ["matmul", "conv2d"])
def test_random_legal_schemes(op: str, tmp_path: Path, shared_cache: Path) -> None:
    rng = random.Random(f"ttile-{op}")
    if op == "matmul":
        sizes = {"i": rng.randint(5, 14), "j": L * rng.choice([1, 2, 3]), "k": rng.randint(3, 12)}
        w = Workload.make("rmm", "matmul", sizes)
        vdim = "j"
    else:
        sizes = {"h": rng.randint(1, 3), "w": rng.randint(4, 9), "k": L * rng.choice([1, 2]), "r": 3, "s": 2}
        sizes["c"] = rng.randint(2, 4)
        w = Workload.make("rcv", "conv2d", sizes, stride=rng.choice([1, 2]))
        vdim = "k"
    target = get_target(HOST_TARGET)
    cands: dict[str, Candidate] = {}
    while len(cands) < 7:
        text = _random_scheme(rng, sizes, vdim if rng.random() < 0.7 else None)
        analyze_for(text, w, target)  # legal by construction: a rejection is a bug
        cands.setdefault(text, scheme(text, hoist=rng.random() < 0.7, fma=rng.random() < 0.7))
    assert_all_ok(list(cands.values()), w, tmp_path, shared_cache, seed=3)


# -- AVX-512 everywhere (compiled), executed where the CPU has it ----------------------------------------
AVX512_CASES = [
    (mm(12, 64, 8), "[R_j, R_k, T_{2,i}, U_{6,i}, U_{2,j}, V_j]"),
    (mm(128, 32, 8), "[R_j, λ_seq_i.[(12,6),(8,7)], T_{8,k}, Uλ_i, U_{2,j}, V_j]"),
    (mm(20, 48, 6), "[R_i, R_k, R_j, Texct_{32,j}, Tvar_{16,j}, V_j]"),
    (conv(2, h=2, w=6, k=32, r=3, s=3, c=2), "[R_h, R_c, T_{2,w}, U_{3,r}, U_{3,s}, U_{3,w}, U_{2,k}, V_k]"),
]


def test_avx512_code_compiles_on_any_host() -> None:
    for w, text in AVX512_CASES:
        src = render(scheme(text, target="avx512"), w)
        assert src.target == "avx512"
        assert "__m512" in src.code and "_mm512_fmadd_ps" in src.code and "__m256" not in src.code
        res = compile_only(src.code, "avx512")
        assert res.ok, (text, res.error)
        assert "x86-64-v4" in res.flags
    nofma = render(scheme(AVX512_CASES[0][1], target="avx512", fma=False), AVX512_CASES[0][0]).code
    assert "fmadd" not in nofma and "_mm512_mul_ps" in nofma
    assert compile_only(nofma, "avx512").ok


def test_avx512_kernels_run_correctly(tmp_path: Path, shared_cache: Path) -> None:
    if "avx512" not in detect().isas:
        pytest.skip(f"this CPU ({detect().model_name}) cannot execute AVX-512; compiled only")
    for n, (w, text) in enumerate(AVX512_CASES):
        assert_all_ok([scheme(text, target="avx512")], w, tmp_path / str(n), shared_cache)


# -- what the switches do to the code --------------------------------------------------------------------
def _lines(text: str, w: Workload, target: str = "avx2", **options: object) -> list[str]:
    return render(scheme(text, target=target, **options), w).code.splitlines()


def _index(lines: list[str], pattern: str) -> list[int]:
    return [n for n, line in enumerate(lines) if re.search(pattern, line)]


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_hoisting_is_visible_in_the_code(target: str) -> None:
    t = get_target(target)
    w = mm(6, 2 * t.lanes, 8)
    text = "[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]"
    load = rf"acc\d+ = {t.load}\(po"
    store = rf"{t.store}\(po"
    hoisted = _lines(text, w, target, hoist=True)
    (kloop,) = _index(hoisted, r"for \(int k_\d+ ")
    loads, stores = _index(hoisted, load), _index(hoisted, store)
    assert len(loads) == len(stores) == 6  # one accumulator per (i, j-vector) of the 3 x 2 register tile
    assert max(loads) < kloop < min(stores)
    inside = _lines(text, w, target, hoist=False)
    (kloop,) = _index(inside, r"for \(int k_\d+ ")
    loads, stores = _index(inside, load), _index(inside, store)
    assert len(loads) == len(stores) == 6
    assert min(loads) > kloop
    assert "kept in registers" in "\n".join(hoisted) and "kept in registers" not in "\n".join(inside)


def test_hoisting_goes_above_all_innermost_reduction_loops() -> None:
    w = conv(1, h=2, w=4, k=16, r=3, s=3, c=2)
    text = "[R_h, T_{2,w}, R_r, R_s, R_c, U_{2,w}, U_{2,k}, V_k]"
    lines = _lines(text, w, hoist=True)
    first_red = min(_index(lines, r"for \(int [rsc]_\d+ "))
    wloop = _index(lines, r"for \(int w_\d+ ")[0]
    loads = _index(lines, r"acc\d+ = _mm256_loadu_ps\(po")
    assert len(loads) == 4 and wloop < min(loads) and max(loads) < first_red
    # a scheme whose innermost loop is parallel keeps its accumulators in the block
    lines = _lines("[R_h, R_r, R_s, R_c, T_{2,w}, U_{2,w}, U_{2,k}, V_k]", w, hoist=True)
    wloop = _index(lines, r"for \(int w_\d+ ")[0]
    assert min(_index(lines, r"acc\d+ = _mm256_loadu_ps\(po")) > wloop


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_loops_under_many_accumulators_stay_rolled(target: str) -> None:
    """Reduction loops under a register tile of more than half the register file get ``#pragma GCC unroll
    1`` (gcc's complete unrolling of a 3-trip r/s/c loop spills such a tile; issue 32); smaller tiles and
    the loops above the accumulators are left to the compiler."""
    t = get_target(target)
    for wu, rolled in ((t.registers // 4, False), (t.registers // 4 + 1, True)):  # 2 * wu accumulators
        w = conv(1, h=2, w=wu, k=2 * t.lanes, r=3, s=3, c=2)
        lines = _lines(f"[R_h, R_r, R_s, R_c, U_{{{wu},w}}, U_{{2,k}}, V_k]", w, target)
        marked = {n + 1 for n in _index(lines, re.escape("#pragma GCC unroll 1"))}
        assert marked == (set(_index(lines, r"for \(int [rsc]_\d+ ")) if rolled else set()), (wu, lines)


def test_rolled_reduction_loops_are_correct(tmp_path: Path, shared_cache: Path) -> None:
    w = conv(1, h=3, w=9, k=2 * L, r=3, s=3, c=3)  # 18 accumulators: rolled on AVX2 and AVX-512
    texts = ["[R_h, R_r, R_s, R_c, U_{9,w}, U_{2,k}, V_k]", "[R_h, R_c, R_r, R_s, U_{9,w}, U_{2,k}, V_k]"]
    assert all("#pragma GCC unroll 1" in render(scheme(t), w).code for t in texts)
    assert_all_ok([scheme(t) for t in texts], w, tmp_path, shared_cache)


def test_scalp_places_accumulators_at_its_position_even_without_hoist() -> None:
    w = mm(4, 3, 64)
    lines = _lines("[R_k, R_j, R_i, ScalP[k], T_{32,k}, U_{2,i}]", w, hoist=False)
    inner_k = _index(lines, r"for \(int k_\d+ ")
    iloop = _index(lines, r"for \(int i_\d+ ")[0]
    loads = _index(lines, r"float acc\d+ = po\[")
    assert len(loads) == 2 and iloop < min(loads) and max(loads) < inner_k[-1]


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_fma_switch(target: str) -> None:
    t = get_target(target)
    w = mm(6, 2 * t.lanes, 8)
    text = "[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]"
    with_fma = "\n".join(_lines(text, w, target, fma=True))
    without = "\n".join(_lines(text, w, target, fma=False))
    assert with_fma.count(t.fmadd) == 6 and t.mul not in with_fma
    assert "fmadd" not in without
    assert without.count(t.mul) == without.count(t.add) == 6
    scalar = "\n".join(_lines("[R_i, R_j, R_k]", w, target, fma=True))
    assert "fmadd" not in scalar and "+=" in scalar


# -- partial microkernels (codegen.partial=masked) -------------------------------------------------------
PARTIAL_CASES = [
    ("[R_j, R_i, T_{16,k}, U_{6,i}, U_{2,j}, V_j]", mm(13, 2 * L + 5, 16)),  # remainders on i and j
    ("[R_j, R_i, T_{8,k}, U_{6,i}, U_{2,j}, V_j]", mm(50, 4 * L, 8)),  # Fig 5.6 shape: I = 50 = 8 x 6 + 2
    ("[R_i, R_k, R_j, V_j]", mm(3, 5, 4)),  # a vector longer than the dimension
    ("[R_j, R_k, U_{6,i}, U_{2,j}, V_j]", mm(4, 2 * L + 3, 3)),  # one partial microkernel covers i
    ("[R_j, R_k, R_i, Texct_{20,i}, Tvar_{8,i}, U_{4,i}, V_j]", mm(50, L, 5)),  # granularity relaxed
    ("[R_k, R_h, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]", conv(2, h=3, w=11, k=2 * L + 3, c=3, r=3, s=3)),
]


@pytest.mark.parametrize(("partial", "hoist"), [("masked", True), ("masked", False), ("padded", True)])
def test_partial_microkernels_equal_the_reference(
    partial: str, hoist: bool, tmp_path: Path, shared_cache: Path
) -> None:
    for n, (text, w) in enumerate(PARTIAL_CASES):
        with pytest.raises(SchemeError):  # without partial microkernels the remainders are illegal
            analyze_for(text, w, get_target(HOST_TARGET))
        assert_all_ok([scheme(text, partial=partial, hoist=hoist)], w, tmp_path / str(n), shared_cache)


def test_padding_copies_only_the_tensors_the_tiles_overrun() -> None:
    w = mm(13, 2 * L, 16)  # i overruns (13 -> 18), j and k fit
    code = render(scheme("[R_j, R_i, T_{16,k}, U_{6,i}, U_{2,j}, V_j]", partial="padded"), w).code
    assert "/* C: [13, " in code and "/* A: [13, 16] -> [18, 16] */" in code and "/* B:" not in code
    assert "static int padded_kernel(" in code


def test_random_non_divisible_shapes_with_partial_microkernels(tmp_path: Path, shared_cache: Path) -> None:
    rng = random.Random(11)
    cands, shapes = [], []
    for n in range(6):
        i, j, k = rng.randint(1, 30), rng.randint(1, 3 * L), rng.randint(1, 9)
        ui, uj = rng.randint(1, 6), rng.randint(1, 2)
        text = f"[R_j, R_i, R_k, U_{{{ui},i}}, U_{{{uj},j}}, V_j]"
        shapes.append(mm(i, j, k))
        cands.append(scheme(text, partial="masked", hoist=bool(n % 2)))
    for n, (c, w) in enumerate(zip(cands, shapes, strict=True)):
        assert_all_ok([c], w, tmp_path / str(n), shared_cache)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_masked_code_uses_the_target_masks_and_compiles(target: str) -> None:
    t = get_target(target)
    w = mm(13, 2 * t.lanes + 5, 16)
    code = render(
        Candidate("scheme", PARTIAL_CASES[0][0], (("partial", "masked"), ("target", target))), w
    ).code
    assert (
        t.mask_type in code and t.masked_load.split("(")[0] in code and t.masked_store.split("(")[0] in code
    )
    assert "switch (e_i_" in code  # remainders of the unrolled i: one complete microkernel per size
    assert f"== {2 * t.lanes}) {{" in code  # the full vector tile keeps unmasked loads
    assert compile_only(code, target).ok


def test_partial_option_is_validated() -> None:
    with pytest.raises(ValueError, match="codegen.partial"):
        analyze_for("[R_i, R_j, R_k]", mm(2, 2, 2), get_target("avx2"), partial="padded-ish")


# -- packing (Pack / PackT, thesis §3.6) -----------------------------------------------------------------
PACK_CASES = [
    ("[T_{2,j}, T_{4,i}, Pack_A, T_{24,k}, U_{4,i}, U_{2,j}, V_j]", mm(16, 4 * L, 24)),  # Fig 3.17 shape
    ("[Pack_B, R_j, R_i, R_k, U_{4,i}, U_{2,j}, V_j]", mm(8, 2 * L, 5)),
    ("[R_j, Pack_C, R_i, R_k, U_{4,i}, U_{2,j}, V_j]", mm(8, 2 * L, 5)),  # the output is copied back
    ("[R_i, R_j, PackT_A[k,i], R_k]", mm(7, 5, 6)),  # transposed buffer
    (
        "[R_j, R_i, R_k, Texct_{20,k}, Pack_A, PackT_B[k,j], Tvar_{8,k}, U_{4,i}, U_{2,j}, V_j]",
        mm(8, 2 * L, 50),
    ),
    (
        "[R_k, R_h, Pack_I, Pack_O, R_w, R_r, R_s, R_c, U_{6,w}, U_{2,k}, V_k]",
        conv(2, h=3, w=12, k=2 * L, c=3, r=3, s=3),
    ),
]


def test_packed_kernels_equal_the_reference(tmp_path: Path, shared_cache: Path) -> None:
    for n, (text, w) in enumerate(PACK_CASES):
        src = render(scheme(text), w)
        assert src.workspace_bytes > 0 and "workspace +" in src.code
        assert_all_ok([scheme(text)], w, tmp_path / str(n), shared_cache)
    # a pack with partial microkernels below it
    w = mm(13, 4 * L + 5, 16)
    assert_all_ok(
        [scheme("[R_j, R_i, T_{16,k}, Pack_C, U_{6,i}, U_{2,j}, V_j]", partial="masked")],
        w,
        tmp_path / "partial",
        shared_cache,
    )


def test_panel_packs_equal_the_reference(tmp_path: Path, shared_cache: Path) -> None:
    """PackT_X[d/p, ..., d] (BLIS's micro-panels): whole shapes, then blocks and a matrix that no block,
    panel or tile divides (partial last panels, masked vectors, the remainder switch)."""
    nr = 2 * L
    whole = f"[PackT_B[j/{nr},k,j], PackT_A[i/4,k,i], R_j, R_i, R_k, U_{{4,i}}, U_{{2,j}}, V_j]"
    src = render(scheme(whole), mm(8, 2 * nr, 5))
    assert "panels of" in src.code
    # whole panels are copied in the buffer's order, the panel's p values innermost with a constant bound
    # (p short rows read side by side for A, contiguous stores for B); only a partial panel needs MIN
    assert re.search(r"pq\d+_k < 5; .*\n\s*for \(int pq\d+_i = 0; pq\d+_i < 4; ", src.code)
    assert "MIN(" not in src.code.split("int kernel", 1)[1]
    odd = render(scheme(whole, partial="masked"), mm(9, 2 * nr, 5)).code
    assert "- pp1 * 4 >= 4) {" in odd and "MIN(4, 9 - pp1 * 4)" in odd
    blocked = (
        f"[R_j, Texct_{{{4 * nr},j}}, R_k, Texct_{{40,k}}, PackT_B[j/{nr},k,j], R_i, Texct_{{30,i}}, "
        f"PackT_A[i/6,k,i], Tvar_{{{4 * nr},j}}, Tvar_{{30,i}}, Tvar_{{40,k}}, U_{{6,i}}, U_{{2,j}}, V_j]"
    )
    assert_all_ok([scheme(whole)], mm(8, 2 * nr, 5), tmp_path / "whole", shared_cache)
    w = mm(101, 5 * nr + 3, 53)
    assert_all_ok([scheme(blocked, partial="masked")], w, tmp_path / "odd", shared_cache)


def test_weight_panels_of_a_tile_whose_k_ends_masked_equal_the_reference(
    tmp_path: Path, shared_cache: Path
) -> None:
    """The conv weights in panels of a 3-vector k tile on K = 3L + 5: the last panel holds 5 channels and
    the masked microkernel reads only those (space.conv.panels_partial_k), copied each call or kept."""
    c = conv(1, h=4, w=7, k=3 * L + 5, c=6, r=3, s=3)
    text = f"[PackT_K[k/{3 * L},r,s,c,k], R_k, R_h, R_w, R_r, R_s, R_c, U_{{7,w}}, U_{{3,k}}, V_k]"
    cands = [scheme(text, partial="masked"), scheme(text, partial="masked", constant="K")]
    assert_all_ok(cands, c, tmp_path, shared_cache)


def test_panels_of_a_row_major_source_go_through_the_panel_transpose(
    tmp_path: Path, shared_cache: Path
) -> None:
    """A's micro-panels (p rows, k contiguous in A) are copied L values of k at a time through the
    in-register transpose, at most L rows per call (the partial group first: its stores spill into rows
    the whole groups write next), the scalar tail and a partial last panel by the general copy; every
    output point equals the reference, on shapes no chunk divides, p from 2 to 2L + 3. (A convolution's
    weights K[r][s][c][k] are contiguous along their panel's k: vector copies, no transpose.)"""
    w = mm(4 * 7 + 1, L + 3, 5 * L + 5)
    cands = []
    for p in (2, 3, 4, 6, 7, L, L + 3, 2 * L + 3):
        kc = 4 * L + 3
        text = f"[R_k, Texct_{{{kc},k}}, PackT_A[i/{p},k,i], R_i, R_j, Tvar_{{{kc},k}}, U_{{{p},i}}, V_j]"
        c = scheme(text, partial="masked")
        code = render(c, w).code
        calls = re.findall(r"ttile_panel(\d+)x(\d+)\(&", code)
        assert [int(n) for _, n in calls] == [n for _, n in panel_groups(L, p)], (p, calls)
        cands.append(c)
    assert_all_ok(cands, w, tmp_path / "p", shared_cache)
    # a k shorter than one chunk keeps the scalar copy; so does a source contiguous along the panel's d
    short = scheme("[PackT_A[i/4,k,i], R_i, R_j, R_k, U_{4,i}, V_j]")
    assert "ttile_panel" not in render(short, mm(8, L, L - 1)).code
    along_j = scheme(f"[PackT_B[j/{L},k,j], R_i, R_j, R_k, V_j]")
    assert "ttile_panel" not in render(along_j, mm(8, 4 * L, 2 * L)).code


@pytest.mark.parametrize(
    ("text", "match"),
    [
        # a loop inside a panel (step 2 under panels of 4 rows)
        ("[PackT_A[i/4,k,i], R_i, R_j, R_k, U_{2,i}, V_j]", "steps by 2"),
        # a tile wider than the panel
        ("[PackT_A[i/2,k,i], R_i, R_j, R_k, U_{4,i}, V_j]", "past a panel"),
        ("[R_i, R_j, R_k, PackT_C[j/2,i,j]]", "inputs only"),
        ("[PackT_A[i/4,k,i], PackT_A[i,k], R_i, R_j, R_k, U_{4,i}, V_j]", "pack it once"),
    ],
)
def test_panel_rules_of_the_generator(text: str, match: str) -> None:
    with pytest.raises(SchemeError, match=match) as ei:
        render(scheme(text), mm(8, 2 * L, 4))
    assert ei.value.rule == "pack-split"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("[Pack_Z, R_i, R_j, R_k]", "unknown-tensor"),
        ("[PackT_A[i,j], R_i, R_j, R_k]", "packt-dims"),
        ("[R_i, R_j, R_k, PackT_B[j,k], V_j]", "V-stride1"),  # the transposed buffer has k innermost
        ("[R_i, R_j, R_k, U_{2,i}, Pack_A]", "unroll-innermost"),
        ("[PackT_A[i/4,i,k], R_i, R_j, R_k]", "pack-split"),  # the panel dimension must be innermost
        ("[PackT_A[i/4,k/2,i], R_i, R_j, R_k]", "pack-split"),  # one split at most
        ("[PackT_A[i/0,k,i], R_i, R_j, R_k]", "pack-split"),
    ],
)
def test_pack_rules(text: str, rule: str) -> None:
    with pytest.raises(SchemeError) as ei:
        analyze_for(text, mm(4, 2 * L, 4), get_target(HOST_TARGET))
    assert ei.value.rule == rule, str(ei.value)


def test_packt_of_a_strided_conv_input_is_rejected() -> None:
    with pytest.raises(SchemeError, match="compound axis") as ei:
        analyze_for(
            "[PackT_I[c,h,w], R_h, R_w, R_k, R_r, R_s, R_c]",
            conv(2, h=2, w=2, k=2, c=2, r=1, s=1),
            get_target(HOST_TARGET),
        )
    assert ei.value.rule == "packt-dims"


# -- regressions found by the scheme fuzzer (harness/verify/fuzz.py) -----------------------------------------
def test_fuzz_regressions(tmp_path: Path, shared_cache: Path) -> None:
    cases = [
        # a masked vector past the extent aliases another operand's address: the mask must be part of the key
        (
            scheme(
                "[R_h, R_c, R_r, R_w, R_k, R_s, U_{2,k}, U_{2,c}, U_{3,w}, V_k]",
                target="avx2",
                partial="masked",
                hoist=False,
            ),
            conv(1, h=1, w=8, k=8, r=3, s=2, c=4),
        ),
        # a pack under a λ nest whose origin is an expression (w_2 + 2) must subtract it as a whole
        (
            scheme(
                "[T_{2,c}, R_w, Texct_{6,w}, Tvar_{3,w}, R_h, T_{1,c}, λ_seq_w.[(1,2),(1,1)], R_s, T_{1,c}, "
                "T_{1,r}, Pack_I, Pack_I, Uλ_w, V_k]",
                target="avx2",
            ),
            conv(3, h=5, w=3, k=8, r=1, s=2, c=2),
        ),
        # rows narrower than a vector: a masked vector past a row has the address of the next row's
        (
            scheme("[R_j, T_{1,i}, U_{5,i}, U_{2,j}, U_{2,k}, V_j]", target="avx2", partial="masked"),
            mm(5, 4, 1),
        ),
    ]
    if HOST_TARGET != "avx2" and "avx2" not in detect().isas:
        pytest.skip("needs an AVX2 host")
    for n, (cand, w) in enumerate(cases):
        assert_all_ok([cand], w, tmp_path / str(n), shared_cache)
    # padding an illegal structure is a scheme error, not a crash of the footprint computation
    with pytest.raises(SchemeError, match="unroll-innermost"):
        render(scheme("[R_j, Uλ_j, T_{11,i}, T_{1,i}, U_{3,j}, U_{11,k}]", partial="padded"), mm(11, 8, 10))


# -- PackT: in-register transposes (8x8 AVX2, 16x16 AVX-512) ---------------------------------------------
PACKT_SCHEMES = [
    "[PackT_A[k,i], R_i, R_j, R_k]",  # the whole of A transposed (k contiguous -> i contiguous)
    "[R_j, PackT_A[k,i], PackT_C[j,i], R_i, R_k]",  # the output too: transposed back after the loops
    "[R_i, PackT_B[j,k], R_j, R_k]",
    "[PackT_A[k,i], PackT_A[i,k], R_i, R_k, R_j, V_j]",  # a PackT of a transposed buffer, vectorized j
    "[R_k, Texct_{24,k}, PackT_A[k,i], PackT_B[j,k], Tvar_{8,k}, R_i, R_j]",  # variable extents
]


@pytest.mark.parametrize("seed", [0, 1])
def test_packt_transposes_equal_the_reference_on_non_divisible_shapes(
    seed: int, tmp_path: Path, shared_cache: Path
) -> None:
    rng = random.Random(seed)
    lanes = get_target(HOST_TARGET).lanes
    sizes = {d: rng.randrange(lanes + 1, 2 * lanes + lanes // 2) for d in "ijk"}
    sizes["k"] = max(sizes["k"], 25)  # Texct_{24,k} needs k > 24 to leave a partial tile
    w = mm(sizes["i"], sizes["j"], sizes["k"])
    cands = [scheme(t, partial="masked" if "V_" in t else "none") for t in PACKT_SCHEMES]
    for c in cands[:3]:
        assert f"ttile_transpose{lanes}x{lanes}(" in render(c, w).code
    assert_all_ok(cands, w, tmp_path, shared_cache, seed=seed)


def test_packt_of_a_conv_kernel_tensor(tmp_path: Path, shared_cache: Path) -> None:
    w = conv(1, h=2, w=3, k=L + 3, r=1, s=2, c=L + 5)
    text = "[PackT_K[r,s,k,c], R_h, R_w, R_k, R_r, R_s, R_c]"
    assert "ttile_transpose" in render(scheme(text), w).code
    assert_all_ok([scheme(text)], w, tmp_path, shared_cache)


def test_packt_transpose_op_lists_transpose_every_block() -> None:
    """The AVX-512 shuffle network is checked here on any host (numpy model of each intrinsic)."""
    import numpy as np

    from kernels.transpose import TRANSPOSES, simulate, simulate_panel

    for tr in TRANSPOSES.values():
        block = np.arange(tr.lanes * tr.lanes).reshape(tr.lanes, tr.lanes)
        np.testing.assert_array_equal(simulate(tr, block), block.T)
        # a wrong immediate breaks it (the model is not vacuous)
        dst, op, a, b, imm = next(o for o in tr.ops if o[1] == "shuffle")
        bad = [(d, o, x, y, (0xEE if i == 0x44 else 0x44) if (d, o) == (dst, op) else i)
               for d, o, x, y, i in tr.ops]  # fmt: skip
        broken = type(tr)(tr.isa, tr.lanes, tr.vtype, tr.load, tr.store, tuple(bad), tr.out)
        assert not (simulate(broken, block) == block.T).all()
        # a panel chunk (p rows, at most L per call, zeros below): each column's p values land at c * p,
        # every spill overwritten but the last column's (L - p mod L floats past the chunk, no more)
        rows = np.arange(3 * tr.lanes * tr.lanes).reshape(3 * tr.lanes, tr.lanes)
        for p in range(2, 2 * tr.lanes + 4):
            out = np.full(tr.lanes * p + tr.lanes, -1)
            simulate_panel(tr, p, rows[:p], out)
            np.testing.assert_array_equal(out[: tr.lanes * p], rows[:p].T.reshape(-1))
            spill, n = out[tr.lanes * p :], (tr.lanes - p % tr.lanes) % tr.lanes
            assert (spill[:n] == 0).all() and (spill[n:] == -1).all(), p


def test_packt_avx512_transpose_compiles_and_runs_where_supported(tmp_path: Path, shared_cache: Path) -> None:
    w = mm(37, 21, 35)
    texts = ["[PackT_A[k,i], R_i, R_j, R_k]", "[R_j, PackT_A[k,i], PackT_C[j,i], R_i, R_k]"]
    for text in texts:
        src = render(scheme(text, target="avx512"), w)
        assert "ttile_transpose16x16(" in src.code and "_mm512_shuffle_f32x4" in src.code
        res = compile_only(src.code, "avx512")
        assert res.ok, res.error
    panel = "[PackT_A[i/12,k,i], R_i, R_j, R_k, U_{12,i}, V_j]"  # A's micro-panels of 12 x 16 chunks
    src = render(scheme(panel, target="avx512", partial="masked"), w)
    assert "ttile_panel16x12(&" in src.code and "_mm512_setzero_ps" in src.code
    res = compile_only(src.code, "avx512")
    assert res.ok, res.error
    texts.append(panel)
    if "avx512" not in detect().isas:
        why = "cannot execute AVX-512; 16x16 transposes compiled only"
        pytest.skip(f"this CPU ({detect().model_name}) {why}")
    assert_all_ok([scheme(t, target="avx512", partial="masked") for t in texts], w, tmp_path, shared_cache)


def test_pack_without_transposition_is_unchanged() -> None:
    w = mm(16, 2 * L, 21)
    for text in ["[Pack_B, R_j, R_i, R_k, U_{4,i}, U_{2,j}, V_j]", "[R_i, R_j, PackT_B[k,j], R_k]"]:
        assert "ttile_transpose" not in render(scheme(text), w).code


# -- prefetch of the next output tile (codegen option prefetch, issue 33) -----------------------------------
def test_prefetching_the_next_output_tile_changes_no_result(tmp_path: Path, shared_cache: Path) -> None:
    """Along i, j (matmul) and w (conv), with partial tiles past the end: every output point checked."""
    lanes = get_target(HOST_TARGET).lanes
    w = mm(23, 2 * lanes + 3, 19)
    cands = [
        scheme("[R_j, R_i, R_k, U_{6,i}, U_{2,j}, V_j]", partial="masked", prefetch=d)
        for d in ("i", "j", "C:i,A:i", "B:j")
    ]
    cands.append(scheme("[R_i, Texct_{12,i}, R_j, Tvar_{12,i}, R_k, U_{6,i}, U_{2,j}, V_j]", partial="masked",
                        prefetch="i"))  # fmt: skip
    for row in run_candidates(cands, w, tmp_path / "mm", shared_cache, FULL):
        assert row["status"] == "ok" and row["check_passed"], (row["label"], row["reason"][:300])
    c = conv(1, h=5, w=9, k=2 * lanes, c=3, r=3, s=3)
    text = "[R_k, R_h, R_w, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]"
    (row,) = run_candidates(
        [scheme(text, partial="masked", prefetch="w")], c, tmp_path / "cv", shared_cache, FULL
    )
    assert row["status"] == "ok" and row["check_passed"], row["reason"][:300]


def test_prefetch_lines_follow_the_accumulators() -> None:
    """One write-intent prefetch per cache line of the tile (two AVX2 vectors share one), at the tile one
    extent further along the dimension, after the accumulators are loaded and before the reduction loop."""
    w = mm(12, 32, 8)
    text = "[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]"
    lines = _lines(text, w, "avx2", prefetch="i")
    pn = _index(lines, r"const float \*pn = C \+ 32 \* \(\(i_\d+\) \+ \(3\)\)")
    pf = _index(lines, r"__builtin_prefetch\(pn \+ \d+, 1, 3\)")
    (kloop,) = _index(lines, r"for \(int k_\d+ ")
    assert len(pn) == 1 and len(pf) == 3  # 3 rows x 16 floats: one line each
    assert max(_index(lines, r"acc\d+ = _mm256_loadu_ps\(po")) < pn[0] < min(pf) and max(pf) < kloop
    assert not _index(_lines(text, w, "avx2"), r"prefetch")


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ({"prefetch": "k"}, "'k' is not a dimension of C"),
        ({"prefetch": "A:j"}, "'j' is not a dimension of A"),
        ({"prefetch": "X:i"}, "no tensor 'X'"),
        ({"prefetch": "i", "hoist": False}, "hoist"),
        ({"prefetch": "A:i@L3"}, "cache level 'L3'"),
        ({"prefetch": "i@stream"}, "@stream is for an input"),
    ],
)
def test_prefetch_needs_an_output_dimension_and_the_tile_in_registers(options: dict, rule: str) -> None:
    cand = scheme("[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "avx2", **options)
    with pytest.raises(SchemeError, match=rule):
        render(cand, mm(12, 32, 8))


# -- broadcast operands read by the FMA (codegen option broadcast=embedded, issue 32) ------------------------
def test_an_embedded_broadcast_reads_each_element_in_its_fma() -> None:
    """No set1: every FMA of a broadcast operand names the element it reads (p0[off]), once per vector of
    the other operand; the vector operand is still loaded once and shared; the 7 x 4 tile of resnet18_12
    then compiles with no zmm register spilled (the set1 form needs 33 of the 32)."""
    w = conv(1, h=7, w=7, k=64, c=16, r=3, s=3)
    text = "[R_h, R_r, R_s, R_c, U_{7,w}, U_{4,k}, V_k]"
    lines = _lines(text, w, "avx512", broadcast="embedded")
    fmas = _index(lines, r"acc\d+ = ttile_fmadd_bcst\(b\d+, &p0\[\d+\], acc\d+\);")
    assert len(fmas) == 28 and not _index(lines, r"_mm512_set1_ps|_mm512_fmadd_ps")
    assert len(_index(lines, r"const __m512 b\d+ = _mm512_loadu_ps\(p1")) == 4
    elements = {re.search(r"&p0\[(\d+)\]", lines[n])[1] for n in fmas}  # type: ignore[index]
    assert len(elements) == 7  # the 7 pixels of the row, each read by its 4 FMAs
    plain = _lines(text, w, "avx512")
    assert len(_index(plain, r"_mm512_set1_ps")) == 7 and not _index(plain, r"ttile_fmadd_bcst")

    def zmm_spills(code: str) -> int:
        """Stack accesses of zmm registers in the assembly gcc makes of ``code`` (the harness's flags)."""
        cc = CompilerConfig()
        cmd = [cc.cc, *cc.opt_flags, *isa_flags("avx512"), "-x", "c", "-S", "-o", "-", "-"]
        asm = subprocess.run(cmd, input=code, capture_output=True, text=True, check=True).stdout
        return sum("%zmm" in line and "(%rsp)" in line for line in asm.splitlines())

    big = conv(1, h=7, w=7, k=512, c=512, r=3, s=3)  # resnet18_12
    tile = "[T_{3,s}, T_{3,r}, R_k, R_h, R_w, T_{512,c}, U_{7,w}, U_{4,k}, V_k]"
    assert zmm_spills(render(scheme(tile, "avx512", broadcast="embedded"), big).code) == 0
    assert zmm_spills(render(scheme(tile, "avx512"), big).code) > 0  # the test can fail: set1 spills


@pytest.mark.parametrize(
    ("target", "options", "rule"),
    [
        ("avx2", {"broadcast": "embedded"}, "needs AVX-512"),
        ("avx512", {"broadcast": "embedded", "fma": False}, "needs fma=true"),
        ("avx512", {"broadcast": "register"}, "allowed: embedded"),
    ],
)
def test_an_embedded_broadcast_needs_an_avx512_fma(target: str, options: dict, rule: str) -> None:
    with pytest.raises(SchemeError, match=rule):
        render(scheme("[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", target, **options), mm(12, 64, 8))


def test_embedded_broadcasts_change_no_result(tmp_path: Path, shared_cache: Path) -> None:
    """Matmul and conv (stride 1 and 2), hoisted or not, with masked partial tiles and packed weights:
    every output point checked."""
    if "avx512" not in detect().isas:
        pytest.skip(f"this CPU ({detect().model_name}) cannot execute AVX-512")
    opts = {"target": "avx512", "broadcast": "embedded", "partial": "masked"}
    m = mm(23, 2 * 16 + 3, 19)
    cands = [
        scheme("[R_j, R_i, R_k, U_{6,i}, U_{2,j}, V_j]", **opts),
        scheme("[R_j, R_i, R_k, U_{6,i}, U_{2,j}, V_j]", hoist=False, **opts),
        scheme("[PackT_A[k,i], R_j, R_i, R_k, U_{4,i}, U_{2,j}, V_j]", **opts),
    ]
    for row in run_candidates(cands, m, tmp_path / "mm", shared_cache, FULL):
        assert row["status"] == "ok" and row["check_passed"], (row["label"], row["reason"][:300])
    for stride in (1, 2):
        c = conv(stride, h=7, w=9, k=3 * 16 + 5, c=5, r=3, s=3)
        text = "[PackT_K[k/32,r,s,c,k], R_k, R_h, R_w, R_r, R_s, R_c, U_{7,w}, U_{2,k}, V_k]"
        (row,) = run_candidates([scheme(text, **opts)], c, tmp_path / f"cv{stride}", shared_cache, FULL)
        assert row["status"] == "ok" and row["check_passed"], row["reason"][:300]


# -- constant inputs (codegen option constant, issue 32) -----------------------------------------------------
def _call(lib: ctypes.CDLL, out: np.ndarray, a: np.ndarray, b: np.ndarray, ws: np.ndarray) -> None:
    ptrs = (ctypes.c_void_p * 3)(*(x.ctypes.data for x in (out, a, b)))
    assert lib.kernel(ptrs, ctypes.c_void_p(ws.ctypes.data)) == 0


def test_a_constant_input_is_packed_once_per_buffer(tmp_path: Path) -> None:
    """constant=B keeps B's outermost pack across calls: the same buffer is not copied again (a change to
    it in place goes unseen, the contract the baselines' cached weight conversions have too), a new buffer
    (or workspace) is; every result is the product of the weights the pack holds."""
    if HOST_TARGET != "avx512" and "avx2" not in detect().isas:
        pytest.skip("needs AVX2 to run the kernel")
    m, n, k = 12, 4 * get_target(HOST_TARGET).lanes, 9
    text = f"[PackT_B[j/{n // 2},k,j], R_j, R_i, R_k, U_{{3,i}}, U_{{2,j}}, V_j]"
    src = render(scheme(text, constant="B"), mm(m, n, k))
    assert "if (ttile_fresh)" in src.code
    res = build(src, CompilerConfig(), tmp_path)
    assert res.ok, res.error
    lib = ctypes.CDLL(str(res.so_path))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b1, b2 = (rng.standard_normal((k, n), dtype=np.float32) for _ in range(2))
    ws = np.zeros(src.workspace_bytes // 4 + 64, dtype=np.float32)

    def product(b: np.ndarray) -> np.ndarray:
        out = np.zeros((m, n), dtype=np.float32)
        _call(lib, out, a, b, ws)
        return out

    np.testing.assert_allclose(product(b1), a @ b1, rtol=1e-5, atol=1e-5)
    kept = b1.copy()
    b1 += 1.0  # changed in place: the pack made from its old values is kept
    np.testing.assert_allclose(product(b1), a @ kept, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(product(b2), a @ b2, rtol=1e-5, atol=1e-5)  # a new buffer: packed again
    ws[:] = 0.0
    ws2 = ws.copy()  # a new workspace: packed again too
    out = np.zeros((m, n), dtype=np.float32)
    _call(lib, out, a, b2, ws2)
    np.testing.assert_allclose(out, a @ b2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("text", "constant", "rule"),
    [
        ("[PackT_B[k,j], R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "C", "the output"),
        ("[PackT_B[k,j], R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "X", "no tensor 'X'"),
        ("[R_j, PackT_B[k,j], R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "B", "must be outermost"),
        ("[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", "B", "no outermost pack of B"),
    ],
)
def test_a_constant_input_needs_an_outermost_pack_of_an_input(text: str, constant: str, rule: str) -> None:
    with pytest.raises(SchemeError, match=rule):
        render(scheme(text, "avx2", constant=constant), mm(12, 32, 8))


def test_a_convolution_input_prefetch_walks_each_window_position_once() -> None:
    """I:w below a 3-pixel tile with the whole 3 x 3 window and c = 40 (stride 2): the next tile's columns
    w*2 + s span 1 + 2*2 + 2 = 7 positions (not 3 x 3 = 9), its rows h*2 + r the window's 3, c by 16."""
    lines = _lines("[R_k, R_h, R_w, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]",
                   conv(2, h=5, w=9, k=16, c=40, r=3, s=3), "avx2", prefetch="I:w@L2")  # fmt: skip
    text = "\n".join(lines)
    loops = re.findall(r"for \(int pf(\d) = 0; pf\d < (.+?); pf\d \+= (\d+)\)", text)
    assert [(k, eval(span), int(step)) for k, span, step in loops] == [  # spans are C integer expressions
        ("0", 3, 1),
        ("1", 7, 1),
        ("2", 40, 16),
    ]
    (pf,) = re.findall(r"__builtin_prefetch\((I \+ .+), 0, 2\);", text)  # @L2: locality 2 (prefetcht1)
    assert re.search(r"\(w_\d+\) \+ \(3\)", pf) and "pf1" in pf and "pf0" in pf and "pf2" in pf


def _code(text: str, w: Workload, prefetch: str) -> list[str]:
    """The kernel's lines without the header comment that spells the option."""
    return [x for x in _lines(text, w, "avx2", prefetch=prefetch) if not x.startswith("/* target")]


@pytest.mark.parametrize(
    ("text", "out", "inp"),
    [
        ("[R_k, R_h, R_w, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]", "w", "w"),
        ("[R_k, R_w, R_h, R_c, R_r, R_s, U_{3,w}, U_{2,k}, V_k]", "h", "h"),
        ("[R_w, R_h, PackT_K[k/16,r,s,c,k], R_k, R_c, R_r, R_s, U_{3,w}, U_{2,k}, V_k]", "k", "h"),
        ("[R_h, λ_seq_w.[(1,4),(1,5)], R_c, R_r, R_s, Uλ_w, U_{2,k}, V_k]", "w", "w"),
    ],
)
def test_prefetch_next_names_the_innermost_loop_above_the_tile_on_the_tensor(
    text: str, out: str, inp: str
) -> None:
    """``next`` is the innermost loop above the hoisted reductions (packs skipped) on one of the tensor's
    dimensions: for the input, the next pixels even below a loop on k."""
    w = conv(1, h=5, w=9, k=16, c=8, r=3, s=3)
    assert _code(text, w, prefetch="I:next") == _code(text, w, prefetch=f"I:{inp}")
    assert _code(text, w, prefetch="next") == _code(text, w, prefetch=out)


def test_prefetch_next_needs_a_loop_above_the_tile_on_the_tensor() -> None:
    """Only a loop on k above the tile: the output's next tile is along k, the input has none."""
    text, w = "[R_k, R_c, R_r, R_s, U_{3,w}, U_{2,k}, V_k]", conv(1, h=1, w=3, k=32, c=8, r=3, s=3)
    assert _code(text, w, prefetch="next") == _code(text, w, prefetch="k")
    with pytest.raises(SchemeError, match="no loop on a dimension of I above"):
        render(scheme(text, "avx2", prefetch="I:next"), w)


def test_a_streamed_input_prefetch_asks_for_one_line_when_the_reduction_index_enters_it() -> None:
    """@stream: in the block under the c loop (not where the accumulators are loaded), the next pixels'
    3 x 7 window positions at this c, when c mod 16 < the block's step on c (1 here)."""
    lines = _lines("[R_k, R_h, R_w, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]",
                   conv(2, h=5, w=9, k=16, c=40, r=3, s=3), "avx2", prefetch="I:w@stream")  # fmt: skip
    text = "\n".join(lines)
    (cloop,) = _index(lines, r"for \(int c_\d+ ")
    (hit,) = _index(lines, r"if \(\(\(c_\d+\) & 15\) < 1\)")
    (pf,) = _index(lines, r"__builtin_prefetch\(I \+ .+, 0, 3\);")
    assert cloop < hit < pf < min(_index(lines, r"_mm256_fmadd_ps"))
    assert re.search(r"for \(int pf2 = 0; pf2 < 1; pf2 \+= 16\)", text)
    assert not _index(_lines("[R_k, R_h, R_w, R_r, R_s, R_c, U_{3,w}, U_{2,k}, V_k]",
                             conv(2, h=5, w=9, k=16, c=40, r=3, s=3), "avx2", prefetch="I:w@L1"),
                      r"& 15")  # fmt: skip


def test_prefetching_the_next_input_tile_of_a_convolution_changes_no_result(
    tmp_path: Path, shared_cache: Path
) -> None:
    """I along w and h, stride 1 and 2, with a masked w remainder and the weights in panels: every output
    point checked (a prefetch is a hint; the check is there for the addresses the loop nest computes)."""
    lanes = get_target(HOST_TARGET).lanes
    cands = [
        scheme("[R_k, R_h, R_w, R_r, R_s, R_c, U_{4,w}, U_{2,k}, V_k]", partial="masked", prefetch=p)
        for p in ("I:w", "I:h", "next,I:next@L2", "I:next@stream", "w,I:h@stream")
    ]
    panels = f"PackT_K[k/{2 * lanes},r,s,c,k]"
    cands.append(scheme(f"[{panels}, R_k, R_h, R_w, R_c, R_r, R_s, U_{{4,w}}, U_{{2,k}}, V_k]",
                        partial="masked", prefetch="I:h"))  # fmt: skip
    for stride in (1, 2):
        c = conv(stride, h=5, w=9, k=2 * lanes, c=19, r=3, s=3)
        for row in run_candidates(cands, c, tmp_path / f"s{stride}", shared_cache, FULL):
            assert row["status"] == "ok" and row["check_passed"], (row["label"], row["reason"][:300])


def test_an_input_prefetch_walks_the_next_tile_of_the_input() -> None:
    """A:i below the i tile of 3 rows and the whole k of 40: rows i+3..i+5, one prefetch per 16 floats."""
    lines = _lines("[R_j, R_i, R_k, U_{3,i}, U_{2,j}, V_j]", mm(12, 32, 40), "avx2", prefetch="A:i")
    text = "\n".join(lines)
    assert "for (int pf0 = 0; pf0 < 3; pf0 += 1)" in text and "for (int pf1 = 0; pf1 < 40; pf1 += 16)" in text
    assert re.search(
        r"__builtin_prefetch\(A \+ 40 \* \(\(i_\d+\) \+ \(3\) \+ pf0\) \+ \(\(0\) \+ pf1\), 0, 3\)", text
    )
