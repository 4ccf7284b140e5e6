"""The isolated microkernel benchmark and offline selection (seed 000, §5.2, Fig 5.2).

Each microkernel runs alone under a reduction loop of 512 iterations, hot cache (data in L1/L2, output
accumulators in registers): convolution on ``{h: uh, w: uw, k: uk*lanes, r: ur, s: us, c: 512*uc}``
with ``[T_{512,c}, <suffix>]``, matmul on ``{i: ui, j: uj*lanes, k: 512}`` with
``[T_{512,k}, U_{ui,i}, U_{uj,j}, V_j]``. Every one goes through the real pipeline
(:func:`harness.experiment.run_experiment`: render, build, pinned driver, full semantic check, timing,
stored row), so a wrong kernel is never selected and a rerun reuses the rows already measured.

Selection keeps the microkernels whose median time reaches ``threshold`` % of the calibrated peak
(85 by default, as the thesis). The measured set and the selection are stored per machine (fingerprint),
ISA and operator as JSON in the cache directory (:mod:`harness.selection`), for search strategies to reuse.

The cost of a selection is part of the result (issue 4: "enumeration + selection wall time on 2 cores"):
``harness microkernels`` times the enumeration, the benchmark (its parallel compilation apart) and the
selection, notes the CPUs used and how many rows were reused from an earlier run (their cost is not in
this run's time), and appends the record to the selection file's ``wall_time`` list
(:func:`record_wall_time`, :func:`wall_times`; shown by studies/ttile_microkernels/figures.py).

``BenchConfig.experiment``/``hoist``/``fma`` and the compiler let other studies measure the same
microkernels the same way under other code-generation or compiler settings (harness compiler-study).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from harness import machine as machine_mod
from harness import store
from harness.build import CompilerConfig, build_many
from harness.check import CheckConfig
from harness.experiment import Experiment, run_experiment
from harness.run import TimingConfig
from harness.sanity import SanityConfig
from harness.selection import (
    DEFAULT_THRESHOLD,
    jsonable,
    load_selected,
    microkernel_of,
    save_selection,
    select,
)
from kernels import microkernels as mkmod
from kernels.candidate import Candidate, KernelSource, Workload, render
from kernels.codegen.legality import embedded_broadcast
from kernels.microkernels import Microkernel
from kernels.operators import make_operator
from kernels.targets import get_target

QUICK_CAP = 24  # microkernels in the quick subset
# Hot and fast: a microkernel call lasts about a microsecond, so many repetitions cost milliseconds; the
# median of up to 2000 samples is what selection reads. A sample times 16 calls back to back (pyperf's
# "loops": a value well above the clock's own cost and jitter). Measured on a noisy Zen 3, five quick
# microkernels, one call vs 16 a sample, interleaved (3 rounds, in two sessions): the median's CoV 0.5-4.6%
# vs 0.2-0.6%, the mean median 73-80% vs 78-90% of peak (rows: reports/measured/bench/*microkernels*).
BENCH_TIMING = TimingConfig(
    mode="hot", warmup=20, min_reps=100, max_reps=2000, rel_ci=0.002, max_seconds=0.3, batch=16
)
# The warm-up is sized in work, not calls: ~50 ms of FMAs at 100 GFLOP/s before the first timed call.
# Measured on the Zen 3 VM: after 20 warm-up calls a 1 us microkernel still ran 2x slower for the first
# ~1 ms of repetitions (the core clock ramps up after the driver's start), which pulled medians of
# 90%-of-peak kernels down to 45-60%.
WARMUP_FLOPS = 5e9
MAX_WARMUP_CALLS = 200_000
BUSY_FLAG = "busy core"  # harness.sanity: other processes ran on the pinned core
DRIFT_FLAG = "peak drift"  # harness.sanity: the FMA peak probed at the start disagrees with calibration


def _say_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- what is benchmarked ---------------------------------------------------------------------------------
@functools.cache
def _op_dims(op: str) -> tuple[str, ...]:
    return make_operator(op).dims


def bench_workload(mk: Microkernel) -> Workload:
    """The microkernel's own footprint on every dimension, times the reduction tile on the bench dimension."""
    sec = mkmod.bench_spec(mk.isa, mk.op)
    sizes = {d: mk.footprint(d) for d in _op_dims(mk.op)}
    sizes[sec["reduction_dim"]] *= int(sec["reduction_tile"])
    return Workload.make(f"ukbench-{mk.name}", mk.op, sizes)


def bench_scheme(mk: Microkernel) -> str:
    """``[T_{512,c}, <suffix>]`` (or ``T_{512,k}`` for matmul)."""
    sec = mkmod.bench_spec(mk.isa, mk.op)
    return mk.scheme([f"T_{{{int(sec['reduction_tile'])},{sec['reduction_dim']}}}"])


def bench_candidate(
    mk: Microkernel, hoist: bool = True, fma: bool = True, broadcast: str | None = None
) -> Candidate:
    """Same options as ``harness run`` gives a scheme (target, hoist, fma, broadcast if set), so keys agree.

    ``hoist`` / ``fma`` off are the code-generation ablations of the §4.3 compiler study; ``broadcast``
    embedded has each FMA read its broadcast operand from memory (issue 32).
    """
    opts: dict[str, object] = {"target": mk.isa, "hoist": bool(hoist), "fma": bool(fma)}
    if broadcast is not None:
        opts["broadcast"] = broadcast
    return Candidate("scheme", bench_scheme(mk), tuple(sorted(opts.items())))


def quick_set(
    isa: str, op: str = "conv2d", reading: str | None = None, cap: int = QUICK_CAP
) -> list[Microkernel]:
    """A small subset for CI / the quick profile.

    conv2d: the enumerated microkernels (``reading``) of the Fig 5.2 slice (uc = uh = ur = us = 1),
    evenly thinned to at most ``cap``; matmul: the enumeration thinned the same way.
    """
    if op == "conv2d":
        pool = [
            m for m in mkmod.enumerate_conv(isa, reading)
            if m.size["c"] == m.size["h"] == m.size["r"] == m.size["s"] == 1
        ]  # fmt: skip
    else:
        pool = mkmod.enumerate_microkernels(isa, op)
    if len(pool) <= cap:
        return pool
    step = len(pool) / cap
    return [pool[int(i * step)] for i in range(cap)]


# -- running ---------------------------------------------------------------------------------------------
@dataclass
class BenchConfig:
    results_dir: Path = Path("results")
    cache_dir: Path | None = None  # default results_dir / "cache"
    timing: TimingConfig = BENCH_TIMING
    check: CheckConfig = field(default_factory=CheckConfig)
    compiler: CompilerConfig = field(default_factory=CompilerConfig)
    sanity: SanityConfig = field(default_factory=SanityConfig)
    seed: int = 0
    warmup_flops: float = WARMUP_FLOPS  # 0: keep timing.warmup as it is
    rerun: bool = False  # measure again even if a row is stored
    retry_busy: int = 1  # re-measure a row flagged busy core or peak drift up to this many times
    experiment: str | None = None  # row directory; default microkernels-<op>-<isa> (experiment_name)
    hoist: bool = True  # code generation: output accumulators kept in registers (thesis §4.3)
    fma: bool = True  # code generation: fused multiply-add intrinsics (else mul + add)
    broadcast: str | None = None  # code generation: embedded, FMAs read their broadcast from memory

    @property
    def cache(self) -> Path:
        return self.cache_dir or self.results_dir / "cache"


def experiment_name(isa: str, op: str) -> str:
    return f"microkernels-{op}-{isa}"


def bench_timing(flops: int, cfg: BenchConfig) -> TimingConfig:
    """``cfg.timing`` with enough warm-up calls for ``cfg.warmup_flops`` of work."""
    if cfg.warmup_flops <= 0:
        return cfg.timing
    calls = min(MAX_WARMUP_CALLS, math.ceil(cfg.warmup_flops / max(1, flops)))
    return dataclasses.replace(cfg.timing, warmup=max(cfg.timing.warmup, calls))


def _experiment(mk: Microkernel, cfg: BenchConfig) -> Experiment:
    w = bench_workload(mk)
    return Experiment(
        cfg.experiment or experiment_name(mk.isa, mk.op),
        w,
        [bench_candidate(mk, cfg.hoist, cfg.fma, cfg.broadcast)],
        timing=bench_timing(w.flops, cfg),
        check=cfg.check,
        compiler=cfg.compiler,
        seed=cfg.seed,
        sanity=cfg.sanity,
        results_dir=cfg.results_dir,
        cache_root=cfg.cache,
    )


def _row_path(exp: Experiment, m: machine_mod.Machine) -> Path:
    cand = exp.candidates[0]
    rid = store.row_id(exp.name, cand.key, exp.workload.name, exp.timing.mode, exp.seed, m.fingerprint)
    return store.row_path(exp.results_dir, exp.name, rid)


def _summary(mk: Microkernel, row: dict[str, Any]) -> dict[str, Any]:
    flags = json.loads(row.get("flags") or "[]")
    opts = json.loads(row.get("candidate_options") or "{}")
    out: dict[str, Any] = {
        "name": mk.name,
        "op": mk.op,
        "isa": mk.isa,
        "suffix": mk.suffix,
        **{f"u_{d}": n for d, n in mk.sizes},
        "workload": row["workload"],
        "scheme": row["candidate_text"],
        "status": row["status"],
        "reason": (row.get("reason") or "")[:300],
        "check_mode": row.get("check_mode"),
        "check_passed": row.get("check_passed"),
        "n_reps": row.get("n_reps"),
        "median_ns": row.get("median_ns"),
        "gflops_median": row.get("gflops_median"),
        "pct_peak_median": row.get("pct_peak_median"),
        "pct_peak_min": row.get("pct_peak_min"),
        "peak_gflops": row.get("peak_gflops"),
        "cov": row.get("cov"),
        "flags": flags,
        "busy": any(BUSY_FLAG in f for f in flags),
        "drift": any(DRIFT_FLAG in f for f in flags),
        "machine_fingerprint": row["machine_fingerprint"],
        "timestamp": row["timestamp"],
        "experiment": row["experiment"],
        "compiler": row.get("compiler"),
        "cflags": row.get("cflags"),
        "hoist": bool(opts.get("hoist", True)),
        "fma": bool(opts.get("fma", True)),
        "broadcast": opts.get("broadcast"),
    }
    return out


def run_microbench(
    microkernels: Sequence[Microkernel],
    cfg: BenchConfig | None = None,
    progress: Callable[[str], None] | None = _say_stderr,
    machine: machine_mod.Machine | None = None,
) -> pd.DataFrame:
    """Benchmark every microkernel (clean stored rows are reused unless ``cfg.rerun``); one summary each.

    Kernels are rendered and compiled first, in parallel, so compilation never overlaps a timed run.
    """
    cfg = cfg or BenchConfig()
    m = machine or machine_mod.detect()
    say = progress or (lambda _msg: None)
    exps = [_experiment(mk, cfg) for mk in microkernels]
    if cfg.rerun:
        for exp in exps:
            _row_path(exp, m).unlink(missing_ok=True)
    todo = [e for e in exps if not _row_path(e, m).is_file()]
    sources = []
    for e in todo:
        try:
            src = render(e.candidates[0], e.workload)
        except ValueError:
            continue  # an illegal scheme: run_experiment records the error
        if isinstance(src, KernelSource):
            sources.append(src)
    compile_s = 0.0
    if sources:
        t0 = time.perf_counter()
        say(f"[microbench] compiling {len(sources)} kernel(s) ...")
        builds = build_many(sources, cfg.compiler, cfg.cache / "so")
        failed = sum(not b.ok for b in builds)
        compile_s = time.perf_counter() - t0
        say(f"[microbench] compiled in {compile_s:.1f}s ({failed} failed)")

    out = []
    for n, (mk, exp) in enumerate(zip(microkernels, exps, strict=True), start=1):
        path = _row_path(exp, m)
        # A row flagged 'busy core' or 'peak drift' (fresh, or stored by an earlier run) is measured again,
        # up to cfg.retry_busy times; clean stored rows are reused as they are.
        for attempt in range(1 + max(0, cfg.retry_busy)):
            reused = path.is_file()
            if not reused:
                run_experiment(exp, progress=lambda _msg: None, machine=m)
            row = pq.read_table(path).to_pylist()[0]
            summary = _summary(mk, row)
            if not (summary["busy"] or summary["drift"]) or attempt == cfg.retry_busy:
                break
            say(f"[microbench] {mk.suffix}: core busy or peak drifted, measuring again")
            path.unlink(missing_ok=True)
        summary["reused"] = reused  # stored by an earlier run: its cost is not in this run's wall time
        out.append(summary)
        perf = (
            f"{summary['pct_peak_median']:.1f}% of peak"
            if summary["status"] == "ok"
            else summary["reason"][:100]
        )
        note = (" [busy core]" if summary["busy"] else "") + (" [peak drift]" if summary["drift"] else "")
        say(
            f"[microbench] {n}/{len(exps)} {mk.suffix}: {summary['status']} {perf}{note}"
            + (" (stored)" if reused else "")
        )
    frame = pd.DataFrame(out)
    frame.attrs["compile_s"] = compile_s  # the parallel compilation before any timed run
    return frame


# -- selection -------------------------------------------------------------------------------------------
# -- Fig 5.2 ---------------------------------------------------------------------------------------------
def fig5_2_frame(
    frame: pd.DataFrame, isa: str, reading: str | None = None, threshold: float = DEFAULT_THRESHOLD
) -> pd.DataFrame:
    """The plotted data: conv rows of the slice uc = uh = ur = us = 1, plus ``selected``, ``in_reading``."""
    if frame.empty:
        return pd.DataFrame(
            columns=["u_k", "u_w", "pct_peak_median", "selected", "in_reading", "status", "busy"]
        )
    sl = frame[(frame["op"] == "conv2d")].copy()
    for d in ("c", "h", "r", "s"):
        sl = sl[sl[f"u_{d}"] == 1]
    pct = pd.to_numeric(sl["pct_peak_median"], errors="coerce")
    sl["pct_peak_median"] = pct.where(sl["status"] == "ok")
    if "pct_peak_min" not in sl.columns:
        sl["pct_peak_min"] = float("nan")
    sl["selected"] = (sl["status"] == "ok") & (pct >= threshold)
    sl["in_reading"] = [not mkmod.conv_violations(microkernel_of(r), reading) for r in sl.to_dict("records")]
    cols = [
        "u_k",
        "u_w",
        "pct_peak_median",
        "pct_peak_min",
        "selected",
        "in_reading",
        "status",
        "busy",
        "drift",
        "suffix",
        "flags",
    ]
    return sl[[c for c in cols if c in sl.columns]].sort_values(["u_w", "u_k"]).reset_index(drop=True)


def plot_fig5_2(data: pd.DataFrame, out: Path, title: str = "", max_k: int = 15, max_w: int = 15) -> Path:
    """Heatmap of % of peak over uk (vectors, x) and uw (y), selected cells bordered red; PNG + CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data.to_csv(out.with_suffix(".csv"), index=False)
    ks, ws = list(range(1, max_k + 1)), list(range(1, max_w + 1))
    grid = pd.DataFrame(np.nan, index=pd.Index(ws, name="uw"), columns=pd.Index(ks, name="uk (vectors)"))
    for r in data.itertuples():
        if int(r.u_w) in grid.index and int(r.u_k) in grid.columns and pd.notna(r.pct_peak_median):
            grid.loc[int(r.u_w), int(r.u_k)] = float(r.pct_peak_median)
    with matplotlib.rc_context({"text.parse_math": False}):
        fig = Figure(figsize=(9.5, 8))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        sns.heatmap(
            grid, ax=ax, vmin=0, vmax=100, cmap="viridis", annot=True, fmt=".0f", annot_kws={"size": 7},
            cbar_kws={"label": "% of calibrated peak (median)"}, linewidths=0.3, linecolor="white",
            mask=grid.isna(),
        )  # fmt: skip
        for r in data.itertuples():
            x, y = (
                ks.index(int(r.u_k)) if int(r.u_k) in ks else None,
                ws.index(int(r.u_w)) if int(r.u_w) in ws else None,
            )
            if x is None or y is None:
                continue
            if bool(r.selected):
                ax.add_patch(Rectangle((x, y), 1, 1, fill=False, edgecolor="red", linewidth=2.2))
            elif bool(getattr(r, "in_reading", False)):
                ax.add_patch(
                    Rectangle(
                        (x + 0.06, y + 0.06),
                        0.88,
                        0.88,
                        fill=False,
                        edgecolor="black",
                        linewidth=0.8,
                        linestyle=":",
                    )
                )
            if str(getattr(r, "status", "ok")) != "ok":
                ax.text(x + 0.5, y + 0.5, "x", ha="center", va="center", color="red", fontsize=9)
            if bool(getattr(r, "busy", False)) or bool(getattr(r, "drift", False)):
                ax.text(x + 0.92, y + 0.2, "*", ha="right", va="center", color="orange", fontsize=10)
        ax.set_facecolor("#eeeeee")
        ax.set_title(title or "Microkernels in isolation, slice c=h=r=s=1", fontsize=10)
        ax.set_xlabel("uk: unroll along k, in vectors (alpha)")
        ax.set_ylabel("uw: unroll along w (beta)")
        fig.text(
            0.01, 0.005,
            "red border: selected (>= threshold); dotted: in the enumeration, not selected; "
            "grey: not evaluated; x: failed; *: busy core or peak drift",
            fontsize=7,
        )  # fmt: skip
        fig.tight_layout(rect=(0, 0.02, 1, 1))
        fig.savefig(out, dpi=130)
    return out


# -- the command -----------------------------------------------------------------------------------------
def command(
    isa: str = "auto",
    op: str = "conv2d",
    quick: bool = False,
    everything: bool = False,
    reading: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    out: Path | None = None,
    results_dir: Path = Path("results"),
    rerun: bool = False,
    cap: int = QUICK_CAP,
    broadcast: str | None = None,
) -> dict[str, Any]:
    """``harness microkernels``: counts per reading, benchmark, selection, stored JSON, Fig 5.2."""
    start = time.perf_counter()
    m = machine_mod.detect()
    if isa == "auto":
        if not m.best_isa:
            raise ValueError(f"this CPU ({m.model_name}) has neither AVX2+FMA nor AVX-512; give --isa")
        isa = m.best_isa
    data = mkmod.isa_data(isa)  # unknown ISA: ValueError naming the known ones
    embedded_broadcast(broadcast, get_target(isa), fma=True)  # its own rule; SchemeError is a ValueError
    reading = reading or mkmod.default_reading(isa)
    if reading not in data["conv"]["readings"]:
        raise ValueError(f"unknown reading {reading!r}; known: {', '.join(data['conv']['readings'])}")
    t_enum = time.perf_counter()
    counts = mkmod.reading_counts(isa)
    print(
        f"{m.model_name} [{m.fingerprint}], ISA {isa} ({data['vector_registers']} vector registers, "
        f"{data['lanes']} lanes), executes: {', '.join(m.isas) or 'none'}"
    )
    print("conv microkernels per reading (thesis: 3059 on AVX-512):")
    for name, n in counts.items():
        print(f"  {name:<24} {n:>6}" + ("   <- default" if name == mkmod.default_reading(isa) else ""))
    print(f"matmul microkernels (Eq. 5.1): {len(mkmod.enumerate_matmul(isa))}")
    if isa not in m.isas:
        print(f"note: this CPU cannot execute {isa}: kernels are compiled and checked for legality only")

    if everything:
        mks, what = (
            mkmod.enumerate_microkernels(isa, op, reading),
            f"all {op} microkernels of reading {reading}",
        )
    elif quick:
        mks, what = quick_set(isa, op, reading, cap), f"quick subset ({op})"
    elif op == "conv2d":
        mks, what = mkmod.fig5_2_slice(isa), "Fig 5.2 slice (uc=uh=ur=us=1)"
    else:
        mks, what = mkmod.enumerate_matmul(isa), "all matmul microkernels"
    enumerate_s = time.perf_counter() - t_enum
    print(f"benchmarking {len(mks)} microkernels: {what}")
    cfg = BenchConfig(results_dir=Path(results_dir), rerun=rerun, broadcast=broadcast)
    if broadcast:
        print(f"code generation: broadcast={broadcast} (selected apart from the default code)")
    t_bench = time.perf_counter()
    frame = run_microbench(mks, cfg, machine=m)
    benchmark_s = time.perf_counter() - t_bench
    t_sel = time.perf_counter()
    sel = select(frame, threshold)
    path = save_selection(
        frame,
        isa,
        op,
        threshold,
        cfg.cache,
        m,
        extra={"reading": reading, "timing": asdict(cfg.timing), "warmup_flops": cfg.warmup_flops},
        broadcast=broadcast,
    )
    select_s = time.perf_counter() - t_sel
    n_reused = int(frame["reused"].sum()) if not frame.empty else 0
    wall = {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "set": what,
        "quick": bool(quick),
        "reading": reading,
        "n_enumerated": int(counts.get(reading, 0)) if op == "conv2d" else len(mks),
        "n_microkernels": len(mks),
        "n_measured": len(mks) - n_reused,
        "n_reused": n_reused,
        "enumerate_s": enumerate_s,
        "compile_s": float(frame.attrs.get("compile_s", 0.0)),
        "benchmark_s": benchmark_s,
        "select_s": select_s,
        "total_s": enumerate_s + benchmark_s + select_s,
        **cores_used(),
    }
    record_wall_time(path, wall)
    ok = frame[frame["status"] == "ok"] if not frame.empty else frame
    summary: dict[str, Any] = {
        "isa": isa, "counts": counts, "n_benchmarked": len(frame), "n_ok": len(ok), "n_selected": len(sel),
        "n_busy": int(frame["busy"].sum()) if not frame.empty else 0,
        "n_drift": int(frame["drift"].sum()) if not frame.empty else 0, "selection": str(path),
    }  # fmt: skip
    bad = frame[~frame["status"].isin(["ok", "unsupported"])] if not frame.empty else frame
    if len(bad):
        print(
            f"{len(bad)} microkernel(s) failed: "
            + "; ".join(f"{r.suffix}: {r.status}" for r in bad.itertuples())
        )
    if len(ok):
        best = ok.sort_values("pct_peak_median", ascending=False).iloc[0]
        summary["best"] = (best["suffix"], float(best["pct_peak_median"]))
        print(
            f"best: [{best['suffix']}] {best['pct_peak_median']:.1f}% of peak "
            f"({best['gflops_median']:.1f} of {best['peak_gflops']:.1f} GFLOP/s)"
            + (" [busy core]" if best["busy"] else "")
            + (" [peak drift]" if best["drift"] else "")
        )
    print(f"{len(sel)}/{len(ok)} measured microkernels reach {threshold:g}% of peak"
          + (f"; rows flagged 'busy core': {summary['n_busy']}, 'peak drift': {summary['n_drift']}"
             if summary["n_busy"] or summary["n_drift"] else ""))  # fmt: skip
    if len(ok):  # a diagnostic only: contention slows some repetitions, the fastest one much less
        by_min = int((pd.to_numeric(ok["pct_peak_min"], errors="coerce") >= threshold).sum())
        summary["n_selected_by_min"] = by_min
        print(f"  (by the fastest repetition instead of the median: {by_min}/{len(ok)}; not used to select)")
    for r in sel.head(10).itertuples():
        note = (" [busy core]" if r.busy else "") + (" [peak drift]" if r.drift else "")
        print(f"  {r.pct_peak_median:5.1f}%  [{r.suffix}]{note}")
    if len(ok) and summary["best"][1] > 105:
        print(
            "warning: above 100% of the calibrated peak: the calibration was probably taken on a busy "
            f"machine; `harness calibrate --force --results {results_dir}` on a quiet one"
        )
    stored = json.loads(path.read_text())
    print(f"selection stored: {path} ({stored['n_selected']} selected of {stored['n_measured']} measured)")
    if op == "conv2d" and out is not None:
        plotted = fig5_2_frame(frame, isa, reading, threshold)
        f = data["conv"]["fig5_2"]
        title = (
            f"{isa} microkernels in isolation on {m.model_name}, % of calibrated peak; slice c=h=r=s=1\n"
            f"[T_{{512,c}}, U_{{1,s}}, U_{{1,r}}, U_{{1,c}}, U_{{uw,w}}, U_{{1,h}}, U_{{uk,k}}, V_k]; "
            f"red: >= {threshold:g}%" + (" (quick subset)" if quick else "")
        )
        png = plot_fig5_2(plotted, Path(out), title, int(f["max_k"]), int(f["max_w"]))
        summary["figure"] = str(png)
        print(f"figure: {png} (+ {png.with_suffix('.csv').name})")
    summary["wall_s"] = time.perf_counter() - start
    summary["wall"] = wall
    print(
        f"wall time: enumeration {enumerate_s:.2f}s, benchmark {benchmark_s:.1f}s (of which compilation "
        f"{wall['compile_s']:.1f}s on {wall['compile_jobs']} parallel jobs, {wall['cpus_available']} CPUs; "
        f"timing on {wall['timing_cpus']} pinned CPU), selection {select_s:.2f}s; "
        f"command {summary['wall_s']:.1f}s"
        + (f" ({n_reused} of {len(mks)} rows reused from the store: not a full cost)" if n_reused else "")
    )
    return summary


WALL_HISTORY = 20  # wall-time records kept per selection file


def cores_used() -> dict[str, int]:
    """CPUs the selection used: compilation runs ``build_many``'s parallel jobs, timing one pinned CPU."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        available = os.cpu_count() or 1
    return {"cpus_available": available, "compile_jobs": os.cpu_count() or 1, "timing_cpus": 1}


def record_wall_time(path: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` (enumeration, benchmark and selection wall time) to the selection file's
    ``wall_time`` list (the last :data:`WALL_HISTORY` kept), atomically."""
    record = json.loads(Path(path).read_text())
    record["wall_time"] = [*record.get("wall_time", []), {k: jsonable(v) for k, v in entry.items()}][
        -WALL_HISTORY:
    ]
    tmp = Path(path).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def wall_times(cache_dir: Path) -> list[dict[str, Any]]:
    """Every stored wall-time record under ``cache_dir``, with the machine, ISA and operator of its file."""
    out = []
    for path in sorted(Path(cache_dir).glob("microkernels-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a file being replaced, or not ours
        for entry in record.get("wall_time", []):
            out.append({
                "fingerprint": record.get("fingerprint"), "model_name": record.get("model_name"),
                "isa": record.get("isa"), "op": record.get("op"), **entry,
            })  # fmt: skip
    return out


def unroll_sizes_selected(
    dim: str, isa: str | None = None, op: str = "conv2d", cache_dir: Path = Path("results/cache")
) -> list[int]:
    """Distinct unroll factors on ``dim`` among the selected microkernels (input to λ_seq covers)."""
    return mkmod.unroll_sizes(load_selected(isa, op, cache_dir), dim)
