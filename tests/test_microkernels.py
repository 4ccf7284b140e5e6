"""Microkernel enumeration, λ_seq covers, the isolated benchmark, selection and Fig 5.2 (seed 000 §5.2-5.3).

The enumeration is re-checked here against the yaml data with independent code (numpy brute force over
the whole unroll grid), so a bug in ``kernels.microkernels`` cannot hide behind itself.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from harness import microbench as mb
from harness import selection
from harness.check import CheckConfig
from harness.machine import detect
from harness.sanity import SanityConfig
from kernels import microkernels as mk
from kernels.candidate import Workload
from kernels.codegen import analyze_for
from kernels.scheme import SchemeError
from kernels.targets import get_target
from tests.conftest import FAST_TIMING, HOST_TARGET, run_candidates, scheme

ISAS = ("avx2", "avx512")
ISA_DIR = Path(__file__).resolve().parent.parent / "kernels" / "isa"


def raw(isa: str) -> dict:
    return yaml.safe_load((ISA_DIR / f"{isa}.yaml").read_text())


# -- ISA data --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
def test_isa_data_agrees_with_code_generation_targets(isa: str) -> None:
    d = raw(isa)
    t = get_target(isa)
    assert (d["lanes"], d["vector_registers"]) == (t.lanes, t.registers)
    assert d["fma"]["units"] >= 1 and d["fma"]["latency"] >= 1
    assert mk.min_accumulators(isa) == d["fma"]["latency"] * d["fma"]["units"]


def test_register_bounds_differ_between_isas() -> None:
    a, b = raw("avx2"), raw("avx512")
    assert a["vector_registers"] < b["vector_registers"]
    assert a["conv"]["total_registers"] != b["conv"]["total_registers"]
    assert a["conv"]["output_registers"] != b["conv"]["output_registers"]
    assert b["conv"]["total_registers"] == [16, 36] and b["conv"]["output_registers"] == [14, 28]  # thesis
    # avx2 = the thesis's bounds scaled to 16 registers
    ratio = a["vector_registers"] / b["vector_registers"]
    for key in ("total_registers", "output_registers"):
        assert a["conv"][key] == [round(x * ratio) for x in b["conv"][key]]


# -- convolution enumeration -----------------------------------------------------------------------------
def brute_force_conv(isa: str, reading: str) -> set[tuple[int, ...]]:
    """Every (us, ur, uc, uw, uh, uk) satisfying the reading, by numpy over the whole grid."""
    d = raw(isa)
    c = d["conv"]
    rd = c["readings"][reading]
    umax = c["unroll_max"]
    pairs = {tuple(p) for g in rd["rs_pairs"] for p in c["rs_pairs"][g]}  # (ur, us)
    scale = d["lanes"] if rd["k_unit"] == "lanes" else 1
    uc, uw, uh, uk = np.meshgrid(
        *(np.arange(1, umax[x] + 1) for x in ("c", "w", "h", "k")), indexing="ij"
    )  # uk counts vectors; the constraints see uk * scale
    found = set()
    for ur, us in sorted(pairs):
        val = {"s": us, "r": ur, "c": uc, "w": uw, "h": uh, "k": uk * scale}
        out = math.prod(val[x] for x in c["output_term"])
        par = math.prod(val[x] for x in rd["params_term"])
        ok = (c["output_registers"][0] <= out) & (out <= c["output_registers"][1])
        ok &= (c["total_registers"][0] <= out + par) & (out + par <= c["total_registers"][1])
        ok &= val["k"] <= umax["k"]
        for i in zip(*np.nonzero(ok), strict=True):
            found.add((us, ur, int(uc[i]), int(uw[i]), int(uh[i]), int(uk[i])))
    return found


@pytest.mark.parametrize("isa", ISAS)
def test_enumeration_matches_independent_brute_force_for_every_reading(isa: str) -> None:
    for reading in mk.conv_readings(isa):
        got = mk.enumerate_conv(isa, reading)
        assert got == mk.enumerate_conv(isa, reading)  # deterministic, same order
        keys = [tuple(m.size[x] for x in ("s", "r", "c", "w", "h", "k")) for m in got]
        assert len(keys) == len(set(keys))
        assert set(keys) == brute_force_conv(isa, reading), reading
        assert all(not mk.conv_violations(m, reading) for m in got)


def test_counts_per_reading() -> None:
    """The numbers the report quotes; the thesis's 3059 is none of them (see kernels/isa/avx512.yaml)."""
    c512, c2 = mk.reading_counts("avx512"), mk.reading_counts("avx2")
    assert c512 == {
        "literal": 1512, "literal_both_orders": 2043, "params_rsc": 3132, "params_rsc_both_orders": 4325,
        "params_rsk": 6416, "params_rsk_both_orders": 10112, "uk_in_lanes": 1,
    }  # fmt: skip
    assert c2 == {
        "literal": 385, "literal_both_orders": 500, "params_rsc": 683, "params_rsc_both_orders": 908,
        "params_rsk": 2272, "params_rsk_both_orders": 3536, "uk_in_lanes": 1,
    }  # fmt: skip
    assert mk.default_reading("avx512") == "literal"


def test_blis_microkernel_is_enumerated_on_avx512() -> None:
    """The thesis: (k, c, w, h, r, s) = (2, 1, 12, 1, 1, 1) is among them."""
    blis = mk.make_conv("avx512", k=2, c=1, w=12, h=1, r=1, s=1)
    assert blis.suffix == "U_{1,s}, U_{1,r}, U_{1,c}, U_{12,w}, U_{1,h}, U_{2,k}, V_k"
    for reading in ("literal", "literal_both_orders", "params_rsc", "params_rsk"):
        assert blis in mk.enumerate_conv("avx512", reading)
    assert mk.conv_violations(mk.make_conv("avx512", k=1, w=1))  # 1 register: out of every reading


def test_constraint4_pairs_and_orders() -> None:
    lit = {(m.size["r"], m.size["s"]) for m in mk.enumerate_conv("avx512", "literal")}
    both = {(m.size["r"], m.size["s"]) for m in mk.enumerate_conv("avx512", "literal_both_orders")}
    assert lit <= {(1, 1), (3, 3), (5, 5), (7, 7), (1, 3), (1, 5), (1, 7)}
    assert (3, 1) not in lit and (3, 1) in both
    # literal reading: 25 K vectors alone exceed the 36 - 14 registers left, so 5x5 and 7x7 never appear
    assert (5, 5) not in lit and (7, 7) not in lit


# -- matmul ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_enumeration_is_eq_5_1(isa: str) -> None:
    d = raw(isa)
    n_r, lat = d["vector_registers"], d["fma"]["latency"] * d["fma"]["units"]
    want = {
        (ui, uj)
        for ui in range(1, d["matmul"]["unroll_max"]["i"] + 1)
        for uj in range(1, d["matmul"]["unroll_max"]["j"] + 1)
        if ui * uj + uj <= n_r and ui * uj >= lat
    }
    got = mk.enumerate_matmul(isa)
    assert {(m.size["i"], m.size["j"]) for m in got} == want
    assert all(m.suffix == f"U_{{{m.size['i']},i}}, U_{{{m.size['j']},j}}, V_j" for m in got)
    if isa == "avx2":
        assert mk.make_matmul("avx2", i=6, j=2) in got  # BLIS's 6x16 AVX2 kernel (thesis §1.4)


# -- every enumerated suffix is legal on its benchmark workload ------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
def test_every_enumerated_suffix_is_legal_on_its_bench_workload(isa: str) -> None:
    target = get_target(isa)
    every: set[mk.Microkernel] = set(mk.enumerate_matmul(isa)) | set(mk.fig5_2_slice(isa))
    for reading in mk.conv_readings(isa):
        every |= set(mk.enumerate_conv(isa, reading))
    for m in every:
        w = mb.bench_workload(m)
        text = mb.bench_scheme(m)
        an = analyze_for(text, w, target)
        assert an.vector_dim == m.vector_dim
        sizes = w.size
        if m.op == "conv2d":
            assert text.startswith("[T_{512,c}, ") and text.endswith(m.suffix + "]")
            assert sizes == {"h": m.size["h"], "w": m.size["w"], "k": m.size["k"] * target.lanes,
                             "r": m.size["r"], "s": m.size["s"], "c": 512 * m.size["c"]}  # fmt: skip
        else:
            assert text == f"[T_{{512,k}}, {m.suffix}]"
            assert sizes == {"i": m.size["i"], "j": m.size["j"] * target.lanes, "k": 512}


def test_microkernel_round_trips_through_dict() -> None:
    m = mk.make_conv("avx2", s=3, r=3, c=1, w=2, h=1, k=2)
    assert m.suffix == "U_{3,s}, U_{3,r}, U_{1,c}, U_{2,w}, U_{1,h}, U_{2,k}, V_k"
    assert mk.Microkernel.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    with pytest.raises(ValueError, match="unknown conv reading"):
        mk.enumerate_conv("avx2", "nope")
    with pytest.raises(ValueError, match="no microkernel data"):
        mk.isa_data("sse2")


# -- covers ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("D", "sizes"), [(128, [6, 7, 12]), (43, [7, 11]), (34, [11, 12]), (17, [2, 3, 4, 5]), (5, [6, 7])]
)
def test_lambda_covers_sum_to_D_and_are_complete(D: int, sizes: list[int]) -> None:
    covers = mk.lambda_covers(D, sizes)
    for c in covers:
        (na, a), (nb, b) = c.pairs
        assert na >= 1 and nb >= 1 and a != b and a in sizes and b in sizes
        assert na * a + nb * b == D == c.total
    brute = {
        ((na, a), (nb, b))
        for a, b in itertools.combinations(sorted(set(sizes)), 2)
        for na in range(1, D + 1)
        for nb in range(1, D + 1)
        if na * a + nb * b == D
    }
    assert {c.pairs for c in covers} == brute
    for c in mk.divisors_cover(D, sizes):
        ((n, a),) = c.pairs
        assert n * a == D and a in sizes


def test_thesis_covers_are_found() -> None:
    assert mk.Cover(((12, 6), (8, 7))) in mk.lambda_covers(128, [6, 7])  # 128 = 12x6 + 8x7
    assert mk.Cover(((3, 7), (2, 11))) in mk.lambda_covers(43, [7, 11])  # 43 = 2x11 + 3x7
    assert mk.divisors_cover(12, [2, 5, 6]) == [mk.Cover(((6, 2),)), mk.Cover(((2, 6),))]
    assert mk.lambda_seq_text("i", mk.Cover(((12, 6), (8, 7)))) == "λ_seq_i.[(12,6),(8,7)]"
    assert (
        mk.lambda_seq_text("i", mk.Cover(((12, 6), (8, 7))), ascii_only=True) == "lambda_seq_i.[(12,6),(8,7)]"
    )
    with pytest.raises(ValueError, match="two"):
        mk.lambda_seq_text("i", mk.Cover(((2, 6),)))


def _lanes() -> int:
    return get_target(HOST_TARGET).lanes


def _cover_cases() -> list[tuple[Workload, str]]:
    """λ_seq schemes built from covers: matmul on i, a scalar i cover, and a conv on w."""
    lanes = _lanes()
    c13 = mk.lambda_covers(13, [6, 7])[0]  # 1x6 + 1x7
    c43 = mk.lambda_covers(43, [7, 11])[0]  # 3x7 + 2x11
    c10 = mk.lambda_covers(10, [4, 6])[0]  # 1x4 + 1x6
    return [
        (
            Workload.make("mm13", "matmul", {"i": 13, "j": 2 * lanes, "k": 16}),
            f"[{mk.lambda_seq_text('i', c13)}, T_{{16,k}}, Uλ_i, U_{{2,j}}, V_j]",
        ),
        (
            Workload.make("mm43", "matmul", {"i": 43, "j": lanes, "k": 8}),
            f"[{mk.lambda_seq_text('i', c43, ascii_only=True)}, T_{{8,k}}, Ul_i, V_j]",
        ),
        (
            Workload.make("cv10", "conv2d", {"h": 2, "w": 10, "k": lanes, "r": 3, "s": 3, "c": 8}),
            f"[R_h, {mk.lambda_seq_text('w', c10)}, T_{{3,r}}, T_{{3,s}}, T_{{8,c}}, Uλ_w, U_{{1,k}}, V_k]",
        ),
    ]


def test_lambda_seq_schemes_from_covers_are_legal() -> None:
    target = get_target(HOST_TARGET)
    for w, text in _cover_cases():
        analyze_for(text, w, target)
    with pytest.raises(SchemeError):  # the same cover on a dimension it does not sum to
        w = Workload.make("mm14", "matmul", {"i": 14, "j": _lanes(), "k": 8})
        analyze_for(
            f"[{mk.lambda_seq_text('i', mk.lambda_covers(13, [6, 7])[0])}, R_k, Uλ_i, V_j]", w, target
        )


def test_lambda_seq_schemes_from_covers_compute_correctly(tmp_path: Path, shared_cache: Path) -> None:
    full = CheckConfig(full_below=10**7)
    for n, (w, text) in enumerate(_cover_cases()):
        rows = run_candidates([scheme(text)], w, tmp_path / f"r{n}", shared_cache, check=full)
        assert [r["status"] for r in rows] == ["ok"], (text, rows[0]["reason"])
        assert rows[0]["check_mode"] == "full" and rows[0]["check_passed"]


# -- the benchmark, selection and stored JSON ------------------------------------------------------------
def test_microbench_selects_by_threshold_and_json_round_trips(tmp_path: Path, shared_cache: Path) -> None:
    other = "avx512" if HOST_TARGET == "avx2" else "avx2"
    mks = [
        mk.make_conv(HOST_TARGET, k=1, w=1),
        mk.make_conv(HOST_TARGET, s=3, k=1, w=2),
        mk.make_conv(HOST_TARGET, k=2, w=3),
        mk.make_conv(other, k=1, w=2),  # unsupported on an AVX2-only CPU, runs on AVX-512 ones
    ]
    cfg = mb.BenchConfig(
        results_dir=tmp_path / "res", cache_dir=shared_cache, timing=FAST_TIMING,
        sanity=SanityConfig(probe=False), retry_busy=0, warmup_flops=0,
    )  # fmt: skip
    seen: list[str] = []
    frame = mb.run_microbench(mks, cfg, progress=seen.append)
    assert len(frame) == 4 and len(seen) >= 4
    assert list(frame["suffix"]) == [m.suffix for m in mks]
    host = frame[frame["isa"] == HOST_TARGET]
    assert (host["status"] == "ok").all(), host["reason"].tolist()
    assert (host["check_passed"]).all()
    m = detect()
    expect_other = "ok" if other in m.isas else "unsupported"
    assert frame.iloc[3]["status"] == expect_other

    assert len(selection.select(frame, 1000.0)) == 0
    everyone = selection.select(frame, 0.0)
    assert set(everyone["name"]) == set(frame[frame["status"] == "ok"]["name"])
    assert list(everyone["pct_peak_median"]) == sorted(everyone["pct_peak_median"], reverse=True)

    sel_dir = tmp_path / "sel"
    path = selection.save_selection(frame, HOST_TARGET, "conv2d", 0.0, sel_dir, m)
    assert path == selection.selection_path(sel_dir, m.fingerprint, HOST_TARGET, "conv2d")
    loaded = selection.load_selected(HOST_TARGET, "conv2d", sel_dir, m)
    host_sel = everyone[everyone["isa"] == HOST_TARGET]
    by_name = {m.name: m for m in mks}
    assert loaded == [by_name[n] for n in host_sel["name"]]  # same microkernels, same order (best first)
    rec = selection.load_selection(HOST_TARGET, "conv2d", sel_dir, m)
    assert rec["n_measured"] == 3 and rec["fingerprint"] == m.fingerprint and rec["threshold_pct"] == 0.0

    selection.save_selection(frame, HOST_TARGET, "conv2d", 1000.0, sel_dir, m)  # same data, higher bar
    assert selection.load_selected(HOST_TARGET, "conv2d", sel_dir, m) == []
    assert selection.load_selected("avx2", "matmul", tmp_path / "none", m, missing_ok=True) == []
    with pytest.raises(FileNotFoundError, match="harness microkernels"):
        selection.load_selected("avx2", "matmul", tmp_path / "none", m)

    again = mb.run_microbench(mks[:1], cfg, progress=seen.append)  # stored rows are reused
    assert again.iloc[0]["timestamp"] == frame.iloc[0]["timestamp"]
    # the selection's wall time must know which rows this run measured itself (harness microkernels)
    assert not frame["reused"].any() and again["reused"].all()
    assert frame.attrs["compile_s"] > 0 and again.attrs["compile_s"] == 0
    assert (frame["compiler"] == "gcc").all() and frame["hoist"].all() and frame["fma"].all()


def test_quick_set_is_small_and_in_the_slice() -> None:
    for isa in ISAS:
        q = mb.quick_set(isa)
        assert 0 < len(q) <= mb.QUICK_CAP
        assert all(m.size["c"] == m.size["h"] == m.size["r"] == m.size["s"] == 1 for m in q)
        assert all(not mk.conv_violations(m) for m in q)
    assert len(mk.fig5_2_slice("avx2")) == 120  # uk + uw <= 16, the upper-left triangle


def test_heatmap_from_synthetic_frame(tmp_path: Path) -> None:
    rows = []
    for m in mk.fig5_2_slice("avx512")[:40]:
        pct = 100.0 * min(1.0, m.size["k"] * m.size["w"] / 16)
        rows.append({"op": "conv2d", "isa": "avx512", "suffix": m.suffix, "status": "ok", "busy": False,
                     "drift": False, "flags": [], "pct_peak_median": pct,
                     **{f"u_{d}": n for d, n in m.sizes}})  # fmt: skip
    rows[0]["status"], rows[0]["pct_peak_median"] = "wrong", None
    rows.append({**rows[1], "u_c": 2, "suffix": "not in the slice"})
    data = mb.fig5_2_frame(pd.DataFrame(rows), "avx512", threshold=85.0)
    assert (
        len(data) == 40
        and data["selected"].sum() == (pd.Series([r["pct_peak_median"] for r in rows[1:40]]) >= 85).sum()
    )
    out = mb.plot_fig5_2(data, tmp_path / "fig" / "ttile_fig5_2.png", "synthetic")
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert len(csv) == 40 and {"u_k", "u_w", "pct_peak_median", "selected"} <= set(csv.columns)


def test_cli_rejects_unknown_isa_and_reading(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    for argv in (
        ["microkernels", "--isa", "avx9"],
        ["microkernels", "--reading", "nope"],
        ["microkernels", "--isa", "avx2", "--broadcast", "embedded"],  # no FMA broadcasts from memory
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err.startswith("harness: error:")


def test_cli_draws_fig5_2_under_the_results_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--results DIR`` keeps the selection in DIR/cache; its figure goes beside it, not to ./results."""
    from harness import microbench
    from harness.cli import main

    seen: list[tuple[Path, str | None]] = []
    monkeypatch.setattr(microbench, "command", lambda *a, **kw: seen.append((a[6], kw.get("broadcast"))))
    main(["microkernels", "--results", str(tmp_path)])
    main(["microkernels", "--results", str(tmp_path), "--out", str(tmp_path / "elsewhere.png")])
    main(["microkernels", "--results", str(tmp_path), "--broadcast", "embedded"])  # a selection of its own
    figures = tmp_path / "figures"
    assert seen == [
        (figures / "ttile_fig5_2.png", None),
        (tmp_path / "elsewhere.png", None),
        (figures / "ttile_fig5_2-embedded.png", "embedded"),
    ]
