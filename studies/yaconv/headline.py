"""The headline of a YaConv run (issue 33), printed at the end of ``harness yaconv``: per machine, each
layer's best YaConv variant over its best im2col (the two algorithms at their best on this CPU), the
geometric mean over the layers with its 95% interval, the same geometric mean round by round when the
layers were timed in interleaved rounds (``--rounds N``), and the layers where YaConv is slower.

A round's ratio pairs the best YaConv and the best im2col *of that round*: rounds are interleaved, so a
slow minute of the host slows both sides of a pair.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from studies.yaconv.figures import IM2COL_PREFIX, YACONV_PREFIX, geomean_ci, geometry, layer_label


def output_rows(workload: str) -> tuple[int, int] | None:
    """(rows that give output, padded rows) of a stride-1 layer: YaConv runs each filter row's GEMM over
    all H + 2P rows of the padded image and H - F + 1 + 2P of them give output (section 5.3's waste), so
    on a small image a share of its work is thrown away that im2col never does."""
    g = geometry(workload)
    if g is None or g["stride"] != 1:
        return None
    return g["H"] - g["F"] + 1 + 2 * g["P"], g["H"] + 2 * g["P"]


def _round_best(part: pd.DataFrame) -> np.ndarray | None:
    """Per round, the fastest of the candidates in ``part`` (None unless all have the same rounds)."""
    given = [r for r in part["round_medians_ns"] if r is not None and not isinstance(r, float)]
    rounds = [np.asarray(r, dtype=float) for r in given]
    if len(rounds) != len(part) or not rounds or len({r.size for r in rounds}) != 1 or rounds[0].size < 2:
        return None
    return np.min(np.vstack(rounds), axis=0)


def per_layer(summary: pd.DataFrame) -> pd.DataFrame:
    """One line per (machine, layer) with both algorithms ok: the best of each (label, median ns), their
    ratio (im2col's time / YaConv's, > 1: YaConv faster) and the per-round ratios (a list, or None)."""
    ok = summary[(summary["status"] == "ok") & (summary["candidate_kind"] == "conv_algo")]
    lines = []
    for (fp, workload), part in ok.groupby(["machine_fingerprint", "workload"], sort=True):
        label = part["label"].astype(str)
        yc, ic = part[label.str.startswith(YACONV_PREFIX)], part[label.str.startswith(IM2COL_PREFIX)]
        if yc.empty or ic.empty:
            continue
        by, bi = yc.sort_values("median_ns").iloc[0], ic.sort_values("median_ns").iloc[0]
        ry, ri = _round_best(yc), _round_best(ic)
        rounds = list(ri / ry) if ry is not None and ri is not None and ry.size == ri.size else None
        lines.append({
            "machine_fingerprint": fp, "workload": workload, "layer": layer_label(str(workload)),
            "best_yaconv": str(by["label"]), "best_im2col": str(bi["label"]),
            "ratio": float(bi["median_ns"] / by["median_ns"]), "round_ratios": rounds,
        })  # fmt: skip
    return pd.DataFrame(lines)


def headline(table: pd.DataFrame) -> list[str]:
    """Printable lines per machine: the geomean with its interval, each round's geomean, the slower layers
    (in the median, in every round, rounds disagreeing)."""
    out: list[str] = []
    for fp, t in table.groupby("machine_fingerprint", sort=True):
        g, lo, hi = geomean_ci(t["ratio"])
        out.append(f"{fp}: best YaConv / best im2col over {len(t)} layers: "
                   f"geomean {g:.3f} [{lo:.3f}, {hi:.3f}] (95%)")  # fmt: skip
        rounds = [r for r in t["round_ratios"] if r is not None]
        if len(rounds) == len(t) and len({len(r) for r in rounds}) == 1:
            per_round = np.exp(np.log(np.vstack(rounds)).mean(axis=0))
            out.append("  per round: " + " / ".join(f"{v:.3f}" for v in per_round))
            every = sum(max(r) < 1 for r in rounds)
            mixed = sum(min(r) < 1 <= max(r) for r in rounds)
            out.append(f"  slower in every round: {every}; rounds disagree: {mixed}")
        slow = t[t["ratio"] < 1].sort_values("ratio")
        out.append(f"  slower (median): {len(slow)}" + (":" if len(slow) else ""))
        if len(slow):
            out.append("    (rows: output rows over the padded rows that YaConv's GEMMs run over, rows=all)")
        for r in slow.itertuples():
            span = f" rounds {min(r.round_ratios):.2f}-{max(r.round_ratios):.2f}" if r.round_ratios else ""
            used = output_rows(str(r.workload)) if "rows=window" not in r.best_yaconv else None
            rows = f" rows {used[0]}/{used[1]}" if used else ""  # a window variant runs no wasted rows
            out.append(f"    {r.layer:<28} {r.ratio:.3f}{span}{rows}  ({r.best_yaconv} vs {r.best_im2col})")
    return out
