"""PARLOOPER loop strings on GEMM and convolution: enumerate, rank (GEMM model), time vs oneDNN (seed 003)

    harness loop-strings [--shapes 256x256x256] [--limit 40] [--time all] [--threads 1] [--results DIR]
    harness loop-strings --op conv [--layers quick|resnet50|NAME,...] [--limit 24] [--results DIR]

For each shape: enumerate loop strings and block lists under the paper's constraints (§II-D; a seeded
sample of ``--limit``), predict each with the slice-level LRU model (studies.loop_strings.model), time
``--time`` of them (``all``, or the model's top N) plus the oneDNN baseline through the standard pipeline
(every kernel checked first), store the predictions under ``<results>/parlooper/model/``, and print the
best string vs oneDNN and whether the model's top-5 classes contain the measured best. ``--op conv``
times ``--limit`` sampled loop orders of each ResNet-50 layer (Fig 7; the slice model covers GEMM bodies
only) beside oneDNN's direct convolution.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import pandas as pd

from harness import cachesim, store
from harness.commands import positive_int
from kernels.baselines import versioned
from kernels.candidate import Candidate
from studies.loop_strings import kernels as lsm
from studies.loop_strings import model as parlooper_model

# Shapes of the paper's GEMM figures (fp32): Fig 2 [repo] squares with bm = bn = bk = 32.
SHAPE_SETS = {
    "quick": ["256x256x256"],
    "fig2": ["512x512x512", "1024x1024x1024", "2048x2048x2048"],
}
MODEL_DIR = "parlooper/model"
#: predictions of a ranking not finished yet (a stopped run resumes from them; removed once it finishes)
PARTIAL_DIR = "parlooper/model-partial"
CONV_SETS = {"quick": ["res5-3x3-512-512"], "resnet50": list(lsm.RESNET50)}


def _fail(msg: str) -> None:
    print(f"harness loop-strings: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    names = SHAPE_SETS.get(text, text.split(","))
    out = []
    for s in names:
        try:
            m, n, k = (int(v) for v in s.lower().split("x"))
        except ValueError:
            _fail(f"shape {s!r} is not MxNxK (or one of {', '.join(SHAPE_SETS)})")
        if min(m, n, k) < 1:
            _fail(f"shape {s!r} has a non-positive size")
        out.append((m, n, k))
    return out


def baselines(args: argparse.Namespace) -> list[Candidate]:
    """The library baselines, on as many threads as the loop strings (a 2-thread string vs a 1-thread
    library would flatter the strings)."""
    opts = (("threads", args.threads),) if args.threads > 1 else ()
    return [versioned(Candidate("baseline", b.strip(), opts)) for b in args.baselines.split(",") if b.strip()]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="harness loop-strings", description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--experiment", default="parlooper")
    p.add_argument("--op", choices=("gemm", "conv"), default="gemm")
    p.add_argument("--shapes", default="quick", help="GEMM: MxNxK,... or quick | fig2")
    p.add_argument("--layers", default="quick", help="conv: quick | resnet50 | layer names")
    p.add_argument("--block", type=positive_int, default=32, help="bm = bn = bk")
    p.add_argument("--k-step", type=positive_int, default=1, help="BRGEMM batch count")
    p.add_argument("--core", choices=lsm.CORES, default="c")
    p.add_argument(
        "--layout",
        choices=lsm.LAYOUTS,
        default="plain",
        help="GEMM operands: row-major in place, or packed into PARLOOPER's blocked layout inside the call; "
        "convolution weights: HWIO in place, or reordered into blocks once per weights buffer",
    )
    p.add_argument("--limit", type=positive_int, default=40, help="enumerated configurations (seeded sample)")
    p.add_argument("--time", default="all", help="all, or the model's top N")
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--cache", default="host", help="conf/cache configuration of the model")
    p.add_argument("--baselines", default="onednn", help="comma-separated library baselines ('' for none)")
    p.add_argument("--max-reps", type=positive_int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--jobs", type=positive_int, default=1,
        help="worker processes for the model's predictions (not for the timings, which run one at a time)",
    )  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.op == "conv":
        conv_main(args)
        return
    shapes = parse_shapes(args.shapes)
    if args.limit < 1 or args.threads < 1 or args.block < 1 or args.k_step < 1:
        _fail("--limit, --threads, --block and --k-step must be positive")
    try:
        cfg = cachesim.load_config(args.cache)
    except cachesim.CacheConfigError as exc:
        _fail(str(exc))
    if args.time != "all":
        try:
            n_time = int(args.time)
        except ValueError:
            _fail(f"--time must be 'all' or an integer, got {args.time!r}")
    from harness import config
    from harness import machine as machine_mod
    from harness.experiment import Experiment, run_experiment
    from kernels.candidate import Workload

    m = machine_mod.detect()
    params = lsm.GemmParams(
        args.block, args.block, args.block, args.k_step, core=args.core, layout=args.layout
    )
    for mm, nn, kk in shapes:
        sizes = {"i": mm, "j": nn, "k": kk}
        try:
            cands = lsm.enumerate_gemm(
                sizes, params, parallel=args.threads > 1, limit=args.limit, seed=args.seed
            )
        except lsm.LoopStringError as exc:
            _fail(str(exc))
        shape = f"{mm}x{nn}x{kk}"
        name = f"{args.experiment}-gemm-{shape}-t{args.threads}"
        out = args.results / MODEL_DIR / f"{name}-{m.fingerprint}.parquet"
        model = stored_model(out, cands, cfg, args.threads)
        if model is None:
            partial = PartialModel(args.results / PARTIAL_DIR / out.name, cfg, args.threads)
            try:
                ranked = parlooper_model.rank(
                    cands, sizes, cfg, args.threads, Progress(name), jobs=args.jobs,
                    known=partial.load(), on_result=partial.add,
                )  # fmt: skip
            except BaseException:  # a stop, a dead worker: keep what was predicted, then stop
                partial.save()
                raise
            partial.finish()
            predicted = {c.key: pr.cycles for c, pr in ranked}
            top = parlooper_model.top_classes(predicted)
            model = pd.DataFrame([
                {"experiment": name, "candidate_key": c.key, "loop_string": c.text,
                 "options": json.dumps(dict(c.options), sort_keys=True, default=list),
                 "predicted_cycles": pr.cycles,
                 "predicted_flops_per_cycle": pr.gflops_per_ghz, "model_rank": k,
                 "in_top5_classes": c.key in top, "cache": cfg.name, "cache_key": cfg.key,
                 "threads": args.threads, "machine_fingerprint": m.fingerprint, "cpu_model": m.model_name,
                 "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
                for k, (c, pr) in enumerate(ranked)
            ])  # fmt: skip
            out.parent.mkdir(parents=True, exist_ok=True)
            model.to_parquet(out, index=False)
        else:
            print(f"[{name}] the model's predictions of these {len(model)} strings reused from {out}",
                  file=sys.stderr, flush=True)  # fmt: skip
        by_key = {c.key: c for c in cands}
        ranked_cands = [by_key[k] for k in model.sort_values("model_rank")["candidate_key"]]
        timed = ranked_cands if args.time == "all" else ranked_cands[:n_time]
        libs = baselines(args)
        timing = config.timing(  # the hot group, as harness run's, with this study's repetitions
            "hot", warmup=2, min_reps=5, max_reps=args.max_reps, max_seconds=1.0, threads=args.threads
        )
        w = Workload.make(f"gemm-{shape}", "matmul", sizes)
        exp = Experiment(name, w, timed + libs, timing=timing, results_dir=args.results)
        run_experiment(exp, machine=m)
    report(args.results, args.experiment)


def stored_model(
    path: Path, cands: list[Candidate], cfg: cachesim.CacheConfig, threads: int
) -> pd.DataFrame | None:
    """The predictions a previous run stored for exactly these candidates, cache and threads (the model
    simulates every BRGEMM call: half an hour for 1000 strings of a 1024^3 GEMM), else None."""
    if not path.is_file():
        return None
    try:
        model = pd.read_parquet(path)
    except Exception:  # noqa: BLE001 - a file cut by a crash: predict again
        return None
    same = (
        set(model["candidate_key"]) == {c.key for c in cands}
        and set(model["cache_key"]) == {cfg.key}
        and set(model["threads"]) == {threads}
    )
    return model if same else None


class PartialModel:
    """The predictions of an unfinished ranking, kept every few seconds: a 2048^3 ranking takes over an hour
    on one core, and a stopped run should not lose it. Written whole (:func:`harness.store.write_frame`)."""

    EVERY_S = 30.0

    def __init__(self, path: Path, cfg: cachesim.CacheConfig, threads: int) -> None:
        self.path, self.cache_key, self.threads = path, cfg.key, threads
        self.rows: list[dict[str, object]] = []
        self.saved = time.monotonic()

    def load(self) -> dict[str, parlooper_model.Prediction]:
        """Predictions stored by a stopped run with the same cache model and threads."""
        if not self.path.is_file():
            return {}
        try:
            df = pd.read_parquet(self.path)
        except Exception:  # noqa: BLE001 - unreadable: predict again
            return {}
        df = df[(df["cache_key"] == self.cache_key) & (df["threads"] == self.threads)]
        self.rows = df.to_dict("records")
        pred = parlooper_model.Prediction
        return {
            r["candidate_key"]: pred(r["cycles"], r["flops_per_cycle"], r["calls"], r["threads"])
            for r in self.rows
        }

    def add(self, c: Candidate, pr: parlooper_model.Prediction) -> None:
        self.rows.append({"candidate_key": c.key, "cycles": pr.cycles, "flops_per_cycle": pr.gflops_per_ghz,
                          "calls": pr.calls, "threads": pr.threads, "cache_key": self.cache_key})  # fmt: skip
        if time.monotonic() - self.saved >= self.EVERY_S:
            self.save()

    def save(self) -> None:
        store.write_frame(pd.DataFrame(self.rows), self.path)
        self.saved = time.monotonic()

    def finish(self) -> None:
        """The ranking is complete (and about to be stored whole): the partial file has served."""
        self.path.unlink(missing_ok=True)


class Progress:
    """The model's progress on stderr, about every 5% of the strings and at the end, with an ETA."""

    def __init__(self, name: str) -> None:
        self.name, self.start, self.shown = name, time.monotonic(), 0

    def __call__(self, done: int, total: int) -> None:
        if done * 20 // total == self.shown and done < total:
            return
        self.shown = done * 20 // total
        elapsed = time.monotonic() - self.start
        print(f"[{self.name}] model: {done}/{total} strings predicted, elapsed {elapsed:.0f}s "
              f"ETA {elapsed / done * (total - done):.0f}s", file=sys.stderr, flush=True)  # fmt: skip


def conv_main(args: argparse.Namespace) -> None:
    names = CONV_SETS.get(args.layers, args.layers.split(","))
    unknown = [n for n in names if n not in lsm.RESNET50]
    if unknown:
        _fail(f"unknown layer(s) {unknown}; allowed: quick, resnet50, {', '.join(lsm.RESNET50)}")
    if args.limit < 1 or args.threads < 1:
        _fail("--limit and --threads must be positive")
    from harness import config
    from harness import machine as machine_mod
    from harness.experiment import Experiment, run_experiment
    from kernels.candidate import Workload

    m = machine_mod.detect()
    for name in names:
        sizes, stride, params = lsm.resnet50_layer(name)
        params = lsm.ConvParams(params.bc, params.bk, params.bw, core=args.core, layout=args.layout)
        cands = lsm.enumerate_conv(sizes, params, parallel=args.threads > 1, limit=args.limit, seed=args.seed)
        libs = baselines(args)
        timing = config.timing(  # the hot group, as harness run's, with this study's repetitions
            "hot", warmup=2, min_reps=5, max_reps=args.max_reps, max_seconds=1.0, threads=args.threads
        )
        w = Workload.make(f"resnet50-{name}", "conv2d", sizes, stride=stride)
        exp = Experiment(f"{args.experiment}-conv-{name}-t{args.threads}", w, cands + libs, timing=timing,
                         results_dir=args.results)  # fmt: skip
        run_experiment(exp, machine=m)
    report(args.results, args.experiment)


def report(results: Path, experiment: str) -> None:
    from harness import analysis, store

    summary = analysis.summarize(store.load(results))
    for line in summarize_runs(summary, results, experiment):
        print(line)


def summarize_runs(summary: pd.DataFrame, results: Path, experiment: str) -> list[str]:
    """Best loop string vs each baseline, and the model's top-5 claim, per experiment and machine."""
    model = load_model(results)
    lines: list[str] = []
    if summary.empty:
        return lines
    ok = summary[
        (summary["status"] == "ok") & summary["experiment"].astype(str).str.startswith(f"{experiment}-")
    ]
    for (exp, fp), part in ok.groupby(["experiment", "machine_fingerprint"]):
        ls_rows = part[part["candidate_kind"] == "loop_string"]
        if ls_rows.empty:
            continue
        best = ls_rows.loc[ls_rows["median_ns"].idxmin()]
        in_top = None
        if not model.empty:
            mod = model[(model["experiment"] == exp) & (model["machine_fingerprint"] == fp)]
            if len(mod):
                in_top = bool(mod[mod["candidate_key"] == best["candidate_key"]]["in_top5_classes"].any())
        msg = f"{exp}: best of {len(ls_rows)} strings {best['label']} {best['gflops_median']:.1f} GFLOP/s"
        for _, b in part[part["candidate_kind"] == "baseline"].iterrows():
            msg += f"; {b['label']} {b['gflops_median']:.1f} (x{b['median_ns'] / best['median_ns']:.2f})"
        claim = "" if in_top is None else f"; measured best in the model's top-5 classes: {in_top}"
        lines.append(msg + claim)
    return lines


def load_model(results: Path) -> pd.DataFrame:
    files = sorted((Path(results) / MODEL_DIR).glob("*.parquet"))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else pd.DataFrame()
