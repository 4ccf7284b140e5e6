"""Seed 000 §4.3, compiler impact: gcc/clang x -O2/-O3 x FMA emission x hoisting on selected microkernels.

Rows come from ``harness compiler-study`` (experiments ``ttile_compiler-<cc>-<level>``, hoist/fma in the
candidate label). One figure and one table per machine: % of calibrated peak per configuration, a box
over the microkernels (their spread) with each microkernel's median and its bootstrap 95% CI.

The verdict checks the thesis's three statements on paired ratios (same microkernel, one switch changed):
  A. with FMA emitted, -O2 and -O3 are "on an equal footing": median O2/O3 ratio within 10% of 1;
  B. with mul + add emitted, -O2 is much slower than -O3 ("a huge difference"): median O2/O3 <= 0.8
     for at least one compiler (the thesis does not say which compiler showed it);
  C. hoisting in the generator improves some microkernels about 2x (45% -> 90%): the largest
     hoisted/unhoisted ratio (fma on) is >= 1.5.
A statement whose configurations were not measured is left out; reproduced = all measured ones hold,
partial = some, differs = none.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from reports.figures import CLAIMS, FigureContext, PaperFigure, paper_figure  # noqa: E402

NAME = "ttile_s4_3_compilers"
PREFIX = "ttile_compiler-"
EQUAL = 0.10  # A: |O2/O3 - 1| within this
SLOWER = 0.80  # B: O2/O3 at most this without FMA emission
HOIST_GAIN = 1.5  # C: hoisted / unhoisted at least this on some microkernel


def study_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """Ok, hot rows of the study with their configuration: cc, opt, fma, hoist, microkernel."""
    rows = summary[
        summary["experiment"].astype(str).str.startswith(PREFIX)
        & (summary["status"] == "ok")
        & (summary["timing_mode"] == "hot")
    ].copy()
    if rows.empty:
        return rows
    parts = rows["experiment"].str.removeprefix(PREFIX).str.rsplit("-", n=1, expand=True)
    label = rows["label"].astype(str)
    return rows.assign(
        cc=parts[0],
        opt=parts[1],
        fma=~label.str.contains("fma=False", regex=False),
        hoist=~label.str.contains("hoist=False", regex=False),
        microkernel=rows["workload"].astype(str).str.removeprefix("ukbench-"),
        pct=pd.to_numeric(rows["pct_peak_median"], errors="coerce"),
    )


def config_name(cc: str, opt: str, fma: bool, hoist: bool) -> str:
    return f"{cc} -{opt}\nfma {'on' if fma else 'off'}\nhoist {'on' if hoist else 'off'}"


def config_table(data: pd.DataFrame) -> pd.DataFrame:
    """One line per configuration: microkernels, median / min / max of their median % of peak, CI width."""
    keys = ["cc", "opt", "fma", "hoist"]
    width = data["pct_peak_median_ci_high"] - data["pct_peak_median_ci_low"]
    g = data.assign(ci_width=width).groupby(keys)
    out = g.agg(
        microkernels=("microkernel", "nunique"),
        median_pct=("pct", "median"),
        min_pct=("pct", "min"),
        max_pct=("pct", "max"),
        median_ci_width=("ci_width", "median"),
    ).reset_index()
    return out.sort_values(keys, ascending=[True, True, False, False]).reset_index(drop=True)


def _paired(data: pd.DataFrame, fixed: dict[str, Any], vary: str, num: Any, den: Any) -> pd.DataFrame:
    """Per (cc and the other keys, microkernel): pct at ``vary == num`` over pct at ``vary == den``."""
    sel = data
    for k, v in fixed.items():
        sel = sel[sel[k] == v]
    keys = [k for k in ("cc", "opt", "fma", "hoist") if k != vary and k not in fixed] + ["microkernel"]
    wide = sel.pivot_table(index=keys, columns=vary, values="pct", aggfunc="first")
    if num not in wide or den not in wide:
        return pd.DataFrame(columns=[*keys, "ratio"])
    wide = wide.dropna(subset=[num, den])
    return wide.assign(ratio=wide[num] / wide[den]).reset_index()


def checks(data: pd.DataFrame) -> list[tuple[str, bool, str]]:
    """(statement, holds, evidence) for each of A, B, C whose configurations were measured."""
    out = []
    a = _paired(data, {"fma": True, "hoist": True}, "opt", "O2", "O3")
    if len(a):
        med = a.groupby("cc")["ratio"].median()
        holds = bool((med.sub(1).abs() <= EQUAL).all())
        out.append(
            ("A: FMA emitted, -O2 = -O3", holds, ", ".join(f"{cc} O2/O3 x{r:.2f}" for cc, r in med.items()))
        )
    b = _paired(data, {"fma": False, "hoist": True}, "opt", "O2", "O3")
    if len(b):
        med = b.groupby("cc")["ratio"].median()
        holds = bool((med <= SLOWER).any())
        out.append(
            ("B: mul+add, -O2 << -O3", holds, ", ".join(f"{cc} O2/O3 x{r:.2f}" for cc, r in med.items()))
        )
    c = _paired(data, {"fma": True}, "hoist", True, False)
    if len(c):
        best = c.loc[c["ratio"].idxmax()]
        unaffected = float((c["ratio"] < 1.1).mean())
        out.append(
            (
                "C: hoisting ~2x on some",
                bool(best["ratio"] >= HOIST_GAIN),
                f"largest hoisted/unhoisted x{best['ratio']:.2f} ([{best['microkernel']}], {best['cc']} "
                f"-{best['opt']}: {best[False]:.0f}% -> {best[True]:.0f}%); "
                f"{unaffected:.0%} of pairs below x1.1",
            )
        )
    return out


def verdict_of(results: list[tuple[str, bool, str]]) -> str:
    """reproduced if every measured statement holds, partial if some do, differs if none."""
    held = sum(ok for _, ok, _ in results)
    return "reproduced" if held == len(results) else "partial" if held else "differs"


def plot(data: pd.DataFrame, title: str) -> plt.Figure:
    """Box over microkernels per configuration, each microkernel's median with its 95% CI."""
    data = data.sort_values(["cc", "opt", "fma", "hoist"], ascending=[True, True, False, False])
    data = data.assign(
        config=[config_name(*k) for k in zip(data.cc, data.opt, data.fma, data.hoist, strict=True)]
    )
    order = list(dict.fromkeys(data["config"]))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.75 * len(order) + 2), 4.8))
    sns.boxplot(data=data, x="config", y="pct", order=order, color="#dde6f0", fliersize=0, ax=ax, width=0.6)
    kernels = sorted(data["microkernel"].unique())
    palette = dict(zip(kernels, sns.color_palette("tab10", len(kernels)), strict=True))
    offsets = np.linspace(-0.2, 0.2, len(kernels)) if len(kernels) > 1 else [0.0]
    for off, mk in zip(offsets, kernels, strict=True):
        part = data[data["microkernel"] == mk]
        x = np.array([order.index(c) for c in part["config"]]) + off
        lo = (part["pct"] - part["pct_peak_median_ci_low"]).clip(lower=0)
        hi = (part["pct_peak_median_ci_high"] - part["pct"]).clip(lower=0)
        ax.errorbar(x, part["pct"], yerr=[lo.fillna(0), hi.fillna(0)], fmt="o", ms=4, capsize=2,
                    color=palette[mk], label=mk)  # fmt: skip
    for value, text in ((90, "90%"), (45, "45%")):
        ax.axhline(value, ls="--", lw=0.8, c="#888")
        ax.text(len(order) - 0.5, value, f" thesis {text}", va="center", fontsize=7, color="#666")
    ax.set(xlabel="", ylabel="% of calibrated peak (median; bars: 95% CI)", ylim=(0, 110), title=title)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(title="microkernel", fontsize=7, title_fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncol=min(4, len(kernels)))  # fmt: skip
    fig.tight_layout()
    return fig


def compilers(ctx: FigureContext) -> list[PaperFigure]:
    """One figure and table per machine (never two machines in one ratio)."""
    summary = ctx.summary
    meta = CLAIMS[NAME]
    data = study_frame(summary)

    def one(fp: str, part: pd.DataFrame) -> PaperFigure | None:
        results = checks(part)
        if not results:
            return None
        verdict = verdict_of(results)
        table = config_table(part)
        fig = plot(part, f"§4.3 compiler study on {part['cpu_model'].iloc[0]}")
        cols = ["microkernel", "cc", "opt", "fma", "hoist", "pct", "pct_peak_median_ci_low",
                "pct_peak_median_ci_high", "flags", "label", "experiment"]  # fmt: skip
        image, csv = ctx.save(fig, part[cols], f"{NAME}-{fp}")  # CSV: every plotted point
        ref = table[table["fma"] & table["hoist"]]
        best = ref.loc[ref["median_pct"].idxmax()] if len(ref) else None
        return paper_figure(
            NAME,
            fp,
            part,
            measured=(
                f"{part['microkernel'].nunique()} microkernel(s) x {len(table)} configuration(s). "
                + "; ".join(
                    f"{name}: {'holds' if ok else 'does not hold'} ({why})" for name, ok, why in results
                )
            ),
            verdict=verdict,
            statistic=(
                "paired ratios of median % of calibrated peak (same microkernel, one switch changed), "
                f"median over microkernels; A holds if O2/O3 is within {EQUAL:.0%} of 1 for every "
                f"compiler, B if O2/O3 <= {SLOWER} for some compiler, C if the largest hoisted/unhoisted "
                f"ratio is >= {HOIST_GAIN}; reproduced = every measured statement holds, partial = some"
            ),
            image=image,
            csv=csv,
            table=table.round(2).to_dict("records"),
            ours=float(best["median_pct"]) if best is not None else None,
            unit=f"% of peak, best configuration ({best['cc']} -{best['opt']}, fma+hoist)"
            if best is not None
            else "",
            paper_value=float(meta["paper_numbers"]["with"]),
            experiments=sorted(part["experiment"].unique()),
        )

    return ctx.per_machine(data, one)


FIGURES = [compilers]
