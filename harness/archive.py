"""Measurements kept with the code (``reports/measured/*.tar.xz``), so a study that takes more than one
session survives a machine that loses its disk between them.

An archive holds a results directory's rows as one parquet table per experiment
(``rows/<experiment>.parquet``), its permutation simulations (``permutations/``), the tuning records of
its TVM modules (``tvm/*.json``: how each was tuned, TVM's per-trial times; not the modules) and the
microkernel selections of its machines (``microkernels/*.json``: a search's space draws from the selection,
which is measured, so a search resumed on a new VM needs the one its rows came from). The store keeps one
file per row (durable writes, resumable sweeps), but a row file weighs about 35 KB, mostly
repeated metadata: the 23 000 rows of the 23-layer, 1000-draw study would be 800 MB that way. Unpacking
validates every row and stores each experiment's rows in its compacted table (:func:`harness.store.add_rows`).
Archives of the older layout (``rows/<experiment>/<row id>.parquet``) unpack too.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness import store
from harness.selection import selection_digest
from kernels import tvm_conv

TOP_LEVEL = ("rows", "permutations", "parlooper", "tvm", "microkernels")
#: a results directory's data beside its rows that figures read: the permutation study's simulations, the
#: loop-string study's model predictions (``parlooper/model/``)
DATA_DIRS = ("permutations", "parlooper")


class ArchiveError(ValueError):
    """An archive this checkout cannot unpack (unexpected members, rows failing today's schema)."""


def pack(
    results_dir: Path,
    out: Path,
    experiments: list[str] | None = None,
    simulations: bool = True,
    machine: str | None = None,
) -> int:
    """Write ``out`` (.tar.xz) from ``results_dir``: the rows of ``experiments`` (all if None; of one
    ``machine`` fingerprint only if given: a directory into which another machine's archives were unpacked,
    as the ported sweeps need, would otherwise pack that machine's rows again under this one's name) and, with
    ``simulations``, the data figures read beside the rows (:data:`DATA_DIRS`: the permutation study's
    simulations, the loop-string model's predictions); and the tuning record of each TVM module a packed row
    measured.
    Returns the number of rows packed."""
    results_dir, out = Path(results_dir), Path(out)
    base = results_dir / "rows"
    names = experiments or store.experiments(results_dir)
    n, records, fingerprints = 0, [], set()
    with tempfile.TemporaryDirectory(prefix="archive-") as tmp:
        (Path(tmp) / "rows").mkdir()
        for name in names:
            table = store.table(results_dir, name)
            if table is not None and machine is not None:
                table = table.filter(pc.equal(table.column("machine_fingerprint"), machine))
            if table is None or table.num_rows == 0:
                of = f" on machine {machine}" if machine else ""
                raise ArchiveError(f"no rows of experiment {name!r}{of} under {base}")
            pq.write_table(table, Path(tmp) / "rows" / f"{name}.parquet", compression="none")
            n += table.num_rows
            records += _tvm_records(results_dir, table)
            fingerprints |= set(table.column("machine_fingerprint").drop_null().to_pylist())
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:xz") as tar:
            tar.add(Path(tmp) / "rows", arcname="rows")
            for data in DATA_DIRS if simulations else ():
                if (results_dir / data).is_dir():
                    tar.add(results_dir / data, arcname=data)
            for record in sorted(set(records)):
                tar.add(record, arcname=f"tvm/{record.name}")
            for sel in _selections(results_dir, fingerprints):
                tar.add(sel, arcname=f"microkernels/{sel.name}")
        partial.replace(out)  # a killed pack leaves no archive that looks complete
    return n


def _tvm_records(results_dir: Path, table: pa.Table) -> list[Path]:
    """The tuning records (``tvm/<module>.json``) of the TVM modules that rows of ``table`` measured."""
    found = []
    for options in table.column("candidate_options").to_pylist():
        module = tvm_conv.module_of(options) if options and "module" in options else None
        if module and (record := tvm_conv.record_in(results_dir, module)).exists():
            found.append(record)
    return found


def _selections(results_dir: Path, fingerprints: set[str]) -> list[Path]:
    """The stored microkernel selections (:mod:`harness.selection`) of these machines in the results
    directory's cache."""
    cache = results_dir / "cache"
    return sorted(p for fp in fingerprints for p in cache.glob(f"microkernels-{fp}-*.json"))


def _digest(path: Path) -> str | None:
    """The hash of the microkernels a stored selection file selects (as search rows carry it)."""
    return selection_digest([m["sizes"] for m in json.loads(path.read_text())["selected"]])


def _restore_selection(f: Path, results_dir: Path, say: Callable[[str], None]) -> None:
    """Put an archived microkernel selection in the cache, unless this directory has one of its own: that
    one holds the machine's own measurements and stays; if it selects other microkernels, say so (a search
    resumed from the archive's rows stops at its first draw that differs, and says why)."""
    dest = results_dir / "cache" / f.name
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, dest)
    elif (here := _digest(dest)) != (archived := _digest(f)):
        say(
            f"{dest} kept: it selects other microkernels than the archive's (selection {here} vs "
            f"{archived}); to resume the archive's searches, remove it and unpack again"
        )


def unpack(archive: Path, results_dir: Path) -> int:
    """Restore ``archive`` into ``results_dir`` (existing rows of the same id replaced); returns the number
    of rows written."""
    return unpack_all([archive], results_dir)[0]


def unpack_all(
    archives: list[Path],
    results_dir: Path,
    jobs: int = 1,
    done: Callable[[Path, int], None] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> list[int]:
    """:func:`unpack` of each archive in turn, as if one after the other (a row or file in a later archive
    replaces an earlier one's), their reading and checking spread over ``jobs`` processes; ``done(archive,
    rows)`` is called as each is stored, ``say`` with what a reader should know (a selection kept). Returns
    each archive's row count. Nothing is stored when an archive fails: its error names it."""
    results_dir = Path(results_dir)
    with tempfile.TemporaryDirectory(prefix="unpack-") as tmp:
        dirs = [Path(tmp) / str(i) for i in range(len(archives))]
        args = list(zip(archives, dirs, strict=True))
        if jobs > 1 and len(archives) > 1:
            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                tables = list(pool.map(_read_checked, *zip(*args, strict=True)))
        else:
            tables = [_read_checked(a, d) for a, d in args]
        counts = []
        for path, where, rows in zip(archives, dirs, tables, strict=True):
            counts.append(store.add_table(results_dir, rows, checked=True) if rows is not None else 0)
            for f in sorted(p for top in TOP_LEVEL[1:] for p in (where / top).rglob("*") if p.is_file()):
                if f.parent == where / "microkernels":
                    _restore_selection(f, results_dir, say)
                    continue
                dest = results_dir / f.relative_to(where)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(f, dest)
            if done:
                done(path, counts[-1])
    return counts


def _read_checked(archive: Path, into: Path) -> pa.Table | None:
    """``archive``'s rows as one table, checked against today's schema (None if it has none); its other
    members extracted under ``into``."""
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        stray = [m.name for m in members if m.name.split("/")[0] not in TOP_LEVEL]
        if stray:
            raise ArchiveError(f"{archive}: members outside {'/'.join(TOP_LEVEL)}: {stray[:3]}")
        tar.extractall(into, filter="data")
    paths = sorted(into.glob("rows/**/*.parquet"))
    if not paths:
        return None
    # one table for all (an older archive holds a file per row, each with the columns of its day)
    rows = pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")
    try:
        return store.validate_table(rows)
    except (ValueError, TypeError, KeyError) as exc:
        raise ArchiveError(f"{archive}: {exc}") from exc
