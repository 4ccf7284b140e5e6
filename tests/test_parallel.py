"""Tpar / Tfused (thesis §3.7, issue 5 item 6): OpenMP parallel loops, their legality, and their results
on every core this process may use (two here), through the real pipeline."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from harness.build import compile_only
from harness.check import CheckConfig
from harness.run import TimingConfig
from kernels.candidate import Workload, render
from kernels.codegen import analyze_for
from kernels.scheme import SchemeError, format_scheme, parse_scheme, scheme_to_yaml
from kernels.targets import get_target
from tests.conftest import FAST_TIMING, HOST_TARGET, run_candidates, scheme

L = get_target(HOST_TARGET).lanes
FULL = CheckConfig(full_below=10**9)
CPUS = len(os.sched_getaffinity(0))
THREADS = min(CPUS, 2)


def mm(i: int, j: int, k: int) -> Workload:
    return Workload.make("mm", "matmul", {"i": i, "j": j, "k": k})


def conv(**sizes: int) -> Workload:
    return Workload.make("cv", "conv2d", sizes, stride=1)


# -- the language ----------------------------------------------------------------------------------------
def test_tpar_and_tfused_parse_print_and_round_trip() -> None:
    s = parse_scheme("[Tfused_[(i,2),(j,3)], Tpar_{2,i}, T_{4,j}, R_k]")
    assert [a.kind for a in s] == ["Tfused", "Tfused", "Tpar", "T", "R"]  # one atom per fused pair
    assert [(a.dim, a.size) for a in s[:3]] == [("i", 2), ("j", 3), ("i", 2)]
    assert format_scheme(s) == "[Tfused_[(i,2),(j,3)], Tpar_{2,i}, T_{4,j}, R_k]"
    assert parse_scheme(format_scheme(s)) == s == parse_scheme(scheme_to_yaml(s))
    mapping = [{"kind": "Tfused", "pairs": [["i", 2], ["j", 3]]}, {"kind": "Tpar", "size": 2, "dim": "i"},
               "T_{4,j}", "R_k"]  # fmt: skip
    assert parse_scheme(mapping) == s


@pytest.mark.parametrize(
    "text", ["[Tfused_[], R_i]", "[Tfused_[(i,2),(i,3)], R_j]", "[Tfused_[(i,x)], R_j]", "[Tpar_{0,i}]"]
)
def test_bad_parallel_atoms_are_syntax_errors(text: str) -> None:
    with pytest.raises(SchemeError) as ei:
        parse_scheme(text)
    assert ei.value.rule in ("syntax", "positive-size"), str(ei.value)


@pytest.mark.parametrize(
    ("text", "rule", "atom"),
    [
        ("[R_j, Tpar_{4,i}, R_k]", "par-outermost", "Tpar_{4,i}"),  # a Tpar under a serial loop
        ("[Tpar_{2,i}, R_j, Tfused_[(i,2)], R_k]", "par-outermost", "Tfused_[(i,2)]"),
        ("[Pack_B, Tpar_{4,i}, R_j, R_k]", "par-outermost", "Tpar_{4,i}"),  # nothing serial above, packs too
        ("[Tpar_{2,k}, R_i, R_j]", "par-reduction", "Tpar_{2,k}"),  # reductions are never parallel
        ("[Tfused_[(i,4),(k,2)], R_j]", "par-reduction", "Tfused_[(i,4),(k,2)]"),
        ("[Tpar_{3,i}, R_j, R_k]", "divisibility", "Tpar_{3,i}"),  # T semantics: 3 does not cover 4
    ],
)
def test_parallel_legality(text: str, rule: str, atom: str) -> None:
    with pytest.raises(SchemeError) as ei:
        analyze_for(text, mm(4, 8, 6), get_target(HOST_TARGET))
    assert ei.value.rule == rule and f"atom {atom}" in str(ei.value), str(ei.value)


# -- the code ----------------------------------------------------------------------------------------------
def test_parallel_code_shape() -> None:
    text = "[Tfused_[(i,2),(j,2)], Tpar_{3,i}, T_{2,j}, Pack_A, R_k, U_{2,i}, V_j]"
    src = render(scheme(text), mm(12, 4 * L, 8))
    assert "-fopenmp" in src.cflags and "#include <omp.h>" in src.code
    assert "#pragma omp parallel for collapse(3) schedule(static)" in src.code
    # the pack buffer is one slice per thread, and the workspace holds them all
    assert "omp_get_thread_num()" in src.code and "num_threads(MIN(omp_get_max_threads(), 12))" in src.code
    assert src.workspace_bytes == 4 * 12 * 2 * 8
    # a scheme without parallel atoms is not an OpenMP kernel
    serial = render(scheme("[R_i, R_j, R_k]"), mm(4, 4, 4))
    assert "-fopenmp" not in serial.cflags and "omp" not in serial.code
    # one-iteration parallel atoms emit no loop
    one = render(scheme("[Tpar_{1,i}, R_j, R_k]"), mm(1, 4, 4))
    assert "pragma" not in one.code


PARALLEL_CASES = [
    ("[Tpar_{4,i}, R_j, R_k, U_{2,i}, V_j]", mm(8, 2 * L, 7), {}),
    ("[Tfused_[(i,3),(j,2)], T_{1,j}, R_k, U_{2,i}, V_j]", mm(6, 2 * L, 9), {}),
    # non-divisible extents below the parallel loops, with packs (per-thread buffers) and a transposition
    ("[Tpar_{2,j}, Tpar_{2,i}, R_k, Texct_{8,k}, Pack_A, PackT_B[k,j], Tvar_{4,k}, T_{5,i}, U_{1,i}, V_j]",
     mm(10, 2 * L, 19), {}),
    ("[Tpar_{2,i}, R_j, Pack_C, R_k, U_{3,i}, U_{2,j}, V_j]", mm(6, 3 * L + 3, 5), {"partial": "masked"}),
    ("[Tfused_[(k,2),(h,3)], R_w, R_r, R_s, R_c, U_{3,w}, V_k]",
     conv(h=3, w=6, k=2 * L, c=3, r=3, s=2), {}),
    ("[Tpar_{2,i}, T_{4,i}, R_j, R_k]", mm(7, 5, 3), {"partial": "padded"}),  # i padded to 8
]  # fmt: skip


def test_parallel_kernels_equal_the_reference_on_all_cores(tmp_path: Path, shared_cache: Path) -> None:
    if THREADS < 2:
        pytest.skip(f"this process may use {CPUS} CPU: parallel kernels run on one thread only")
    timing = TimingConfig(**{**FAST_TIMING.__dict__, "threads": THREADS})
    for n, (text, w, opts) in enumerate(PARALLEL_CASES):
        cand = scheme(text, **opts)
        rows = run_candidates([cand], w, tmp_path / str(n), shared_cache, check=FULL, timing=timing)
        bad = [(r["label"], r["status"], r["reason"][:400]) for r in rows if r["status"] != "ok"]
        assert not bad, bad
        assert rows[0]["check_passed"] and rows[0]["check_points"] == math.prod(w.shapes()[0])


def test_parallel_kernels_also_run_serially(tmp_path: Path, shared_cache: Path) -> None:
    text, w, opts = PARALLEL_CASES[2]
    rows = run_candidates([scheme(text, **opts)], w, tmp_path, shared_cache, check=FULL)
    assert rows[0]["status"] == "ok" and rows[0]["check_passed"], rows[0]["reason"]


def test_parallel_avx512_code_compiles() -> None:
    src = render(scheme("[Tfused_[(i,2),(j,2)], R_k, U_{2,i}, V_j]", target="avx512"), mm(4, 32, 8))
    assert "_mm512_fmadd_ps" in src.code
    res = compile_only(src.code, "avx512")
    assert res.ok, res.error


# -- the thesis's parallelisation rules (§5.6, §6.2.1) --------------------------------------------------
def test_chunk_footprint_and_the_l2_and_thread_rules() -> None:
    from kernels.parallel import parallel_chunk

    t = get_target(HOST_TARGET)
    w = mm(8, 4 * L, 10)
    chunk = parallel_chunk("[Tpar_{2,i}, Tpar_{2,j}, T_{2,i}, T_{2,j}, R_k, U_{2,i}, V_j]", w, t)
    assert chunk.iterations == 4 and chunk.extents == {"i": 4, "j": 2 * L, "k": 10}
    assert chunk.footprint_bytes == 4 * (4 * 2 * L + 4 * 10 + 10 * 2 * L)  # C tile + A rows + B columns
    assert chunk.problems(l2_bytes=1, threads=2) == []
    assert chunk.problems(l2_bytes=1, threads=3) == ["4 parallel iterations are not a multiple of 3 threads"]
    assert chunk.problems(l2_bytes=1, threads=8) == ["4 parallel iterations < 8 threads"]
    assert "< L2" in chunk.problems(l2_bytes=512 * 1024, threads=2)[0]
    serial = parallel_chunk("[R_i, R_j, R_k]", w, t)  # no parallel prefix: one chunk, the whole kernel
    assert serial.iterations == 1 and serial.extents == w.size


def test_with_parallel_prefix_follows_6_2_1_and_runs(tmp_path: Path, shared_cache: Path) -> None:
    from kernels.parallel import with_parallel_prefix

    t = get_target(HOST_TARGET)
    w = conv(h=2, w=4, k=2 * L, c=3, r=1, s=1)
    text = with_parallel_prefix("[R_k, R_h, R_w, R_c, R_r, R_s, U_{2,w}, V_k]", w, t, "k", 2)
    assert text == "[Tpar_{2,k}, T_{1,k}, R_h, R_w, R_c, R_r, R_s, U_{2,w}, V_k]"
    with pytest.raises(SchemeError) as ei:
        with_parallel_prefix("[R_k, R_h, R_w, R_c, R_r, R_s, U_{2,w}, V_k]", w, t, "k", 3)
    assert ei.value.rule == "par-threads" and "atom R_k" in str(ei.value)
    timing = TimingConfig(**{**FAST_TIMING.__dict__, "threads": THREADS})
    rows = run_candidates([scheme(text)], w, tmp_path, shared_cache, check=FULL, timing=timing)
    assert rows[0]["status"] == "ok", rows[0]["reason"]
