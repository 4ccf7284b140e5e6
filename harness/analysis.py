"""Statistics over stored rows: per-candidate summaries with median CIs, failure counts, repetitions.

Why here and not in the report: the same numbers feed tables, figures and tests, and the rule "a wrong or
failed candidate never gets a performance number" must hold in one place.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pandas as pd
from scipy import stats

from harness import store

#: One summary line per measurement unit: one candidate's rows on one workload and machine, in one timing
#: condition (the mode, and the co-runner if there was one).
GROUP_KEYS: list[str] = [
    *("experiment", "machine_fingerprint", "workload", "candidate_key", "timing_mode", "contention"),
]

#: Order in which a non-ok status wins when rows of one unit disagree (first = most telling).
STATUS_PRIORITY: tuple[str, ...] = (
    "wrong",
    "kernel_error",
    "crash",
    "timeout",
    "compile_error",
    "error",
    "unsupported",
    "ok",
)

#: columns a summary line takes from the first of its rows that has them
_CARRIED: tuple[str, ...] = (
    "cpu_model",
    "label",
    "candidate_kind",
    "target",
    "candidate_text",
    "candidate_options",
    "library",
    "library_version",
    "library_source",
    "search_strategy",
)
SUMMARY_COLUMNS: list[str] = [
    *GROUP_KEYS,
    *_CARRIED,
    "status",
    "reason",
    "flags",
    "search_runs",
    "timestamp",
    "n_rows",
    "n_reps",
    "flops",
    "peak_gflops",
    "min_ns",
    "median_ns",
    "median_ci_low_ns",
    "median_ci_high_ns",
    "gflops_min",
    "gflops_median",
    "pct_peak_min",
    "pct_peak_median",
    "pct_peak_median_ci_low",
    "pct_peak_median_ci_high",
    "cov",
    "round_medians_ns",
    "round_times",
]

#: Summary columns that are NaN unless the unit is ok.
_PERF_SUMMARY: list[str] = SUMMARY_COLUMNS[SUMMARY_COLUMNS.index("min_ns") :]

CI_LEVEL = 0.95


@functools.lru_cache(maxsize=4096)
def _median_ranks(n: int, confidence_level: float) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bounding the median at ``confidence_level``: the
    largest k with P(Binomial(n, 1/2) < k) <= alpha/2 (Conover, Practical Nonparametric Statistics, 3.2);
    below 6 values no pair reaches 95%, so the extremes (coverage 1 - 2^(1-n))."""
    # ppf: the smallest k with P(B <= k) >= alpha/2, so P(B <= k - 1) < alpha/2
    k = max(int(stats.binom.ppf((1.0 - confidence_level) / 2.0, n, 0.5)), 1)
    return k - 1, n - k


def median_ci(times: np.ndarray, confidence_level: float = CI_LEVEL) -> tuple[float, float]:
    """Distribution-free CI of the median: two order statistics of the times, chosen from the binomial
    distribution (no resampling: exact, the same data always give the same interval, and 5 µs a unit where
    a 2000-resample bootstrap took 1-3 ms, an hour over every archive's units).

    NaN for fewer than 3 repetitions, where no interval says anything.
    """
    times = np.asarray(times, dtype=float)
    times = np.sort(times[np.isfinite(times)])
    if times.size < 3:
        return math.nan, math.nan
    lo, hi = _median_ranks(int(times.size), float(confidence_level))
    return float(times[lo]), float(times[hi])


def _group_status(statuses: list[object]) -> str:
    """A unit is ok only if every row of it is ok (a wrong result under any seed makes it wrong)."""
    present = {s for s in statuses if not _missing(s)}
    for s in STATUS_PRIORITY:
        if s in present and s != "ok":
            return s
    others = sorted(present - {"ok"})
    if others:
        return str(others[0])
    return "ok" if present else "error"


def _pooled_times(rows: list[dict[str, object]]) -> np.ndarray:
    arrays = [np.asarray(r["times_ns"], dtype=float) for r in rows if _has_values(r["times_ns"])]
    return np.concatenate(arrays) if arrays else np.array([], dtype=float)


def _has_values(value: object) -> bool:
    return value is not None and not isinstance(value, float) and len(value) > 0  # type: ignore[arg-type]


def _missing(value: object) -> bool:
    """A null cell of a loaded row: None, NaN or pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def n_rounds(rounds: object) -> int:
    """How many timing rounds a summary's ``round_medians_ns`` holds (NaN, for a failed unit: 0)."""
    return 0 if rounds is None or isinstance(rounds, float) else len(rounds)


#: Rounds of two candidates further apart than this are not paired: the host drifts over minutes.
PAIR_WINDOW_S = 600.0


def round_ratio(
    rounds_a: object, rounds_b: object, times_a: object = None, times_b: object = None
) -> tuple[float, float, float]:
    """Speed of A over speed of B round by round (B's time / A's time): (median, min, max) over the pairs.
    Rounds of one run are interleaved, so a slow minute of the host slows both sides of a pair.

    As many rounds on both sides (the passes of one run): paired in order, the k-th with the k-th, when
    each such pair is within :data:`PAIR_WINDOW_S` or the times are not known. Otherwise, with the rounds'
    times (``round_times``), each round of A is paired with B's round nearest in time, if within the
    window (a baseline re-timed beside every confirmation of a growing search has more rounds than any
    one candidate). Not nearest-in-time for equal counts: a pass visits its candidates in a new order each
    time, so A's second round can fall nearer B's first than B's second (the Zen 4's t01 of 2026-11-29:
    paired by time, two of our three rounds met the library's slow first one, x1.16 for x1.03).
    NaNs when nothing pairs."""
    a = np.asarray(rounds_a if rounds_a is not None else [], dtype=float)
    b = np.asarray(rounds_b if rounds_b is not None else [], dtype=float)
    ta, tb = _seconds(times_a, a.size), _seconds(times_b, b.size)
    timed = ta is not None and tb is not None
    if a.size and a.size == b.size and (not timed or (np.abs(ta - tb) <= PAIR_WINDOW_S).all()):
        ratios = b / a
    elif timed and a.size and b.size:
        gap = np.abs(ta[:, None] - tb[None, :])
        nearest = gap.argmin(axis=1)
        close = gap[np.arange(a.size), nearest] <= PAIR_WINDOW_S
        if not close.any():
            return math.nan, math.nan, math.nan
        ratios = b[nearest[close]] / a[close]
    else:
        return math.nan, math.nan, math.nan
    return float(np.median(ratios)), float(ratios.min()), float(ratios.max())


def _seconds(times: object, n: int) -> np.ndarray | None:
    """ISO times as epoch seconds, or None unless there is one per round."""
    if times is None or isinstance(times, float) or len(times) != n:  # type: ignore[arg-type]
        return None
    stamps = pd.to_datetime(pd.Series(list(times)), utc=True, format="ISO8601")  # type: ignore[arg-type]
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def _flags(rows: list[dict[str, object]]) -> list[str]:
    """Distinct measurement-sanity flags of a unit's rows (JSON lists in the store)."""
    out: dict[str, None] = {}
    for r in rows:
        text = r.get("flags")
        for f in json.loads(text) if isinstance(text, str) and text else []:
            out[str(f)] = None
    return list(out)


def _search_runs(rows: list[dict[str, object]]) -> str:
    """JSON list of [search seed, proposal index] of a unit's rows: which search run proposed the candidate
    and when (the summary pools seeds, so a convergence curve needs this to replay each run)."""
    pairs = {
        (int(r["search_seed"]), int(r["search_index"]))  # type: ignore[call-overload]
        for r in rows
        if not _missing(r.get("search_index")) and not _missing(r.get("search_seed"))
    }
    return json.dumps(sorted(pairs))


def _first(rows: list[dict[str, object]], column: str) -> object:
    return next((r[column] for r in rows if not _missing(r.get(column))), None)


#: the row columns a summary line reads (the others, such as the machine's JSON, stay out of its records)
SUMMARY_INPUTS: tuple[str, ...] = (
    *GROUP_KEYS,
    *_CARRIED,
    *("status", "reason", "flags", "flops", "peak_gflops", "timestamp", "search_seed", "search_index"),
    *("times_ns", "round_medians_ns", "round_times"),
)


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``contention`` key as objects (null: no co-runner), whether the column came all
    null from arrow (floats), from rows of before it existed (absent) or from a summary (objects), so units
    group and merge alike."""
    if "contention" in frame and frame["contention"].dtype == object:
        return frame
    co = frame["contention"] if "contention" in frame else pd.Series(None, index=frame.index, dtype=object)
    return frame.assign(contention=co.astype(object).where(co.notna(), None))


def condition(frame: pd.DataFrame) -> pd.Series:
    """A unit's timing condition in words: "hot cache", "cold cache", or with the co-runner the timing met
    ("hot cache + stream co-runner", timing.contention)."""
    text = frame["timing_mode"].astype(str) + " cache"
    if "contention" in frame:
        co = frame["contention"]
        text = text.where(co.isna(), text + " + " + co.astype(str) + " co-runner")
    return text.rename("condition")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """One line per (experiment, machine, workload, candidate, timing mode) with its performance.

    Repetitions of all ok rows of a unit (e.g. several seeds) are pooled. Performance columns are only
    filled for units whose status is ok; wrong/failed units keep their status and reason, with NaN numbers.
    """
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in SUMMARY_COLUMNS})
    df = _keyed(df)
    codes = df.groupby(GROUP_KEYS, sort=True, dropna=False).ngroup().to_numpy()
    # most units are one row: those are summarised a column at a time (_single_row_lines), the others
    # (several rows, or a row the column-wise path does not cover) a unit at a time
    fast = (np.bincount(codes)[codes] == 1) & _plain(df)
    lines = _single_row_lines(df.iloc[np.flatnonzero(fast)])
    slow = np.flatnonzero(~fast)
    # the units' rows as plain dicts: pandas' per-group indexing cost 18 ms a unit
    records = df.iloc[slow][[c for c in SUMMARY_INPUTS if c in df]].to_dict("records")
    slow_codes = codes[slow]
    order = np.argsort(slow_codes, kind="stable")
    units = np.split(order, np.flatnonzero(np.diff(slow_codes[order])) + 1) if slow.size else []
    unit_lines = [_summary_line([records[i] for i in unit]) for unit in units]
    # both kinds of line back in the units' order (the group keys sorted)
    unit_codes = np.array([slow_codes[unit[0]] for unit in units], dtype=codes.dtype)
    position = np.argsort(np.concatenate([codes[fast], unit_codes]), kind="stable")
    columns = {}
    for c in SUMMARY_COLUMNS:
        values = lines[c] + [line[c] for line in unit_lines]
        columns[c] = [values[i] for i in position]
    out = pd.DataFrame(columns, columns=SUMMARY_COLUMNS)
    out["n_reps"] = out["n_reps"].astype("int64")
    out["n_rows"] = out["n_rows"].astype("int64")
    return out


def _plain(df: pd.DataFrame) -> np.ndarray:
    """Rows :func:`_single_row_lines` summarises as :func:`_summary_line` would: a status, and for an ok
    row at least one time, every time and round median finite."""
    status = df["status"]
    has_status = status.notna().to_numpy()
    ok = (status == "ok").fillna(False).to_numpy(dtype=bool)
    finite = np.fromiter(
        (
            _finite(t, 1) and _finite(r, 0)
            for t, r in zip(df["times_ns"], _column(df, "round_medians_ns"), strict=True)
        ),
        dtype=bool,
        count=len(df),
    )
    return has_status & (~ok | finite)


def _column(df: pd.DataFrame, name: str) -> list[object]:
    return df[name].tolist() if name in df else [None] * len(df)


def _finite(values: object, at_least: int) -> bool:
    """Whether ``values`` (an array, or None/NaN for none) holds at least ``at_least`` values, all finite."""
    if values is None or isinstance(values, float):
        return at_least == 0
    arr = np.asarray(values, dtype=float)
    return arr.size >= at_least and bool(np.isfinite(arr).all())


def present(column: pd.Series) -> list[object]:
    """A column's values as Python objects, None where missing (one vectorised test, not one a value)."""
    return [None if m else v for v, m in zip(column.tolist(), column.isna().to_numpy(), strict=True)]


def _present(df: pd.DataFrame, name: str) -> list[object]:
    """A column's values, None where missing (or where the column is absent), as :func:`_first` reads them."""
    return present(df[name]) if name in df else [None] * len(df)


def _single_row_lines(rows: pd.DataFrame) -> dict[str, list[object]]:
    """The summary lines of units of one row each, as :func:`_summary_line` makes them, a column at a time:
    the units' repetitions are stacked by count, so the statistics are a few array operations, not a few
    numpy calls a unit (30 s of the report of every archive's 158 000 units)."""
    n = len(rows)
    out: dict[str, list[object]] = {k: rows[k].tolist() for k in GROUP_KEYS}
    out.update({c: _present(rows, c) for c in _CARRIED})
    status = rows["status"].tolist()
    reasons = _present(rows, "reason")
    flag_text = {t: "; ".join(_flags([{"flags": t}])) for t in dict.fromkeys(_column(rows, "flags"))}
    seeds, indices = _present(rows, "search_seed"), _present(rows, "search_index")
    stamps = _present(rows, "timestamp")
    flops, peaks = _present(rows, "flops"), _present(rows, "peak_gflops")
    out.update(
        status=status,
        reason=["" if s == "ok" or r is None else str(r) for s, r in zip(status, reasons, strict=True)],
        flags=[flag_text[t] for t in _column(rows, "flags")],
        search_runs=[
            "[]" if s is None or i is None else json.dumps([[int(s), int(i)]])  # type: ignore[call-overload]
            for s, i in zip(seeds, indices, strict=True)
        ],
        timestamp=[None if t is None else str(t) for t in stamps],
        n_rows=[1] * n,
        flops=flops,
        peak_gflops=peaks,
    )
    perf: dict[str, list[object]] = {c: [math.nan] * n for c in _PERF_SUMMARY}
    perf["n_reps"] = [0] * n
    times = _column(rows, "times_ns")
    round_medians = _column(rows, "round_medians_ns")
    round_times = _column(rows, "round_times")
    by_count: dict[int, list[int]] = {}
    for i, s in enumerate(status):
        if s == "ok":
            by_count.setdefault(len(times[i]), []).append(i)  # type: ignore[arg-type]
    for count, idx in by_count.items():
        stacked = np.array([times[i] for i in idx], dtype=float).reshape(len(idx), count)
        ordered = np.sort(stacked, axis=1)
        mid = count // 2
        medians = ordered[:, mid] if count % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2
        covs = (
            stacked.std(axis=1, ddof=1) / stacked.mean(axis=1) if count > 1 else np.full(len(idx), math.nan)
        )
        lo_rank, hi_rank = _median_ranks(count, CI_LEVEL) if count >= 3 else (None, None)
        for k, i in enumerate(idx):
            tmin, tmed = float(ordered[k, 0]), float(medians[k])
            rm, rt = round_medians[i], round_times[i]
            rounds = [float(t) for t in rm] if _has_values(rm) else [tmed]  # type: ignore[union-attr]
            if _has_values(rt):
                when: list[str] | None = [str(t) for t in rt]  # type: ignore[union-attr]
            else:
                when = [str(stamps[i])] if len(rounds) == 1 and stamps[i] else None
            if len(rounds) > 1:
                tmed, lo, hi = store.median(rounds), float(min(rounds)), float(max(rounds))
            elif lo_rank is not None:
                lo, hi = float(ordered[k, lo_rank]), float(ordered[k, hi_rank])
            else:
                lo, hi = math.nan, math.nan
            values = {
                **dict(n_reps=count, min_ns=tmin, median_ns=tmed, median_ci_low_ns=lo, median_ci_high_ns=hi),
                **dict(cov=float(covs[k]), round_medians_ns=rounds, round_times=when),
                **_rates(flops[i], peaks[i], tmin, tmed, lo, hi),
            }
            for c, v in values.items():
                perf[c][i] = v
    out.update(perf)
    return out


def _summary_line(rows: list[dict[str, object]]) -> dict[str, object]:
    status = _group_status([r["status"] for r in rows])
    bad = [r["reason"] for r in rows if r["status"] != "ok" and not _missing(r["reason"])]
    line: dict[str, object] = {k: rows[0][k] for k in GROUP_KEYS}
    flops, peak = _first(rows, "flops"), _first(rows, "peak_gflops")
    stamps = [str(r["timestamp"]) for r in rows if not _missing(r.get("timestamp"))]
    line.update({c: _first(rows, c) for c in _CARRIED})
    line.update(
        status=status,
        reason="; ".join(dict.fromkeys(str(r) for r in bad if str(r))),
        flags="; ".join(_flags(rows)),
        search_runs=_search_runs(rows),
        timestamp=min(stamps) if stamps else None,
        n_rows=len(rows),
        flops=flops,
        peak_gflops=peak,
    )
    times = _pooled_times(rows) if status == "ok" else np.array([], dtype=float)
    perf: dict[str, object] = dict.fromkeys(_PERF_SUMMARY, math.nan)
    perf["n_reps"] = 0
    if times.size:
        tmin, tmed = float(times.min()), store.median(times)
        per_row = [store.round_medians(r) for r in rows]  # the unit is ok: every row
        rounds = [t for row_rounds in per_row for t in row_rounds]
        when = [store.round_times(r) for r in rows]
        perf["round_times"] = None if any(w is None for w in when) else [t for w in when for t in w]
        if any(len(row_rounds) > 1 for row_rounds in per_row):
            # timed in interleaved rounds: each round weighs the same (store.perf_fields), and the
            # interval is the range of the round medians (for 3 rounds, 75% coverage of the median)
            tmed, lo, hi = store.median(rounds), float(min(rounds)), float(max(rounds))
        else:
            lo, hi = median_ci(times)
        perf.update(
            n_reps=int(times.size),
            min_ns=tmin,
            median_ns=tmed,
            median_ci_low_ns=lo,
            median_ci_high_ns=hi,
            # the array's methods: np.std and np.mean's own code, without their wrappers
            cov=float(times.std(ddof=1) / times.mean()) if times.size > 1 else math.nan,
            round_medians_ns=rounds,
        )
        perf.update(_rates(flops, peak, tmin, tmed, lo, hi))
    line.update(perf)
    return line


def _rates(flops: object, peak: object, tmin: float, tmed: float, lo: float, hi: float) -> dict[str, float]:
    """GFLOP/s and % of peak of a unit's times: none without flops, no % without a peak."""
    if flops is None:
        return {}
    f = float(flops)  # type: ignore[arg-type]
    out = {"gflops_min": f / tmin, "gflops_median": f / tmed}
    if peak is not None and float(peak) > 0:  # type: ignore[arg-type]
        to_pct = 100.0 * f / float(peak)  # type: ignore[arg-type]
        # % of peak falls as time grows: the CI bounds swap.
        out.update(pct_peak_min=to_pct / tmin, pct_peak_median=to_pct / tmed,
                   pct_peak_median_ci_low=to_pct / hi, pct_peak_median_ci_high=to_pct / lo)  # fmt: skip
    return out


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: measurement units total, ok, wrong and failed (any other non-ok status)."""
    summary = summarize(df)
    if summary.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64") for c in ("total", "ok", "wrong", "failed")},
            index=pd.Index([], name="experiment"),
        )
    status = summary["status"]
    table = pd.DataFrame(
        {
            "experiment": summary["experiment"],
            "total": 1,
            "ok": (status == "ok").astype("int64"),
            "wrong": (status == "wrong").astype("int64"),
            "failed": (~status.isin(["ok", "wrong"])).astype("int64"),
        }
    )
    return table.groupby("experiment").sum()


def repetitions(df: pd.DataFrame, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table, one line per timed repetition of an ok unit, with its % of calibrated peak.

    This is what performance figures plot: wrong or failed units are not in it. ``summary`` is
    ``summarize(df)`` when the caller has it already.
    """
    cols = [
        *GROUP_KEYS,
        "cpu_model",
        "label",
        "candidate_kind",
        "target",
        "seed",
        "flops",
        "peak_gflops",
        "time_ns",
        "gflops",
        "pct_peak",
    ]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    summary = summarize(df) if summary is None else summary
    ok_units = _keyed(summary.loc[summary["status"] == "ok", GROUP_KEYS])
    rows = _keyed(df[df["status"] == "ok"]).merge(ok_units, on=GROUP_KEYS, how="inner")
    rows = rows[[*cols[:-3], "times_ns"]].explode("times_ns").rename(columns={"times_ns": "time_ns"})
    rows = rows.dropna(subset=["time_ns"])
    rows["time_ns"] = rows["time_ns"].astype("float64")
    rows["gflops"] = rows["flops"].astype("float64") / rows["time_ns"]
    rows["pct_peak"] = 100.0 * rows["gflops"] / rows["peak_gflops"].astype("float64")
    return rows[cols].reset_index(drop=True)
