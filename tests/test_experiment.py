"""The pipeline as a whole: failures are rows with reasons, the sweep goes on, wrong kernels never count."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness import experiment as exp_mod
from harness import store
from harness.machine import detect
from harness.run import RunLimits
from kernels.candidate import Candidate, KernelSource, Workload
from tests.conftest import FAST_TIMING, scheme

GOOD = "[R_i, R_j, R_k]"
HEAD = "int kernel(float *const *t, void *w) { (void)t; (void)w; "
BROKEN = {
    "segfault": HEAD + "*(volatile int *)0 = 1; return 0; }",
    "hang": HEAD + "for (;;) {} return 0; }",
    "garbage": HEAD + "t[0][0] = 1e30f; return 0; }",
    "syntax": HEAD + "return oops; }",
    "nonzero": HEAD + "return 7; }",
    # takes memory until the driver's limit stops it (malloc fails -> abort)
    "oom": "#include <stdlib.h>\n#include <string.h>\n"
    + HEAD
    + "for (;;) { char *p = malloc(1 << 26); if (!p) abort(); memset(p, 1, 1 << 26); } return 0; }",
}


@pytest.fixture
def broken_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates named after a BROKEN entry render to that hand-written broken kernel."""
    real = exp_mod.render

    def render(cand: Candidate, w: Workload) -> KernelSource:
        return KernelSource(BROKEN[cand.text], "any") if cand.text in BROKEN else real(cand, w)

    monkeypatch.setattr(exp_mod, "render", render)


def test_failures_are_recorded_and_the_sweep_goes_on(
    tmp_path: Path, shared_cache: Path, broken_kernels: None
) -> None:
    w = Workload.make("mm", "matmul", {"i": 16, "j": 16, "k": 8})
    cands = [Candidate("baseline", name) for name in BROKEN] + [scheme(GOOD)]
    exp = exp_mod.Experiment(
        "fail",
        w,
        cands,
        timing=FAST_TIMING,
        # 256 MiB: the oom kernel reaches it in milliseconds even on a busy host (at 1 GiB, its page faults
        # outlasted the 3 s timeout beside another test worker)
        limits=RunLimits(timeout_s=3, memory_bytes=1 << 28),
        results_dir=tmp_path,
        cache_root=shared_cache,
    )
    rows = {r["candidate_text"]: r for r in exp_mod.run_experiment(exp, progress=lambda _m: None)}
    assert rows["segfault"]["status"] == "crash" and "SIGSEGV" in rows["segfault"]["reason"]
    assert rows["hang"]["status"] == "timeout"
    assert rows["garbage"]["status"] == "wrong" and rows["garbage"]["check_passed"] is False
    assert rows["syntax"]["status"] == "compile_error" and "oops" in rows["syntax"]["reason"]
    assert rows["nonzero"]["status"] == "kernel_error"
    assert rows["oom"]["status"] == "crash" and "SIGABRT" in rows["oom"]["reason"]
    assert rows[GOOD]["status"] == "ok"
    df = store.load(tmp_path, "fail")
    assert len(df) == len(cands)
    # a wrong or failed kernel has no time, so it can never be plotted as fast
    assert df.loc[df["status"] != "ok", "median_ns"].isna().all()
    assert df.loc[df["status"] == "ok", "median_ns"].notna().all()


def test_avx512_is_compiled_everywhere_and_run_only_where_supported(
    tmp_path: Path, shared_cache: Path
) -> None:
    w = Workload.make("mm", "matmul", {"i": 8, "j": 32, "k": 8})
    exp = exp_mod.Experiment(
        "isa",
        w,
        [scheme("[R_i, R_k, R_j, V_j]", target="avx512")],
        timing=FAST_TIMING,
        results_dir=tmp_path,
        cache_root=shared_cache,
    )
    (row,) = exp_mod.run_experiment(exp, progress=lambda _m: None)
    assert row["source_hash"] and row["cflags"] and "x86-64-v4" in row["cflags"]
    if "avx512" in detect().isas:
        assert row["status"] == "ok"
    else:
        assert row["status"] == "unsupported" and "avx512" in row["reason"]
        print(f"AVX-512 kernel compiled but not executed: {row['reason']}")


def test_cold_rows_record_their_method(tmp_path: Path, shared_cache: Path) -> None:
    from harness.run import TimingConfig

    w = Workload.make("mm", "matmul", {"i": 16, "j": 16, "k": 16})
    rows = []
    for method in ("clflushopt", "sweep"):
        timing = TimingConfig(
            mode="cold", cold_method=method, warmup=0, min_reps=2, max_reps=2, flush_bytes=1 << 20
        )
        exp = exp_mod.Experiment(
            f"cold_{method}", w, [scheme(GOOD)], timing=timing, results_dir=tmp_path, cache_root=shared_cache
        )
        rows += exp_mod.run_experiment(exp, progress=lambda _m: None)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["cold_method"] in ("clflushopt", "clflush")
    assert rows[1]["cold_method"] == "sweep"
    assert all(r["timing_mode"] == "cold" and r["n_reps"] == 2 for r in rows)


def test_unavailable_baseline_is_unsupported_not_a_crash(tmp_path: Path, shared_cache: Path) -> None:
    w = Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1})
    exp = exp_mod.Experiment(
        "base",
        w,
        [Candidate("baseline", "openblas")],
        timing=FAST_TIMING,
        results_dir=tmp_path,
        cache_root=shared_cache,
    )
    (row,) = exp_mod.run_experiment(exp, progress=lambda _m: None)
    assert row["status"] == "unsupported" and "matmul only" in row["reason"]


def test_unknown_library_renders_as_unsupported_and_a_bad_scheme_as_error() -> None:
    """A library this checkout does not know yet (a space may list it before its renderer lands) is an
    unsupported row, not an exception; an illegal scheme stays an error row."""
    w = Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1})
    status, reason = exp_mod.render_or_failure(Candidate("baseline", "not_a_library_yet"), w)  # type: ignore[misc]
    assert status == "unsupported" and "not_a_library_yet" in reason
    status, _ = exp_mod.render_or_failure(scheme("[U_{3,w}, V_k]"), w)  # type: ignore[misc]
    assert status == "error"


def test_without_a_search_the_space_list_is_measured_as_before() -> None:
    e = exp_mod.Experiment("x", Workload.make("m", "matmul", {"i": 2, "j": 8, "k": 2}), [])
    assert e.search is None and e.space == {} and e.base_options == {}


# -- interleaved timing rounds ----------------------------------------------------------------------------
def _rounds_exp(tmp_path: Path, cache: Path, rounds: int, cands: list[Candidate] | None = None):
    w = Workload.make("mm", "matmul", {"i": 16, "j": 16, "k": 8})
    timing = dataclasses.replace(FAST_TIMING, min_reps=3, max_reps=3, rounds=rounds)
    cands = cands or [scheme(GOOD), scheme("[R_i, R_k, R_j]")]
    return exp_mod.Experiment("rounds", w, cands, timing=timing, results_dir=tmp_path, cache_root=cache)


def test_rounds_pool_every_pass_and_keep_each_round_median(tmp_path: Path, shared_cache: Path) -> None:
    rows = exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 3), progress=lambda _m: None)
    assert len(rows) == 2
    for row in store.load(tmp_path, "rounds").to_dict("records"):
        times = np.asarray(row["times_ns"], dtype=float)
        assert row["status"] == "ok" and row["n_reps"] == 9 == times.size
        medians = [float(np.median(times[i * 3 : (i + 1) * 3])) for i in range(3)]
        assert list(row["round_medians_ns"]) == pytest.approx(medians)
        # each round weighs the same, however many repetitions it took
        assert row["median_ns"] == pytest.approx(float(np.median(medians)))


def test_a_rerun_with_more_rounds_tops_up_the_stored_rows(tmp_path: Path, shared_cache: Path) -> None:
    say: list[str] = []
    exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 1), progress=say.append)
    first = store.load(tmp_path, "rounds")
    assert all(len(r) == 1 for r in first["round_medians_ns"])
    rows = exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 2), progress=say.append)
    assert len(rows) == 2 and any("round 2/2" in m for m in say)
    again = store.load(tmp_path, "rounds")
    assert all(len(r) == 2 for r in again["round_medians_ns"]) and (again["n_reps"] == 6).all()
    # the first round's times are kept, not replaced
    for key, times in zip(first["candidate_key"], first["times_ns"], strict=True):
        new = again.loc[again["candidate_key"] == key, "times_ns"].iloc[0]
        assert list(new[:3]) == list(times)


def test_a_wrong_result_in_a_later_round_makes_the_row_wrong(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = exp_mod.check_output, []

    def flaky(*args, **kwargs):  # the second check of the run (round 2 of the first candidate) fails
        res = real(*args, **kwargs)
        calls.append(1)
        return dataclasses.replace(res, passed=False, n_bad=1) if len(calls) == 3 else res

    monkeypatch.setattr(exp_mod, "check_output", flaky)
    rows = exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 2), progress=lambda _m: None)
    statuses = sorted(r["status"] for r in rows)
    assert statuses == ["ok", "wrong"]
    bad = next(r for r in rows if r["status"] == "wrong")
    assert bad["reason"].startswith("timing round 2:") and bad["median_ns"] is None
    stored = store.load(tmp_path, "rounds")
    assert stored.loc[stored["status"] == "wrong", "times_ns"].isna().all()


def _disturbed_host(monkeypatch: pytest.MonkeyPatch, slow_calls: Callable[[int], bool]) -> list[int]:
    """Kernel runs whose every call takes 1000 ns, or 3000 ns on the calls ``slow_calls(n)`` picks (n counts
    runs from 1), so a round's slowdown is exact; the outputs stay real and checked."""
    real, calls = exp_mod.run_kernel, []

    def run(*args, **kwargs):
        res = real(*args, **kwargs)
        calls.append(1)
        ns = 3000.0 if slow_calls(len(calls)) else 1000.0
        return dataclasses.replace(res, times_ns=[ns] * len(res.times_ns))

    monkeypatch.setattr(exp_mod, "run_kernel", run)
    return calls


def _retime_exp(tmp_path: Path, cache: Path, retime: float | None):
    e = _rounds_exp(tmp_path, cache, 2)
    e.timing = dataclasses.replace(e.timing, retime=retime, retime_wait=0.0)
    return e


def test_a_round_slowed_by_the_host_is_timed_again_and_the_retry_kept(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # runs 1-2: round 1 of both candidates; run 3: the first of round 2, three times slower
    calls = _disturbed_host(monkeypatch, lambda n: n == 3)
    say: list[str] = []
    rows = exp_mod.run_experiment(_retime_exp(tmp_path, shared_cache, 1.25), progress=say.append)
    assert len(calls) == 5  # one retime
    assert any("waiting" in m and "1/2" in m for m in say)
    for row in store.load(tmp_path, "rounds").to_dict("records"):
        assert list(row["round_medians_ns"]) == [1000.0, 1000.0]  # the slow try is gone
        assert row["n_reps"] == 6 and row["median_ns"] == 1000.0
    flagged = [r for r in rows if "retimed" in r["flags"]]
    assert len(flagged) == 1
    assert "first ran x3.00" in flagged[0]["flags"] and "then x1.00" in flagged[0]["flags"]


def test_a_round_still_slow_after_every_retime_is_kept_and_flagged(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _disturbed_host(monkeypatch, lambda n: n >= 3)  # the host stays slow from round 2 on
    exp_mod.run_experiment(_retime_exp(tmp_path, shared_cache, 1.25), progress=lambda _m: None)
    assert len(calls) == 2 + 2 * (1 + exp_mod.RETIME_TRIES)
    for row in store.load(tmp_path, "rounds").to_dict("records"):
        assert list(row["round_medians_ns"]) == [1000.0, 3000.0]  # the last try, not the fastest
        assert f"still x3.00 after {exp_mod.RETIME_TRIES} retime(s)" in row["flags"]


def test_without_retime_a_slow_round_is_kept_as_timed(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _disturbed_host(monkeypatch, lambda n: n == 3)
    exp_mod.run_experiment(_retime_exp(tmp_path, shared_cache, None), progress=lambda _m: None)
    assert len(calls) == 4
    medians = sorted(tuple(r) for r in store.load(tmp_path, "rounds")["round_medians_ns"])
    assert medians == [(1000.0, 1000.0), (1000.0, 3000.0)]


def test_a_launch_moves_many_stored_row_files_into_one_table_and_still_skips_them(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "COMPACT_AT", 2)
    exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 1), progress=lambda _m: None)
    before = store.load(tmp_path, "rounds")
    say: list[str] = []
    assert exp_mod.run_experiment(_rounds_exp(tmp_path, shared_cache, 1), progress=say.append) == []
    assert any("2 stored rows moved into one table" in m for m in say)
    assert any("2 candidate(s) already measured, skipped" in m for m in say)
    assert store.row_files(tmp_path, "rounds") == []
    assert store.load(tmp_path, "rounds").drop(columns="times_ns").equals(before.drop(columns="times_ns"))


def test_rounds_with_a_search_need_search_confirm(tmp_path: Path) -> None:
    from harness.search import SearchConfig

    e = _rounds_exp(tmp_path, tmp_path, 2)
    e.search = SearchConfig(strategy="random", budget=2)
    with pytest.raises(ValueError, match="search.confirm"):
        exp_mod.run_experiment(e, progress=lambda _m: None)


def test_a_space_baseline_may_carry_options() -> None:
    """``{name: onednn, threads: 2}`` in a space's baselines: the library with that option (Fig 6.5)."""
    from kernels.baselines import library_info
    from kernels.space import SpaceError, space_candidates

    wl = Workload.make("c", "conv2d", {"h": 4, "w": 4, "k": 16, "c": 4, "r": 1, "s": 1})
    space = {"schemes": [], "baselines": ["onednn", {"name": "onednn", "threads": 2}]}
    one, two = space_candidates(space, wl, "avx2", {})
    v = ("version", library_info("onednn").version or "not installed")  # the installed library's version
    assert (one.text, one.options) == ("onednn", (v,)) and (two.text, two.options) == (
        "onednn",
        (("threads", 2), v),
    )
    assert two.label() == f"onednn {v[1]} (threads=2)" and one.key != two.key
    with pytest.raises(SpaceError, match="needs a name and an option"):
        space_candidates({"baselines": [{"threads": 2}]}, wl, "avx2", {})
