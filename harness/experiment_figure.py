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

import functools
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import cbook
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, findfont, get_font
from matplotlib.ft2font import LoadFlags
from matplotlib.lines import Line2D

from harness import analysis, drawing, store

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
        # 0.1 inch from the top whatever the figure's height (the layout is placed in inches, _grid)
        top = 1 - 0.1 / fig.get_size_inches()[1]
        fig.suptitle(f"{experiment} — {cpu} ({fingerprint[:12]})", fontsize=11, y=top, va="top")
        png = fig_dir / f"{stem}.png"
        fig.savefig(png, dpi=110, pil_kwargs=drawing.PNG)
    csv = fig_dir / f"{stem}.csv"
    order = units.sort_values(["workload", "timing_mode", "pct_peak_median"], ascending=[True, True, False])
    store.write_csv(order.reindex(columns=CSV_COLUMNS), csv)
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
    facets = {key: part for key, part in units.groupby(["workload", "condition"], sort=False)}
    empty = units.iloc[:0]
    grid = [[facets.get((w, m), empty).sort_values("pct_peak_median", ascending=False) for m in modes]
            for w in workloads]  # fmt: skip
    labels = [[_labels(facet) for facet in row] for row in grid]
    # each column's tick labels set its left margin; each row is as tall as its longest facet
    label_inches = [
        max((_text_inches(t, 8) for row in labels for t in row[j]), default=0.5) for j in range(len(modes))
    ]
    heights = [0.3 * max(max(len(f), 1) for f in row) + 0.3 for row in labels]
    legend = [*(f"{k}: one timed repetition" for k in palette), "median"]
    ncols = _legend_columns(legend, _columns(label_inches, 4.2, False)[1])
    fig, axes = _grid(
        heights, label_inches, axes_inches=4.2, row_gap=0.75, legend_rows=-(-len(legend) // ncols)
    )
    xmax = _xmax(units["pct_peak_median"].combine(units["pct_peak_min"], max))
    reps_by_unit = {
        key: part["pct_peak"].to_numpy()
        for key, part in reps.groupby(["workload", analysis.condition(reps), "candidate_key"], sort=False)
    }
    rng = np.random.default_rng(0)  # the jitter: the same data draws the same picture
    for i, workload in enumerate(workloads):
        for j, mode in enumerate(modes):
            ax, facet = axes[i][j], grid[i][j]
            ax.set_title(f"{workload} · {mode}", fontsize=10, y=1.0)
            ax.set_xlim(0, xmax)
            ax.axvline(100.0, color="0.4", linestyle="--", linewidth=1)
            ax.set_xlabel("% of calibrated peak" if i == len(workloads) - 1 else "")
            if facet.empty:
                ax.text(0.5, 0.5, "no ok candidate", ha="center", va="center", transform=ax.transAxes)
                ax.set_yticks([])
                continue
            named_units = facet[facet["shown"]]
            # one scatter and one line per facet (not per candidate): the repetitions, then the medians
            xs, ys, colours = [], [], []
            for y, (key, kind) in enumerate(
                zip(named_units["candidate_key"], named_units["candidate_kind"], strict=True)
            ):
                pts = reps_by_unit.get((workload, mode, key), np.array([]))
                xs.append(pts)
                ys.append(y + rng.uniform(-0.25, 0.25, pts.size))
                colours += [palette.get(kind, "0.5")] * pts.size
            if colours:
                ax.scatter(np.concatenate(xs), np.concatenate(ys), s=10, alpha=0.55, color=colours)
            ax.plot(
                named_units["pct_peak_median"].to_numpy(),
                np.arange(len(named_units)),
                marker="D",
                markersize=5,
                color="black",
                linestyle="none",
            )
            others = facet.loc[~facet["shown"], "pct_peak_median"].dropna().to_numpy()
            if others.size:
                _boxes(ax, [others], [len(named_units)], width=0.6, fliers=True)
            ax.set_yticks(range(len(labels[i][j])), labels[i][j], fontsize=8)
            ax.set_ylim(max(len(labels[i][j]), 1) - 0.5, -0.5)  # an empty facet keeps a row
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
    fig.legend(handles=handles, loc="lower center", ncols=ncols, fontsize=8, frameon=False)
    return fig


def _labels(facet: pd.DataFrame) -> list[str]:
    """A facet's tick labels, top down: its named candidates, then the box of the others if any."""
    out = [str(d) for d in facet.loc[facet["shown"], "display"]]
    others = facet.loc[~facet["shown"], "pct_peak_median"].dropna()
    return [*out, f"{others.size} other candidates (their medians)"] if others.size else out


def _per_workload(units: pd.DataFrame) -> Figure:
    """A line per workload, a facet per timing mode: the candidates' medians as a box, the best as a star,
    each baseline's median as a marker of its own."""
    units = units.assign(condition=analysis.condition(units))
    workloads = sorted(units["workload"].unique())
    modes = sorted(units["condition"].unique())
    refs = sorted(units.loc[units["candidate_kind"].isin(REFERENCE_KINDS), "display"].astype(str).unique())
    markers = dict(zip(refs, ["o", "s", "^", "v", "P", "X", "<", ">", "h", "p"] * 3, strict=False))
    colours = dict(zip(refs, sns.color_palette("deep", max(len(refs), 1)), strict=False))
    label_inches = max(_text_inches(str(w), 8) for w in workloads)
    n = units.loc[~units["candidate_kind"].isin(REFERENCE_KINDS), "candidate_key"].nunique()
    legend = ["best candidate", f"box: the medians of {n} candidates", *refs]
    ncols = _legend_columns(legend, _columns([label_inches] * len(modes), 6.5, True)[1])
    fig, grid = _grid(
        [0.34 * len(workloads) + 0.2],
        [label_inches] * len(modes),
        6.5,
        0.0,
        sharey=True,
        legend_rows=-(-len(legend) // ncols),
    )
    axes = grid[0]
    xmax = _xmax(units["pct_peak_median"])
    row_of = {w: y for y, w in enumerate(workloads)}
    is_ref = units["candidate_kind"].isin(REFERENCE_KINDS)
    for ax, mode in zip(axes, modes, strict=True):
        in_mode = units["condition"] == mode
        ax.set_title(mode, fontsize=10, y=1.0)
        ax.set_xlim(0, xmax)
        ax.axvline(100.0, color="0.4", linestyle="--", linewidth=1)
        ax.set_xlabel("% of calibrated peak (median of each candidate)")
        cands = units.loc[in_mode & ~is_ref, ["workload", "pct_peak_median"]].dropna()
        groups = {w: part.to_numpy() for w, part in cands.groupby("workload")["pct_peak_median"]}
        if groups:
            ys = [row_of[w] for w in groups]
            _boxes(ax, list(groups.values()), ys, width=0.55)
            best = [float(v.max()) for v in groups.values()]
            ax.plot(best, ys, marker="*", markersize=10, color="black", linestyle="none")
        refs_here = units.loc[in_mode & is_ref, ["workload", "display", "pct_peak_median"]]
        for name, ref in refs_here.groupby(refs_here["display"].astype(str)):
            ax.plot(
                ref["pct_peak_median"].to_numpy(),
                ref["workload"].map(row_of).to_numpy(),
                marker=markers[name],
                color=colours[name],
                markersize=6,
                linestyle="none",
                alpha=0.85,
            )
        ax.set_yticks(range(len(workloads)), workloads, fontsize=8)
        ax.set_ylim(len(workloads) - 0.5, -0.5)
    handles = [
        Line2D([], [], marker="*", markersize=10, linestyle="none", color="black", label="best candidate"),
        Line2D(
            [],
            [],
            marker="|",
            markersize=10,
            linestyle="none",
            color="0.5",
            label=legend[1],
        ),
        *[Line2D([], [], marker=markers[r], linestyle="none", color=colours[r], label=r) for r in refs],
    ]
    fig.legend(handles=handles, loc="lower center", ncols=ncols, fontsize=8, frameon=False)
    return fig


def _boxes(
    ax: Axes, data: list[np.ndarray], positions: list[float], width: float, fliers: bool = False
) -> None:
    """Horizontal box plots of ``data`` at ``positions`` (quartiles, median, whiskers at 1.5 IQR, as
    ``Axes.boxplot``) drawn as one line collection: ``boxplot`` made six artists a box, ~20 ms a call,
    and the report of every archive drew 500 boxes."""
    h = width / 2
    segments, medians, outliers = [], [], []
    for stat, y in zip(cbook.boxplot_stats(data), positions, strict=True):
        q1, q3, lo, hi = stat["q1"], stat["q3"], stat["whislo"], stat["whishi"]
        segments += [
            [(q1, y - h), (q3, y - h)], [(q1, y + h), (q3, y + h)], [(q1, y - h), (q1, y + h)],
            [(q3, y - h), (q3, y + h)], [(lo, y), (q1, y)], [(q3, y), (hi, y)],
            [(lo, y - h / 2), (lo, y + h / 2)], [(hi, y - h / 2), (hi, y + h / 2)],
        ]  # fmt: skip
        medians.append([(stat["med"], y - h), (stat["med"], y + h)])
        outliers += [(x, y) for x in stat["fliers"]] if fliers else []
    ax.add_collection(LineCollection(segments, colors="0.5", linewidths=1), autolim=False)
    ax.add_collection(LineCollection(medians, colors="0.3", linewidths=1.5), autolim=False)
    if outliers:
        xs, ys = zip(*outliers, strict=True)
        ax.plot(xs, ys, "o", markersize=2, alpha=0.4, markerfacecolor="none", markeredgecolor="0.3")


def _grid(
    heights: list[float],
    label_inches: list[float],
    axes_inches: float,
    row_gap: float,
    sharey: bool = False,
    legend_rows: int = 1,
) -> tuple[Figure, list[list[Axes]]]:
    """A figure of ``len(heights)`` x ``len(label_inches)`` axes placed in inches, each column after its
    tick labels' width: computed, not searched (constrained layout measured every tick label several
    times, 40% of a figure's time in the report of every archive). ``sharey``: one y axis per row, labelled
    in the first column only; ``legend_rows``: the figure legend's lines, below the last row's x axis."""
    top, bottom = 0.6, 0.6 + 0.22 * legend_rows
    lefts, width = _columns(label_inches, axes_inches, sharey)
    height = top + sum(heights) + row_gap * (len(heights) - 1) + bottom
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes: list[list[Axes]] = []
    y = height - top
    for h in heights:
        x, row = 0.0, []
        for left in lefts:
            x += left
            share = row[0] if sharey and row else None
            row.append(
                fig.add_axes((x / width, (y - h) / height, axes_inches / width, h / height), sharey=share)
            )
            if share is not None:
                row[-1].tick_params(labelleft=False)
            x += axes_inches
        axes.append(row)
        y -= h + row_gap
    return fig, axes


def _columns(label_inches: list[float], axes_inches: float, sharey: bool) -> tuple[list[float], float]:
    """The left margin before each column of axes (its tick labels' width), and the figure's width."""
    right, pad = 0.3, 0.15
    lefts = [label_inches[0] + pad] + [0.25 if sharey else w + pad for w in label_inches[1:]]
    return lefts, sum(lefts) + axes_inches * len(lefts) + right


def _legend_columns(labels: list[str], width: float, size: float = 8, most: int = 5) -> int:
    """The most legend columns (up to ``most``) whose entries fit on a figure ``width`` inches wide, as
    Matplotlib lays them out: entries split into columns in order, each column as wide as its widest
    entry (handle 2 em, gap 0.8 em, text), columns 2 em apart. A legend wider than its figure ran off both
    edges."""
    em = size / 72
    entry = [_text_inches(t, size) + 2.8 * em for t in labels]
    for n in range(min(most, len(labels)), 1, -1):
        rows, big = divmod(len(labels), n)
        sizes = [rows + 1] * big + [rows] * (n - big)
        starts = np.cumsum([0, *sizes])
        widths = [max(entry[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True)]
        if sum(widths) + 2 * em * (n - 1) + 2 * em <= width:
            return n
    return 1


@functools.cache
def _advance(char: str) -> float:
    """Advance width of ``char`` in Matplotlib's default font, in points at size 1."""
    font = get_font(findfont(FontProperties()))
    font.set_size(100, 72)
    return font.load_char(ord(char), flags=LoadFlags.NO_HINTING).linearHoriAdvance / 65536 / 100


def _text_inches(text: str, size: float) -> float:
    """Width of ``text`` at ``size`` points (no kerning: a few percent over, which the margin keeps)."""
    return 1.05 * size * sum(_advance(c) for c in text) / 72
