"""TVM baseline (optional, issue 5): tune each layer with MetaSchedule, then check and time it beside oneDNN.

``harness tvm-tune --layers resnet18_06,yolo9000_12 [--trials 200] [--seeds 0|0,3|0-7] [--cost-model xgb]
[--strategy evolutionary] [--rounds 3] [--if-available] [--results DIR]`` tunes each layer (a name of
``conf/workload/``, a convolution; ``all``: the 23 layers of seed 000) for this CPU and one core
(``kernels.tvm_conv``), exports the best schedule to ``DIR/tvm/`` and measures it, oneDNN and
oneDNN-blocked through the standard pipeline (check before timing, interleaved rounds) as experiment
``tvm_conv``: the report's Fig 6.3 shows its bars. Tuning measures on this machine, so run it with nothing
else timing. A module already tuned with the same trials, seed, cost model and strategy is reused.
``--retime`` times them again, replacing the stored rows (after a change to the wrapper). Several seeds
tune independent runs (Fig 6.2 draws TVM's per-trial curve of each, from the tuning record beside each
module); a layer's modules are timed together, in the same rounds as oneDNN.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import config, store
from harness import machine as machine_mod
from harness.cli import workload_of
from harness.commands import positive_int
from harness.config import CONF_DIR, composed
from harness.experiment import Experiment, run_experiment
from kernels import tvm_conv
from kernels.baselines import versioned
from kernels.candidate import Candidate, Workload
from kernels.conv_space import load_layers

EXPERIMENT = "tvm_conv"
BESIDE = ("onednn", "onednn-blocked")


def load_workload(name: str) -> Workload:
    """A convolution of ``conf/workload/<name>.yaml``, as ``harness run workload=<name>`` composes it."""
    if not (CONF_DIR / "workload" / f"{name}.yaml").exists():
        raise ValueError(f"no workload {name!r} (conf/workload/{name}.yaml)")
    w = workload_of(composed([f"workload={name}"]))
    if w.op.name != "conv2d":
        raise ValueError(f"workload {name!r} is not a convolution (op {w.op.name!r})")
    return w


def seed_list(text: str) -> list[int]:
    """``"0"``, ``"0,3,5"`` or ``"0-7"`` (inclusive) as a sorted list of distinct seeds >= 0."""
    seeds: set[int] = set()
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            first = int(lo)
            last = int(hi) if dash else first
            if first < 0 or last < first:
                raise ValueError
            seeds.update(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds are N, N,M,... or N-M with 0 <= N <= M, got {text!r}"
        ) from None
    return sorted(seeds)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness tvm-tune", description=__doc__.splitlines()[0])
    p.add_argument("--layers", required=True, help="comma-separated workload names, or 'all' (23 layers)")
    p.add_argument("--trials", type=positive_int, default=200, help="MetaSchedule trials per layer")
    p.add_argument("--seeds", "--seed", type=seed_list, default=[0], help="tuning seeds: N, N,M,... or N-M")
    p.add_argument("--cost-model", choices=tvm_conv.COST_MODELS, default="xgb")
    p.add_argument("--strategy", choices=tvm_conv.STRATEGIES, default="evolutionary")
    p.add_argument(
        "--if-available",
        action="store_true",
        help="without TVM installed, say so and exit 0 (the workflow's job: Fig 6.3 then has no TVM bar)",
    )
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved timing rounds")
    p.add_argument(
        "--retime",
        action="store_true",
        help="time the modules and oneDNN again and replace their stored rows (a stored row is otherwise "
        "kept: rows are keyed by candidate, so a change to the wrapper alone is not re-timed)",
    )
    p.add_argument("--results", type=Path, default=Path("results"))
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    names = [layer.name for layer in load_layers()] if args.layers == "all" else args.layers.split(",")
    try:
        layers = [load_workload(n.strip()) for n in names if n.strip()]
    except ValueError as exc:
        print(f"harness tvm-tune: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if reason := tvm_conv.unavailable():
        what = "nothing measured" if args.if_available else "error"
        print(f"harness tvm-tune: {what}: {reason}", file=sys.stderr)
        raise SystemExit(0 if args.if_available else 2)
    m = machine_mod.detect()
    timing = config.timing("hot", rounds=args.rounds)  # the default timing group, as harness run's
    for n, w in enumerate(layers, 1):
        say = f"[{EXPERIMENT}] layer {n}/{len(layers)} {w.name}"
        cands = []
        for seed in args.seeds:
            how = f"{args.cost_model}-{args.strategy}"
            done = tvm_conv.is_tuned(tvm_conv.module_path(args.results / "tvm", w, args.trials, seed, how))
            print(f"{say}: {'reusing the module of' if done else 'tuning'} {args.trials} trials, seed {seed}",
                  file=sys.stderr)  # fmt: skip
            tuned = tvm_conv.tune(w, args.trials, args.results / "tvm", seed, args.cost_model, args.strategy)
            rec = tuned.record
            print(f"[{EXPERIMENT}] {w.name}: tuned in {rec['tuning_seconds']} s, TVM's best "
                  f"{rec['tvm_best_latency_s']} s: {tuned.path}", file=sys.stderr)  # fmt: skip
            cands.append(versioned(Candidate("baseline", "tvm", (("module", str(tuned.path.resolve())),))))
        cands += [versioned(Candidate("baseline", b)) for b in BESIDE]
        if not args.retime:
            exp = Experiment(EXPERIMENT, w, cands, timing=timing, results_dir=args.results)
            run_experiment(exp, machine=m)
            continue
        args.results.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="retime-", dir=args.results) as tmp:
            exp = Experiment(EXPERIMENT, w, cands, timing=timing, results_dir=Path(tmp),
                             cache_root=args.results / "cache")  # fmt: skip
            run_experiment(exp, machine=m)
            table = store.table(Path(tmp), EXPERIMENT)
            n = store.add_rows(args.results, table.to_pylist()) if table is not None else 0
        print(f"[{EXPERIMENT}] {w.name}: {n} rows timed again, replacing the stored ones", file=sys.stderr)
