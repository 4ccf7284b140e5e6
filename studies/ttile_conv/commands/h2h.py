"""two searches' winners timed in the same rounds: per layer one over the other, and each over oneDNN

    harness h2h --results DIR [--experiment ttile_conv_h2h]
                [--searches ttile_conv_levers_transfer100,ttile_conv_random_levers] [--csv OUT.csv]

Sweep ``ttile_conv_h2h`` times each layer's best scheme of each listed search (``space.best_of.each``)
beside both oneDNN layouts in shared interleaved rounds. This command finds, per machine and layer, which
scheme of those rows is each search's best (ranked as ``space.best_of`` ranks them) and prints the first
search's speed over the second's round by round (``harness.analysis.round_ratio``: median [lowest,
highest]), and each over the faster oneDNN layout of the same rounds (as ``harness versus`` picks it), then
the geometric mean and the layers better by the median / in every round, and per network the flop-weighted
% of peak of each search, and of the better of the two per layer, over oneDNN's (as ``harness versus``
weighs its network lines; issue 32's 1.05 is this number).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness import analysis, store
from harness.commands.versus import DEFAULT_BASELINES, network_of, networks
from harness.winners import plain_rows, ranked


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness h2h", description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--experiment", default="ttile_conv_h2h", help="the shared rounds' experiment")
    p.add_argument("--searches", default="ttile_conv_levers_transfer100,ttile_conv_random_levers",
                   help="two experiments, comma separated: the first's best over the second's")  # fmt: skip
    p.add_argument("--csv", type=Path, help="write the table here too")
    return p


def head_to_head(shared: pd.DataFrame, bests: dict[str, dict[tuple[str, str], str]]) -> pd.DataFrame:
    """One line per (machine, workload) of the shared rounds' summary where both searches' best schemes
    (``bests[search][(fingerprint, workload)]``, a candidate text) and a oneDNN layout are ok, alone."""
    (first, a), (second, b) = bests.items()
    ok = shared[(shared["status"] == "ok") & (analysis.condition(shared) == "hot cache")]
    lines = []
    for (fp, workload), part in ok.groupby(["machine_fingerprint", "workload"], sort=True):
        libs = part[(part["candidate_kind"] == "baseline") & part["candidate_text"].isin(DEFAULT_BASELINES)]
        schemes = part[part["candidate_kind"] == "scheme"].set_index("candidate_text")
        ta, tb = a.get((fp, workload)), b.get((fp, workload))
        if libs.empty or ta not in schemes.index or tb not in schemes.index:
            continue
        lib, sa, sb = libs.sort_values("median_ns").iloc[0], schemes.loc[ta], schemes.loc[tb]

        def ratio(x: pd.Series, y: pd.Series) -> tuple[float, float, float]:
            return analysis.round_ratio(x["round_medians_ns"], y["round_medians_ns"],
                                        x.get("round_times"), y.get("round_times"))  # fmt: skip

        line: dict[str, object] = {
            "machine_fingerprint": fp, "workload": workload, "network": network_of(str(workload)),
            "flops": float(lib["flops"]), "same": ta == tb, "oneDNN pct": float(lib["pct_peak_median"]),
            f"{first} pct": float(sa["pct_peak_median"]), f"{second} pct": float(sb["pct_peak_median"]),
        }  # fmt: skip
        for name, (x, y) in {f"{first} / {second}": (sa, sb), f"{first} / oneDNN": (sa, lib),
                             f"{second} / oneDNN": (sb, lib)}.items():  # fmt: skip
            line[name], line[f"{name} low"], line[f"{name} high"] = ratio(x, y)
        lines.append(line)
    return pd.DataFrame(lines)


def weighted(table: pd.DataFrame, searches: list[str]) -> pd.DataFrame:
    """Per machine and network, each search's flop-weighted % of peak over oneDNN's in the shared rounds
    (``harness versus``'s network lines), and the same for the better of the two per layer."""
    sides = {s: (table[f"{s} pct"], table[f"{s} / oneDNN"], table[f"{s} / oneDNN low"]) for s in searches}
    first = table[f"{searches[0]} / oneDNN"] >= table[f"{searches[1]} / oneDNN"]
    pick = [table[f"{searches[0]} {c}"].where(first, table[f"{searches[1]} {c}"])
            for c in ("pct", "/ oneDNN", "/ oneDNN low")]  # fmt: skip
    sides["the better of the two"] = tuple(pick)
    parts = []
    for side, (pct, mid, low) in sides.items():
        lines = table[["machine_fingerprint", "network", "flops"]].assign(
            condition="hot cache", best_pct=pct, baseline_pct=table["oneDNN pct"], round_ratio=mid,
            ratio_median=mid, round_ratio_low=low,
        )  # fmt: skip
        parts.append(networks(lines).assign(side=side))
    return pd.concat(parts, ignore_index=True)


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    searches = [s.strip() for s in args.searches.split(",") if s.strip()]
    if len(searches) != 2:
        print(f"harness h2h: --searches takes two experiments, got {args.searches!r}", file=sys.stderr)
        raise SystemExit(2)
    rows = store.load(args.results, args.experiment)
    if rows.empty:
        print(f"harness h2h: no rows of experiment {args.experiment} in {args.results}", file=sys.stderr)
        raise SystemExit(2)
    bests: dict[str, dict[tuple[str, str], str]] = {}
    for s in searches:
        bests[s] = {}
        for (fp, workload), g in plain_rows([s], args.results, None).groupby(
            ["machine_fingerprint", "workload"]
        ):
            top = ranked(g, [s])
            if not top.empty:
                bests[s][(str(fp), str(workload))] = str(top.iloc[0]["candidate_text"])
    table = head_to_head(analysis.summarize(rows), bests)
    if table.empty:
        print(f"harness h2h: no layer of {args.experiment} has the best schemes of both "
              f"{', '.join(searches)} and a oneDNN layout ok", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    if left := sorted(set(rows["workload"]) - set(table["workload"])):
        print(f"left out (a search's best is not among the shared rounds' ok schemes, e.g. it was searched "
              f"further since, or no oneDNN layout is ok): {', '.join(map(str, left))}",
              file=sys.stderr)  # fmt: skip
    key = f"{searches[0]} / {searches[1]}"
    with pd.option_context("display.width", 250, "display.precision", 3):
        print(table.to_string(index=False))
    mid = table[key]
    geo = float(np.exp(np.log(mid).mean()))
    print(f"\n{key}: x{geo:.3f} (geometric mean over {len(table)} layers), better on "
          f"{int((mid > 1).sum())} ({int((table[f'{key} low'] > 1).sum())} in every round)")  # fmt: skip
    for s in searches:
        col = f"{s} / oneDNN"
        every = int((table[f"{col} low"] > 1).sum())
        print(f"{col}: ahead on {int((table[col] > 1).sum())} ({every} in every round)")
    print("\nflop-weighted % of peak over oneDNN's, per network (the shared rounds):")
    for _, n in weighted(table, searches).iterrows():
        print(f"  {n['side']}, {n['network']} ({n['workloads']} layers): x{n['weighted_ratio']:.3f}, "
              f"ahead on {n['ahead_median']} ({n['ahead_every_round']} in every round)")  # fmt: skip
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"{args.csv}: {len(table)} lines", file=sys.stderr)
