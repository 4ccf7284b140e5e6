"""The loop-permutation study (seed 004): simulate every loop order, time some, compare, analyse.

Simulation rows (one per layer x order x cache configuration x threads x variant) are not timing rows:
they go to ``<results>/permutations/sim/<experiment>/*.parquet`` (one file per layer, configuration,
thread count and variant, written atomically, so a rerun skips what exists), each row carrying its
provenance (cache configuration and its key, layout, cap, harness version, the machine that ran the
simulation, timestamp, seed). Timings go through :func:`harness.experiment.run_experiment` like every
other measurement (rows in the result store, checked against the reference before they count).

Analyses follow the thesis: speedup(p, L) = best_L / metric(p, L) in (0, 1]; per order the average and
the worst case over layers (Fig 4.7/4.8); oracle pairs (Fig 5.3); each layer's sorted speedups and the
chance that n random orders contain a good one (Fig 5.4, hypergeometric); across cache configurations
(Fig 5.1); and, for validation, Spearman's rank correlation between simulated cycles and measured time
over the orders of each layer (scipy).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import cachesim, interrupt, store, workers
from studies.permutations import kernels as perm

SIM_DIR = "permutations/sim"


def sim_dir(results: Path, experiment: str) -> Path:
    return Path(results) / SIM_DIR / experiment


def sim_file(
    results: Path, experiment: str, layer: str, cfg: cachesim.CacheConfig, threads: int, partial_sums: bool,
    layout: str, cap: int | None,
) -> Path:  # fmt: skip
    ps = "ps" if partial_sums else "nops"
    return (
        sim_dir(results, experiment)
        / f"{layer}-{cfg.name}-{cfg.key}-t{threads}-{ps}-{layout}-cap{cap or 0}.parquet"
    )


def _sim_one(args: tuple[Any, ...]) -> dict[str, Any]:
    order, sizes, cfg, threads, cap, layout, partial_sums, seed = args
    nest = cachesim.ConvNest(tuple(order), sizes, layout=layout, partial_sums=partial_sums)
    res = cachesim.simulate_nest(nest, cfg, threads=threads, cap=cap, seed=seed)
    res["cycles_per_thread"] = json.dumps(res["cycles_per_thread"])
    return res


def sim_pool(jobs: int) -> ProcessPoolExecutor:
    """Workers for the simulations (:func:`harness.workers.process_pool`), each starting with this module
    (numpy, pycachesim) loaded."""
    return workers.process_pool(jobs, [__name__])


def _stoppable(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The simulations' results, with a stop the user asked for honoured between them (a layer's 720
    orders take up to minutes; the pool then drops the orders still queued)."""
    out = []
    for res in results:
        interrupt.check()
        out.append(res)
    return out


def simulate_layer(
    layer: str,
    sizes: Mapping[str, int],
    cfg: cachesim.CacheConfig,
    threads: int = 1,
    cap: int | None = None,
    layout: str = "harness",
    partial_sums: bool = True,
    orders: Sequence[perm.Order] | None = None,
    seed: int = 0,
    jobs: int = 1,
    machine: Any = None,
    pool: ProcessPoolExecutor | None = None,
) -> pd.DataFrame:
    """One row per order: counts, cycles, the order's thesis index and SJT position, provenance.
    ``pool``: the workers of :func:`sim_pool` to run the orders on (else ``jobs`` workers of its own)."""
    from harness import machine as machine_mod
    from harness.experiment import HARNESS_VERSION

    orders = list(orders or perm.sjt())
    sjt_pos = {o: k for k, o in enumerate(perm.sjt())}
    work = [(o, dict(sizes), cfg, threads, cap, layout, partial_sums, seed) for o in orders]
    if pool is not None:
        results = _stoppable(pool.map(_sim_one, work, chunksize=8))
    elif jobs > 1:
        with sim_pool(jobs) as own:
            results = _stoppable(own.map(_sim_one, work, chunksize=8))
    else:
        results = _stoppable(_sim_one(w) for w in work)
    m = machine or machine_mod.detect()
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = []
    for o, res in zip(orders, results, strict=True):
        rows.append({
            "layer": layer, "sizes": json.dumps(dict(sizes), sort_keys=True),
            "order": perm.order_text(o), "scheme": perm.scheme_text(o),
            "perm_index": perm.order_index(o), "sjt_index": sjt_pos[o],
            "outer": o[0], "cache": cfg.name, "cache_key": cfg.key, "cache_desc": cfg.describe(),
            "threads": threads, "partial_sums": partial_sums, "layout": layout, "cap": cap or 0,
            **res,
            "seed": seed, "machine_fingerprint": m.fingerprint, "cpu_model": m.model_name,
            "harness_version": HARNESS_VERSION, "timestamp": stamp,
        })  # fmt: skip
    return pd.DataFrame(rows)


def run_simulations(
    results: Path,
    experiment: str,
    layers: Mapping[str, Mapping[str, int]],
    configs: Sequence[cachesim.CacheConfig],
    threads: Sequence[int] = (1,),
    cap: int | None = None,
    layout: str = "harness",
    partial_sums: bool = True,
    jobs: int = 1,
    say: Callable[[str], None] = print,
    reuse_from: str | None = None,
) -> list[Path]:
    """Simulate every order of every layer on every configuration and thread count; skip stored files.

    ``reuse_from``: another experiment whose stored simulations are linked in instead of recomputed (a
    simulation does not depend on how the orders are later compiled and timed, e.g. at -O0)."""
    import time

    paths = []
    todo = [(n, s, c, t) for n, s in layers.items() for c in configs for t in threads]
    start = time.monotonic()
    simulated = 0  # in this call: the ETA counts what is left to simulate at this call's pace
    with sim_pool(jobs) if jobs > 1 else nullcontext() as pool:  # one set of workers for every layer
        for k, (name, sizes, cfg, t) in enumerate(todo, start=1):
            path = sim_file(results, experiment, name, cfg, t, partial_sums, layout, cap)
            paths.append(path)
            if path.exists():
                say(f"[{experiment}] {name} {cfg.name} t{t}: already simulated, skipped")
                continue
            other = reuse_from and sim_file(results, reuse_from, name, cfg, t, partial_sums, layout, cap)
            if other and other.exists():
                store.write_frame(pd.read_parquet(other), path)
                say(f"[{experiment}] {name} {cfg.name} t{t}: simulation reused from {reuse_from}")
                continue
            df = simulate_layer(name, sizes, cfg, t, cap, layout, partial_sums, pool=pool)
            store.write_frame(df, path)
            simulated += 1
            elapsed = time.monotonic() - start
            left = sum(
                not sim_file(results, experiment, n, c, th, partial_sums, layout, cap).exists()
                for n, _, c, th in todo[k:]
            )
            eta = f", ETA {elapsed / simulated * left / 60:.0f} min for {left} more" if left else ""
            say(
                f"[{experiment}] {k}/{len(todo)} {name} {cfg.name} t{t}: 720 orders simulated, cycles "
                f"best/worst {df['cycles'].min():.3g}/{df['cycles'].max():.3g} (elapsed {elapsed:.0f}s{eta})"
            )
    return paths


def load_sim(results: Path, experiment: str | None = None, drop: Sequence[str] = ()) -> pd.DataFrame:
    """Every stored simulation (of ``experiment``, or all), with its folder as ``experiment``; the columns
    ``drop`` are not kept. The files are joined as Arrow tables and converted once: a frame per file and
    their concatenation left ~70 MB of freed heap in each process of the report of every archive."""
    base = Path(results) / SIM_DIR
    files = sorted((base / experiment if experiment else base).rglob("*.parquet")) if base.exists() else []
    if not files:
        return pd.DataFrame()
    tables = []
    for f in files:
        t = pq.read_table(f)
        t = t.drop_columns([c for c in drop if c in t.column_names])
        tables.append(t.append_column("experiment", pa.array([f.parent.name] * t.num_rows, pa.string())))
    whole = pa.concat_tables(tables, promote_options="permissive").combine_chunks()
    del tables
    frame = whole.to_pandas().reset_index(drop=True)
    del whole
    # the 500 files' pieces, which mimalloc keeps otherwise: 250 MB where the frame needs 125 (every archive)
    pa.default_memory_pool().release_unused()
    return frame


# -- timing through the standard pipeline ---------------------------------------------------------------
def timed_experiment_name(experiment: str, layer: str, threads: int = 1) -> str:
    return f"{experiment}-{layer}" if threads == 1 else f"{experiment}-t{threads}-{layer}"


def time_orders(
    results: Path,
    experiment: str,
    layer: str,
    sizes: Mapping[str, int],
    orders: Sequence[perm.Order],
    partial_sums: bool = True,
    timing: Any = None,
    target: str | None = None,
    say: Callable[[str], None] | None = None,
    opt_flags: tuple[str, ...] = ("-O3",),
) -> list[dict[str, Any]]:
    """Time the orders' scheme kernels (checked first) and store rows as every study does.

    With ``timing.threads > 1`` the OpenMP version (Tpar on the outermost loop) of the orders whose
    outermost loop indexes the output is timed; the others have no parallel kernel and are left out."""
    from harness import machine as machine_mod
    from harness.build import CompilerConfig
    from harness.experiment import Experiment, run_experiment
    from harness.run import TimingConfig
    from kernels.candidate import Workload

    m = machine_mod.detect()
    isa = target or ("avx2" if "avx2" in m.isas else m.best_isa or "avx2")
    w = Workload.make(f"perm-{layer}", "conv2d", dict(sizes), stride=1)
    cands = [perm.candidate(o, partial_sums, isa) for o in orders]
    threads = timing.threads if timing is not None else 1
    if threads > 1:
        cands = [
            type(c)("scheme", perm.parallel_scheme_text(o, sizes), c.options)
            for o, c in zip(orders, cands, strict=True)
            if o[0] in perm.OUTPUT_LOOPS
        ]
    exp = Experiment(
        timed_experiment_name(experiment, layer, threads), w, cands,
        timing=timing or TimingConfig(mode="hot", warmup=2, min_reps=5, max_reps=20, max_seconds=1.0),
        compiler=CompilerConfig(opt_flags=tuple(opt_flags)), results_dir=Path(results),
    )  # fmt: skip
    return run_experiment(exp, progress=say, machine=m)


def _threads_of(experiment: str) -> int:
    """Thread count of a timed experiment (``<exp>-t<N>-<layer>``; 1 without the infix)."""
    import re

    m = re.search(r"-t(\d+)-", experiment)
    return int(m.group(1)) if m else 1


@functools.lru_cache(maxsize=4096)
def _order_of_label(scheme: str) -> perm.Order | None:
    """The loop order of a timed row's scheme text, None if it is not one (720 orders, many rows each)."""
    try:
        return perm.order_of_scheme(scheme)
    except (ValueError, perm.PermutationError):
        return None


def timed_frame(summary: pd.DataFrame, experiment_prefix: str | None = None) -> pd.DataFrame:
    """Timed permutation rows (status ok): layer, order, partial sums, median time, machine."""
    if summary.empty or "label" not in summary:
        return pd.DataFrame()
    ok = summary[(summary["status"] == "ok") & summary["workload"].astype(str).str.startswith("perm-")]
    if experiment_prefix:
        ok = ok[ok["experiment"].astype(str).str.startswith(experiment_prefix)]
    rows = []
    # plain columns, not iterrows (a Series per row: 2 s of each of seven figures over every archive)
    columns = ("label", "workload", "median_ns", "machine_fingerprint", "cpu_model", "experiment")
    for label, workload, median, fp, cpu, exp in zip(*(ok[c].tolist() for c in columns), strict=True):
        # the label is the scheme text plus the options that differ from the defaults (hoist=False)
        label = str(label)
        o = _order_of_label(label[: label.index("]") + 1]) if "]" in label else None
        if o is None:
            continue
        rows.append({
            "layer": str(workload).removeprefix("perm-"), "order": perm.order_text(o),
            "partial_sums": "hoist=False" not in label, "median_ns": float(median),
            "machine_fingerprint": fp, "cpu_model": cpu,
            "experiment": exp, "threads": _threads_of(str(exp)),
        })  # fmt: skip
    for row in rows:  # the simulation experiment E of a timed experiment E-<layer> / E-t<N>-<layer>
        t = row["threads"]
        base = row["experiment"].removesuffix(f"-{row['layer']}")
        row["sim_experiment"] = base.removesuffix(f"-t{t}") if t != 1 else base
    return pd.DataFrame(rows)


# -- analyses -------------------------------------------------------------------------------------------
def speedup_table(df: pd.DataFrame, metric: str = "cycles", by: str = "layer") -> pd.DataFrame:
    """orders x layers (or other ``by``) of best / metric; lower metric is better."""
    pivot = df.pivot_table(index="order", columns=by, values=metric, aggfunc="mean")
    return pivot.min(axis=0) / pivot


def winners(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The top-average and top-worst-case orders (Fig 4.7/4.8)."""
    avg, worst = table.mean(axis=1), table.min(axis=1)
    a, w = avg.idxmax(), worst.idxmax()
    return {
        "top_average": {"order": a, "average": float(avg[a]), "worst": float(worst[a])},
        "top_worst": {"order": w, "average": float(avg[w]), "worst": float(worst[w])},
    }


def best_pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Every pair of orders scored as an oracle choosing the better member per layer (Fig 5.3)."""
    v = table.to_numpy()
    names = list(table.index)
    out_a, out_b, avg, worst = [], [], [], []
    for p in range(len(names) - 1):
        best = np.maximum(v[p][None, :], v[p + 1 :])
        out_a += [names[p]] * len(best)
        out_b += names[p + 1 :]
        avg.append(best.mean(axis=1))
        worst.append(best.min(axis=1))
    return pd.DataFrame(
        {"a": out_a, "b": out_b, "average": np.concatenate(avg), "worst": np.concatenate(worst)}
    )


def p_good_in_sample(n_good: int, n_total: int, n: int) -> float:
    """Chance that n orders drawn without replacement contain at least one good one (hypergeometric)."""
    from scipy.stats import hypergeom

    return float(1.0 - hypergeom(n_total, n_good, n).pmf(0))


def spearman_by_layer(sim: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    """Spearman rank correlation of simulated cycles and measured median time over the orders timed,
    per experiment, layer, cache configuration, variant and machine (threads = 1). Timed rows of
    experiment ``<E>-<layer>`` are paired with the simulations of ``E`` (another experiment may time the
    same layer differently, e.g. at -O0)."""
    from scipy.stats import spearmanr

    if sim.empty or timed.empty:
        return pd.DataFrame()
    s = sim[sim["threads"] == 1]
    rows = []
    timed = timed[timed["threads"] == 1]
    keys = ["sim_experiment", "layer", "partial_sums", "machine_fingerprint"]
    for (sim_exp, layer, ps, fp), t in timed.groupby(keys):
        here = s[(s["layer"] == layer) & (s["partial_sums"] == ps)]
        if "experiment" in here:
            here = here[here["experiment"] == sim_exp]
        for cache, sc in here.groupby("cache"):
            j = t.merge(sc[["order", "cycles"]].drop_duplicates("order"), on="order")
            if len(j) < 3:
                continue
            rho, pval = spearmanr(j["cycles"], j["median_ns"])
            rows.append({
                "experiment": sim_exp, "layer": layer, "partial_sums": ps, "cache": cache,
                "machine_fingerprint": fp, "cpu_model": t["cpu_model"].iloc[0], "n_orders": len(j),
                "spearman": float(rho), "p_value": float(pval),
            })  # fmt: skip
    return pd.DataFrame(rows)


def average_speedups(
    results: Path, experiment: str | None = None, cache: str = "loki", threads: int = 1
) -> dict[perm.Order, float]:
    """Per order, the average speedup over the simulated layers: the ranking behind
    ``studies.permutations.kernels.select_orders("best-average", ranking=...)`` (empty without
    simulations)."""
    sim = load_sim(results, experiment)
    if sim.empty:
        return {}
    part = sim[(sim["cache"] == cache) & (sim["threads"] == threads) & sim["partial_sums"]]
    if part.empty:
        return {}
    avg = speedup_table(part).mean(axis=1)
    return {perm.parse_order(o): float(v) for o, v in avg.items()}
