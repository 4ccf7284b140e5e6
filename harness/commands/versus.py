"""each workload's best candidate against the best of its baselines, as ratios paired by timing round

    harness versus --results DIR --experiment ttile_conv_prior [--baselines onednn,onednn-blocked|all]
                   [--within N] [--csv OUT.csv]

Per machine, workload and timing condition (the mode, and the co-runner if there was one): the fastest
candidate that was timed in the interleaved rounds (a search's confirmed ones; the fastest of all when
none was), the fastest of the named baselines, their % of peak (median), and the candidate's speed over
the baseline's round by round (harness.analysis.round_ratio: median, lowest, highest of the rounds). On a
shared host a single run's verdict is weak: the range says how much the rounds agreed. Then, per group of
workloads (a network of the convolution layers), the flop-weighted average % of peak of each side and
the candidates ahead in every round / in their median. ``--within N`` keeps the candidates a search
proposed among its first N (a best of 100 from a 1000-draw run, which ``search.confirm_within`` confirms).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness import analysis, store
from harness.commands import positive_int

DEFAULT_BASELINES = ("onednn", "onednn-blocked")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness versus", description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--experiment", required=True)
    p.add_argument(
        "--baselines",
        default=",".join(DEFAULT_BASELINES),
        help="baselines (candidate texts), comma separated, or 'all' (every baseline in the rows); the "
        "fastest of them counts",
    )
    p.add_argument("--within", type=positive_int, default=None,
                   help="only the candidates a search proposed among its first N")  # fmt: skip
    p.add_argument("--csv", type=Path, help="write the table here too")
    return p


@functools.cache
def _conv_networks() -> dict[str, str]:
    from kernels.conv_space import load_layers

    return {layer.name: layer.network for layer in load_layers()}


def network_of(workload: str) -> str:
    """The group a workload's line is averaged in: its conv network (kernels.conv_space's table), else
    its name up to the last underscore."""
    return _conv_networks().get(workload, workload.rsplit("_", 1)[0])


def _first_index(search_runs: object) -> float:
    """The earliest proposal index of a candidate over its search runs (inf: not a search's)."""
    runs = json.loads(search_runs) if isinstance(search_runs, str) and search_runs else []
    return float(min((i for _, i in runs), default=math.inf))


#: the summary columns :func:`versus` reads (with those :func:`analysis.condition` reads)
_READ = ("machine_fingerprint", "workload", "timing_mode", "contention", "candidate_kind",
         "candidate_text", "label", "flops", "median_ns", "pct_peak_median", "round_medians_ns",
         "round_times", "search_runs")  # fmt: skip


def versus(summary: pd.DataFrame, baselines: tuple[str, ...], within: int | None = None) -> pd.DataFrame:
    """One line per (machine, workload, condition) that has both sides ok (see the module's doc)."""
    # the columns read below only: each group's rows are taken from every column the frame has (the
    # report's summary has 40; the report of every archive draws 40 of these tables)
    ok = summary.loc[summary["status"] == "ok", [c for c in _READ if c in summary]]
    ok = ok.assign(condition=analysis.condition(ok))
    if within is not None:
        first = ok["search_runs"].map(_first_index) if "search_runs" in ok else pd.Series(math.inf, ok.index)
        ok = ok[(ok["candidate_kind"] == "baseline") | (first < within)]
    lines = []
    for (fp, workload, cond), part in ok.groupby(["machine_fingerprint", "workload", "condition"], sort=True):
        libs = part[part["candidate_text"].isin(baselines) & (part["candidate_kind"] == "baseline")]
        cands = part[part["candidate_kind"] != "baseline"]
        if libs.empty or cands.empty:
            continue
        rounds = cands["round_medians_ns"].map(analysis.n_rounds)
        pool = cands[rounds > 1] if (rounds > 1).any() else cands
        best = pool.sort_values("median_ns").iloc[0]
        lib = libs.sort_values("median_ns").iloc[0]
        mid, lo, hi = analysis.round_ratio(
            best["round_medians_ns"], lib["round_medians_ns"], best["round_times"], lib["round_times"]
        )
        lines.append({
            "machine_fingerprint": fp, "workload": workload, "network": network_of(str(workload)),
            "condition": cond, "flops": float(best["flops"]),
            "best_pct": float(best["pct_peak_median"]), "baseline_pct": float(lib["pct_peak_median"]),
            "baseline": str(lib["label"]), "ratio_median": float(lib["median_ns"] / best["median_ns"]),
            "round_ratio": mid, "round_ratio_low": lo, "round_ratio_high": hi,
            "rounds": analysis.n_rounds(best["round_medians_ns"]),
            "best": str(best["label"]),
        })  # fmt: skip
    return pd.DataFrame(lines)


def networks(table: pd.DataFrame) -> pd.DataFrame:
    """Per machine, condition and network: flop-weighted average % of peak of each side, the lines won, and
    the ceiling of the ratio (ours at 100% of peak everywhere)."""
    out = []
    for (fp, cond, net), t in table.groupby(["machine_fingerprint", "condition", "network"], sort=True):
        w = t["flops"].to_numpy(float)
        best, lib = np.average(t["best_pct"], weights=w), np.average(t["baseline_pct"], weights=w)
        out.append({
            "machine_fingerprint": fp, "condition": cond, "network": net, "workloads": len(t),
            "best_weighted_pct": best, "baseline_weighted_pct": lib, "weighted_ratio": best / lib,
            # what the ratio would be at 100% of peak on every layer: a library near peak caps it
            "ceiling_ratio": 100.0 / lib,
            # ahead by the median of its round ratios (the pooled medians where rounds could not be paired)
            "ahead_median": int((t["round_ratio"].fillna(t["ratio_median"]) > 1).sum()),
            "ahead_every_round": int((t["round_ratio_low"] > 1).sum()),
        })  # fmt: skip
    return pd.DataFrame(out)


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    rows = store.load(args.results, args.experiment)
    if rows.empty:
        print(f"harness versus: no rows of experiment {args.experiment} in {args.results}", file=sys.stderr)
        raise SystemExit(2)
    present = sorted(rows.loc[rows["candidate_kind"] == "baseline", "candidate_text"].astype(str).unique())
    named = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    baselines = tuple(present) if named == ("all",) else named
    table = versus(analysis.summarize(rows), baselines, args.within)
    if table.empty:
        print(f"harness versus: no workload of {args.experiment} has both a candidate and one of "
              f"{', '.join(baselines)} ok (its baselines: {', '.join(present) or 'none'})",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    print(f"baselines (the fastest counts): {', '.join(baselines)}")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.precision", 3):
        cols = ["machine_fingerprint", "condition", "workload", "best_pct", "baseline_pct", "baseline",
                "round_ratio", "round_ratio_low", "round_ratio_high", "rounds"]  # fmt: skip
        print(table[cols].to_string(index=False))
        print()
        print(networks(table).to_string(index=False))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"{args.csv}: {len(table)} lines", file=sys.stderr)
