"""the 720 loop orders of direct convolution: cache simulation, timing, rank correlation (seed 004)

    harness permutations [--layers quick] [--cache loki,host] [--threads 1] [--time 24] [--results DIR]

Simulates every loop order of every layer (pycachesim, thesis cycle model) on each cache configuration of
``conf/cache/`` and thread count, stores the rows under ``<results>/permutations/sim/``, times ``--time``
orders per layer (evenly spaced along the SJT order; ``all`` for 720; checked kernels through the standard
pipeline), and prints the winners and the Spearman correlation of simulated cycles with measured time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import cachesim
from harness.commands import positive_int
from studies.permutations import kernels as perm
from studies.permutations import study as permstudy


def _fail(msg: str) -> None:
    print(f"harness permutations: error: {msg}", file=sys.stderr)
    sys.exit(2)


def _ints(text: str, what: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        _fail(f"{what} must be comma-separated integers, got {text!r}")
    if not out or any(v < 1 for v in out):
        _fail(f"{what} must be positive integers, got {text!r}")
    return out


def spaced(orders: list[perm.Order], n: int) -> list[perm.Order]:
    """n orders evenly spaced along the SJT order (covers every region of the signature)."""
    if n >= len(orders):
        return list(orders)
    step = len(orders) / n
    return [orders[int(k * step)] for k in range(n)]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="harness permutations", description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--experiment", default="permutations", help="name of this study's rows")
    p.add_argument(
        "--sim-from", default=None, metavar="EXPERIMENT",
        help="reuse that experiment's stored simulations (e.g. to time the same orders at -O0)",
    )  # fmt: skip
    p.add_argument("--layers", default="quick", help="table4.1 | table4.2 | table4.3 | quick | names")
    p.add_argument("--cache", default="loki,host", help="configurations of conf/cache/, comma-separated")
    p.add_argument("--threads", default="1", help="simulated thread counts, e.g. 1,2,4,8")
    p.add_argument("--cap", type=positive_int, default=None, help="simulate at most this many MACs per order")
    p.add_argument("--layout", choices=cachesim.LAYOUTS, default="harness",
                   help="harness: the timed kernels' HWC layout; thesis: CHW without halo")  # fmt: skip
    p.add_argument("--no-partial-sums", action="store_true", help="output read+written at every MAC")
    p.add_argument("--time", default="24", help="orders timed per layer: N (spaced along SJT), all, or 0")
    p.add_argument("--time-layers", default=None, help="layers to time (default: --layers)")
    p.add_argument("--max-reps", type=positive_int, default=20)
    p.add_argument("--time-threads", default="1", help="thread counts timed, e.g. 1,2 (>1: Tpar orders)")
    p.add_argument(
        "--opt", default="-O3", help="timed kernels' flags (thesis: -O0; give it its own --experiment)"
    )
    p.add_argument("--jobs", type=positive_int, default=1, help="simulation processes")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    try:
        layers = perm.layer_set(args.layers)
        time_layers = perm.layer_set(args.time_layers) if args.time_layers else layers
        configs = [cachesim.load_config(c.strip()) for c in args.cache.split(",") if c.strip()]
    except (perm.PermutationError, cachesim.CacheConfigError) as exc:
        _fail(str(exc))
    threads = _ints(args.threads, "--threads")
    if args.time == "all":
        n_time = 720
    else:
        try:
            n_time = int(args.time)
        except ValueError:
            _fail(f"--time must be an integer or 'all', got {args.time!r}")
        if n_time < 0:
            _fail(f"--time must be >= 0, got {n_time}")
    ps = not args.no_partial_sums

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    permstudy.run_simulations(
        args.results, args.experiment, layers, configs, threads, args.cap, args.layout, ps, args.jobs, say,
        reuse_from=args.sim_from,
    )  # fmt: skip
    time_threads = _ints(args.time_threads, "--time-threads")
    if n_time:
        from harness.run import TimingConfig

        orders = spaced(perm.sjt(), n_time)
        for tt, (name, sizes) in ((t, ls) for t in time_threads for ls in time_layers.items()):
            timing = TimingConfig(
                mode="hot", warmup=2, min_reps=5, max_reps=args.max_reps, max_seconds=1.0, threads=tt
            )
            permstudy.time_orders(
                args.results, args.experiment, name, sizes, orders, ps, timing, say=say,
                opt_flags=tuple(args.opt.split()),
            )  # fmt: skip
    report(args.results, args.experiment)


def report(results: Path, experiment: str) -> None:
    """Winners per configuration and thread count, and the rank correlation with measured time."""
    from harness import analysis, store

    sim = permstudy.load_sim(results, experiment)
    if sim.empty:
        return
    for (cache, t, ps), part in sim.groupby(["cache", "threads", "partial_sums"]):
        table = permstudy.speedup_table(part)
        w = permstudy.winners(table)
        print(
            f"{cache} threads={t} partial_sums={ps} ({table.shape[1]} layers): top average "
            f"{w['top_average']['order']} avg {w['top_average']['average']:.3f} worst "
            f"{w['top_average']['worst']:.3f}; top worst-case {w['top_worst']['order']} "
            f"worst {w['top_worst']['worst']:.3f}"
        )
    summary = analysis.summarize(store.load(results))
    timed = permstudy.timed_frame(summary, experiment)
    rho = permstudy.spearman_by_layer(sim, timed)
    for _, r in rho[rho["experiment"] == experiment].iterrows() if len(rho) else ():
        print(
            f"spearman(simulated cycles [{r['cache']}], measured time) on {r['layer']} over "
            f"{r['n_orders']} orders: {r['spearman']:.3f} (p={r['p_value']:.2g})"
        )
