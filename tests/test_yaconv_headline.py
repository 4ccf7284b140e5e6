"""The headline ``harness yaconv`` prints: best against best per layer, round by round."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from studies.yaconv.headline import headline, output_rows, per_layer

A, B = "yc_h7_w7_c160_m320_f3_p1", "yc_h14_w14_c96_m208_f3_p1"


def _line(workload: str, label: str, rounds: list[float], fp: str = "m1", status: str = "ok") -> dict:
    return {"machine_fingerprint": fp, "workload": workload, "label": label, "candidate_kind": "conv_algo",
            "status": status, "median_ns": float(np.median(rounds)),
            "round_medians_ns": np.array(rounds)}  # fmt: skip


def _summary() -> pd.DataFrame:
    return pd.DataFrame([
        # layer A: YaConv (ours) best in 2 of 3 rounds; im2col's best is OpenBLAS in one round, BLIS in two
        _line(A, "yaconv (ukr=blis)", [120.0, 120.0, 120.0]),
        _line(A, "yaconv (ukr=ours)", [80.0, 100.0, 90.0]),
        _line(A, "im2col (gemm=blis)", [100.0, 100.0, 110.0]),
        _line(A, "im2col (gemm=openblas)", [105.0, 95.0, 99.0]),
        # layer B: YaConv slower in every round
        _line(B, "yaconv (ukr=ours)", [200.0, 210.0, 220.0]),
        _line(B, "im2col (gemm=blis)", [100.0, 100.0, 100.0]),
        # a failed YaConv row does not count
        _line(B, "yaconv (ukr=blis)", [1.0, 1.0, 1.0], status="error"),
    ])  # fmt: skip


def test_best_against_best_per_layer_and_round() -> None:
    t = per_layer(_summary()).set_index("workload")
    assert t.loc[A, "best_yaconv"] == "yaconv (ukr=ours)"
    assert t.loc[A, "best_im2col"] == "im2col (gemm=openblas)"  # median 99 against BLIS's 100
    assert t.loc[A, "ratio"] == pytest.approx(99.0 / 90.0)
    # round by round, each side's best of that round: im2col 100, 95, 99 over YaConv 80, 100, 90
    assert t.loc[A, "round_ratios"] == pytest.approx([100 / 80, 95 / 100, 99 / 90])
    assert t.loc[B, "ratio"] == pytest.approx(100.0 / 210.0)  # the error row is not the best YaConv


def test_headline_counts_the_slower_layers() -> None:
    text = "\n".join(headline(per_layer(_summary())))
    g = math.sqrt((99 / 90) * (100 / 210))
    assert f"geomean {g:.3f}" in text
    r1 = math.sqrt((100 / 80) * (100 / 200))
    assert f"per round: {r1:.3f} / " in text
    assert "slower in every round: 1; rounds disagree: 1" in text
    assert "slower (median): 1:" in text and "7 7 160 3 3 320 1 1" not in text.split("slower (median)")[1]


def test_a_single_pass_has_no_round_lines() -> None:
    s = _summary().assign(round_medians_ns=None)
    t = per_layer(s)
    assert t["round_ratios"].isna().all()
    assert "per round" not in "\n".join(headline(t))


def test_output_rows_of_a_padded_image() -> None:
    assert output_rows("yc_h7_w7_c1152_m1152_f5_p2") == (7, 11)  # 7 x 7 with 5 x 5 filters: 7 of 11 rows
    assert output_rows(A) == (7, 9)
    assert output_rows("yc_h224_w224_c3_m64_f3_p1_s2") is None  # strided: YaConv does not apply
    text = "\n".join(headline(per_layer(_summary())))
    assert "14 14 96 3 3 208 1 1" in text and "rows 14/16" in text
