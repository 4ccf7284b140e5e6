"""Exports of the result store: pyperf JSON (so ``python -m pyperf compare_to a.json b.json`` works on
two runs), CSV summaries per experiment, and per paper figure its plotted data and verdict line. Parquet
itself is the primary format (schema: ``harness.store.COLUMNS``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pyperf

from harness import analysis, store
from reports.figures import PaperFigure, paper_figures


def benchmark_name(row: pd.Series) -> str:
    """Stable across runs and machines, so compare_to pairs the same candidate on the same workload."""
    return f"{row['experiment']}/{row['workload']}/{row['timing_mode']}/{row['label']}"


def to_pyperf(df: pd.DataFrame) -> pyperf.BenchmarkSuite | None:
    """One pyperf benchmark per (experiment, workload, timing mode, candidate) with one run per row;
    values are seconds per kernel call. Failed or wrong rows have no timings and are left out."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return None
    benchmarks = []
    for name, rows in ok.groupby(ok.apply(benchmark_name, axis=1), sort=True):
        runs = []
        for _, row in rows.iterrows():
            meta = {
                "name": name,
                "unit": "second",
                "cpu_model_name": str(row["cpu_model"]),
                "harness_machine": str(row["machine_fingerprint"]),
                "harness_candidate_key": str(row["candidate_key"]),
                "harness_source_hash": str(row["source_hash"]),
                "harness_compiler": f"{row['compiler_version']} {row['cflags']}",
                "harness_counter_backend": str(row["counter_backend"]),
                "harness_seed": int(row["seed"]),
                "harness_peak_gflops": float(row["peak_gflops"] or 0.0),
            }
            values = [float(t) * 1e-9 for t in row["times_ns"]]
            runs.append(pyperf.Run(values, warmups=None, metadata=meta, collect_metadata=False))
        benchmarks.append(pyperf.Benchmark(runs))
    return pyperf.BenchmarkSuite(benchmarks)


def export_pyperf(results_dir: Path, out: Path, experiment: str | None = None) -> Path:
    suite = to_pyperf(store.load(results_dir, experiment))
    if suite is None:
        raise ValueError(
            f"no measured (status ok) rows in {results_dir}" + (f" for {experiment}" if experiment else "")
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    suite.dump(str(out), replace=True)
    return out


def export_csv(results_dir: Path, out_dir: Path) -> list[Path]:
    """The summary table per experiment (one line per candidate x workload x machine x timing mode), and
    per paper figure (``figures/``): the data it plots and its verdict line (``figures/verdicts.csv``)."""
    summary = analysis.summarize(store.load(results_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for experiment, part in summary.groupby("experiment", sort=True):
        path = out_dir / f"{experiment}.csv"
        part.to_csv(path, index=False)
        paths.append(path)
    (out_dir / "columns.json").write_text(
        json.dumps({name: desc for name, (_, desc) in store.COLUMNS.items()}, indent=1)
    )
    return paths + export_figures_csv(summary, out_dir / "figures", results_dir)


def verdict_table(figures: list[PaperFigure]) -> pd.DataFrame:
    """One line per paper figure and machine: the paper's number, ours with its CI, the ratio, the verdict."""
    lines = []
    for f in figures:
        lo, hi = f.ours_ci or (None, None)
        rlo, rhi = f.ratio_ci or (None, None)
        lines.append(
            {
                "figure": f.name,
                "machine_fingerprint": f.machine,
                "cpu_model": f.cpu_model,
                "paper": f.paper,
                "where": f.where,
                "claim": f.claim,
                "paper_number": f.paper_text,
                "paper_value": f.paper_value,
                "ours": f.ours,
                "ours_ci_low": lo,
                "ours_ci_high": hi,
                "unit": f.unit,
                "ratio": f.ratio,
                "ratio_ci_low": rlo,
                "ratio_ci_high": rhi,
                "verdict": f.verdict,
                "statistic": f.statistic,
                "measured": f.measured,
                "timing_mode": f.timing_mode,
                "experiments": ", ".join(f.experiments),
                **{f"units_{k}": v for k, v in f.counts.items()},
                "plotted_data": f.csv,
            }
        )
    return pd.DataFrame(lines)


def export_figures_csv(summary: pd.DataFrame, out_dir: Path, results_dir: Path | None = None) -> list[Path]:
    """Every paper figure the results allow: its plotted data (CSV, with its PNG beside) and verdicts.csv."""
    from harness.report import complete_figure

    errors: list[tuple[str, str]] = []
    figures = [complete_figure(f, summary) for f in paper_figures(summary, out_dir, errors, results_dir)]
    for name, error in errors:  # one broken plug-in must not cost the other figures their CSV
        print(f"warning: figure builder {name} failed, its CSV is missing: {error}", file=sys.stderr)
    if not figures:
        return []
    path = out_dir / "verdicts.csv"
    verdict_table(figures).to_csv(path, index=False)
    plotted = [out_dir / Path(f.csv).name for f in figures if f.csv]
    return [path, *sorted(p for p in plotted if p.is_file())]
