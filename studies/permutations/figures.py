"""Seed 004 (Papaphilippou) figures: loop-order signatures, winners, pairs, sorted speedups, cache
configurations, and the simulator's validation against measured time.

Simulated rows are read from ``<results>/permutations/sim/`` (:mod:`studies.permutations.study`); the results
directory is the report directory's parent (``<results>/report/figures`` -> ``<results>``), else
``./results``. Timed rows come from the summary. A figure is built per machine fingerprint: for simulated
rows the machine that ran the simulation (it matters for the ``host`` configuration, built from that
machine's caches), for timed rows the machine that measured them; simulation and timing are only put
side by side for the same machine.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from reports.figures import CLAIMS, FigureContext, PaperFigure, paper_figure
from studies.permutations import kernels as perm
from studies.permutations import study as permstudy

MAIN_CACHE = "loki"  # the thesis's configuration: headline numbers use it when present
DEFAULT_EXPERIMENT = "permutations"  # harness permutations's default --experiment (the harness's flags)


def _sim(ctx: FigureContext) -> pd.DataFrame:
    """Every stored simulation, read once per process while the files stay the same: seven figures read
    them (6 s each over every archive), and a report's worker builds several."""
    base = Path(ctx.results_dir) / permstudy.SIM_DIR
    stats = [(f, f.stat()) for f in sorted(base.rglob("*.parquet"))]
    files = tuple((str(f), st.st_mtime_ns, st.st_size) for f, st in stats)
    return pool_hosts(_load_sim(Path(ctx.results_dir), files).copy(deep=False), ctx.summary)


def pool_hosts(sim: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """``sim`` with each experiment's simulations of named cache configurations filed under one machine.

    A row carries the fingerprint of the host that ran the simulator, but only the ``host`` configuration
    (built from that machine's caches) depends on it: a run resumed on another host (Table 4.3's 108
    simulations, 39 on a Zen 3 and 69 on a Zen 4) would otherwise come out as two partial figures. The
    machine kept is the one that timed most of the experiment's orders (simulation and timing stay side by
    side), else the one that ran most of its simulations."""
    if sim.empty or "machine_fingerprint" not in sim:
        return sim
    named = sim["cache"] != "host"
    # masks over the summary, not a copy of its ok rows: that is the whole summary (230 MB, every archive)
    ok = summary["status"] == "ok" if "status" in summary else pd.Series(True, index=summary.index)
    fp_col, cpu_col = sim["machine_fingerprint"].astype(str), sim["cpu_model"].astype(str)
    # codes into each column's few distinct values, not arrays of 360 000 Python strings (60 MB of each
    # report worker that draws these figures, every archive)
    fp, fps = pd.factorize(fp_col)
    cpu, cpus = pd.factorize(cpu_col)
    moved = False
    for exp, part in fp_col[named].groupby(sim["experiment"][named]):
        counts = part.value_counts()
        if len(counts) < 2:
            continue
        keep = str(counts.idxmax())
        if len(summary):
            # the experiment's own timed rows (<exp>-<layer>, <exp>-t<N>-<layer>), not a longer name's
            mine = sim.loc[part.index, ["layer", "threads"]].drop_duplicates()
            names = {permstudy.timed_experiment_name(exp, la, th) for la, th in mine.itertuples(index=False)}
            t = summary.loc[ok & summary["experiment"].isin(names), "machine_fingerprint"]
            t_counts = t.astype(str).value_counts().reindex(counts.index).fillna(0)
            keep = str(t_counts.idxmax()) if t_counts.max() > 0 else keep
        rows = sim.index.get_indexer(part.index)
        fp[rows] = fps.get_loc(keep)
        cpu[rows] = cpu[rows[np.argmax((part == keep).to_numpy())]]
        moved = True
    if not moved:
        return sim
    # a shallow copy with two new columns: the cached frame underneath stays as loaded
    out = sim.copy(deep=False)
    out["machine_fingerprint"] = pd.Series(fps.take(fp), index=sim.index)
    out["cpu_model"] = pd.Series(cpus.take(cpu), index=sim.index)
    return out


#: the simulation columns no figure reads (provenance and the simulator's counts, kept in the stored
#: files): not held in memory, 150 MB of every archive's simulations in each report worker otherwise, and
#: the counts another 33 MB, copied again by each filter and group a figure takes
_UNREAD = ["sizes", "scheme", "cache_key", "cache_desc", "layout", "cap", "cycles_per_thread", "seed",
           "harness_version", "timestamp", "perm_index", "outer", "L1_hits", "L2_hits", "L3_hits",
           "L1_accesses", "MEM_accesses", "non_memory_instructions", "cycles_simulated", "macs_simulated",
           "macs_total", "idle_threads"]  # fmt: skip


@functools.lru_cache(maxsize=1)
def _load_sim(results: Path, files: tuple[tuple[str, int, int], ...]) -> pd.DataFrame:
    """``files``: the simulations' paths, times and sizes, so a changed file is read again."""
    return permstudy.load_sim(results, drop=_UNREAD)


def _cpu(part: pd.DataFrame) -> pd.DataFrame:
    return part.assign(cpu_model=part["cpu_model"].astype(str))


def _timed_for(timed: pd.DataFrame, exp: str, threads: int = 1) -> pd.DataFrame:
    """Timed rows of simulation experiment ``exp`` (``<exp>-<layer>``, ``<exp>-t<N>-<layer>``)."""
    if timed.empty:
        return timed
    names = [permstudy.timed_experiment_name(exp, la, threads) for la in timed["layer"]]
    return timed[timed["experiment"] == pd.Series(names, index=timed.index)]


def _headline_cache(sim: pd.DataFrame) -> str:
    caches = sorted(sim["cache"].unique())
    return MAIN_CACHE if MAIN_CACHE in caches else caches[0]


def _one_thread(sim: pd.DataFrame) -> pd.DataFrame:
    return sim[(sim["threads"] == 1) & (sim["partial_sums"])]


def _measured_table(timed: pd.DataFrame, exp: str, fp: str) -> pd.DataFrame:
    """orders x layers of measured best / time (1 thread, partial sums) for simulation experiment ``exp``
    on machine ``fp``: the layers timed on the most orders, over the orders timed on all of them (a big
    layer timed on a sample of orders would otherwise cut every layer down to that sample); the layers
    left out, with their counts, in ``attrs["left_out"]``. Empty when nothing was timed."""
    t = _timed_for(timed, exp)
    if t.empty:
        return pd.DataFrame()
    t = t[(t["machine_fingerprint"] == fp) & t["partial_sums"]]
    if t.empty:
        return pd.DataFrame()
    table = permstudy.speedup_table(t, metric="median_ns")
    n = table.notna().sum(axis=0)
    out = table.loc[:, n == n.max()].dropna()
    out.attrs["left_out"] = {str(k): int(v) for k, v in n[n < n.max()].items()}
    return out


def _left_out(measured: pd.DataFrame) -> str:
    gone = measured.attrs.get("left_out") or {}
    return (
        "; timed on fewer orders, left out of the measured panel: "
        + ", ".join(f"{k} ({v} orders)" for k, v in gone.items())
        if gone
        else ""
    )


def _panels(
    table: pd.DataFrame, measured: pd.DataFrame, cache: str, min_layers: int = 1
) -> dict[str, pd.DataFrame]:
    """The simulated table and, when orders were timed on enough layers, the measured one beside it."""
    panels = {f"simulated ({cache})": table}
    if len(measured) and measured.shape[1] >= min_layers:
        panels["measured"] = measured
    return panels


def signatures(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 4.3: cycles per order in SJT order, per layer (simulated), with measured time beside it."""
    summary = ctx.summary
    sim = _sim(ctx)
    if sim.empty:
        return []
    timed = permstudy.timed_frame(summary)
    figures = []
    for (exp, fp), part in ctx.machines(_one_thread(sim), by=("experiment",)):
        cache = _headline_cache(part)
        part = part[part["cache"] == cache]
        layers = sorted(part["layer"].unique())
        t_here = _timed_for(timed, exp)
        t_here = (
            t_here[(t_here["machine_fingerprint"] == fp) & t_here["partial_sums"]] if len(t_here) else t_here
        )
        ratios, rows, curves = [], [], []
        for layer in layers:
            s = part[part["layer"] == layer].sort_values("sjt_index")
            norm = s["cycles"] / s["cycles"].min()
            ratios.append(float(norm.max()))
            data = s[["layer", "sjt_index", "order", "cycles"]].assign(cycles_norm=norm.to_numpy())
            t = t_here[t_here["layer"] == layer] if len(t_here) else pd.DataFrame()
            t = t.merge(s[["order", "sjt_index"]], on="order") if len(t) else t
            if len(t):
                data = data.merge(t[["order", "median_ns"]], on="order", how="left")
            rows.append(data)
            curves.append((layer, s["sjt_index"].to_numpy(), norm.to_numpy(), t))
        fig = (_signature_panels if len(layers) <= MAX_PANELS else _signature_heatmap)(curves, cache)
        image, csv = ctx.save(fig, pd.concat(rows), f"permutations_fig4_3-{exp}-{fp}")
        mean_ratio = float(np.mean(ratios))
        lo, hi = CLAIMS["permutations_fig4_3"]["paper_numbers"]["worst_over_best_band"]
        figures.append(
            paper_figure(
                "permutations_fig4_3", fp, _cpu(part),
                measured=f"{exp}: {len(layers)} layers, cache {cache}: worst/best simulated cycles "
                f"{mean_ratio:.2f}x on average (per layer: "
                + ", ".join(f"{n} {r:.2f}x" for n, r in zip(layers, ratios, strict=True)) + ")",
                verdict="reproduced" if lo <= mean_ratio <= hi
                else "partial" if mean_ratio > 1.2 else "differs",
                statistic=f"mean over layers of max/min simulated cycles over the 720 orders; reproduced if "
                f"in [{lo}, {hi}] (the thesis: about 2x)",
                image=image, csv=csv, ours=mean_ratio,
                paper_value=CLAIMS["permutations_fig4_3"]["paper_numbers"]["worst_over_best"], unit="x",
            )
        )  # fmt: skip
    return figures


MAX_PANELS = 12  # Fig 4.3 draws one panel per layer up to this many, a heatmap of all layers beyond


def _signature_panels(curves: list[tuple[str, np.ndarray, np.ndarray, Any]], cache: str) -> plt.Figure:
    """One panel per layer: simulated cycles / best over the SJT order, measured times on their own axis."""
    fig, axes = plt.subplots(
        len(curves), 1, figsize=(10, 2.4 * len(curves)), squeeze=False, constrained_layout=True
    )
    for ax, (layer, x, norm, t) in zip(axes[:, 0], curves, strict=True):
        ax.plot(x, norm, lw=0.8, label=f"simulated cycles ({cache})")
        if len(t):
            # own axis: compiled code also differs in vectorisation, which the cache model ignores
            ax2 = ax.twinx()
            ax2.plot(t["sjt_index"], t["median_ns"] / t["median_ns"].min(), "o", ms=3, c="C3",
                     label="measured time / best (right)")  # fmt: skip
            ax2.set_ylabel("measured / best", color="C3")
            ax2.legend(fontsize=7, loc="lower right")
        ax.set(ylabel="/ best", title=layer)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("loop order, Steinhaus-Johnson-Trotter index")
    return fig


def _signature_heatmap(curves: list[tuple[str, np.ndarray, np.ndarray, Any]], cache: str) -> plt.Figure:
    """Every layer as one row of a heatmap (216 panels of Table 4.2 would be a figure 500 inches tall):
    simulated cycles / the layer's best over the SJT order, on a log colour scale; the rows (and any
    measured times) stay in the CSV."""
    from matplotlib.colors import LogNorm

    width = max(len(x) for _, x, _, _ in curves)
    grid = np.full((len(curves), width), np.nan)
    for i, (_, x, norm, _) in enumerate(curves):
        grid[i, x.astype(int)] = norm
    fig, ax = plt.subplots(figsize=(10, 6), constrained_layout=True)
    img = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis",
                    norm=LogNorm(vmin=1.0, vmax=max(float(np.nanmax(grid)), 1.01)))  # fmt: skip
    fig.colorbar(img, ax=ax, label=f"simulated cycles / the layer's best ({cache})")
    step = max(1, len(curves) // 24)
    ax.set_yticks(range(0, len(curves), step), [c[0] for c in curves][::step], fontsize=6)
    ax.set(xlabel="loop order, Steinhaus-Johnson-Trotter index", ylabel=f"layer ({len(curves)})")
    return fig


def _winner_fig(panels: dict[str, pd.DataFrame]) -> plt.Figure:
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 3.5), squeeze=False)
    for ax, (name, table) in zip(axes[0], panels.items(), strict=True):
        avg, worst = table.mean(axis=1).sort_values(), table.min(axis=1)
        ax.plot(range(len(avg)), avg.to_numpy(), label="average over layers")
        ax.plot(range(len(avg)), worst[avg.index].to_numpy(), lw=0.6, label="worst case (same order)")
        ax.set(
            xlabel="orders sorted by average speedup", ylabel="speedup vs per-layer best",
            title=f"{name}, {table.shape[0]} orders, {table.shape[1]} layers",
        )  # fmt: skip
        ax.legend()
    return fig


def winners(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 4.7/4.8: average and worst-case speedup of every order over the layers; the winners."""
    summary = ctx.summary
    sim = _sim(ctx)
    if sim.empty:
        return []
    figures = []
    meta = CLAIMS["permutations_fig4_7"]["paper_numbers"]
    timed = permstudy.timed_frame(summary)
    for (exp, fp), part in ctx.machines(_one_thread(sim), by=("experiment",)):
        cache = _headline_cache(part)
        part = part[part["cache"] == cache]
        table = permstudy.speedup_table(part)
        w = permstudy.winners(table)
        thesis = perm.order_text(perm.THESIS_BEST_AVERAGE)
        tt = _measured_table(timed, exp, fp)
        fig = _winner_fig(_panels(table, tt, cache))
        data = pd.DataFrame(
            {"order": table.index, "average": table.mean(axis=1), "worst": table.min(axis=1)}
        ).reset_index(drop=True)
        measured_txt = ""
        if len(tt):
            tw = permstudy.winners(tt)
            sim_best = w["top_average"]["order"]
            transfer = (
                f"; the simulated winner measures {tt.mean(axis=1)[sim_best]:.3f}"
                if sim_best in tt.index
                else ""
            )
            measured_txt = (
                f"; measured ({len(tt)} orders timed on {tt.shape[1]} layers): top average "
                f"{tw['top_average']['order']} {tw['top_average']['average']:.3f} (worst "
                f"{tw['top_average']['worst']:.3f}), top worst-case {tw['top_worst']['order']} "
                f"{tw['top_worst']['worst']:.3f}{transfer}{_left_out(tt)}"
            )
            measured = pd.DataFrame({"order": tt.index, "measured_average": tt.mean(axis=1)})
            data = data.merge(measured.reset_index(drop=True), on="order", how="left")
        image, csv = ctx.save(
            fig, data.sort_values("average", ascending=False), f"permutations_fig4_7-{exp}-{fp}"
        )
        ours = w["top_average"]["average"]
        thesis_avg = float(table.mean(axis=1).get(thesis, float("nan")))
        rank = int((table.mean(axis=1) > thesis_avg).sum()) + 1
        verdict = (
            "reproduced" if abs(ours - meta["top_average"]) <= 0.03
            else "partial" if ours >= 0.85 else "differs"
        )  # fmt: skip
        figures.append(
            paper_figure(
                "permutations_fig4_7", fp, _cpu(part),
                measured=f"{exp}, simulated ({cache}, {table.shape[1]} layers): top average "
                f"{w['top_average']['order']} {ours:.3f} (worst {w['top_average']['worst']:.3f}); top "
                f"worst-case {w['top_worst']['order']} {w['top_worst']['worst']:.3f}; the thesis's winner "
                f"{thesis} averages {thesis_avg:.3f} (rank {rank}/720){measured_txt}",
                verdict=verdict,
                statistic="mean over layers of best/cycles per order, maximum over orders; reproduced if "
                "within 0.03 of the thesis's 0.966, partial if at least 0.85",
                image=image, csv=csv, ours=ours, paper_value=meta["top_average"], unit="of per-layer best",
                table=[{"which": k, **v} for k, v in w.items()],
            )
        )  # fmt: skip
    return figures


def pairs(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 5.3: every pair of orders as an oracle picking the better one per layer (simulated, and
    measured beside it on the timed orders)."""
    summary = ctx.summary
    sim = _sim(ctx)
    if sim.empty:
        return []
    figures = []
    meta = CLAIMS["permutations_fig5_3"]["paper_numbers"]
    timed = permstudy.timed_frame(summary)
    for (exp, fp), part in ctx.machines(_one_thread(sim), by=("experiment",)):
        cache = _headline_cache(part)
        part = part[part["cache"] == cache]
        table = permstudy.speedup_table(part)
        if table.shape[1] < 2:
            continue  # one layer: the best single order is already the oracle
        panels = _panels(table, _measured_table(timed, exp, fp), cache, min_layers=2)
        fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
        tops, keep = {}, []
        for ax, (name, tab) in zip(axes[0], panels.items(), strict=True):
            pr = permstudy.best_pairs(tab)
            tops[name] = pr.loc[pr["average"].idxmax()]
            ax.hexbin(pr["average"], pr["worst"], gridsize=60, bins="log", cmap="viridis")
            ax.set(
                xlabel="average speedup of the pair", ylabel="worst-case speedup",
                title=f"pairs, {name}: {tab.shape[0]} orders, {tab.shape[1]} layers",
            )  # fmt: skip
            keep.append(pr.nlargest(2000, "average").assign(source=name))
        image, csv = ctx.save(fig, pd.concat(keep), f"permutations_fig5_3-{exp}-{fp}")
        text = [
            f"{name} ({panels[name].shape[1]} layers): best pair {top['a']} + {top['b']}: average "
            f"{top['average']:.3f}, worst {top['worst']:.3f}"
            for name, top in tops.items()
        ]
        ours = float(next(iter(tops.values()))["average"])
        figures.append(
            paper_figure(
                "permutations_fig5_3", fp, _cpu(part),
                measured="; ".join(text) + _left_out(panels.get("measured", pd.DataFrame())),
                verdict="reproduced" if ours >= meta["top_pair_average"] - 0.02 else "partial"
                if ours >= 0.9 else "differs",
                statistic="oracle max over the pair per layer, mean over layers, simulated; reproduced if "
                "within 0.02 of the thesis's 0.99",
                image=image, csv=csv, ours=ours, paper_value=meta["top_pair_average"],
                unit="of per-layer best",
            )
        )  # fmt: skip
    return figures


def sorted_speedups(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 5.4: each layer's speedups sorted; chance that n random orders contain a good one (simulated,
    and measured beside it on the timed orders)."""
    summary = ctx.summary
    sim = _sim(ctx)
    if sim.empty:
        return []
    figures = []
    meta = CLAIMS["permutations_fig5_4"]["paper_numbers"]
    timed = permstudy.timed_frame(summary)
    for (exp, fp), part in ctx.machines(_one_thread(sim), by=("experiment",)):
        cache = _headline_cache(part)
        part = part[part["cache"] == cache]
        table = permstudy.speedup_table(part)
        panels = _panels(table, _measured_table(timed, exp, fp), cache)
        fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
        rows, text, p26s = [], [], []
        for ax, (name, tab) in zip(axes[0], panels.items(), strict=True):
            for layer in tab.columns:
                ax.plot(np.sort(tab[layer].to_numpy())[::-1], lw=0.7, label=layer)
            ax.axhline(meta["good"], ls="--", c="k", lw=0.8)
            if tab.shape[1] <= 12:  # the synthetic tables have hundreds of layers: no legend then
                ax.legend(fontsize=7, loc="lower left")
            ax.set(xlabel="orders, sorted per layer", ylabel="speedup vs layer best", title=name)
            good = (tab >= meta["good"]).sum(axis=0)
            hardest, n = int(good.min()), len(tab)
            p10, p26 = (permstudy.p_good_in_sample(hardest, n, k) for k in (10, 26))
            p26s.append(p26)
            rows.append(pd.DataFrame({"source": name, "layer": good.index, "good_orders": good.to_numpy()}))
            text.append(
                f"{name}: hardest of {tab.shape[1]} layers has {hardest}/{n} orders >= {meta['good']}; 10 "
                f"random orders contain one with p={p10:.3f}, 26 with p={p26:.3f}"
            )
        image, csv = ctx.save(fig, pd.concat(rows), f"permutations_fig5_4-{exp}-{fp}")
        figures.append(
            paper_figure(
                "permutations_fig5_4", fp, _cpu(part),
                measured="; ".join(text) + _left_out(panels.get("measured", pd.DataFrame())),
                verdict="reproduced" if p26s[0] >= 0.95 else "partial" if p26s[0] >= 0.8 else "differs",
                statistic="hypergeometric (draws without replacement) from the hardest layer's count of good "
                "orders, simulated; reproduced if 26 draws give >= 0.95 as in the thesis",
                image=image, csv=csv, ours=p26s[0], paper_value=meta["p26"], unit="probability",
            )
        )  # fmt: skip
    return figures


def cache_configs(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 5.1: average speedup per order across cache configurations (parallel coordinates)."""
    sim = _sim(ctx)
    if sim.empty:
        return []
    figures = []
    for (exp, fp), part in ctx.machines(_one_thread(sim), by=("experiment",)):
        caches = sorted(part["cache"].unique())
        # the thesis's axes are Loki hierarchies of several sizes; other models only when fewer exist
        loki_sizes = [c for c in caches if c.startswith("loki_")]
        caches = loki_sizes if len(loki_sizes) >= 2 else caches
        if len(caches) < 2:
            continue
        # only layers simulated on every configuration, so each axis averages the same layers
        common_layers = set.intersection(*(set(part[part["cache"] == c]["layer"]) for c in caches))
        part = part[part["layer"].isin(common_layers)]
        avg = pd.DataFrame(
            {c: permstudy.speedup_table(part[part["cache"] == c]).mean(axis=1) for c in caches}
        )
        avg = avg.dropna()
        sjt_pos = {perm.order_text(o): k for k, o in enumerate(perm.sjt())}
        colors = plt.cm.viridis(np.array([sjt_pos[o] for o in avg.index]) / 719)
        fig, ax = plt.subplots(figsize=(7, 4))
        for (_, row), col in zip(avg.iterrows(), colors, strict=True):
            ax.plot(range(len(caches)), row.to_numpy(), c=col, lw=0.3, alpha=0.6)
        ax.set_xticks(range(len(caches)), caches)
        ax.set(ylabel="average speedup over layers", title="orders coloured by SJT index")
        from scipy.stats import spearmanr

        rhos = [float(spearmanr(avg[a], avg[b])[0]) for a, b in zip(caches, caches[1:], strict=False)]
        top10 = [set(avg[c].nlargest(10).index) for c in caches]
        common = len(set.intersection(*top10))
        image, csv = ctx.save(fig, avg.reset_index(), f"permutations_fig5_1-{exp}-{fp}")
        ours = float(np.mean(rhos))
        figures.append(
            paper_figure(
                "permutations_fig5_1", fp, _cpu(part),
                measured=f"{len(caches)} configurations ({', '.join(caches)}), {part['layer'].nunique()} "
                f"layers: Spearman of average speedups between neighbouring axes "
                f"{', '.join(f'{r:.2f}' for r in rhos)}; "
                f"{common} orders in the top 10 of every configuration",
                verdict="reproduced" if common >= 3 and ours >= 0.7
                else "partial" if ours >= 0.4 else "differs",
                statistic="Spearman rank correlation of per-order average speedups between configurations, "
                "and the overlap of their top-10 sets; reproduced if mean rho >= 0.7 and >= 3 common",
                image=image, csv=csv, ours=ours, unit="Spearman rho",
            )
        )  # fmt: skip
    return figures


def threads(ctx: FigureContext) -> list[PaperFigure]:
    """Fig 4.4/4.5 and 4.9: signatures at several thread counts; the ky/kx-outermost third."""
    summary = ctx.summary
    sim = _sim(ctx)
    if sim.empty:
        return []
    figures = []
    timed = permstudy.timed_frame(summary)
    for (exp, fp), part in ctx.machines(sim[sim["partial_sums"]], by=("experiment",)):
        cache = _headline_cache(part)
        part = part[part["cache"] == cache]
        ts = sorted(int(t) for t in part["threads"].unique())
        if len(ts) < 2:
            continue
        common_layers = set.intersection(*(set(part[part["threads"] == t]["layer"]) for t in ts))
        part = part[part["layer"].isin(common_layers)]
        fig, ax = plt.subplots(figsize=(10, 3.5))
        rows, any_measured = [], False
        for t in ts:
            tab = permstudy.speedup_table(part[part["threads"] == t])
            avg = tab.mean(axis=1)
            sjt_pos = {perm.order_text(o): k for k, o in enumerate(perm.sjt())}
            s = pd.DataFrame({"order": avg.index, "avg": avg.to_numpy(), "threads": t})
            s["sjt_index"] = s["order"].map(sjt_pos)
            s["kernel_outer"] = s["order"].str.startswith(("(ky", "(kx"))
            rows.append(s)
            s = s.sort_values("sjt_index")
            line = ax.plot(s["sjt_index"], s["avg"], lw=0.7, label=f"{t} thread(s), simulated")
            tm = _timed_for(timed, exp, t)
            tm = tm[(tm["machine_fingerprint"] == fp) & tm["layer"].isin(common_layers)] if len(tm) else tm
            if len(tm):
                mt = permstudy.speedup_table(tm, metric="median_ns").dropna().mean(axis=1)
                xs = [sjt_pos[o] for o in mt.index]
                ax.plot(xs, mt.to_numpy(), "o", ms=3, c=line[0].get_color(), label=f"{t} thread(s), measured")
                any_measured = True
        what = f"simulated ({cache})" + (" and measured" if any_measured else "")
        ax.set(xlabel="SJT index", ylabel="average speedup vs each layer's best", title=f"{exp}: {what}")
        ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")  # beside the curves
        data = pd.concat(rows)
        image, csv = ctx.save(fig, data, f"permutations_fig4_4-{exp}-{fp}")
        tmax = data[data["threads"] == ts[-1]]
        gap = float(tmax[~tmax["kernel_outer"]]["avg"].mean() - tmax[tmax["kernel_outer"]]["avg"].mean())
        figures.append(
            paper_figure(
                "permutations_fig4_4", fp, _cpu(part),
                measured=f"threads {ts} ({cache}): at {ts[-1]} threads the 240 ky/kx-outermost orders "
                f"average {tmax[tmax['kernel_outer']]['avg'].mean():.3f} vs "
                f"{tmax[~tmax['kernel_outer']]['avg'].mean():.3f} "
                f"for the others; best average {tmax['avg'].max():.3f}",
                verdict="reproduced" if gap >= 0.1 else "partial" if gap > 0 else "differs",
                statistic="mean average-speedup of the ky/kx-outermost orders vs the rest at the largest "
                "thread count; reproduced if they are at least 0.1 worse (the thesis's 'bad step')",
                image=image, csv=csv, ours=gap, unit="speedup gap",
            )
        )  # fmt: skip
    return figures


def validation(ctx: FigureContext) -> list[PaperFigure]:
    """Simulated cycles vs measured time over the timed orders, per layer (Spearman)."""
    summary = ctx.summary
    sim = _sim(ctx)
    timed = permstudy.timed_frame(summary)
    if sim.empty or timed.empty:
        return []
    rho = permstudy.spearman_by_layer(sim, timed)
    if rho.empty:
        return []
    figures = []
    for fp, part in ctx.machines(rho):
        t = timed[timed["machine_fingerprint"] == fp]
        caches = sorted(part["cache"].unique())
        fig, axes = plt.subplots(1, len(caches), figsize=(4.5 * len(caches), 4), squeeze=False)
        for ax, cache in zip(axes[0], caches, strict=True):
            s = sim[(sim["cache"] == cache) & (sim["threads"] == 1)]
            # each timed experiment <E>-<layer> against the simulations of E
            j = t.merge(
                s[["experiment", "layer", "order", "partial_sums", "cycles"]].rename(
                    columns={"experiment": "sim_experiment"}
                ),
                on=["sim_experiment", "layer", "order", "partial_sums"],
            )
            for (exp, layer), g in j.groupby(["experiment", "layer"]):
                label = layer if exp == permstudy.timed_experiment_name(DEFAULT_EXPERIMENT, layer) else exp
                ax.scatter(
                    g["cycles"] / g["cycles"].min(), g["median_ns"] / g["median_ns"].min(), s=8, label=label
                )
            ax.set(xlabel=f"simulated cycles / best ({cache})", ylabel="measured time / best")
            ax.legend(fontsize=7)
        image, csv = ctx.save(fig, part, f"permutations_validation-{fp}")
        host = part[part["cache"] == "host"] if "host" in caches else part
        # the headline is the default study (the harness's flags); other experiments (e.g. -O0) are listed
        main = host[host["experiment"] == DEFAULT_EXPERIMENT]
        ours = float((main if len(main) else host)["spearman"].mean())
        figures.append(
            paper_figure(
                "permutations_validation", fp, _cpu(t.assign(cpu_model=t["cpu_model"])),
                measured="Spearman per layer and configuration: " + "; ".join(
                    f"{r.layer}{'' if r.experiment == DEFAULT_EXPERIMENT else f' ({r.experiment})'} "
                    f"[{r.cache}, {r.n_orders} orders] {r.spearman:.2f}"
                    for r in part.itertuples()
                ),
                verdict="reproduced" if ours >= 0.5 else "partial" if ours >= 0.2 else "differs",
                statistic="Spearman rank correlation (scipy) of simulated cycles and measured median time "
                "over the timed orders, mean over layers for this machine's hierarchy (host); the thesis "
                "only reported rough qualitative agreement with MARSSx86: reproduced if >= 0.5",
                image=image, csv=csv, ours=ours, unit="Spearman rho",
                table=part.round(3).to_dict("records"),
            )
        )  # fmt: skip
    return figures


FIGURES: list[Any] = [signatures, winners, pairs, sorted_speedups, cache_configs, threads, validation]
