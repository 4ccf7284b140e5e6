"""Paper figures: for each reproduced figure, our plot, the statistic compared with the paper's claim,
and an automatic verdict. Claims (text and numbers) are data in ``reports/claims/*.yaml``.

Figures are plug-ins: this module holds the seed-000 foundation figures; every module ``reports/fig_*.py``
adds its own by defining ``FIGURES`` (a list of builders ``(summary, out_dir) -> list[PaperFigure]``)
and its claims in ``reports/claims/<topic>.yaml``.

A figure is built per machine (reports never mix machines in one ratio) from the summary of the result
store (``harness.analysis.summarize``); a figure whose experiment has no rows is simply absent.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import pkgutil
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
import yaml  # noqa: E402

from harness import studies  # noqa: E402


def _load_claims() -> dict[str, Any]:
    claims: dict[str, Any] = {}
    for path in [*sorted((Path(__file__).parent / "claims").glob("*.yaml")), *studies.files("claims.yaml")]:
        part = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if clash := set(part) & set(claims):
            raise ValueError(f"{path.name}: claims {sorted(clash)} are already defined in another file")
        claims.update(part)
    return claims


CLAIMS = _load_claims()


@dataclass
class PaperFigure:
    """One reproduced figure on one machine: the paper's side (from the claims) beside ours.

    The fields after ``table`` are optional so plug-ins written before them keep working; the report
    fills ``experiments`` (from the claims), ``timing_mode`` and the candidate counts when a builder leaves
    them empty, and shows ``ratio`` wherever both ``ours`` and ``paper_value`` are numbers.
    """

    name: str
    machine: str  # fingerprint
    cpu_model: str
    paper: str
    where: str
    claim: str
    measured: str  # our result, in words, with its numbers
    verdict: str  # reproduced | partial | differs
    statistic: str  # how the verdict was decided
    image: str | None = None  # relative to the report directory
    csv: str | None = None
    table: list[dict[str, Any]] = field(default_factory=list)
    ours: float | None = None  # our headline number (the one compared with the paper's)
    ours_ci: tuple[float, float] | None = None  # its 95% confidence interval
    paper_value: float | None = None  # the paper's number in the same unit, when it gave one
    unit: str = ""  # unit of ours / paper_value, e.g. "% of peak" or "x speed-up"
    paper_text: str = ""  # the paper's number in words (e.g. "45% -> 90%"); defaults to the claims'
    experiments: list[str] = field(default_factory=list)  # experiments the figure reads
    timing_mode: str = ""  # hot | cold | "hot, cold"
    counts: dict[str, int] = field(default_factory=dict)  # units: total, ok, wrong, unavailable, failed

    @property
    def ratio(self) -> float | None:
        """ours / paper_value, when both are numbers (None otherwise)."""
        if self.ours is None or not self.paper_value or _nan(self.ours):
            return None
        return float(self.ours) / float(self.paper_value)

    @property
    def ratio_ci(self) -> tuple[float, float] | None:
        """The CI of ours divided by the paper's number (the paper's is taken as exact)."""
        if self.ratio is None or self.ours_ci is None or any(_nan(v) for v in self.ours_ci):
            return None
        lo, hi = self.ours_ci
        return float(lo) / float(self.paper_value), float(hi) / float(self.paper_value)  # type: ignore[arg-type]


def _nan(value: object) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def paper_figure(name: str, fp: object, part: pd.DataFrame, **measured: Any) -> PaperFigure:
    """A figure of ``name`` on machine ``fp``: the paper's side from the claims, ours from ``measured``.

    Claims may carry ``paper_text`` (the paper's number in words) and ``experiment``; both become
    defaults of the figure. ``timing_mode`` defaults to the modes present in ``part``.
    """
    meta = CLAIMS[name]
    cpu = str(part["cpu_model"].iloc[0])
    measured.setdefault("paper_text", str(meta.get("paper_text", "")))
    if "experiment" in meta:
        measured.setdefault("experiments", [meta["experiment"]])
    if "timing_mode" in part:
        measured.setdefault("timing_mode", ", ".join(sorted(map(str, part["timing_mode"].dropna().unique()))))
    return PaperFigure(name, str(fp), cpu, meta["paper"], meta["where"], meta["claim"], **measured)


def mean_ci(values: Any, level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of a mean (NaN, NaN below two values): summaries over sizes are means of medians."""
    import numpy as np
    from scipy import stats

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return float("nan"), float("nan")
    if np.all(v == v[0]):
        return float(v[0]), float(v[0])
    lo, hi = stats.t.interval(level, v.size - 1, loc=v.mean(), scale=stats.sem(v))
    return float(lo), float(hi)


def ok_rows(summary: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return summary[(summary["experiment"] == experiment) & (summary["status"] == "ok")].copy()


def save_figure(fig: plt.Figure, data: pd.DataFrame, out_dir: Path, stem: str) -> tuple[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{stem}.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data.to_csv(out_dir / f"{stem}.csv", index=False)
    return f"figures/{stem}.png", f"figures/{stem}.csv"


def hoisting(summary: pd.DataFrame, out_dir: Path) -> list[PaperFigure]:
    """§4.3: every scheme measured with hoisting on and off; the ratio of their median % of peak."""
    meta = CLAIMS["ttile_s4_3_hoisting"]
    ok = ok_rows(summary, meta["experiment"])
    ok = ok[(ok["candidate_kind"] == "scheme") & (ok["timing_mode"] == "hot")]
    figures = []
    for fp, part in ok.groupby("machine_fingerprint"):
        part = part.assign(
            scheme=part["label"].str.replace(r" \(.*\)$", "", regex=True),
            hoisted=~part["label"].str.contains("hoist=False", regex=False),
        )
        pairs = part.pivot_table(index="scheme", columns="hoisted", values="pct_peak_median", aggfunc="first")
        if True not in pairs or False not in pairs:
            continue
        pairs = pairs.dropna().rename(columns={True: "hoisted", False: "not hoisted"}).reset_index()
        if pairs.empty:
            continue
        pairs["ratio"] = pairs["hoisted"] / pairs["not hoisted"]
        # CIs of both medians, and the ratio's interval from their extreme quotients (conservative)
        for col, is_hoisted in (("hoisted", True), ("not hoisted", False)):
            side = part[part["hoisted"] == is_hoisted].drop_duplicates("scheme").set_index("scheme")
            for b in ("low", "high"):
                pairs[f"{col} ci {b}"] = pairs["scheme"].map(side[f"pct_peak_median_ci_{b}"]).astype(float)
        pairs["ratio ci low"] = pairs["hoisted ci low"] / pairs["not hoisted ci high"]
        pairs["ratio ci high"] = pairs["hoisted ci high"] / pairs["not hoisted ci low"]
        best = pairs.loc[pairs["hoisted"].idxmax()]
        long = pairs.melt(id_vars="scheme", value_vars=["not hoisted", "hoisted"], value_name="pct")
        fig, ax = plt.subplots(figsize=(9, 0.8 + 0.5 * len(pairs)))
        sns.barplot(data=long, y="scheme", x="pct", hue="hoisted", ax=ax, palette=["#bbbbbb", "#2b6cb0"])
        for value, color in (
            (meta["paper_numbers"]["with"], "#2b6cb0"),
            (meta["paper_numbers"]["without"], "#888"),
        ):
            ax.axvline(value, ls="--", c=color, lw=1)
        ax.set(
            xlabel="% of calibrated peak (median); dashed: the paper's 45% and 90%", ylabel="", xlim=(0, 105)
        )
        ax.legend(title="accumulators", loc="lower right")
        image, csv = save_figure(fig, pairs, out_dir, f"ttile_s4_3_hoisting-{fp}")
        paper_ratio = meta["paper_numbers"]["with"] / meta["paper_numbers"]["without"]
        table = pairs[
            ["scheme", "not hoisted", "not hoisted ci low", "not hoisted ci high"]
            + ["hoisted", "hoisted ci low", "hoisted ci high", "ratio", "ratio ci low", "ratio ci high"]
        ]
        reproduced = best["hoisted"] >= 80.0 and best["ratio"] >= 1.5
        figures.append(
            paper_figure(
                "ttile_s4_3_hoisting",
                fp,
                part,
                measured=(
                    f"best scheme {best['scheme']}: {best['hoisted']:.1f}% of peak hoisted vs "
                    f"{best['not hoisted']:.1f}% not hoisted "
                    f"(x{best['ratio']:.2f}; the paper's x{paper_ratio:.1f})"
                ),
                verdict="reproduced" if reproduced else "differs",
                statistic="median % of calibrated peak; reproduced if the best hoisted scheme reaches 80% "
                "and at least 1.5x its unhoisted twin",
                image=image,
                csv=csv,
                table=table.round(2).to_dict("records"),
                ours=float(best["ratio"]),
                ours_ci=(float(best["ratio ci low"]), float(best["ratio ci high"])),
                paper_value=paper_ratio,
                paper_text=f"{meta['paper_numbers']['without']:g}% -> {meta['paper_numbers']['with']:g}% of "
                f"peak (x{paper_ratio:.1f})",
                unit="x (hoisted / not hoisted, best scheme)",
            )
        )
    return figures


SERIES = ("combination of microkernels", "single microkernel + partial tile", "single microkernel + padding")


def fig5_6_series(label: str, kind: str) -> str:
    """The Fig 5.6 series a candidate belongs to (libraries are their own series)."""
    if kind == "baseline":
        return label
    if "partial=masked" in label:
        return SERIES[1]
    if "partial=padded" in label:
        return SERIES[2]
    return SERIES[0]


def small_matmul(summary: pd.DataFrame, out_dir: Path) -> list[PaperFigure]:
    """Fig 5.6: the best candidate of each series per I; mean and spread over I per series."""
    meta = CLAIMS["ttile_fig5_6"]
    ok = ok_rows(summary, meta["experiment"])
    figures = []
    for fp, part in ok.groupby("machine_fingerprint"):
        series = [fig5_6_series(lbl, k) for lbl, k in zip(part["label"], part["candidate_kind"], strict=True)]
        sizes = part["workload"].str.extract(r"_i(\d+)$", expand=False).astype(float)
        part = part.assign(series=series, I=sizes).dropna(subset=["I"])
        if part.empty:
            continue
        best = part.loc[part.groupby(["series", "I"])["pct_peak_median"].idxmax()]
        best = best[["series", "I", "label", "pct_peak_median"]]
        stats = best.groupby("series")["pct_peak_median"].agg(["mean", "std", "min", "count"]).reset_index()
        cis = {k: mean_ci(v) for k, v in best.groupby("series")["pct_peak_median"]}
        stats["mean ci low"] = [cis[k][0] for k in stats["series"]]
        stats["mean ci high"] = [cis[k][1] for k in stats["series"]]
        stats = stats.sort_values("mean", ascending=False)
        order = [s for s in SERIES if s in set(best["series"])] + sorted(set(best["series"]) - set(SERIES))
        fig, ax = plt.subplots(figsize=(9, 4.5))
        sns.lineplot(data=best, x="I", y="pct_peak_median", hue="series", hue_order=order, marker="o", ax=ax)
        ax.set(xlabel="I (J = K = 128)", ylabel="% of calibrated peak (median)", ylim=(0, 105))
        ax.legend(fontsize=8, loc="lower right")
        image, csv = save_figure(fig, best, out_dir, f"ttile_fig5_6-{fp}")
        comb = stats[stats["series"] == SERIES[0]]
        libs = stats[~stats["series"].isin(SERIES)]
        verdict, measured = "differs", "no combination series measured"
        ours: dict[str, Any] = {}
        if not comb.empty:
            c = comb.iloc[0]
            ours = dict(ours=float(c["mean"]), ours_ci=(float(c["mean ci low"]), float(c["mean ci high"])))
            measured = (
                f"combination: mean {c['mean']:.1f}% (sd {c['std']:.1f}) over {int(c['count'])} sizes of I"
            )
            if not libs.empty:
                top = libs.iloc[0]
                measured += f"; best library {top['series']}: mean {top['mean']:.1f}% (sd {top['std']:.1f})"
                above = c["mean"] >= top["mean"]
                steadiest = c["std"] <= stats["std"].min() + 1e-9
                verdict = "reproduced" if above and steadiest else "partial" if above else "differs"
        figures.append(
            paper_figure(
                "ttile_fig5_6",
                fp,
                part,
                measured=measured,
                verdict=verdict,
                statistic="per I the best candidate of each series (median % of peak); over I the mean "
                "(95% t-interval) and standard deviation; reproduced if the combination's mean is at least "
                "the best library's and its spread the smallest, partial if only the mean holds",
                image=image,
                csv=csv,
                table=stats.round(2).to_dict("records"),
                unit="% of peak (combination, mean over I)",
                paper_text="no number: combination >= libraries on average, least variation over I",
                **ours,
            )
        )
    return figures


def _unrolls(label: str) -> dict[str, int]:
    return {d: int(n) for n, d in re.findall(r"U_\{(\d+),(\w+)\}", label)}


def microkernel_slice(summary: pd.DataFrame, out_dir: Path) -> list[PaperFigure]:
    """Fig 5.2: isolated conv microkernels of the slice uc = uh = ur = us = 1, heatmap over (uk, uw)."""
    from harness.microbench import plot_fig5_2

    meta = CLAIMS["ttile_fig5_2"]
    threshold = meta["paper_numbers"]["threshold"]
    rows = summary[summary["experiment"].str.startswith(meta["experiment_prefix"])]
    figures = []
    for (exp, fp), part in rows.groupby(["experiment", "machine_fingerprint"]):
        u = pd.DataFrame([_unrolls(lbl) for lbl in part["label"]], index=part.index)
        sl = part.join(u.reindex(columns=["k", "w", "c", "h", "r", "s"]).fillna(1).astype(int))
        sl = sl[(sl[["c", "h", "r", "s"]] == 1).all(axis=1)]
        if sl.empty:
            continue
        ok = sl["status"] == "ok"
        data = pd.DataFrame({
            "u_k": sl["k"], "u_w": sl["w"], "pct_peak_median": sl["pct_peak_median"].where(ok),
            "ci_low": sl["pct_peak_median_ci_low"].where(ok),
            "ci_high": sl["pct_peak_median_ci_high"].where(ok),
            "selected": ok & (sl["pct_peak_median"] >= threshold), "status": sl["status"],
        })  # fmt: skip
        # the count's interval: kernels surely above the threshold (CI low) to possibly above (CI high)
        n_sure = int((data["ci_low"].fillna(data["pct_peak_median"]) >= threshold).sum())
        n_maybe = int((data["ci_high"].fillna(data["pct_peak_median"]) >= threshold).sum())
        stem = f"ttile_fig5_2-{exp}-{fp}"
        plot_fig5_2(data, out_dir / f"{stem}.png", title=f"{exp} on {part['cpu_model'].iloc[0]}")
        n_sel, best = int(data["selected"].sum()), data.loc[data["pct_peak_median"].idxmax()]
        verdict = "reproduced" if n_sel >= 10 else "partial" if n_sel else "differs"
        figures.append(
            paper_figure(
                "ttile_fig5_2",
                fp,
                part,
                measured=(
                    f"{exp}: {len(data)} microkernels of the slice measured, {n_sel} at or above "
                    f"{threshold:g}% (selected); best uk={int(best['u_k'])}, uw={int(best['u_w'])} at "
                    f"{best['pct_peak_median']:.1f}%"
                ),
                verdict=verdict,
                statistic=f"median % of calibrated peak per microkernel; reproduced if at least ten reach "
                f"{threshold:g}% in the slice, partial if some do; the count's interval counts the kernels "
                "whose 95% CI lies above the threshold, and those whose CI reaches it",
                image=f"figures/{stem}.png",
                csv=f"figures/{stem}.csv",
                table=data[data["selected"]].round(1).to_dict("records"),
                ours=float(n_sel),
                ours_ci=(float(n_sure), float(n_maybe)),
                unit=f"microkernels at or above {threshold:g}% of peak",
                paper_text=f"'counted in tens' above {threshold:g}% of peak",
                experiments=[str(exp)],
            )
        )
    return figures


Builder = Callable[[pd.DataFrame, Path], list[PaperFigure]]
FIGURES: list[Builder] = [hoisting, microkernel_slice, small_matmul]


def all_builders(errors: list[tuple[str, str]] | None = None) -> list[Builder]:
    """This module's figures, then those of every ``reports/fig_*.py`` plug-in (sorted by module name), then
    every study's ``studies/<name>/figures.py`` (:mod:`harness.studies`).

    With ``errors`` (a list), a plug-in that cannot be imported is recorded there and skipped.
    """
    builders = list(FIGURES)
    package = Path(__file__).parent
    names = [f"reports.{m.name}" for m in sorted(pkgutil.iter_modules([str(package)]), key=lambda m: m.name)]
    for name in [n for n in names if n.startswith("reports.fig_")] + studies.modules("figures"):
        try:
            builders += importlib.import_module(name).FIGURES
        except Exception as exc:
            if errors is None:
                raise
            errors.append((name, f"{type(exc).__name__}: {exc}"))
    return builders


_RESULTS_DIR: ContextVar[Path | None] = ContextVar("results_dir", default=None)


def results_dir_of(out_dir: Path) -> Path:
    """The results directory whose report is being built (for builders that read more than the summary:
    cachegrind rows, simulations, selection files): the one given to :func:`paper_figures`, else the
    default layout ``<results>/report/figures``."""
    given = _RESULTS_DIR.get()
    return given if given is not None else Path(out_dir).resolve().parent.parent


def paper_figures(
    summary: pd.DataFrame,
    out_dir: Path,
    errors: list[tuple[str, str]] | None = None,
    results_dir: Path | None = None,
    workers: int = 1,
) -> list[PaperFigure]:
    """Every paper figure the results allow, one per figure and machine.

    With ``errors`` (a list), a builder that raises is recorded there as (builder, error) and the others
    still run, so one broken plug-in cannot hide every other figure of the report; without it, it raises.
    ``results_dir`` is what :func:`results_dir_of` gives the builders. ``workers`` > 1 runs the builders
    in that many forked processes (each draws its own PNGs: the report of every archive spends a minute
    drawing 100 figures), and returns the figures in the builders' order all the same.
    """
    if summary.empty:
        return []
    builders = all_builders() if errors is None else all_builders(errors)
    results = Path(results_dir).resolve() if results_dir is not None else None
    global _JOB
    _JOB = (builders, summary, Path(out_dir), results)
    try:
        if workers > 1 and len(builders) > 1 and "fork" in multiprocessing.get_all_start_methods():
            gc.freeze()  # a worker's collector would touch, and so copy, every page of the parent's objects
            try:
                with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                    outcomes = list(pool.map(_build_one, range(len(builders))))
            finally:
                gc.unfreeze()
        else:
            outcomes = [_build_one(i, reraise=errors is None) for i in range(len(builders))]
    finally:
        _JOB = None
    figures: list[PaperFigure] = []
    for name, built, error in outcomes:
        if error is None:
            figures += built
        elif errors is None:
            raise RuntimeError(f"figure builder {name} failed: {error}")
        else:
            errors.append((name, error))
    return figures


#: what the builders build from: (builders, summary, out_dir, results_dir), set before a fork
_JOB: tuple[list[Builder], pd.DataFrame, Path, Path | None] | None = None


def _build_one(i: int, reraise: bool = False) -> tuple[str, list[PaperFigure], str | None]:
    """Run builder ``i`` of :data:`_JOB`: (its name, its figures, None), or (its name, [], the error)
    unless ``reraise``."""
    assert _JOB is not None
    builders, summary, out_dir, results = _JOB
    build = builders[i]
    name = f"{build.__module__}.{build.__qualname__}"
    token = _RESULTS_DIR.set(results)
    try:
        return name, build(summary, out_dir), None
    except Exception as exc:
        plt.close("all")
        if reraise:
            raise
        return name, [], f"{type(exc).__name__}: {exc}"
    finally:
        _RESULTS_DIR.reset(token)
