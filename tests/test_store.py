"""Result store: schema validation, round trip, atomic writes that survive a killed writer."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import store

ROOT = Path(__file__).resolve().parent.parent


def make_row(**overrides: Any) -> dict[str, Any]:
    """A complete, valid ok row; keyword arguments replace columns."""
    times = overrides.pop("times_ns", [1000.0, 1100.0, 1050.0, 990.0])
    flops = 2 * 64 * 64 * 64
    peak = 100.0
    row: dict[str, Any] = {
        "experiment": "exp1",
        "candidate_key": "k0",
        "candidate_kind": "scheme",
        "candidate_text": "[U_{4,i}, V_j]",
        "candidate_options": json.dumps({"target": "avx2"}),
        "label": "[U_{4,i}, V_j]",
        "workload": "mm64",
        "op": "matmul",
        "op_params": "{}",
        "sizes": json.dumps({"i": 64, "j": 64, "k": 64}),
        "flops": flops,
        "source_hash": "abc123",
        "target": "avx2",
        "compiler": "gcc",
        "compiler_version": "12.2.0",
        "cflags": "-O3 -mavx2 -mfma",
        "machine_fingerprint": "fpA",
        "cpu_model": "AMD EPYC",
        "machine": json.dumps({"isa": "avx2", "caches": {"l1d": 32768}}),
        "peak_gflops": peak,
        "timing_mode": "hot",
        "cold_method": "",
        "counter_backend": "clock_gettime",
        "counters": json.dumps({"cycles": [1, 2, 3, 4]}),
        "counters_unavailable": json.dumps({"papi": "no PMU"}),
        "seed": 0,
        "check_mode": "sampled",
        "check_points": 1000,
        "check_eps": 1e-4,
        "check_max_err": 1e-6,
        "check_passed": True,
        "status": "ok",
        "reason": "",
        "flags": "[]",
        "timestamp": "2024-06-01T12:00:00+00:00",
        "harness_version": "0.1.0",
    }
    row.update(store.perf_fields(times, flops, peak, rel_ci=0.01))
    row.update(overrides)
    return row


def failed_row(
    status: str = "wrong", reason: str = "max rel err 0.5 > 1e-4", **overrides: Any
) -> dict[str, Any]:
    row = make_row(status=status, reason=reason, check_passed=status != "wrong", **overrides)
    row.update(dict.fromkeys(store.PERF_COLUMNS))
    return row


def test_columns_document_every_field() -> None:
    assert list(store.COLUMNS)[:2] == ["experiment", "candidate_key"]
    assert store.COLUMNS["times_ns"][0] == pa.list_(pa.float64())
    assert all(desc for _, desc in store.COLUMNS.values())
    assert store.SCHEMA.names == list(store.COLUMNS)
    assert set(make_row()) | set(store.OPTIONAL_COLUMNS) == set(store.COLUMNS)


def test_optional_search_columns_default_to_null_and_old_rows_read_back(tmp_path: Path) -> None:
    """Rows written before the search columns existed (or by producers that omit them) load with null."""
    old = make_row(candidate_key="old")
    table = store.validate_row(old).drop_columns(list(store.OPTIONAL_COLUMNS))  # an old-schema file
    d = tmp_path / "rows" / old["experiment"]
    d.mkdir(parents=True)
    pq.write_table(table, d / "old.parquet")
    store.write_row(tmp_path, make_row(candidate_key="new", search_strategy="random", search_budget=10,
                                       search_seed=3, search_index=0))  # fmt: skip
    frame = store.load(tmp_path).set_index("candidate_key")
    assert frame.loc["new", "search_strategy"] == "random" and frame.loc["new", "search_index"] == 0
    assert frame.loc["old", "search_strategy"] is None or pd.isna(frame.loc["old", "search_strategy"])
    assert pd.isna(frame.loc["old", "search_budget"])


def test_missing_and_unknown_columns_are_named(tmp_path: Path) -> None:
    row = make_row()
    del row["cflags"]
    row["bogus"] = 1
    with pytest.raises(ValueError, match="missing columns: cflags") as err:
        store.write_row(tmp_path, row)
    assert "unknown columns: bogus" in str(err.value)
    assert store.row_files(tmp_path) == []


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("flops", "many", "column flops"),
        ("status", "fast", "column status"),
        ("timing_mode", "warm", "column timing_mode"),
        ("machine", "{not json", "column machine: not valid JSON"),
        ("experiment", "../escape", "not a safe file name"),
        ("seed", None, "must not be null: seed"),
        ("n_reps", 7, "n_reps=7"),
    ],
)
def test_bad_values_rejected(tmp_path: Path, column: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        store.write_row(tmp_path, make_row(**{column: value}))


def test_failed_row_must_not_carry_timings(tmp_path: Path) -> None:
    row = make_row(status="crash", reason="SIGSEGV")
    with pytest.raises(ValueError, match="timing columns must be null: .*times_ns"):
        store.write_row(tmp_path, row)
    store.write_row(tmp_path, failed_row("crash", "SIGSEGV"))


def test_round_trip_with_list_column(tmp_path: Path) -> None:
    times = [1234.5, 1200.25, 1300.0, 1250.0, 1199.0]
    ok = make_row(times_ns=times)
    bad = failed_row(candidate_key="k1", label="broken")
    p_ok = store.write_row(tmp_path, ok)
    store.write_row(tmp_path, bad)
    store.write_row(tmp_path, make_row(experiment="exp2"))

    rid = store.row_id("exp1", "k0", "mm64", "hot", 0, "fpA")
    assert p_ok == tmp_path / "rows" / "exp1" / f"{rid}.parquet"
    assert store.has_row(tmp_path, "exp1", rid)
    assert not store.has_row(tmp_path, "exp2", rid)

    df = store.load(tmp_path, "exp1")
    assert list(df.columns) == list(store.COLUMNS)
    assert len(df) == 2
    got = df.set_index("candidate_key")
    np.testing.assert_array_equal(np.asarray(got.loc["k0", "times_ns"]), times)
    assert got.loc["k0", "n_reps"] == 5
    assert got.loc["k0", "median_ns"] == pytest.approx(1234.5)
    assert got.loc["k0", "gflops_median"] == pytest.approx(ok["flops"] / 1234.5)
    assert got.loc["k0", "pct_peak_median"] == pytest.approx(100 * ok["flops"] / 1234.5 / 100.0)
    assert json.loads(got.loc["k0", "counters"]) == {"cycles": [1, 2, 3, 4]}
    assert bool(got.loc["k0", "check_passed"]) is True
    # failed row: timing columns null, nullable integers stay integers
    assert got.loc["k1", "status"] == "wrong"
    assert pd.isna(got.loc["k1", "n_reps"]) and pd.isna(got.loc["k1", "median_ns"])
    assert got.loc["k1", "times_ns"] is None
    assert str(df["n_reps"].dtype) == "Int64"

    assert len(store.load(tmp_path)) == 3
    assert set(store.load(tmp_path)["experiment"]) == {"exp1", "exp2"}


def test_rewrite_replaces_row(tmp_path: Path) -> None:
    store.write_row(tmp_path, make_row(times_ns=[5.0, 6.0, 7.0]))
    store.write_row(tmp_path, make_row(times_ns=[1.0, 2.0, 3.0]))
    df = store.load(tmp_path)
    assert len(df) == 1 and df.loc[0, "min_ns"] == 1.0


def test_load_of_some_columns_reads_only_those_and_a_row_file_still_wins(tmp_path: Path) -> None:
    store.write_row(tmp_path, make_row(times_ns=[5.0, 6.0, 7.0]))
    store.compact(tmp_path, "exp1")
    store.write_row(tmp_path, make_row(times_ns=[1.0, 2.0, 3.0]))  # a row file beside its compacted copy
    store.write_row(tmp_path, make_row(candidate_key="k1", seed=1))
    full = store.load(tmp_path)
    df = store.load(tmp_path, columns=["workload", "times_ns"])
    assert {"workload", "times_ns"} <= set(df.columns) < set(full.columns)
    assert "op_params" not in df and "machine" not in df and "sizes" not in df
    assert len(df) == len(full) == 2
    assert sorted(min(t) for t in df["times_ns"]) == sorted(min(t) for t in full["times_ns"]) == [1.0, 990.0]
    assert list(store.load(tmp_path / "none", columns=["workload"]).columns)[0] == "workload"
    with pytest.raises(ValueError, match="unknown column.*no_such_column"):
        store.load(tmp_path, columns=["workload", "no_such_column"])


def test_load_empty_has_schema(tmp_path: Path) -> None:
    df = store.load(tmp_path)
    assert df.empty and list(df.columns) == list(store.COLUMNS)
    assert store.load(tmp_path, "nothing").empty


def test_row_id_is_stable_and_discriminating() -> None:
    a = store.row_id("e", "k", "w", "hot", 1, "m")
    assert a == store.row_id("e", "k", "w", "hot", 1, "m")
    assert (
        len(
            {
                a,
                store.row_id("e", "k", "w", "cold", 1, "m"),
                store.row_id("e", "k", "w", "hot", 2, "m"),
                store.row_id("e", "k", "w", "hot", 1, "m2"),
                store.row_id("e", "kw", "", "hot", 1, "m"),
            }
        )
        == 5
    )


def test_failed_replace_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write_row(tmp_path, make_row(candidate_key="before"))

    def boom(src: str, dst: str) -> None:
        raise OSError("disk vanished")

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(OSError, match="disk vanished"):
        store.write_row(tmp_path, make_row(candidate_key="during"))
    monkeypatch.undo()

    exp_dir = tmp_path / "rows" / "exp1"
    rid = store.row_id("exp1", "during", "mm64", "hot", 0, "fpA")
    assert not store.has_row(tmp_path, "exp1", rid)
    assert sorted(p.name for p in exp_dir.iterdir()) == [p.name for p in store.row_files(tmp_path)]
    assert list(store.load(tmp_path)["candidate_key"]) == ["before"]


def test_kill_9_during_write_leaves_store_readable(tmp_path: Path) -> None:
    """A writer SIGKILLed after writing the temp file but before the rename leaves only a stray temp file."""
    store.write_row(tmp_path, make_row(candidate_key="before"))
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store import make_row
        from harness import store
        real_fsync = os.fsync
        def fsync_then_die(fd):
            real_fsync(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        store.os.fsync = fsync_then_die
        store.write_row({str(tmp_path)!r}, make_row(candidate_key="killed"))
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    exp_dir = tmp_path / "rows" / "exp1"
    leftovers = [p for p in exp_dir.iterdir() if not p.name.endswith(".parquet")]
    assert leftovers, "the killed writer should have left its temp file behind"
    assert not store.has_row(tmp_path, "exp1", store.row_id("exp1", "killed", "mm64", "hot", 0, "fpA"))
    assert list(store.load(tmp_path)["candidate_key"]) == ["before"]
    # a rerun writes the row normally despite the leftover
    store.write_row(tmp_path, make_row(candidate_key="killed"))
    assert sorted(store.load(tmp_path)["candidate_key"]) == ["before", "killed"]


# -- the compacted table: rows moved out of their own files load the same, and a newer file wins --------
def _rid(key: str, experiment: str = "exp1") -> str:
    return store.row_id(experiment, key, "mm64", "hot", 0, "fpA")


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["experiment", "candidate_key"]).drop(columns="times_ns").reset_index(drop=True)


def _some_rows(results: Path) -> None:
    for i in range(4):
        store.write_row(results, make_row(candidate_key=f"k{i}", times_ns=[1000.0 + i, 1100.0]))
    store.write_row(results, failed_row(candidate_key="bad"))
    store.write_row(results, make_row(experiment="exp2", candidate_key="other"))


def test_compacted_rows_read_back_as_they_were_written(tmp_path: Path) -> None:
    _some_rows(tmp_path)
    before = store.load(tmp_path)
    one = store.read_row(tmp_path, "exp1", _rid("k2"))
    assert store.compact(tmp_path, "exp1") == 5
    assert store.row_files(tmp_path, "exp1") == [] and len(store.row_files(tmp_path, "exp2")) == 1
    after = store.load(tmp_path)
    assert _sorted(after).equals(_sorted(before))
    assert [list(t) for t in after.sort_values("candidate_key")["times_ns"].dropna()] == [
        list(t) for t in before.sort_values("candidate_key")["times_ns"].dropna()
    ]
    assert all(store.has_row(tmp_path, "exp1", _rid(k)) for k in ("k0", "k3", "bad"))
    assert not store.has_row(tmp_path, "exp1", _rid("never"))
    assert store.read_row(tmp_path, "exp1", _rid("k2")) == one
    assert store.compact(tmp_path, "exp1") == 0  # nothing left to move
    assert store.compact(tmp_path, "nothing-here") == 0


def test_a_row_written_after_compaction_wins_over_its_compacted_copy(tmp_path: Path) -> None:
    _some_rows(tmp_path)
    store.compact(tmp_path, "exp1")
    store.write_row(tmp_path, make_row(candidate_key="k1", times_ns=[7.0, 8.0]))  # re-timed
    for _ in range(2):  # as a single-row file beside the table, then compacted again
        df = store.load(tmp_path, "exp1")
        assert len(df) == 5 and df.loc[df["candidate_key"] == "k1", "min_ns"].tolist() == [7.0]
        assert store.read_row(tmp_path, "exp1", _rid("k1"))["min_ns"] == 7.0
        store.compact(tmp_path, "exp1")
    assert store.row_files(tmp_path, "exp1") == []


def test_a_row_file_replaced_while_compacting_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _some_rows(tmp_path)
    real = store._rewrite_compacted

    def then_a_writer_retimes_k3(directory: Path, newer: pa.Table) -> None:
        real(directory, newer)
        store.write_row(tmp_path, make_row(candidate_key="k3", times_ns=[5.0, 6.0]))

    monkeypatch.setattr(store, "_rewrite_compacted", then_a_writer_retimes_k3)
    store.compact(tmp_path, "exp1")
    assert [p.stem for p in store.row_files(tmp_path, "exp1")] == [_rid("k3")]
    df = store.load(tmp_path, "exp1")
    assert len(df) == 5 and df.loc[df["candidate_key"] == "k3", "min_ns"].tolist() == [5.0]


def test_a_compaction_that_fails_before_its_rename_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _some_rows(tmp_path)
    before = store.load(tmp_path)

    def boom(src: str, dst: str) -> None:
        raise OSError("disk vanished")

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(OSError, match="disk vanished"):
        store.compact(tmp_path, "exp1")
    monkeypatch.undo()
    assert len(store.row_files(tmp_path, "exp1")) == 5
    assert not (tmp_path / "rows" / "exp1" / store.COMPACTED).exists()
    assert not list((tmp_path / "rows" / "exp1").glob(".tmp-*"))
    assert _sorted(store.load(tmp_path)).equals(_sorted(before))


def test_added_rows_replace_stored_ones_and_a_bad_row_is_named(tmp_path: Path) -> None:
    store.write_row(tmp_path, make_row(candidate_key="k0", times_ns=[9.0, 9.5]))
    assert store.add_rows(tmp_path, [make_row(candidate_key="k0", times_ns=[1.0, 2.0]),
                                     make_row(candidate_key="k1")]) == 2  # fmt: skip
    assert store.row_files(tmp_path) == []  # k0's older file is gone
    df = store.load(tmp_path, "exp1")
    assert sorted(df["candidate_key"]) == ["k0", "k1"] and df["min_ns"].min() == 1.0
    with pytest.raises(ValueError, match=r"row 1: .*status"):
        store.add_rows(
            tmp_path, [make_row(candidate_key="k2"), make_row(candidate_key="k3", status="exploded")]
        )
    assert len(store.load(tmp_path)) == 2  # nothing of the refused batch stored


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.concat_tables([store.validate_row(r) for r in rows])


def test_a_table_validates_as_its_rows_do() -> None:
    rows = [make_row(candidate_key=f"k{i}") for i in range(3)]
    assert store.validate_table(_table(rows)).equals(_table(rows))
    old = _table(rows).drop_columns(list(store.OPTIONAL_COLUMNS))  # rows of an older schema
    assert store.validate_table(old).column("library").null_count == 3
    crashed = {**make_row(candidate_key="k9"), **dict.fromkeys(store.PERF_COLUMNS), "status": "crash"}
    failed = _table([{**crashed, "check_mode": None}])
    assert store.validate_table(failed).column("check_mode").null_count == 1  # an enum may be null


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"status": "exploded"}, r"row 1: column status"),
        ({"status": "wrong"}, r"row 1: status 'wrong': timing columns must be null: counters"),
        ({"n_reps": 3}, r"row 1: n_reps=3 but times_ns has 4 values"),
        ({"sizes": "{not json"}, r"row 1: column sizes: not valid JSON"),
        ({"timing_mode": None}, r"row 1: columns must not be null: timing_mode"),
        ({"experiment": "../escape"}, r"not a safe file name"),
    ],
)
def test_a_bad_row_of_a_table_is_named(bad: dict[str, Any], message: str) -> None:
    good = store.validate_row(make_row(candidate_key="k0"))
    # built column by column: validate_row would refuse the bad row itself
    bad_row = good.to_pylist()[0] | {"candidate_key": "k1", **bad}
    table = pa.concat_tables([good, pa.Table.from_pylist([bad_row], schema=store.SCHEMA)])
    with pytest.raises(ValueError, match=message):
        store.validate_table(table)


def test_a_table_with_unknown_or_missing_columns_is_refused() -> None:
    table = _table([make_row()])
    with pytest.raises(ValueError, match="unknown columns: colour"):
        store.validate_table(table.append_column("colour", pa.array(["red"])))
    with pytest.raises(ValueError, match="missing columns: workload"):
        store.validate_table(table.drop_columns(["workload"]))
    with pytest.raises(ValueError, match="column flops: cannot store"):
        store.validate_table(table.set_column(10, "flops", pa.array(["many"])))


def test_an_added_table_replaces_stored_rows(tmp_path: Path) -> None:
    store.write_row(tmp_path, make_row(candidate_key="k0", times_ns=[9.0, 9.5]))
    kept = store.write_row(tmp_path, make_row(candidate_key="k5"))  # not in the table: its file stays
    rows = [
        make_row(candidate_key="k0", times_ns=[1.0, 2.0]),
        make_row(candidate_key="k1", experiment="exp2"),
    ]
    assert store.add_table(tmp_path, _table(rows)) == 2
    assert store.row_files(tmp_path) == [kept]
    df = store.load(tmp_path)
    assert sorted(df["experiment"]) == ["exp1", "exp1", "exp2"] and df["min_ns"].min() == 1.0


@pytest.mark.parametrize(
    "values",
    [[3.0], [5.0, 1.0], [2.0, 9.0, 4.0, 7.0], [1e9, 1e9 + 1, 3.0, 2.5, 8.0], [], [1.0, math.nan, 2.0]],
)
def test_median_is_numpys(values: list[float]) -> None:
    """The summary's median (store.median, without numpy's wrappers) gives np.median's value, NaN included."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # np.median of nothing warns
        expected = float(np.median(np.asarray(values, dtype=float)))
    got = store.median(values)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_write_csv_reads_back_the_frame_with_or_without_arrow(tmp_path: Path) -> None:
    """Arrow writes a plain table; a list column (no CSV form in Arrow) falls back to pandas; both read
    back as the frame they wrote."""
    plain = pd.DataFrame({"a": [1, 2], "b": ["x, y", None], "c": [0.5, float("nan")], "d": [True, False]})
    store.write_csv(plain, tmp_path / "plain.csv")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "plain.csv"), plain, check_dtype=False)
    listed = plain.assign(e=[[1.0, 2.0], [3.0]])
    store.write_csv(listed, tmp_path / "listed.csv")
    assert pd.read_csv(tmp_path / "listed.csv")["e"].tolist() == ["[1.0, 2.0]", "[3.0]"]
