"""The figure of one experiment on one machine: what a reader can read, whatever the number of candidates.

A study of 1000 schemes on 23 layers has 23 000 candidates: a dot per repetition with a tick label per
candidate drew for an hour and gave an unreadable picture. So each facet (workload x timing mode) names
the library baselines and the :data:`SHOWN` best candidates (a dot per timed repetition, a diamond at
the median) and draws the others as one box of their medians; an experiment of more than
:data:`MANY_WORKLOADS` workloads gets one line per workload instead (the candidates' medians as a box, the
best as a star, each baseline as a marker). Every unit stays in the figure's CSV (one line per candidate,
workload and timing mode, with its median, CI and repetitions).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness import analysis

#: candidates a facet names, besides the baselines (the best by median % of peak)
SHOWN = 12
#: above this many workloads, one line per workload (the distribution view)
MANY_WORKLOADS = 6
#: candidate kinds that are references, always named
REFERENCE_KINDS = ("baseline",)
#: columns of the figure's CSV (one line per unit)
CSV_COLUMNS = [
    "experiment",
    "machine_fingerprint",
    "workload",
    "timing_mode",
    "contention",
    "display",
    "candidate_key",
    "candidate_kind",
    "target",
    "pct_peak_median",
    "pct_peak_median_ci_low",
    "pct_peak_median_ci_high",
    "pct_peak_min",
    "gflops_median",
    "median_ns",
    "n_reps",
    "shown",
]


def mark_shown(units: pd.DataFrame, shown: int = SHOWN) -> pd.DataFrame:
    """``units`` (ok summary lines) with a column ``shown``: in each facet (workload x timing mode), every
    reference and the ``shown`` best other candidates by median % of peak."""
    units = units.copy()
    ref = units["candidate_kind"].isin(REFERENCE_KINDS)
    rank = (
        units[~ref]
        .groupby(["workload", analysis.condition(units[~ref])])["pct_peak_median"]
        .rank(ascending=False, method="first")
    )
    units["shown"] = ref | units.index.isin(rank.index[rank <= shown])
    return units


def plot(
    reps: pd.DataFrame, units: pd.DataFrame, fig_dir: Path, stem: str, experiment: str, fingerprint: str
) -> dict[str, str]:
    """Draw ``experiment`` on machine ``fingerprint`` into ``fig_dir/<stem>.png`` (its CSV beside it):
    ``reps`` its timed repetitions, ``units`` its ok summary lines (both with a ``display`` label; ``shown``
    as :func:`mark_shown` sets it, else set here). Returns the paths, relative to the report, and what the
    caption says."""
    if "shown" not in units:
        units = mark_shown(units)
    cpu = units["cpu_model"].dropna().iloc[0] if units["cpu_model"].notna().any() else "unknown CPU"
    per_workload = units["workload"].nunique() > MANY_WORKLOADS
    with matplotlib.rc_context({"text.parse_math": False}), sns.axes_style("whitegrid"):
        fig = _per_workload(units) if per_workload else _per_candidate(reps, units)
        fig.suptitle(f"{experiment} — {cpu} ({fingerprint[:12]})", fontsize=11)
        png = fig_dir / f"{stem}.png"
        fig.savefig(png, dpi=110)
    csv = fig_dir / f"{stem}.csv"
    units.sort_values(["workload", "timing_mode", "pct_peak_median"], ascending=[True, True, False]).reindex(
        columns=CSV_COLUMNS
    ).to_csv(csv, index=False)
    return {
        "png": f"{fig_dir.name}/{png.name}",
        "csv": f"{fig_dir.name}/{csv.name}",
        "machine_fingerprint": fingerprint,
        "cpu_model": str(cpu),
        "view": "per workload" if per_workload else "per candidate",
        "n_units": str(len(units)),
        "n_shown": str(int(units["shown"].sum())),
    }


def _xmax(values: pd.Series) -> float:
    return max(105.0, float(values.max()) * 1.05) if values.notna().any() else 105.0


def _per_candidate(reps: pd.DataFrame, units: pd.DataFrame) -> Figure:
    """Facets per workload x timing mode: a row per named candidate (dots = repetitions, diamond =
    median), then one box of the others' medians."""
    kinds = sorted(units["candidate_kind"].dropna().unique())
    palette = dict(zip(kinds, sns.color_palette("deep", len(kinds)), strict=True))
    workloads = sorted(units["workload"].unique())
    units = units.assign(condition=analysis.condition(units))
    modes = sorted(units["condition"].unique())
    rows_of = {
        (w, m): units[(units["workload"] == w) & (units["condition"] == m)] for w in workloads for m in modes
    }
    n_rows = [
        max(
            max(int(f["shown"].sum()) + int((~f["shown"]).any()), 1)
            for (w2, _), f in rows_of.items()
            if w2 == w
        )
        for w in workloads
    ]
    named = units.loc[units["shown"], "display"].astype(str)
    label_inches = max(4.5, 0.07 * int(named.str.len().max())) if len(named) else 4.5
    heights = [0.3 * n + 1.1 for n in n_rows]
    fig = Figure(figsize=(4.2 * len(modes) + label_inches, sum(heights) + 0.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(workloads), len(modes), squeeze=False, gridspec_kw={"height_ratios": heights})
    xmax = _xmax(units["pct_peak_median"].combine(units["pct_peak_min"], max))
    reps_by_unit = {
        key: part["pct_peak"].to_numpy()
        for key, part in reps.groupby(["workload", analysis.condition(reps), "candidate_key"], sort=False)
    }
    rng = np.random.default_rng(0)  # the jitter: the same data draws the same picture
    for i, workload in enumerate(workloads):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            facet = rows_of[(workload, mode)].sort_values("pct_peak_median", ascending=False)
            ax.set_title(f"{workload} · {mode}", fontsize=10)
            ax.set_xlim(0, xmax)
            ax.axvline(100.0, color="0.4", linestyle="--", linewidth=1)
            ax.set_xlabel("% of calibrated peak" if i == len(workloads) - 1 else "")
            if facet.empty:
                ax.text(0.5, 0.5, "no ok candidate", ha="center", va="center", transform=ax.transAxes)
                ax.set_yticks([])
                continue
            named_units = facet[facet["shown"]]
            labels = []
            for y, (_, u) in enumerate(named_units.iterrows()):
                pts = reps_by_unit.get((workload, mode, u["candidate_key"]), np.array([]))
                jitter = rng.uniform(-0.25, 0.25, pts.size)
                ax.scatter(pts, y + jitter, s=10, alpha=0.55, color=palette.get(u["candidate_kind"], "0.5"))
                ax.plot(
                    [u["pct_peak_median"]], [y], marker="D", markersize=5, color="black", linestyle="none"
                )
                labels.append(str(u["display"]))
            others = facet.loc[~facet["shown"], "pct_peak_median"].dropna().to_numpy()
            if others.size:
                ax.boxplot(
                    others,
                    positions=[len(labels)],
                    orientation="horizontal",
                    widths=0.6,
                    showfliers=True,
                    flierprops={"markersize": 2, "alpha": 0.4},
                )
                labels.append(f"{others.size} other candidates (their medians)")
            ax.set_yticks(range(len(labels)), labels, fontsize=8)
            ax.set_ylim(len(labels) - 0.5, -0.5)
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="none",
            color=palette[k],
            alpha=0.7,
            label=f"{k}: one timed repetition",
        )
        for k in palette
    ]
    handles.append(Line2D([], [], marker="D", linestyle="none", color="black", label="median"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    return fig


def _per_workload(units: pd.DataFrame) -> Figure:
    """A line per workload, a facet per timing mode: the candidates' medians as a box, the best as a star,
    each baseline's median as a marker of its own."""
    units = units.assign(condition=analysis.condition(units))
    workloads = sorted(units["workload"].unique())
    modes = sorted(units["condition"].unique())
    refs = sorted(units.loc[units["candidate_kind"].isin(REFERENCE_KINDS), "display"].astype(str).unique())
    markers = dict(zip(refs, ["o", "s", "^", "v", "P", "X", "<", ">", "h", "p"] * 3, strict=False))
    colours = dict(zip(refs, sns.color_palette("deep", max(len(refs), 1)), strict=False))
    fig = Figure(figsize=(6.5 * len(modes) + 2.5, 0.34 * len(workloads) + 2.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(modes), squeeze=False, sharey=True)[0]
    xmax = _xmax(units["pct_peak_median"])
    for ax, mode in zip(axes, modes, strict=True):
        part = units[units["condition"] == mode]
        ax.set_title(mode, fontsize=10)
        ax.set_xlim(0, xmax)
        ax.axvline(100.0, color="0.4", linestyle="--", linewidth=1)
        ax.set_xlabel("% of calibrated peak (median of each candidate)")
        for y, workload in enumerate(workloads):
            w = part[part["workload"] == workload]
            cands = w.loc[~w["candidate_kind"].isin(REFERENCE_KINDS), "pct_peak_median"].dropna().to_numpy()
            if cands.size:
                ax.boxplot(
                    cands,
                    positions=[y],
                    orientation="horizontal",
                    widths=0.55,
                    showfliers=False,
                    medianprops={"color": "0.3"},
                    boxprops={"color": "0.5"},
                    whiskerprops={"color": "0.5"},
                    capprops={"color": "0.5"},
                )
                ax.plot([cands.max()], [y], marker="*", markersize=10, color="black", linestyle="none")
            for _, ref in w[w["candidate_kind"].isin(REFERENCE_KINDS)].iterrows():
                name = str(ref["display"])
                ax.plot(
                    [ref["pct_peak_median"]],
                    [y],
                    marker=markers[name],
                    color=colours[name],
                    markersize=6,
                    linestyle="none",
                    alpha=0.85,
                )
        ax.set_yticks(range(len(workloads)), workloads, fontsize=8)
        ax.set_ylim(len(workloads) - 0.5, -0.5)
    n = units.loc[~units["candidate_kind"].isin(REFERENCE_KINDS), "candidate_key"].nunique()
    handles = [
        Line2D([], [], marker="*", markersize=10, linestyle="none", color="black", label="best candidate"),
        Line2D(
            [],
            [],
            marker="|",
            markersize=10,
            linestyle="none",
            color="0.5",
            label=f"box: the medians of {n} candidates",
        ),
        *[Line2D([], [], marker=markers[r], linestyle="none", color=colours[r], label=r) for r in refs],
    ]
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=8, frameon=False
    )
    return fig
