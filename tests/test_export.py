"""Exports: pyperf JSON that `python -m pyperf compare_to` reads, CSV per experiment and per paper figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness import export, store
from tests.test_report import make_row
from tests.test_report_render import fixture_rows


def write(results: Path, rows: list[dict]) -> Path:
    for row in rows:
        store.write_row(results, row)
    return results


def test_pyperf_compare_to_reads_two_runs(tmp_path: Path) -> None:
    fast = write(tmp_path / "a", [make_row(candidate="k", times=[50_000.0 + i for i in range(6)])])
    slow = write(tmp_path / "b", [make_row(candidate="k", times=[80_000.0 + i for i in range(6)])])
    a = export.export_pyperf(fast, tmp_path / "a.json")
    b = export.export_pyperf(slow, tmp_path / "b.json")
    out = subprocess.run(
        [sys.executable, "-m", "pyperf", "compare_to", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "1.60x slower" in out.stdout  # 80 us / 50 us, the same benchmark name in both files


def test_pyperf_export_refuses_a_store_without_measurements(tmp_path: Path) -> None:
    results = write(tmp_path / "r", [make_row(candidate="k", status="wrong", reason="bad")])
    with pytest.raises(ValueError, match="no measured"):
        export.export_pyperf(results, tmp_path / "x.json")


def test_csv_per_experiment_and_per_figure(tmp_path: Path) -> None:
    results = write(tmp_path / "r", fixture_rows())
    paths = export.export_csv(results, tmp_path / "csv")
    names = {p.relative_to(tmp_path / "csv").as_posix() for p in paths}
    assert {"extra.csv", "quick_matmul.csv", "ttile_fig5_6.csv", "figures/verdicts.csv"} <= names
    verdicts = pd.read_csv(tmp_path / "csv" / "figures" / "verdicts.csv")
    assert len(verdicts) == 3 and set(verdicts["machine_fingerprint"]) == {"fp-zen3", "fp-emr"}
    hoist = verdicts[verdicts["figure"] == "ttile_s4_3_hoisting"].set_index("machine_fingerprint")
    assert hoist.loc["fp-zen3", "verdict"] == "reproduced" and hoist.loc["fp-emr", "verdict"] == "differs"
    assert hoist.loc["fp-zen3", "ratio"] == pytest.approx(hoist.loc["fp-zen3", "ours"] / 2.0)
    assert (
        hoist.loc["fp-zen3", "ours_ci_low"]
        <= hoist.loc["fp-zen3", "ours"]
        <= hoist.loc["fp-zen3", "ours_ci_high"]
    )
    fig56 = verdicts[verdicts["figure"] == "ttile_fig5_6"].iloc[0]
    assert fig56["units_unavailable"] == 1 and pd.isna(fig56["ratio"])
    # the plotted data of every figure is exported beside the verdicts
    assert sum(n.startswith("figures/") and n != "figures/verdicts.csv" for n in names) == 3
