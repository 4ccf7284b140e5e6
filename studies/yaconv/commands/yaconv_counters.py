"""Cachegrind counts of YaConv vs im2col per layer (seed 001 Fig 5.3/5.5 counters; no PMU here).

``harness yaconv-counters [--set layers|seed000|fig5_4|fig5_6] [--quick] [--limit N] [--sample N]
[--no-ours] [--results DIR]``
runs each candidate's kernel in the harness's own measurement driver (harness/driver/driver.c, the same
executable and arguments as a timed run) under ``valgrind --tool=cachegrind --cache-sim=yes
--branch-sim=yes``. The driver calls the kernel 2 + extra times (first call for the check, then the
repetitions); two runs with 1 and 1 + EXTRA repetitions are subtracted, so the counts are those of
EXTRA hot calls of the kernel alone (driver start-up, tensor loading and the first call's library
initialisation cancel), divided by EXTRA. Counts repeat to within a few accesses (library paths such as
memcpy's depend on buffer addresses). The simulated caches are fixed (L1d 32 KiB 8-way, LL 32 MiB
16-way, 64 B lines) so the counts do not depend on the host; the thesis's "L3" is cachegrind's LL.

Rows go to experiment ``yaconv_cachegrind`` with ``counter_backend = "cachegrind"``, the per-call counts
in ``counters`` (Ir, Dr, Dw, D1mr, D1mw, DLmr, DLmw, Bc, Bcm, Bi, Bim) and no timing. The first call's
output is checked against the reference like every other row. Kernels that need AVX-512 are skipped with
a reason: valgrind does not execute AVX-512.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness import machine as machine_mod
from harness import store
from harness.build import CompilerConfig, build
from harness.cachegrind import CachegrindError, CachegrindKilled, count, valgrind
from harness.check import CheckConfig, check_output, make_tensors
from harness.commands import positive_int
from harness.experiment import Experiment, base_row, render_or_failure
from kernels.candidate import Candidate, Workload
from studies.yaconv.commands.yaconv import SETS, candidates, layer_set

EXPERIMENT = "yaconv_cachegrind"


def measure(
    cand: Candidate, w: Workload, results: Path, m: machine_mod.Machine, cache_dir: Path
) -> dict[str, Any]:
    exp = Experiment(EXPERIMENT, w, [cand], results_dir=results, check=CheckConfig())
    row = base_row(exp, cand, m)
    row["counter_backend"] = "cachegrind"
    src = render_or_failure(cand, w)
    if isinstance(src, tuple):
        row["status"], row["reason"] = src
        return row
    row["target"] = src.target
    if src.target == "avx512":
        row["status"], row["reason"] = "unsupported", "valgrind does not execute AVX-512 code"
        return row
    built = build(src, CompilerConfig(), cache_dir / "so")
    row.update(source_hash=src.source_hash, compiler_version=built.cc_version, cflags=built.flags)
    if not built.ok or built.so_path is None:
        row["status"], row["reason"] = "compile_error", built.error
        return row
    tensors = make_tensors(w, exp.seed, exp.check)
    try:
        counts, first = count(src, built.so_path, tensors, cache_dir)
    except CachegrindError as exc:
        row["status"], row["reason"] = "error", str(exc)
        return row
    chk = check_output(w, tensors, first, exp.check, exp.seed)
    row.update(
        check_mode=chk.mode, check_points=chk.points, check_max_err=chk.max_err, check_passed=chk.passed
    )
    if not chk.passed:
        row["status"], row["reason"] = "wrong", f"{chk.n_bad}/{chk.points} points off"
        return row
    counts["workspace_bytes"] = src.workspace_bytes
    row.update(status="ok", counters=json.dumps(counts, sort_keys=True))
    return row


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness yaconv-counters", description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=SETS, default="layers")
    p.add_argument("--quick", action="store_true", help="the quick layers / reduced grid")
    p.add_argument("--limit", type=positive_int, default=None, help="first N layers only")
    p.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        help="N layers spread evenly over the set sorted by work (the simulation is ~50x slower than a run)",
    )
    p.add_argument("--no-ours", action="store_true", help="only the paper's pair: YaConv and im2col")
    p.add_argument("--results", type=Path, default=Path("results"))
    return p


def spread(layers: list[Any], n: int | None) -> list[Any]:
    """``n`` layers evenly spaced over ``layers`` sorted by flops (smallest and largest included)."""
    if n is None or n >= len(layers):
        return layers
    ordered = sorted(layers, key=lambda la: la.workload().flops)
    if n == 1:
        return [ordered[len(ordered) // 2]]
    return [ordered[round(i * (len(ordered) - 1) / (n - 1))] for i in range(n)]


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    if valgrind() is None:
        print(
            "harness yaconv-counters: error: valgrind is not installed (apt install valgrind)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    m = machine_mod.detect()
    cache_dir = args.results / "cache"
    # our microkernel runs as AVX2 under valgrind on every host (valgrind has no AVX-512); the thesis's
    # variants only (the counters are its Figs 5.3 and 5.5; valgrind takes ~45 ms per MFLOP of a call)
    cands = candidates("avx2", not args.no_ours, with_window=False)
    layers = spread(layer_set(args.set, args.quick, args.limit), args.sample)
    for n, layer in enumerate(layers, 1):
        w = layer.workload()
        for cand in cands:
            rid = store.row_id(EXPERIMENT, cand.key, w.name, "hot", 0, m.fingerprint)
            if store.has_row(args.results, EXPERIMENT, rid):
                continue
            try:
                row = measure(cand, w, args.results, m, cache_dir)
            except CachegrindKilled as exc:
                print(
                    f"harness yaconv-counters: stopped: {exc} on {w.name} {cand.label()}; nothing stored"
                    " for it, the same command measures it again",
                    file=sys.stderr,
                )
                raise SystemExit(1) from exc
            store.write_row(args.results, row)
            c = json.loads(row["counters"]) if row["counters"] else {}
            what = re.sub(r"\s+", " ", f"Dr={c.get('Dr')} Bc={c.get('Bc')} DLmr={c.get('DLmr')}") if c else ""
            head = f"[{EXPERIMENT}] {n}/{len(layers)} {w.name} {cand.label()}: {row['status']}"
            print(f"{head} {what} {row['reason']}"[:300],
                  file=sys.stderr)  # fmt: skip
