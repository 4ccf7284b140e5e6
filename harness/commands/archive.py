"""pack a results directory's measurements into one archive kept with the code, or restore one

    harness archive pack --results DIR --out reports/measured/<date>-<fingerprint>-<study>.tar.xz
                         [--experiment NAME ...] [--no-simulations]
    harness archive unpack reports/measured/*.tar.xz --results DIR
    harness archive compact --results DIR [--experiment NAME ...]

An archive holds each experiment's rows as one table (a 1000-draw, 23-layer study is ~23 000 rows), the
permutation simulations and the microkernel selections its searches drew from; unpacking stores each
experiment's rows as the store's compacted table, so a search resumes from the restored rows (and the
selection they were drawn from) and ``harness report --results DIR`` draws their figures. ``compact`` moves
the rows a sweep wrote one file each into that table (searches do it themselves past 500 such files): a
study of 20 000 rows then loads in a second instead of half a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness import archive, store


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness archive", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    pk = sub.add_parser("pack", help="results directory -> archive")
    pk.add_argument("--results", type=Path, required=True)
    pk.add_argument("--out", type=Path, required=True, help="a .tar.xz path")
    pk.add_argument("--experiment", action="append", help="only these experiments (repeatable)")
    pk.add_argument("--no-simulations", action="store_true", help="leave permutations/ out")
    pk.add_argument("--machine", help="only this machine fingerprint's rows (not another's unpacked beside)")
    up = sub.add_parser("unpack", help="archives -> results directory")
    up.add_argument("archives", type=Path, nargs="+")
    up.add_argument("--results", type=Path, required=True)
    up.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes reading the archives"
    )
    cp = sub.add_parser("compact", help="a results directory's single-row files -> one table per experiment")
    cp.add_argument("--results", type=Path, required=True)
    cp.add_argument("--experiment", action="append", help="only these experiments (repeatable)")
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    try:
        if args.action == "pack":
            if not args.out.name.endswith(".tar.xz"):
                raise archive.ArchiveError(f"--out must end in .tar.xz, got {args.out}")
            n = archive.pack(args.results, args.out, args.experiment, not args.no_simulations, args.machine)
            print(f"{args.out}: {n} rows, {args.out.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
        elif args.action == "compact":
            for name in args.experiment or store.experiments(args.results):
                n = store.compact(args.results, name)
                print(f"{name}: {n} rows moved into its compacted table", file=sys.stderr)
        else:
            archive.unpack_all(
                args.archives,
                args.results,
                jobs=args.jobs,
                done=lambda path, n: print(f"{path}: {n} rows restored into {args.results}", file=sys.stderr),
                say=lambda msg: print(f"harness archive: note: {msg}", file=sys.stderr),
            )
    except (archive.ArchiveError, OSError) as exc:
        print(f"harness archive: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
