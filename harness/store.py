"""The result store: one schema for every measured candidate, one durable parquet file per row.

Why one file per row: a sweep may be killed at any moment (timeout, OOM, ``kill -9``, a SLURM pre-emption).
Each row is written to a temp file in its final directory, fsynced and renamed with :func:`os.replace`, so a
row file either exists complete or not at all, and a rerun skips the rows that exist (:func:`has_row`).
Readers only look at ``*.parquet`` names, so leftover temp files from a killed writer are ignored.

Layout: ``<results_dir>/rows/<experiment>/<row_id>.parquet``, and beside them at most one compacted table
``_compacted.parquet`` of rows moved out of their own files (:func:`compact`): a study of 20 000 rows loads
in a second from it, against half a minute from 20 000 files. A row in its own file is newer than its copy in
the table (a re-timed row is rewritten there), so readers take the file's version.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.parquet as pq

STR = pa.string()
I64 = pa.int64()
F64 = pa.float64()

#: Every column of a result row, in order: name -> (arrow type, description).
COLUMNS: OrderedDict[str, tuple[pa.DataType, str]] = OrderedDict(
    [
        ("experiment", (STR, "experiment name (also the row directory)")),
        ("candidate_key", (STR, "stable content hash of the candidate (kernels.candidate.Candidate.key)")),
        ("candidate_kind", (STR, "kind of candidate, a key of kernels.candidate.renderers()")),
        ("candidate_text", (STR, "scheme text, or library name for a baseline")),
        ("candidate_options", (STR, "code-generation options, JSON object")),
        ("label", (STR, "human-readable candidate label used in tables and figures")),
        ("workload", (STR, "workload name")),
        ("op", (STR, "operator name")),
        ("op_params", (STR, "operator parameters (e.g. stride), JSON object")),
        ("sizes", (STR, "dimension sizes, JSON object dim -> size")),
        ("flops", (I64, "floating-point operations of one kernel call")),
        ("source_hash", (STR, "hash of the generated C source, flags and libraries")),
        ("target", (STR, "ISA the kernel needs: avx512 | avx2 | any")),
        ("compiler", (STR, "compiler executable")),
        ("compiler_version", (STR, "compiler version string")),
        ("cflags", (STR, "compile flags, space separated")),
        ("machine_fingerprint", (STR, "stable hash identifying the machine (CPU model, ISA, caches)")),
        ("cpu_model", (STR, "CPU model name")),
        ("machine", (STR, "machine description (ISA, caches, cores...), JSON object")),
        ("peak_gflops", (F64, "calibrated fp32 peak GFLOP/s of one core for the ISA the kernel uses")),
        ("timing_mode", (STR, "hot | cold | fresh (cold + a newly mapped workspace per call)")),
        ("cold_method", (STR, "how caches were made cold (e.g. clflushopt, sweep); empty when hot")),
        ("counter_backend", (STR, "counter backend used (papi, perf_event, tsc, clock_gettime...)")),
        ("counters", (STR, "counter values, JSON object event -> list (one value per repetition)")),
        ("counters_unavailable", (STR, "counters that could not be read, JSON object backend -> reason")),
        ("seed", (I64, "seed of the input initialisation and of the sampled check")),
        ("check_mode", (STR, "sampled | full")),
        ("check_points", (I64, "number of output points checked")),
        ("check_eps", (F64, "relative error tolerance of the check")),
        ("check_max_err", (F64, "largest relative error seen by the check")),
        ("check_passed", (pa.bool_(), "whether the semantic check passed")),
        (
            "status",
            (STR, "ok | wrong | crash | timeout | compile_error | kernel_error | unsupported | error"),
        ),
        ("reason", (STR, "why the status is not ok (empty when ok)")),
        ("flags", (STR, "measurement-sanity warnings (noisy, busy core, peak drift), JSON list of strings")),
        ("times_ns", (pa.list_(F64), "every timed repetition, nanoseconds")),
        ("n_reps", (I64, "number of timed repetitions")),
        ("min_ns", (F64, "minimum time, ns")),
        ("median_ns", (F64, "median time, ns")),
        ("mean_ns", (F64, "mean time, ns")),
        ("cov", (F64, "coefficient of variation of the times (std / mean)")),
        ("rel_ci", (F64, "relative half-width of the confidence interval reached by the repetition loop")),
        ("gflops_min", (F64, "GFLOP/s from the minimum time")),
        ("gflops_median", (F64, "GFLOP/s from the median time")),
        ("pct_peak_min", (F64, "100 * gflops_min / peak_gflops")),
        ("pct_peak_median", (F64, "100 * gflops_median / peak_gflops")),
        ("timestamp", (STR, "ISO 8601 time the row was measured")),
        ("harness_version", (STR, "harness version that produced the row")),
        ("search_strategy", (STR, "search strategy that proposed the candidate (null: the space's list)")),
        ("search_budget", (I64, "candidates the search was allowed to propose (null: no budget)")),
        ("search_seed", (I64, "seed of the search strategy")),
        ("search_index", (I64, "order in which the search proposed the candidate (0 first; null: baseline)")),
        (
            "search_selection",
            (
                STR,
                "hash of the measured microkernel selection the search's space drew from (harness "
                "microkernels); a resumed search needs the same (null: none, or rows older than the column)",
            ),
        ),
        ("workspace_bytes", (I64, "temporary buffer the kernel allocates besides its tensors, bytes")),
        ("harness_commit", (STR, "git commit of the harness that produced the row (+ '-dirty' if modified)")),
        (
            "threads",
            (I64, "threads the kernel ran with (1: serial, on one CPU); % of peak is per core"),
        ),
        ("cpus", (STR, "CPUs the kernel ran on, JSON list")),
        ("timing_batch", (I64, "kernel calls per timed sample (a batch, as seed 001); times are per call")),
        ("impl", (STR, "implementation a library reported choosing (e.g. oneDNN's jit:avx2); empty if none")),
        (
            "round_medians_ns",
            (pa.list_(F64), "median time of each interleaved timing round (timing.rounds), in round order"),
        ),
        (
            "round_times",
            (pa.list_(STR), "ISO 8601 time of each timing round, in round order (null: one round only)"),
        ),
        ("library", (STR, "the library a baseline ran (onednn, openblas, mkl, blis, libxsmm, torch, tvm)")),
        ("library_version", (STR, "its exact version, as the library reports it at run time")),
        ("library_source", (STR, "where it was installed from: debian | pypi")),
        ("contention", (STR, "the co-runner the timing met (timing.contention): stream; null: none")),
        ("contention_bytes", (I64, "the co-runner's footprint, bytes (null: none)")),
        ("contention_gbps", (F64, "what the co-runner streamed, GB/s, the lowest of the row's rounds")),
        (
            "sentinel_ratio",
            (
                F64,
                "the peak probe (drift sentinel) when the row was timed over its first reading in the run; "
                "the farthest from 1 of the row's rounds (null: no probe)",
            ),
        ),
        (
            "sentinel_cache_ratio",
            (
                F64,
                "the cache probe (drift sentinel: read bandwidth over 4x L2) when the row was timed over its "
                "first reading in the run; the farthest from 1 of the row's rounds (null: no probe)",
            ),
        ),
        (
            "allocation",
            (
                STR,
                "the batch job the row was measured in (scheduler, job id, node, partition, its CPUs), "
                "JSON object; null: outside a scheduler",
            ),
        ),
    ]
)

#: Columns added after the first rows were written: a producer may omit them (they default to null), and
#: rows stored before they existed read back with null.
OPTIONAL_COLUMNS: dict[str, Any] = {
    "search_strategy": None,
    "search_budget": None,
    "search_seed": None,
    "search_index": None,
    "search_selection": None,
    "workspace_bytes": None,
    "harness_commit": None,
    "threads": None,
    "cpus": None,
    "timing_batch": None,
    "impl": None,
    "round_medians_ns": None,
    "round_times": None,
    "library": None,
    "library_version": None,
    "library_source": None,
    "contention": None,
    "contention_bytes": None,
    "contention_gbps": None,
    "sentinel_ratio": None,
    "sentinel_cache_ratio": None,
    "allocation": None,
}

#: Arrow schema of a row file; field metadata carries the descriptions.
SCHEMA: pa.Schema = pa.schema(
    [
        pa.field(name, typ, nullable=True, metadata={"description": desc})
        for name, (typ, desc) in COLUMNS.items()
    ]
)

#: Columns that only mean something for a measured, correct kernel: null unless status == "ok".
PERF_COLUMNS: tuple[str, ...] = (
    "counters",
    "times_ns",
    "n_reps",
    "min_ns",
    "median_ns",
    "mean_ns",
    "cov",
    "rel_ci",
    "gflops_min",
    "gflops_median",
    "pct_peak_min",
    "pct_peak_median",
    "round_medians_ns",
    "round_times",
)

JSON_COLUMNS: tuple[str, ...] = (
    "candidate_options",
    "cpus",
    "op_params",
    "sizes",
    "machine",
    "counters",
    "counters_unavailable",
    "flags",
    "allocation",
)

STATUSES: tuple[str, ...] = (
    "ok",
    "wrong",
    "crash",
    "timeout",
    "compile_error",
    "kernel_error",
    "unsupported",
    "error",
)

#: Allowed values of enumerated columns (null is always allowed).
ENUMS: dict[str, tuple[str, ...]] = {
    "candidate_kind": ("scheme", "baseline", "conv_algo", "loop_string"),
    "target": ("avx512", "avx2", "any"),
    "timing_mode": ("hot", "cold", "fresh"),
    "check_mode": ("sampled", "full"),
    "status": STATUSES,
}

#: the columns that make a row's id, in :func:`row_id`'s order (a null contention: no co-runner)
ID_COLUMNS = (
    *("experiment", "candidate_key", "workload", "timing_mode", "seed", "machine_fingerprint"),
    "contention",
)
#: Columns that must be present and non-null: they name the row and where it lives.
REQUIRED_NON_NULL: tuple[str, ...] = (*ID_COLUMNS[:-1], "status")

_ROW_SUFFIX = ".parquet"
COMPACTED = "_compacted.parquet"
#: run_experiment compacts an experiment's rows once this many are in their own files
COMPACT_AT = 500
_TMP_PREFIX = ".tmp-"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=,@-]*$")


def row_id(
    experiment: str, candidate_key: str, workload: str, timing_mode: str, seed: int, machine_fingerprint: str,
    contention: str | None = None,
) -> str:  # fmt: skip
    """Stable id of one measurement, so a rerun of the same sweep on the same machine finds its rows (a
    co-runner, when there is one, makes it another measurement)."""
    key = [experiment, candidate_key, workload, timing_mode, int(seed), machine_fingerprint]
    blob = json.dumps(key + ([contention] if contention else []), separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def perf_fields(
    times_ns: list[float],
    flops: int,
    peak_gflops: float | None,
    rel_ci: float | None = None,
    round_medians_ns: list[float] | None = None,
) -> dict[str, Any]:
    """Derived timing columns of an ok row, so every producer computes them the same way.

    GFLOP/s is flops per nanosecond; % of peak is against the calibrated peak of the ISA used.
    ``round_medians_ns``: the median of each interleaved timing round (None: the times are one round).
    With several rounds the row's median is the median of the round medians: each round weighs the same,
    whereas a round on a noisy host runs to more repetitions and would dominate the pooled times.
    """
    times = pd.Series(times_ns, dtype="float64")
    if times.empty or not (times > 0).all():
        raise ValueError("times_ns must be a non-empty list of positive times")
    tmin, tmed, tmean = float(times.min()), float(times.median()), float(times.mean())
    if round_medians_ns is not None and len(round_medians_ns) > 1:
        tmed = median(round_medians_ns)
    cov = float(times.std(ddof=1) / tmean) if len(times) > 1 else math.nan
    gmin, gmed = flops / tmin, flops / tmed
    peak = peak_gflops if peak_gflops and peak_gflops > 0 else None
    return {
        "times_ns": [float(t) for t in times],
        "n_reps": len(times),
        "min_ns": tmin,
        "median_ns": tmed,
        "mean_ns": tmean,
        "cov": cov,
        "rel_ci": rel_ci,
        "gflops_min": gmin,
        "gflops_median": gmed,
        "pct_peak_min": 100.0 * gmin / peak if peak else None,
        "pct_peak_median": 100.0 * gmed / peak if peak else None,
        "round_medians_ns": [float(t) for t in round_medians_ns] if round_medians_ns else [tmed],
    }


def median(values: Any) -> float:
    """``np.median`` of a 1-D sequence of floats, without its layers of wrappers (25 us a call, and the
    summary of every archive makes 170 000 calls on a median of 5 values): the middle value, or the mean
    of the two middle ones; NaN when empty or when any value is NaN (as np.median)."""
    s = np.sort(np.asarray(values, dtype=float))
    n = s.size
    if n == 0 or math.isnan(s[-1]):  # np.sort puts NaN last
        return math.nan
    mid = n // 2
    return float(s[mid]) if n % 2 else float((s[mid - 1] + s[mid]) / 2)


def round_medians(row: Mapping[str, Any]) -> list[float]:
    """Median time of each timing round of an ok row (a dict or a loaded row): its ``round_medians_ns``, or
    for a row stored before rounds existed one round, the median of its times; [] without times."""
    medians = row.get("round_medians_ns")
    if medians is not None and len(medians):
        return [float(t) for t in medians]
    times = row.get("times_ns")
    return [median(times)] if times is not None and len(times) else []


def round_times(row: Mapping[str, Any]) -> list[str] | None:
    """When each of an ok row's rounds was timed: its ``round_times``; for a row timed in one round, its
    timestamp; None for rows whose rounds predate the column (their times are unknown)."""
    times = row.get("round_times")
    if times is not None and not _is_null(times) and len(times):
        return [str(t) for t in times]
    stamp = row.get("timestamp")
    return [str(stamp)] if len(round_medians(row)) == 1 and stamp else None


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _check_name(kind: str, value: str) -> str:
    """Experiment names become directory names: refuse anything that could escape or collide."""
    if not isinstance(value, str) or not _SAFE_NAME.match(value) or ".." in value:
        raise ValueError(f"{kind} {value!r} is not a safe file name (letters, digits and _.+=,@- only)")
    return value


def validate_row(row: Mapping[str, Any]) -> pa.Table:
    """Check a row against :data:`COLUMNS` and return it as a one-row arrow table.

    Raises ValueError naming missing/unknown columns, values of the wrong type, bad enum values, invalid
    JSON, or timing columns set on a row whose status is not ok.
    """
    row = {**OPTIONAL_COLUMNS, **row}
    _check_columns(row, "row")
    values: dict[str, Any] = {}
    for name, (typ, _) in COLUMNS.items():
        value = row[name]
        if isinstance(value, float) and math.isnan(value) and typ != F64:
            value = None
        if name in JSON_COLUMNS and value is not None and not isinstance(value, str):
            value = json.dumps(value, sort_keys=True, default=str)
        values[name] = value
    if problem := _row_problem(values):
        raise ValueError(problem)
    arrays = []
    for name, (typ, _) in COLUMNS.items():
        try:
            arrays.append(pa.array([values[name]], type=typ))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"column {name}: cannot store {values[name]!r} as {typ} ({exc})") from exc
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _check_columns(names: Iterable[str], what: str) -> None:
    """Every column of the schema present (the optional ones may be absent), none besides."""
    names = list(names)
    missing = [c for c in COLUMNS if c not in names and c not in OPTIONAL_COLUMNS]
    unknown = [c for c in names if c not in COLUMNS]
    if missing or unknown:
        parts = [f"missing columns: {', '.join(missing)}"] if missing else []
        parts += [f"unknown columns: {', '.join(map(str, unknown))}"] if unknown else []
        raise ValueError(f"bad result {what}; " + "; ".join(parts))


@functools.lru_cache(maxsize=1 << 14)
def _json_error(text: str) -> str | None:
    """Why ``text`` is not JSON, or None. Cached: a table's JSON columns repeat a few values (its machine,
    compiler, sizes) on thousands of rows, and parsing each copy was half of unpacking every archive."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    return None


def _row_problem(values: Mapping[str, Any]) -> str | None:
    """What is wrong with a row's values (JSON columns as text), in the words an error gives; None if
    nothing. The one statement of the row rules: single rows and whole tables are checked by it."""
    for name in JSON_COLUMNS:
        if values[name] is not None and (error := _json_error(values[name])):
            return f"column {name}: not valid JSON ({error})"
    nulls = [c for c in REQUIRED_NON_NULL if _is_null(values[c])]
    if nulls:
        return f"columns must not be null: {', '.join(nulls)}"
    for name, allowed in ENUMS.items():
        if values[name] is not None and values[name] not in allowed:
            return f"column {name}: {values[name]!r} not in {allowed}"
    if values["status"] != "ok":
        set_perf = [c for c in PERF_COLUMNS if not _is_null(values[c])]
        if set_perf:
            return f"status {values['status']!r}: timing columns must be null: {', '.join(set_perf)}"
    elif (
        values["times_ns"] is not None
        and values["n_reps"] is not None
        and len(values["times_ns"]) != values["n_reps"]
    ):
        return f"n_reps={values['n_reps']} but times_ns has {len(values['times_ns'])} values"
    return None


def _rows_dir(results_dir: Path, experiment: str) -> Path:
    return Path(results_dir) / "rows" / _check_name("experiment", experiment)


def row_path(results_dir: Path, experiment: str, rid: str) -> Path:
    """Where the row ``rid`` of ``experiment`` lives."""
    return _rows_dir(results_dir, experiment) / f"{_check_name('row id', rid)}{_ROW_SUFFIX}"


def write_row(results_dir: Path, row: dict[str, Any], sync: bool = True) -> Path:
    """Validate ``row`` and write it atomically as one parquet file; return its path.

    Temp file in the final directory + fsync + os.replace: a killed writer leaves either the old state or
    the complete new file, never a truncated parquet. Rewriting an existing row replaces it. ``sync=False``
    skips the fsyncs (still atomic, not durable across a power cut): for bulk copies that can be redone,
    such as restoring an archive of thousands of rows.
    """
    table = validate_row(row)
    rid = row_id(*(row.get(k) for k in ID_COLUMNS))
    final = row_path(results_dir, row["experiment"], rid)
    final.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(table, final, rid, sync)
    return final


def write_frame(df: pd.DataFrame, path: Path, sync: bool = True) -> None:
    """Write ``df`` (without its index) as one parquet file at ``path``, atomically as a row is: a file that
    others read back after a crash (simulation results, model predictions) is the old one or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(pa.Table.from_pandas(df, preserve_index=False), path, path.stem, sync)


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """``df`` (without its index) as a CSV file for readers: Arrow's writer, 20x faster than pandas' on a
    report's tables (7 s -> 0.3 s for every archive's summary), pandas' where Arrow has no CSV form (a
    list column, mixed Python objects). Both read back alike (pandas.read_csv: the same values)."""
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        pa_csv.write_csv(table, str(path), pa_csv.WriteOptions(quoting_style="needed"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df.to_csv(path, index=False)


def _write_atomically(table: pa.Table, final: Path, tag: str, sync: bool = True) -> None:
    """Write ``table`` to a temp file beside ``final`` (named after ``tag``), fsync it and rename it over
    ``final``, then fsync the directory: a killed writer leaves the old file or the new one, never half."""
    fd, tmp_name = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{tag}-", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            pq.write_table(table, fh)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp_name, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    if sync:
        _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    """Make the rename itself durable (best effort: not every filesystem allows fsync on a directory)."""
    try:
        dfd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_row(results_dir: Path, experiment: str, rid: str) -> dict[str, Any] | None:
    """The stored row ``rid`` as a dict of Python values (lists stay lists), or None if absent."""
    path = row_path(results_dir, experiment, rid)
    if path.exists():
        rows = pq.read_table(path).to_pylist()
        return rows[0] if rows else None
    if rid not in _compacted_ids(results_dir, experiment):
        return None
    table = _read([_rows_dir(results_dir, experiment) / COMPACTED])
    ids = _ids(table)  # of this very table: a compaction may have replaced it since the lookup
    return table.slice(ids.index(rid), 1).to_pylist()[0] if rid in ids else None


def has_row(results_dir: Path, experiment: str, row_id: str) -> bool:
    """Whether the row is already stored, so a resumed sweep can skip it."""
    in_file = row_path(results_dir, experiment, row_id).is_file()
    return in_file or row_id in _compacted_ids(results_dir, experiment)


def row_files(results_dir: Path, experiment: str | None = None) -> list[Path]:
    """Complete files of single rows (``*.parquet`` only; temp files of killed writers and the compacted
    table are not among them)."""
    return [f for d in _experiment_dirs(results_dir, experiment) for f in _row_files_in(d)]


def _row_files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob(f"*{_ROW_SUFFIX}") if p.name[0] not in "._")


def experiments(results_dir: Path) -> list[str]:
    """Names of the experiments stored under ``results_dir``."""
    base = Path(results_dir) / "rows"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def stored_bytes(results_dir: Path, experiment: str) -> int:
    """The bytes ``experiment``'s rows take on disk: a cheap measure of how long reading them takes."""
    return sum(f.stat().st_size for f in _rows_dir(results_dir, experiment).rglob("*") if f.is_file())


def _experiment_dirs(results_dir: Path, experiment: str | Sequence[str] | None) -> list[Path]:
    if experiment is None:
        names = experiments(results_dir)
    else:
        names = [experiment] if isinstance(experiment, str) else list(experiment)
    return [_rows_dir(results_dir, name) for name in names]


def _ids(table: pa.Table) -> list[str]:
    n = table.num_rows
    cols = [table.column(k).to_pylist() if k in table.column_names else [None] * n for k in ID_COLUMNS]
    return [row_id(*vals) for vals in zip(*cols, strict=True)]


def _read(paths: list[Path], columns: list[str] | None = None, encoded: bool = False) -> pa.Table:
    """Row files or a compacted table, today's schema applied (columns added since read as null); only
    ``columns`` when given; ``encoded``: the :data:`_CATEGORICAL` columns as parquet stores them,
    dictionary-encoded (as plain strings the machine's JSON was 446 of the 783 MB of every archive)."""
    schema, fmt = (_ENCODED_SCHEMA, _ENCODED_FORMAT) if encoded else (SCHEMA, "parquet")
    return ds.dataset([str(p) for p in paths], schema=schema, format=fmt).to_table(columns=columns)


@functools.lru_cache(maxsize=8)
def _ids_at(path: str, version: tuple[int, int, int]) -> frozenset[str]:
    """Row ids of a compacted table; ``version`` (inode, mtime, size) keys the cache to one version of the
    file (compaction replaces it, never edits it)."""
    return frozenset(_ids(_read([Path(path)])))


def _compacted_ids(results_dir: Path, experiment: str) -> frozenset[str]:
    path = _rows_dir(results_dir, experiment) / COMPACTED
    version = _stamp(path)
    return frozenset() if version is None else _ids_at(str(path), version)


def _experiment_table(
    directory: Path, columns: list[str] | None = None, encoded: bool = False
) -> pa.Table | None:
    """One experiment's rows: its compacted table, then its single-row files, which win over the table's
    copy of the same row (``columns``: only those, with the row id's; ``encoded``: see :func:`_read`)."""
    try:
        return _read_experiment(directory, columns, encoded)
    except FileNotFoundError:  # a compaction moved rows between the listing and the reading
        return _read_experiment(directory, columns, encoded)


def set_aside_unreadable(results_dir: Path, experiment: str) -> list[Path]:
    """Row files whose parquet footer cannot be read (truncated or overwritten outside the harness: a row
    written here is whole or absent) renamed to ``.<name>.corrupt``, out of every listing, so their
    candidates count as not measured; returns the new paths."""
    return _set_aside(_rows_dir(results_dir, experiment))


def _set_aside(directory: Path) -> list[Path]:
    moved = []
    for f in _row_files_in(directory):
        try:
            pq.read_metadata(f)
        except FileNotFoundError:
            continue
        except (OSError, pa.ArrowException):
            aside = f.with_name(f".{f.name}.corrupt")
            os.replace(f, aside)
            moved.append(aside)
    return moved


def _read_experiment(directory: Path, columns: list[str] | None, encoded: bool) -> pa.Table | None:
    # the row id's columns too: a row file replaces the table's copy of the same row
    wanted = None if columns is None else list(dict.fromkeys([*columns, *ID_COLUMNS]))
    files = _row_files_in(directory)
    try:
        parts = [_read(files, wanted, encoded)] if files else []
    except (OSError, pa.ArrowException):  # an unreadable row file: set it aside, read the others
        for aside in _set_aside(directory):
            warnings.warn(f"set aside an unreadable row file (truncated?): {aside}", stacklevel=2)
        files = _row_files_in(directory)
        parts = [_read(files, wanted, encoded)] if files else []
    compacted = directory / COMPACTED
    if compacted.is_file():
        parts.insert(0, _read([compacted], wanted, encoded))
    table = _newest(pa.concat_tables(parts)) if len(parts) > 1 else (parts[0] if parts else None)
    return table if table is None or columns is None else table.select(columns)


def _newest(table: pa.Table) -> pa.Table:
    """``table`` with one copy of each row, the last."""
    last = {rid: i for i, rid in enumerate(_ids(table))}
    return table if len(last) == table.num_rows else table.take(pa.array(sorted(last.values()), pa.int64()))


def table(results_dir: Path, experiment: str) -> pa.Table | None:
    """``experiment``'s rows as one arrow table (None if it has none), as :func:`load` reads them."""
    return _experiment_table(_rows_dir(results_dir, experiment))


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Keeps two rewrites of one compacted table from dropping each other's rows; writers of single rows
    need no lock."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _rewrite_compacted(directory: Path, newer: pa.Table) -> None:
    """The compacted table with ``newer``'s rows added (replacing its copies of them): written next to the
    old one, fsynced and renamed over it."""
    path = directory / COMPACTED
    merged = _newest(pa.concat_tables([_read([path]), newer]) if path.is_file() else newer)
    _write_atomically(merged, path, "compacted")


def compact(results_dir: Path, experiment: str) -> int:
    """Move ``experiment``'s single-row files into its compacted table; returns the number of rows moved.

    A row file is deleted only once the new table holds it (renamed into place and fsynced), and only if
    it is still the file that was read: a writer that re-timed the row meanwhile keeps its new file, which
    wins over the table's copy.
    """
    directory = _rows_dir(results_dir, experiment)
    if not directory.is_dir():
        return 0
    with _locked(directory):
        seen = {f: _stamp(f) for f in _row_files_in(directory)}  # before reading: replaced later -> kept
        if not seen:
            return 0
        _rewrite_compacted(directory, _read(list(seen)))
        for f, stamp in seen.items():
            if _stamp(f) == stamp:
                f.unlink()
    return len(seen)


def validate_table(table: pa.Table) -> pa.Table:
    """:func:`validate_row`'s checks on a whole table (an archive's 23 000 rows in seconds: one cast per
    column instead of an arrow array per value): returns it in :data:`SCHEMA` (missing optional columns
    null), or raises ValueError naming the first bad row and what is wrong with it."""
    _check_columns(table.column_names, "rows")
    arrays = []
    for name, (typ, _) in COLUMNS.items():
        if name not in table.column_names:
            arrays.append(pa.nulls(table.num_rows, typ))
            continue
        try:
            arrays.append(table.column(name).cast(typ))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ValueError(f"column {name}: cannot store as {typ} ({exc})") from exc
    out = pa.Table.from_arrays(arrays, schema=SCHEMA)
    for i, values in enumerate(out.to_pylist()):
        if problem := _row_problem(values):
            raise ValueError(f"row {i}: {problem}")
    for name in pc.unique(out.column("experiment")).to_pylist():
        _check_name("experiment", name)
    return out


def add_rows(results_dir: Path, rows: list[Mapping[str, Any]]) -> int:
    """Validate ``rows`` and store them straight into their experiments' compacted tables (a bulk restore:
    one write instead of a file per row); a stored row of the same id, in a file or the table, is replaced.
    Raises ValueError naming the first bad row. Returns the number of rows stored."""
    tables = []
    for i, row in enumerate(rows):
        try:
            tables.append(validate_row(row))
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from exc
    return add_table(results_dir, pa.concat_tables(tables)) if tables else 0


def add_table(results_dir: Path, table: pa.Table, checked: bool = False) -> int:
    """:func:`add_rows` for rows already in a table (an archive's): validated at once
    (:func:`validate_table`; ``checked`` when the caller has: :func:`validate_table`'s own result), stored
    into their experiments' compacted tables. Returns the rows stored."""
    table = table if checked else validate_table(table)
    experiments_of = table.column("experiment")
    for name in pc.unique(experiments_of).to_pylist():
        directory = _rows_dir(results_dir, name)
        newer = table.filter(pc.equal(experiments_of, name))
        with _locked(directory):
            _rewrite_compacted(directory, newer)
            stored = set(_ids(newer))
            for f in _row_files_in(directory):  # the row files there, not a path per stored row
                if f.name.removesuffix(_ROW_SUFFIX) in stored:
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()  # older than the row just stored
    return table.num_rows


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


#: columns that repeat one long value on every row of a machine: read dictionary-encoded, categorical in
#: pandas (the machine's JSON is 2 KB a row, 446 MB of the 260 000 archived rows as plain strings)
_CATEGORICAL = ("machine",)
_ENCODED_SCHEMA = pa.schema(
    [pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in _CATEGORICAL else f for f in SCHEMA]
)
_ENCODED_FORMAT = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=_CATEGORICAL))


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow -> pandas keeping integer and bool columns nullable (failed rows have null n_reps)."""
    for name in _CATEGORICAL:
        i = table.schema.get_field_index(name)
        if i >= 0 and not pa.types.is_dictionary(table.schema.field(i).type):
            table = table.set_column(i, name, pc.dictionary_encode(table.column(i)))
    mapping = {I64: pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    return table.to_pandas(types_mapper=mapping.get)


def empty_frame() -> pd.DataFrame:
    """A zero-row DataFrame with every column and its dtype."""
    return _to_pandas(SCHEMA.empty_table())


def load(
    results_dir: Path, experiment: str | Sequence[str] | None = None, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """Every stored row (of one experiment, of a list of them, or of all) as a DataFrame with the schema
    applied; only ``columns`` when given, and those the legacy upgrade reads (a reader of every archive
    that needs a third of the columns holds a third of the memory). An unknown column is a ValueError
    naming it.

    ``times_ns`` holds one numpy array per row; int64/bool columns are nullable pandas dtypes.
    Baseline rows stored before library versions were recorded read as the libraries they measured
    (kernels.library_versions.LEGACY: an old ``onednn`` row is ``onednn-2.6``, version 2.6.3, from Debian).
    """
    from kernels.library_versions import LEGACY_COLUMNS, upgrade_legacy

    wanted = None
    if columns is not None:
        unknown = [c for c in columns if c not in COLUMNS]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(unknown)}; the store has {', '.join(COLUMNS)}")
        # the legacy upgrade reads and rewrites its own columns: read them whenever it could apply
        wanted = list(dict.fromkeys([*columns, *LEGACY_COLUMNS]))
    found = [_experiment_table(d, wanted, encoded=True) for d in _experiment_dirs(results_dir, experiment)]
    tables = [t for t in found if t is not None]
    if not tables:
        return empty_frame() if wanted is None else empty_frame()[wanted]
    # one chunk a column, not one per experiment: every later selection (a take) over 160 chunks cost 0.2
    # ms a column, 9 s of the report of every archive
    whole = pa.concat_tables(tables).combine_chunks()
    del found, tables
    df = upgrade_legacy(_to_pandas(whole).reset_index(drop=True))
    del whole
    pa.default_memory_pool().release_unused()  # the tables' buffers, which mimalloc would otherwise keep
    return df
