"""Static HTML report of stored results: machines, per-experiment figures, summaries, failures, provenance.

Why a static page: it must open from a results directory copied anywhere (relative links only, CSS copied
next to it, figures as PNG files with the CSV of exactly what they plot). Every number on it comes from
:mod:`harness.analysis`, so a wrong or failed candidate can never appear in a performance figure, and no
axis ever mixes two machines (one figure per experiment and machine).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness import analysis, drawing, experiment_figure, provenance, store, verdict_matrix
from harness.machine import microarchitecture
from reports.figures import CLAIMS, PaperFigure, collect_paper_figures, paper_figure_calls

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "reports" / "templates"
DEFAULT_TITLE = "Tensor kernel benchmark report"

PROVENANCE_COLUMNS = [
    "machine_fingerprint",
    "cpu_model",
    "compiler",
    "compiler_version",
    "cflags",
    "counter_backend",
    "counters_unavailable",
    "timing_mode",
    "cold_method",
    "seed",
    "check_mode",
    "check_points",
    "check_eps",
    "harness_version",
    "impl",
]


def build_report(
    results_dir: Path, out_dir: Path, experiments: list[str] | None = None, title: str = DEFAULT_TITLE
) -> Path:
    """Load the stored rows (optionally only ``experiments``) and write the report; return index.html.

    Each forked worker that draws shares, and counts, every page this process holds, so what it holds is
    read in forks and comes back compact: the summary from its own load of the rows (the columns only it
    reads, round times, options, flags, never enter this process), then the rows the page draws with
    their repeated texts as categories. The report of every archive's drawing: 1.84 -> 1.57 GiB (summed
    PSS). The summary is made in runs of experiments, two forks at a time (:func:`_parts`).
    """
    results_dir = Path(results_dir)
    # twice as many runs as workers: two halves side by side summed 1.85-1.97 GiB at their peak (each held
    # half the rows) in 29-30 s, four runs 1.51-1.55 GiB in 27-29 s (one fork alone: 41-47 s, 1.80 GiB;
    # the load stage of the report of every archive on a Zen 3, wall time)
    parts = _parts(results_dir, experiments, 2 * REPORT_WORKERS)
    calls = [(_load_and_summarize, (results_dir, part)) for part in parts]
    *summaries, df = drawing.apart_all([*calls, (_load_coded, (results_dir, experiments))], REPORT_WORKERS)
    summarized = _joined(summaries)
    del summaries
    return render_report(df, Path(out_dir), title=title, results_dir=results_dir, summarized=summarized)


def _parts(results_dir: Path, experiments: list[str] | None, n: int) -> list[list[str]]:
    """The experiments (all stored, or ``experiments``), sorted, in at most ``n`` runs of about as many
    bytes of rows each: summarised side by side, a worker each (the summary of every archive in one fork
    left the other core idle). Runs of the sorted names, so their summaries joined are in the
    summary's order (experiment first)."""
    stored = store.experiments(results_dir)
    names = sorted(stored if experiments is None else set(experiments) & set(stored))
    if len(names) < 2 or n < 2:
        return [names]
    # cut where the running total of bytes passes each n-th of the whole
    ends = np.cumsum([store.stored_bytes(results_dir, e) for e in names], dtype=float)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) / n, side="left") + 1
    bounds = [0, *sorted({int(min(c, len(names) - 1)) for c in cuts}), len(names)]
    return [names[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _joined(
    summaries: list[tuple[pd.DataFrame, dict[tuple[str, str], str]]],
) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    """The summaries of :func:`_parts`' runs as one (each experiment's labels are its own)."""
    frames = [s for s, _ in summaries if not s.empty]
    # inferred again: a run whose lines have no text in a column (no library among its candidates) made
    # it an object column, which the whole summary has as strings
    summary = pd.concat(frames, ignore_index=True).infer_objects() if frames else summaries[0][0]
    return summary, {k: v for _, names in summaries for k, v in names.items()}


def _load(results_dir: Path, columns: tuple[str, ...], experiments: list[str] | None) -> pd.DataFrame:
    if experiments is not None:  # only the stored ones: a name with no rows is no error here
        experiments = sorted(set(experiments) & set(store.experiments(results_dir)))
    return store.load(results_dir, experiments, columns=columns)


def _load_coded(results_dir: Path, experiments: list[str] | None) -> pd.DataFrame:
    return _coded(_load(results_dir, DRAWN_COLUMNS, experiments))


#: a text column of the drawn rows becomes a category when it has at most this many values a row
CODED_SHARE = 0.01
#: text columns the report orders (a category has no min or max): never coded
_ORDERED_TEXT = ("timestamp",)


def _coded(df: pd.DataFrame, share: float = CODED_SHARE) -> pd.DataFrame:
    """``df`` with its text columns of few values (compiler flags, counters' reasons, machines...) as
    categories: a code a row instead of the text. The page is the same (tested with every text column
    coded: the report of the columns it reads is the report of every column)."""
    few = [c for c in df.columns if c not in _ORDERED_TEXT and pd.api.types.is_string_dtype(df[c])
           and df[c].nunique() <= len(df) * share]  # fmt: skip
    return df.astype(dict.fromkeys(few, "category")) if few else df


def _load_and_summarize(
    results_dir: Path, experiments: list[str] | None
) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    return _summarize_here(_load(results_dir, REPORT_COLUMNS, experiments))


def summarize(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    """The report's summary of ``df`` (:func:`analysis.summarize`, computed in a fork: what it frees stays
    out of this process) with each unit's ``display`` label, and those labels by (experiment, candidate)
    (:func:`_display_labels`)."""
    return drawing.apart(_summarize_here, df)


def _summarize_here(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    summary = analysis.summarize(df)
    names = _display_labels(summary)
    if not summary.empty:
        summary["display"] = [
            names[(e, k)] for e, k in zip(summary["experiment"], summary["candidate_key"], strict=True)
        ]
    return summary, names


def render_report(
    df: pd.DataFrame,
    out_dir: Path,
    title: str = DEFAULT_TITLE,
    templates_dir: Path = TEMPLATES_DIR,
    results_dir: Path | None = None,
    summarized: tuple[pd.DataFrame, dict[tuple[str, str], str]] | None = None,
) -> Path:
    """Write index.html, provenance.html, style.css and figures/ for the rows in ``df`` (store schema).

    ``results_dir`` (optional) is where the calibration cache is read for the provenance page.
    ``summarized``: :func:`summarize` of the rows, when the caller has it (then ``df`` needs only the
    :data:`DRAWN_COLUMNS`).
    """
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    summary, names = summarize(df) if summarized is None else summarized

    builder_errors: list[tuple[str, str]] = []
    paper = paper_figure_calls(summary, fig_dir, builder_errors, results_dir)
    sections, drawings, figures_of = _experiment_calls(df, summary, names, fig_dir)
    # the study figures first: the longest calls (a builder draws all of a study's machines); then each
    # experiment's figures and its section's tables, built by the same workers
    calls = [*paper, *drawings, *sections]
    print(f"report: {len(paper)} study figures, {len(drawings)} experiment figures, {len(sections)} "
          f"sections on {REPORT_WORKERS} worker(s)", file=sys.stderr, flush=True)  # fmt: skip
    done = drawing.run(calls, REPORT_WORKERS, progress="report")
    figures = sorted(
        (complete_figure(f, summary) for f in collect_paper_figures(done[: len(paper)], builder_errors)),
        key=lambda f: (f.paper, f.name, f.cpu_model, f.machine),
    )
    drawn = done[len(paper) : len(paper) + len(drawings)]
    experiments = done[len(paper) + len(drawings) :]
    for experiment, indices in zip(experiments, figures_of, strict=True):
        experiment["figures"] = [drawn[i] for i in indices]

    env = Environment(
        loader=FileSystemLoader(str(templates_dir)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["sig"] = _sig
    env.filters["slug"] = lambda s: _slug(s, 80)
    env.filters["short"] = lambda s, n=12: "" if s is None else str(s)[:n]
    # (anchor, figure): the verdict table links to each figure's section
    anchored = [(f"fig-{i}-{_slug(f.name)}", f) for i, f in enumerate(figures, 1)]
    machines = _machines(df)
    common = {"title": title, "n_rows": len(df), "time_span": _time_span(df), "machines": machines}
    with drawing.style():
        matrix = verdict_matrix.plot(
            figures, fig_dir, {m["fingerprint"]: m["microarchitecture"] for m in machines}
        )
    html = env.get_template("index.html.j2").render(
        **common,
        experiments=experiments,
        paper_figures=anchored,
        verdicts=_verdict_counts(figures),
        matrix=matrix,
        builder_errors=builder_errors,
    )
    prov = env.get_template("provenance.html.j2").render(
        **common,
        env=provenance.environment(),
        harness_versions=provenance.harness_versions(df),
        compilers=provenance.compilers_used(df),
        libraries=provenance.libraries_used(df),
        calibrations=provenance.calibrations(results_dir),
        row_peaks=provenance.row_peaks(df),
        counters=provenance.counter_backends(df),
        experiments=experiments,
    )
    shutil.copyfile(Path(templates_dir) / "style.css", out_dir / "style.css")
    (out_dir / "provenance.html").write_text(prov, encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(html, encoding="utf-8")
    return index


#: the row columns an experiment's figure reads (:func:`analysis.repetitions`' inputs)
_FIGURE_INPUTS = (*analysis.GROUP_KEYS, "cpu_model", "label", "candidate_kind", "target", "seed", "flops",
                  "peak_gflops", "status", "times_ns")  # fmt: skip


#: the summary's columns of arrays (each unit's round medians and times), in no table or CSV
_ROUND_COLUMNS = ("round_medians_ns", "round_times")
#: the summary columns an experiment's figure reads (its units, their CSV, :func:`analysis.repetitions`)
_UNIT_INPUTS = tuple(dict.fromkeys(
    (*analysis.GROUP_KEYS, "status", "cpu_model", *(c for c in experiment_figure.CSV_COLUMNS if c != "shown"))
))  # fmt: skip


def _experiment_figure(
    df: pd.DataFrame,
    summary: pd.DataFrame,
    names: dict[tuple[str, str], str],
    fig_dir: Path,
    exp: str,
    fp: str,
    at: tuple[Any, Any],
) -> dict[str, str]:
    """Draw experiment ``exp`` on machine ``fp`` (:func:`experiment_figure.plot`): the baselines and the
    best candidates of each facet, ranked over every machine of the experiment, with their repetitions.
    ``at``: the positions of the experiment's lines in ``df`` and in ``summary``."""
    rows_at, summary_at = at
    # the lines' columns the figure reads: a copy of all of them (the round times' arrays touched, so
    # copied into the worker) took 300 MB of the largest experiment's figure
    exp_summary = _rows(summary, summary_at, _UNIT_INPUTS)
    marked = experiment_figure.mark_shown(exp_summary[exp_summary["status"] == "ok"])
    units = marked[marked["machine_fingerprint"] == fp]
    # the named units' repetitions only (23 000 candidates' would be a million lines), and only the columns
    # they need: a worker copies each page of df's objects that its selection touches
    named = units[units["shown"]]
    # the named units' positions first, then their rows: a take of the experiment's rows on every machine
    # touched (and so copied into the worker) 100 000 arrays of times of the largest experiment
    keys = _rows(df, rows_at, ("machine_fingerprint", "candidate_key"))
    mine = (keys["machine_fingerprint"] == fp) & keys["candidate_key"].isin(named["candidate_key"])
    rows = _rows(df, rows_at[mine.to_numpy()], _FIGURE_INPUTS)
    reps = analysis.repetitions(rows, named)
    reps["display"] = [names[(exp, k)] for k in reps["candidate_key"]]
    return experiment_figure.plot(reps, units, fig_dir, _stem(exp, fp), exp, fp)


def _rows(df: pd.DataFrame, positions: Any, columns: tuple[str, ...]) -> pd.DataFrame:
    """``df``'s (or the summary's) lines at ``positions``, only the ``columns`` it has (a row has about
    80: a take of every column copies what a worker would not read)."""
    return df.iloc[positions, [df.columns.get_loc(c) for c in dict.fromkeys(columns) if c in df]]


def _experiment_calls(
    df: pd.DataFrame, summary: pd.DataFrame, names: dict[tuple[str, str], str], fig_dir: Path
) -> tuple[list[drawing.Call], list[drawing.Call], list[list[int]]]:
    """The calls that build the report's experiment sections (one per experiment, :func:`_section`) and
    draw their figures (one per experiment and machine with ok units, :func:`_experiment_figure`), and for
    each section the indices of its figures among the figure calls. Each call finds its rows in ``df`` and
    ``summary``, which a worker inherits: a call holding its own rows would keep them all in this process
    until every section is built (650 MB for every archive)."""
    # each experiment's positions, found in one pass (a mask per experiment scanned every row 200 times)
    rows_at = df.groupby("experiment", sort=False).indices if not df.empty else {}
    summary_at = summary.groupby("experiment", sort=False).indices if not summary.empty else {}
    # two columns of the ok lines, not a copy of them all (the whole summary, 230 MB for every archive)
    machines = (
        summary.loc[summary["status"] == "ok", ["experiment", "machine_fingerprint"]]
        .groupby("experiment")["machine_fingerprint"]
        .unique()
        if len(summary)
        else {}
    )
    sections: list[drawing.Call] = []
    drawings: list[drawing.Call] = []
    figures_of: list[list[int]] = []
    for exp in sorted(rows_at):
        at = (rows_at[exp], summary_at.get(exp, np.array([], dtype=np.intp)))
        fps = sorted(machines[exp]) if exp in machines else []
        figures_of.append(list(range(len(drawings), len(drawings) + len(fps))))
        drawings += [(_experiment_figure, (df, summary, names, fig_dir, exp, fp, at)) for fp in fps]
        sections.append((_section, (df, summary, names, fig_dir, exp, at)))
    return sections, drawings, figures_of


#: the row columns an experiment's section reads (provenance, sentinel, sources): a row has about 80
_SECTION_INPUTS = (*PROVENANCE_COLUMNS, "sentinel_ratio", "sentinel_cache_ratio", "timestamp", "experiment",
                   "candidate_key", "workload", "target", "source_hash", "status")  # fmt: skip


#: the row columns :func:`_machines` and :func:`_time_span` read
_MACHINE_INPUTS = ("machine_fingerprint", "machine", "cpu_model", "target", "peak_gflops", "experiment",
                   "timestamp")  # fmt: skip
#: the row columns the report reads once the summary is made: figures, sections, provenance, machines
DRAWN_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(
    (*_FIGURE_INPUTS, *_SECTION_INPUTS, *provenance.ROW_COLUMNS, *_MACHINE_INPUTS)
))  # fmt: skip
#: every row column the report reads (:func:`build_report` loads only these: the others, about half of a
#: row's bytes, never left the store)
REPORT_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((*analysis.SUMMARY_INPUTS, *DRAWN_COLUMNS)))


def _section(
    df: pd.DataFrame,
    summary: pd.DataFrame,
    names: dict[tuple[str, str], str],
    fig_dir: Path,
    exp: str,
    at: tuple[Any, Any],
) -> dict[str, Any]:
    """Experiment ``exp``'s section of the page: its unit counts, tables (their CSVs written), provenance
    and drift sentinel (``at``: its lines' positions in ``df`` and ``summary``). Its ``figures`` are set by
    the caller."""
    rows_at, summary_at = at
    exp_rows = _rows(df, rows_at, _SECTION_INPUTS)
    # not the round times (arrays a take would touch, so copy into the worker): no table shows them
    exp_summary = _rows(summary, summary_at, tuple(c for c in summary.columns if c not in _ROUND_COLUMNS))
    ok = exp_summary["status"] == "ok"
    marked = experiment_figure.mark_shown(exp_summary[ok]) if ok.any() else exp_summary[ok]
    failed = exp_summary[~ok].sort_values(["machine_fingerprint", "workload", "display"])
    sources = _sources(exp_rows, names)
    return {
        "name": exp,
        "anchor": f"exp-{_slug(exp, 80)}",
        "counts": unit_counts(exp_summary),
        "figures": [],
        "machines": _summary_by_machine(exp_summary, marked, fig_dir),
        "failed": _records(failed.head(LISTED).reindex(columns=_TABLE_FIELDS)),
        "n_failed": len(failed),
        "failed_csv": _table_csv(failed, fig_dir, exp, "failed"),
        "provenance": _provenance(exp_rows),
        "sentinel": _sentinel(exp_rows, fig_dir, exp),
        "sources": _records(sources.head(LISTED)),
        "n_sources": len(sources),
        "sources_csv": _table_csv(sources, fig_dir, exp, "sources"),
    }


# -- paper figures -------------------------------------------------------------------------------------

UNAVAILABLE = ("unsupported",)
#: processes drawing the figures (the report of every archive draws about 200: two minutes on one core)
REPORT_WORKERS = max(1, min(2, os.cpu_count() or 1))
#: lines of a long table on the page (failed units, generated sources); all of them are in its CSV
LISTED = 100


def figure_experiments(fig: PaperFigure, summary: pd.DataFrame) -> list[str]:
    """The experiments a figure reads: its own list, else its claim's ``experiment`` or prefix."""
    if fig.experiments:
        return list(fig.experiments)
    meta = CLAIMS.get(fig.name, {})
    if "experiment" in meta:
        return [str(meta["experiment"])]
    if "experiment_prefix" in meta and not summary.empty:
        names = summary["experiment"].dropna().unique()
        return sorted(str(e) for e in names if str(e).startswith(str(meta["experiment_prefix"])))
    return []


def unit_counts(summary: pd.DataFrame) -> dict[str, int]:
    """Measurement units by outcome: ok, wrong (failed the semantic check), unavailable (e.g. an ISA or
    library this machine lacks), failed (crash, timeout, compile error...)."""
    status = summary["status"] if not summary.empty else pd.Series(dtype="object")
    return {
        "total": int(len(status)),
        "ok": int((status == "ok").sum()),
        "wrong": int((status == "wrong").sum()),
        "unavailable": int(status.isin(UNAVAILABLE).sum()),
        "failed": int((~status.isin(["ok", "wrong", *UNAVAILABLE])).sum()),
    }


def complete_figure(fig: PaperFigure, summary: pd.DataFrame) -> PaperFigure:
    """Fill what a builder left empty from the summary: experiments, timing mode, candidate counts."""
    fig.experiments = figure_experiments(fig, summary)
    part = summary[
        summary["experiment"].isin(fig.experiments) & (summary["machine_fingerprint"] == fig.machine)
    ]
    if not fig.counts:
        fig.counts = unit_counts(part)
    if not fig.timing_mode and not part.empty:
        fig.timing_mode = ", ".join(sorted(map(str, part["timing_mode"].dropna().unique())))
    return fig


def _verdict_counts(figures: list[PaperFigure]) -> dict[str, int]:
    out = {"reproduced": 0, "partial": 0, "differs": 0}
    for f in figures:
        out[f.verdict] = out.get(f.verdict, 0) + 1
    return out


# -- figures -------------------------------------------------------------------------------------------


def _slug(text: str, n: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_.")[:n] or "x"


# -- tables --------------------------------------------------------------------------------------------


def _display_labels(summary: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Labels that are unique per experiment: candidates differing only in target ISA share a label."""
    if summary.empty:
        return {}
    # the first line of each (experiment, candidate), found by their codes: hashing 260 000 pairs of strings
    # (drop_duplicates, duplicated over tuples) took 5 s of every archive's report
    experiment, key = summary["experiment"].factorize()[0], summary["candidate_key"].factorize()[0]
    first = np.unique(experiment.astype(np.int64) * (int(key.max()) + 1) + key, return_index=True)[1]
    cands = summary[["experiment", "candidate_key", "label", "target"]].iloc[np.sort(first)]
    label = cands["label"].fillna(cands["candidate_key"]).astype(str)
    with_target = label + " [" + cands["target"].fillna("?").astype(str) + "]"
    multi = pd.DataFrame({"e": cands["experiment"], "l": label}).duplicated(keep=False).to_numpy()
    still = pd.DataFrame({"e": cands["experiment"], "l": with_target}).duplicated(keep=False).to_numpy()
    keys = cands["candidate_key"].astype(str)
    shown = label.where(~multi, with_target.where(~still, with_target + " #" + keys.str[:6]))
    pairs = zip(cands["experiment"].tolist(), keys.tolist(), strict=True)
    return dict(zip(pairs, shown.tolist(), strict=True))


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame``'s lines as dicts of plain values, None where missing."""
    names = list(frame.columns)
    lines = zip(*(analysis.present(frame[c]) for c in names), strict=True)
    return [dict(zip(names, line, strict=True)) for line in lines]


def _stem(experiment: str, *details: str) -> str:
    """A file name of an experiment's figure or table: readable, and unique by a hash of all its parts
    (slugs of two experiment names may agree)."""
    tag = hashlib.sha256("\0".join([experiment, *details]).encode()).hexdigest()[:8]
    return "-".join([_slug(experiment), *(_slug(d) for d in details), tag])


def _table_csv(frame: pd.DataFrame, fig_dir: Path, experiment: str, *details: str) -> str:
    """Write ``frame`` as the CSV of one of an experiment's tables; its path relative to the report."""
    path = fig_dir / f"{_stem(experiment, *details)}.csv"
    store.write_csv(frame.drop(columns=list(_ROUND_COLUMNS), errors="ignore"), path)
    return f"{fig_dir.name}/{path.name}"


def _summary_by_machine(summary: pd.DataFrame, marked: pd.DataFrame, fig_dir: Path) -> list[dict[str, Any]]:
    """Summary lines split per machine, so no table ratio compares two CPUs. A table names the units the
    figure names (baselines and the best candidates of each facet, :func:`experiment_figure.mark_shown`)
    and the first :data:`LISTED` failed ones; every line is in its CSV."""
    out = []
    order = {
        "by": ["workload", "timing_mode", "pct_peak_median", "display"],
        "ascending": [True, True, False, True],
        "na_position": "last",
    }
    for fp, part in summary.groupby("machine_fingerprint", sort=True):
        part = part.sort_values(**order)
        named = marked[(marked["machine_fingerprint"] == fp) & marked["shown"]]
        listed = pd.concat([named, part[part["status"] != "ok"].head(LISTED)]).sort_values(**order)
        cpu = part["cpu_model"].dropna()
        out.append(
            {
                "fingerprint": fp,
                "cpu_model": cpu.iloc[0] if len(cpu) else "",
                "rows": _records(listed.reindex(columns=_TABLE_FIELDS)),
                "n_units": len(part),
                "csv": _table_csv(part, fig_dir, part["experiment"].iloc[0], fp, "summary"),
            }
        )
    return out


#: the summary fields the page's tables show (every field is in the tables' CSVs)
_TABLE_FIELDS = [
    *("display", "candidate_key", "flags", "workload", "timing_mode", "target", "status", "reason"),
    *("cpu_model", "machine_fingerprint", "flops", "n_reps", "cov", "gflops_median", "pct_peak_min"),
    *("pct_peak_median", "pct_peak_median_ci_low", "pct_peak_median_ci_high"),
    *("median_ns", "median_ci_low_ns", "median_ci_high_ns"),
]
#: the drift sentinel's ratio beyond which an experiment is flagged (sanity.max_peak_drift's default)
SENTINEL_DRIFT = 0.10


def _sentinel(rows: pd.DataFrame, fig_dir: Path, experiment: str) -> list[dict[str, Any]]:
    """Per machine, the drift sentinel over the run (harness/sentinel.py): the range of its two probes over
    the rows, whether either moved beyond :data:`SENTINEL_DRIFT`, and a plot of both against the time each
    row was written when either moved (144 plots of flat sentinels took 33 s of the report of every
    archive), their readings as a CSV always."""
    columns = [c for c in ("sentinel_ratio", "sentinel_cache_ratio") if c in rows]
    if not columns:
        return []
    out = []
    for fp, part in rows.dropna(subset=columns, how="all").groupby("machine_fingerprint"):
        ratios = part[columns].astype(float)
        lo, hi = float(ratios.min().min()), float(ratios.max().max())
        when = pd.to_datetime(part["timestamp"], utc=True, errors="coerce")
        stem = _stem(experiment, str(fp), "sentinel")
        moved = max(abs(lo - 1), abs(hi - 1)) > SENTINEL_DRIFT
        if moved:
            _draw_sentinel(when, ratios, fig_dir / f"{stem}.png")
        store.write_csv(ratios.assign(timestamp=when.to_numpy()), fig_dir / f"{stem}.csv")
        png = f"figures/{stem}.png" if moved else None
        out.append({"fingerprint": fp, "n": len(part), "lo": lo, "hi": hi, "moved": moved, "png": png,
                    "csv": f"figures/{stem}.csv"})  # fmt: skip
    return out


def _draw_sentinel(when: pd.Series, ratios: pd.DataFrame, png: Path) -> Path:
    """The sentinel's two probes (``ratios``' columns) against the time each row was written."""
    fig = Figure(figsize=(6, 2.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for col, name in zip(ratios.columns, ("peak probe", "cache probe"), strict=False):
        if ratios[col].notna().any():
            ax.plot(when, ratios[col], ".", ms=3, label=name)
    ax.axhspan(1 - SENTINEL_DRIFT, 1 + SENTINEL_DRIFT, color="0.9", zorder=0)
    ax.set(ylabel="sentinel / its first", xlabel="row written (UTC)")
    ax.legend(fontsize=7)
    fig.savefig(png, dpi=100, pil_kwargs=drawing.PNG)
    return png


def _unavailable_text(value: Any) -> str:
    if _isna(value) or value == "":
        return ""
    try:
        parsed = json.loads(value)
    except (TypeError, json.JSONDecodeError):
        return str(value)
    if isinstance(parsed, dict):
        return "; ".join(f"{k}: {v}" for k, v in parsed.items())
    return json.dumps(parsed)


def _provenance(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Distinct build/run settings of an experiment and how many rows used each."""
    # plain tuples counted (pandas' group-by over 15 columns cost 15 s over every archive's experiments)
    columns = [analysis.present(rows[c]) for c in PROVENANCE_COLUMNS]
    counts: dict[tuple[Any, ...], int] = {}
    for key, n in Counter(zip(*columns, strict=True)).items():
        key = tuple(_unavailable_text(v) if c == "counters_unavailable" else v
                    for c, v in zip(PROVENANCE_COLUMNS, key, strict=True))  # fmt: skip
        counts[key] = counts.get(key, 0) + n
    ordered = sorted(counts, key=lambda key: tuple(_sort_key(v) for v in key))
    return [{**dict(zip(PROVENANCE_COLUMNS, key, strict=True)), "n_rows": counts[key]} for key in ordered]


def _sort_key(value: Any) -> tuple[bool, bool, Any]:
    """Orders a column's values as a sort would, numbers before text and missing last, without comparing
    a number with a text."""
    if value is None:
        return (True, False, 0)
    if isinstance(value, bool | int | float):
        return (False, False, value)
    return (False, True, str(value))


def _sources(rows: pd.DataFrame, names: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Which generated source (hash) each candidate used on each workload."""
    src = rows[
        ["experiment", "candidate_key", "workload", "target", "source_hash", "status"]
    ].drop_duplicates(["candidate_key", "workload", "source_hash"])
    src = src.assign(
        display=[names.get((e, k), k) for e, k in zip(src["experiment"], src["candidate_key"], strict=True)]
    )
    return src.sort_values(["display", "workload"])


# -- machines ------------------------------------------------------------------------------------------


def _flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        items: list[tuple[str, Any]] = []
        for k, v in obj.items():
            items.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return items
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        items = []
        for i, v in enumerate(obj):
            items.extend(_flatten(v, f"{prefix}[{i}]"))
        return items
    if isinstance(obj, list):
        return [(prefix, ", ".join(map(str, obj)))]
    return [(prefix, obj)]


def _bytes_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


_CACHE_KEY = re.compile(r"(cache|^l[1-4]|\.l[1-4]|llc)", re.IGNORECASE)


def _cache_lines(info: dict[str, Any]) -> list[tuple[str, str]]:
    """``L1d: 32 KiB, 8-way`` lines from harness.machine's cache list (empty if the shape differs)."""
    out = []
    for c in info.get("caches") or []:
        if not isinstance(c, dict) or "level" not in c or "size_bytes" not in c:
            return []
        kind = {"Data": "d", "Instruction": "i"}.get(str(c.get("type")), "")
        ways = f", {c['ways']}-way" if c.get("ways") else ""
        out.append((f"L{c['level']}{kind}", f"{_bytes_text(c['size_bytes'])}{ways}"))
    return out


def _machines(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per machine fingerprint: CPU, ISA, calibrated peaks per ISA, caches, all details."""
    out: list[dict[str, Any]] = []
    if df.empty:
        return out
    fp = "machine_fingerprint"
    # a few columns at a time: a copy of every row per machine was 300 MB for every archive's report
    first = df.dropna(subset=["machine"]).drop_duplicates(fp).set_index(fp)["machine"]
    cpus = df.dropna(subset=["cpu_model"]).drop_duplicates(fp).set_index(fp)["cpu_model"]
    # library calls ("any") are measured against the best ISA's peak: list each ISA's peak once
    isa_rows = df.loc[df["target"] != "any", [fp, "target", "peak_gflops"]].dropna(subset=["peak_gflops"])
    peaks = isa_rows.groupby([fp, "target"])["peak_gflops"].median()
    targets = df[[fp, "target"]].dropna().drop_duplicates()
    experiments = df[[fp, "experiment"]].drop_duplicates()
    for name in sorted(df[fp].dropna().unique()):
        try:
            info = json.loads(first[name]) if name in first.index else {}
        except json.JSONDecodeError:
            info = {"machine": first[name]}
        if not isinstance(info, dict):
            info = {"machine": info}
        flat = _flatten(info)
        isa = info.get("isas", info.get("isa"))
        if isinstance(isa, list):
            isa = ", ".join(map(str, isa))
        if not isa:
            isa = ", ".join(sorted(t for t in targets.loc[targets[fp] == name, "target"] if t != "any"))
        caches = _cache_lines(info) or [(k, _bytes_text(v)) for k, v in flat if _CACHE_KEY.search(k)]
        known = all(k in info for k in ("vendor", "family", "model"))
        out.append(
            {
                "fingerprint": name,
                "cpu_model": cpus.get(name, ""),
                "microarchitecture": microarchitecture(info["vendor"], info["family"], info["model"])
                if known
                else None,
                "isa": isa or "",
                "peaks": sorted(peaks[name].items()) if name in peaks.index.get_level_values(0) else [],
                "caches": caches,
                "details": [(k, "" if v is None else str(v)) for k, v in flat],
                "experiments": sorted(experiments.loc[experiments[fp] == name, "experiment"]),
            }
        )
    return out


# -- formatting ----------------------------------------------------------------------------------------


def _isna(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _num(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    """Jinja filter: ``value * scale`` in fixed point, an en dash for missing/NaN."""
    if _isna(value):
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    v *= scale
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    return f"{v:.{digits}f}"


def _sig(value: Any, digits: int = 3) -> str:
    """Jinja filter: ``digits`` significant figures (ratios and counts read better than fixed point)."""
    if _isna(value):
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    return f"{v:.{digits}g}"


def _time_span(df: pd.DataFrame) -> tuple[str, str] | None:
    ts = df["timestamp"].dropna() if "timestamp" in df else pd.Series(dtype="object")
    return (str(ts.min()), str(ts.max())) if len(ts) else None


def pdf_documents(html: Path) -> list[Any]:
    """WeasyPrint renderings of the report's pages in PDF order: the index, then the provenance page."""
    import weasyprint

    pages = [Path(html), Path(html).with_name("provenance.html")]
    return [weasyprint.HTML(filename=str(p)).render() for p in pages if p.is_file()]


def build_pdf(html: Path) -> Path:
    """The same report as one PDF next to the HTML: the index, then the provenance page."""
    docs = pdf_documents(html)
    pdf = Path(html).with_name("report.pdf")
    tmp = pdf.with_suffix(".pdf.tmp")
    docs[0].copy([page for doc in docs for page in doc.pages]).write_pdf(str(tmp))
    tmp.replace(pdf)
    return pdf
