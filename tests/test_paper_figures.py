"""Paper figures: the statistic and the verdict follow the measurements, per machine."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness import analysis, store
from reports.figures import PaperFigure, mean_ci, paper_figures
from studies.ttile_microkernels.figures import fig5_6_series
from tests.test_report import FLOPS, frame
from tests.test_report import make_row as row


def ns_for(pct: float, peak: float) -> float:
    return FLOPS / (pct / 100.0 * peak)


def hoist_rows(hoisted: float, plain: float, machine: str = "fp-zen3") -> list[dict]:
    from tests.test_report import MACHINES

    peak = MACHINES[machine][2]
    out = []
    for label, pct in (
        ("[R_j, R_i, T_{192,k}, U_{6,i}, U_{2,j}, V_j]", hoisted),
        ("[R_j, R_i, T_{192,k}, U_{6,i}, U_{2,j}, V_j] (hoist=False)", plain),
    ):
        out.append(
            row(
                machine=machine,
                candidate=f"{machine}-{label}",
                label=label,
                experiment="quick_matmul",
                times=[ns_for(pct, peak)] * 5,
            )
        )
    return out


def build(rows: list[dict], tmp_path: Path) -> list:
    return paper_figures(analysis.summarize(frame(rows)), tmp_path)


def test_hoisting_verdict_follows_the_numbers(tmp_path: Path) -> None:
    (good,) = build(hoist_rows(90.0, 40.0), tmp_path)
    assert good.name == "ttile_s4_3_hoisting" and good.verdict == "reproduced"
    assert "90.0% of peak hoisted vs 40.0%" in good.measured and (tmp_path / Path(good.image).name).exists()
    (bad,) = build(hoist_rows(70.0, 60.0), tmp_path)
    assert bad.verdict == "differs"


def test_figures_are_per_machine(tmp_path: Path) -> None:
    figs = build(hoist_rows(90.0, 40.0, "fp-zen3") + hoist_rows(70.0, 65.0, "fp-emr"), tmp_path)
    assert {(f.machine, f.verdict) for f in figs} == {("fp-zen3", "reproduced"), ("fp-emr", "differs")}


def test_small_matmul_series_and_verdict(tmp_path: Path) -> None:
    from tests.test_report import MACHINES

    peak = MACHINES["fp-zen3"][2]
    rows = []
    for i in (8, 20, 50):
        for label, kind, pct in (
            ("[R_j, λ_seq_i.[(1,4),(1,6)], T_{128,k}, Uλ_i, U_{2,j}, V_j]", "scheme", 88.0),
            ("[R_j, R_i, T_{128,k}, U_{6,i}, U_{2,j}, V_j] (partial=masked)", "scheme", 70.0 + i / 5),
            ("mkl", "baseline", 60.0 + i / 2),
        ):
            rows.append(
                row(
                    candidate=f"{label}-{i}",
                    label=label,
                    kind=kind,
                    experiment="ttile_fig5_6",
                    workload=f"small_matmul_i{i}",
                    times=[ns_for(pct, peak)] * 5,
                )
            )
    (fig,) = build(rows, tmp_path)
    assert fig.name == "ttile_fig5_6" and fig.verdict == "reproduced"
    series = {r["series"]: r for r in fig.table}
    assert abs(series["combination of microkernels"]["mean"] - 88.0) < 0.5
    assert set(series) == {"combination of microkernels", "single microkernel + partial tile", "mkl"}


def test_series_names() -> None:
    assert fig5_6_series("blis", "baseline") == "blis"
    assert fig5_6_series("[R_i] (partial=padded)", "scheme") == "single microkernel + padding"


def test_headline_number_ci_and_ratio(tmp_path: Path) -> None:
    rows = hoist_rows(90.0, 40.0)
    for r, jitter in zip(rows, (0.02, 0.05), strict=True):  # spread the repetitions: a real interval
        r.update(
            store.perf_fields([r["times_ns"][0] * (1 + jitter * k) for k in (-2, -1, 0, 1, 2)], FLOPS, 100.0)
        )
    (fig,) = build(rows, tmp_path)
    assert fig.ours == pytest.approx(90.0 / 40.0, rel=1e-6)
    lo, hi = fig.ours_ci
    assert lo < fig.ours < hi
    assert fig.paper_value == pytest.approx(2.0) and fig.ratio == pytest.approx(fig.ours / 2.0)
    assert fig.ratio_ci == pytest.approx((lo / 2.0, hi / 2.0))
    assert "45% -> 90%" in fig.paper_text and fig.timing_mode == "hot"
    assert fig.experiments == ["quick_matmul"]


def test_no_ratio_without_a_paper_number() -> None:
    f = PaperFigure("x", "fp", "cpu", "p", "w", "c", "m", "partial", "s", ours=3.0, ours_ci=(2.0, 4.0))
    assert f.ratio is None and f.ratio_ci is None
    f.paper_value = 1.5
    assert f.ratio == pytest.approx(2.0) and f.ratio_ci == pytest.approx((4 / 3, 8 / 3))
    f.ours = float("nan")
    assert f.ratio is None


def test_mean_ci() -> None:
    lo, hi = mean_ci([80.0, 90.0, 100.0])
    assert lo < 90.0 < hi and hi - 90.0 == pytest.approx(90.0 - lo)
    assert all(math.isnan(v) for v in mean_ci([5.0]))
    assert mean_ci([7.0, 7.0, 7.0]) == (7.0, 7.0)
