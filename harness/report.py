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
import re
import shutil
from pathlib import Path
from typing import Any

import matplotlib
import pandas as pd
import seaborn as sns
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness import analysis, provenance, store
from reports.figures import CLAIMS, PaperFigure, paper_figures

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
    """Load the stored rows (optionally only ``experiments``) and write the report; return index.html."""
    df = store.load(Path(results_dir))
    if experiments is not None:
        df = df[df["experiment"].isin(experiments)].reset_index(drop=True)
    return render_report(df, Path(out_dir), title=title, results_dir=Path(results_dir))


def render_report(
    df: pd.DataFrame,
    out_dir: Path,
    title: str = DEFAULT_TITLE,
    templates_dir: Path = TEMPLATES_DIR,
    results_dir: Path | None = None,
) -> Path:
    """Write index.html, provenance.html, style.css and figures/ for the rows in ``df`` (store schema).

    ``results_dir`` (optional) is where the calibration cache is read for the provenance page.
    """
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    summary = analysis.summarize(df)
    reps = analysis.repetitions(df)
    names = _display_labels(summary)
    if not summary.empty:
        summary["display"] = [
            names[(e, k)] for e, k in zip(summary["experiment"], summary["candidate_key"], strict=True)
        ]
    if not reps.empty:
        reps["display"] = [
            names[(e, k)] for e, k in zip(reps["experiment"], reps["candidate_key"], strict=True)
        ]

    experiments = []
    for exp in sorted(df["experiment"].dropna().unique()) if not df.empty else []:
        exp_rows = df[df["experiment"] == exp]
        exp_summary = summary[summary["experiment"] == exp]
        figures = []
        for fp in sorted(exp_rows["machine_fingerprint"].unique()):
            fig_reps = reps[(reps["experiment"] == exp) & (reps["machine_fingerprint"] == fp)]
            if not fig_reps.empty:
                figures.append(_figure(fig_reps, fig_dir, exp, fp))
        experiments.append(
            {
                "name": exp,
                "anchor": f"exp-{_slug(exp, 80)}",
                "counts": unit_counts(exp_summary),
                "figures": figures,
                "machines": _summary_by_machine(exp_summary),
                "failed": _records(
                    exp_summary[exp_summary["status"] != "ok"].sort_values(
                        ["machine_fingerprint", "workload", "display"]
                    )
                ),
                "provenance": _provenance(exp_rows),
                "sources": _sources(exp_rows, names),
            }
        )

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
    builder_errors: list[tuple[str, str]] = []
    figures = sorted(
        (complete_figure(f, summary) for f in paper_figures(summary, fig_dir, builder_errors, results_dir)),
        key=lambda f: (f.paper, f.name, f.cpu_model, f.machine),
    )
    # (anchor, figure): the verdict table links to each figure's section
    anchored = [(f"fig-{i}-{_slug(f.name)}", f) for i, f in enumerate(figures, 1)]
    machines = _machines(df)
    common = {"title": title, "n_rows": len(df), "time_span": _time_span(df), "machines": machines}
    html = env.get_template("index.html.j2").render(
        **common,
        experiments=experiments,
        paper_figures=anchored,
        verdicts=_verdict_counts(figures),
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


# -- paper figures -------------------------------------------------------------------------------------

UNAVAILABLE = ("unsupported",)


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


def _figure(reps: pd.DataFrame, fig_dir: Path, experiment: str, fingerprint: str) -> dict[str, str]:
    """One PNG per (experiment, machine): facets per workload x timing mode, a dot per repetition + median."""
    tag = hashlib.sha256(f"{experiment}\0{fingerprint}".encode()).hexdigest()[:8]
    stem = f"{_slug(experiment)}-{_slug(fingerprint, 12)}-{tag}"
    workloads = sorted(reps["workload"].unique())
    modes = sorted(reps["timing_mode"].unique())
    kinds = sorted(reps["candidate_kind"].dropna().unique())
    palette = dict(zip(kinds, sns.color_palette("deep", len(kinds)), strict=True))
    n_labels = [max(reps.loc[reps["workload"] == w, "display"].nunique(), 1) for w in workloads]
    xmax = max(105.0, float(reps["pct_peak"].max()) * 1.05) if reps["pct_peak"].notna().any() else 105.0
    cpu = reps["cpu_model"].dropna().iloc[0] if reps["cpu_model"].notna().any() else "unknown CPU"
    # The y labels are whole schemes (a conv scheme runs to 150+ characters): a fixed width left the axes
    # no room, and constrained layout gave up and cut the labels off.
    label_inches = max(4.5, 0.07 * int(reps["display"].astype(str).str.len().max()))

    with matplotlib.rc_context({"text.parse_math": False}), sns.axes_style("whitegrid"):
        fig = Figure(
            figsize=(4.2 * len(modes) + label_inches, sum(0.32 * n + 1.1 for n in n_labels) + 0.8),
            layout="constrained",
        )
        FigureCanvasAgg(fig)
        axes = fig.subplots(
            len(workloads),
            len(modes),
            squeeze=False,
            gridspec_kw={"height_ratios": [0.32 * n + 1.1 for n in n_labels]},
        )
        for i, workload in enumerate(workloads):
            for j, mode in enumerate(modes):
                ax = axes[i][j]
                facet = reps[(reps["workload"] == workload) & (reps["timing_mode"] == mode)]
                ax.set_title(f"{workload} · {mode} cache", fontsize=10)
                ax.set_xlim(0, xmax)
                ax.axvline(100.0, color="0.4", linestyle="--", linewidth=1)
                ax.set_xlabel("% of calibrated peak" if i == len(workloads) - 1 else "")
                ax.set_ylabel("")
                if facet.empty:
                    ax.text(0.5, 0.5, "no ok candidate", ha="center", va="center", transform=ax.transAxes)
                    ax.set_yticks([])
                    continue
                order = (
                    facet.groupby("display")["pct_peak"].median().sort_values(ascending=False).index.tolist()
                )
                sns.stripplot(
                    data=facet,
                    x="pct_peak",
                    y="display",
                    order=order,
                    hue="candidate_kind",
                    hue_order=kinds,
                    palette=palette,
                    size=3.5,
                    alpha=0.55,
                    jitter=0.25,
                    legend=False,
                    ax=ax,
                )
                sns.pointplot(
                    data=facet,
                    x="pct_peak",
                    y="display",
                    order=order,
                    estimator="median",
                    errorbar=None,
                    color="black",
                    marker="D",
                    markersize=5,
                    linestyle="none",
                    ax=ax,
                )
                ax.set_ylabel("")
                ax.set_xlabel("% of calibrated peak" if i == len(workloads) - 1 else "")
                ax.tick_params(axis="y", labelsize=8)
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
            for k in kinds
        ]
        handles.append(Line2D([], [], marker="D", linestyle="none", color="black", label="median"))
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
        fig.suptitle(f"{experiment} — {cpu} ({fingerprint[:12]})", fontsize=11)
        png = fig_dir / f"{stem}.png"
        fig.savefig(png, dpi=110)

    csv = fig_dir / f"{stem}.csv"
    reps.drop(columns=["display"]).assign(display_label=reps["display"]).to_csv(csv, index=False)
    return {
        "png": f"figures/{png.name}",
        "csv": f"figures/{csv.name}",
        "machine_fingerprint": fingerprint,
        "cpu_model": str(cpu),
    }


# -- tables --------------------------------------------------------------------------------------------


def _display_labels(summary: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Labels that are unique per experiment: candidates differing only in target ISA share a label."""
    names: dict[tuple[str, str], str] = {}
    if summary.empty:
        return names
    cands = summary.drop_duplicates(["experiment", "candidate_key"])[
        ["experiment", "candidate_key", "label", "target"]
    ].copy()
    cands["label"] = cands["label"].fillna(cands["candidate_key"]).astype(str)
    for _, group in cands.groupby(["experiment", "label"]):
        multi = len(group) > 1
        with_target = group["label"] + " [" + group["target"].fillna("?").astype(str) + "]"
        still_multi = with_target.duplicated(keep=False)
        for (_, row), wt, dup in zip(group.iterrows(), with_target, still_multi, strict=True):
            name = row["label"]
            if multi:
                name = f"{wt} #{row['candidate_key'][:6]}" if dup else wt
            names[(row["experiment"], row["candidate_key"])] = name
    return names


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if _isna(v) else v) for k, v in rec.items()} for rec in frame.to_dict("records")]


def _summary_by_machine(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """Summary lines split per machine, so no table ratio compares two CPUs."""
    out = []
    for fp, part in summary.groupby("machine_fingerprint", sort=True):
        part = part.sort_values(
            ["workload", "timing_mode", "pct_peak_median", "display"],
            ascending=[True, True, False, True],
            na_position="last",
        )
        cpu = part["cpu_model"].dropna()
        out.append({"fingerprint": fp, "cpu_model": cpu.iloc[0] if len(cpu) else "", "rows": _records(part)})
    return out


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
    prov = rows[PROVENANCE_COLUMNS].copy()
    prov["counters_unavailable"] = prov["counters_unavailable"].map(_unavailable_text)
    prov = prov.astype("object").where(prov.notna(), None)
    grouped = prov.groupby(PROVENANCE_COLUMNS, dropna=False, sort=True).size().reset_index(name="n_rows")
    return _records(grouped)


def _sources(rows: pd.DataFrame, names: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Which generated source (hash) each candidate used on each workload."""
    src = rows[
        ["experiment", "candidate_key", "workload", "target", "source_hash", "status"]
    ].drop_duplicates(["candidate_key", "workload", "source_hash"])
    src = src.assign(
        display=[names.get((e, k), k) for e, k in zip(src["experiment"], src["candidate_key"], strict=True)]
    )
    return _records(src.sort_values(["display", "workload"]))


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
    out = []
    if df.empty:
        return out
    for fp, rows in df.groupby("machine_fingerprint", sort=True):
        raw = rows["machine"].dropna()
        try:
            info = json.loads(raw.iloc[0]) if len(raw) else {}
        except json.JSONDecodeError:
            info = {"machine": raw.iloc[0]}
        if not isinstance(info, dict):
            info = {"machine": info}
        flat = _flatten(info)
        isa = info.get("isas", info.get("isa"))
        if isinstance(isa, list):
            isa = ", ".join(map(str, isa))
        if not isa:
            isa = ", ".join(sorted(t for t in rows["target"].dropna().unique() if t != "any"))
        # library calls ("any") are measured against the best ISA's peak: list each ISA's peak once
        isa_rows = rows[rows["target"] != "any"].dropna(subset=["peak_gflops"])
        peaks = isa_rows.groupby("target")["peak_gflops"].median().sort_index().items()
        caches = _cache_lines(info) or [(k, _bytes_text(v)) for k, v in flat if _CACHE_KEY.search(k)]
        cpu = rows["cpu_model"].dropna()
        out.append(
            {
                "fingerprint": fp,
                "cpu_model": cpu.iloc[0] if len(cpu) else "",
                "isa": isa or "",
                "peaks": [(t, p) for t, p in peaks],
                "caches": caches,
                "details": [(k, "" if v is None else str(v)) for k, v in flat],
                "experiments": sorted(rows["experiment"].unique()),
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
