"""Timing with a neighbour (issue 32): a co-runner started and stopped by the driver on another CPU, said
in the row, kept apart from the plain timing of the same candidate; and another experiment's winners as
a space's candidates (``space.best_of``)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from harness import analysis, store
from harness import experiment as exp_mod
from harness.cli import UsageError
from harness.machine import detect
from harness.run import TimingConfig, corunner_cpu
from harness.winners import NoWinners, best_of, best_of_others
from kernels.candidate import Candidate, Workload
from tests.conftest import FAST_TIMING, scheme

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CPUS, reason="a co-runner needs a second CPU (this process has one)")
W = Workload.make("mm", "matmul", {"i": 16, "j": 16, "k": 8})
STREAM = dataclasses.replace(
    FAST_TIMING, contention="stream", contention_bytes=1 << 20, min_reps=3, max_reps=3
)


def test_bad_contention_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="timing.contention must be one of none, stream"):
        TimingConfig(contention="memory-hog")
    with pytest.raises(ValueError, match="contention_bytes must be at least 64"):
        TimingConfig(contention="stream", contention_bytes=8)


def test_a_co_runner_needs_a_cpu_besides_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    with pytest.raises(ValueError, match=r"needs a CPU besides the kernel's \[3\]"):
        corunner_cpu(STREAM, [3])
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 3})
    assert corunner_cpu(STREAM, [3]) == 1


def _drivers() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if "--corun stream" in ln and "ps -eo" not in ln]


@needs_two
def test_the_driver_runs_the_co_runner_during_the_timing_and_stops_it(
    shared_cache: Path, tmp_path: Path
) -> None:
    """The result says what ran beside the kernel and how hard it streamed; no co-runner outlives it."""
    cands = [scheme("[R_i, R_j, R_k]")]
    exp = exp_mod.Experiment("co", W, cands, timing=STREAM, results_dir=tmp_path, cache_root=shared_cache)
    (row,) = exp_mod.run_experiment(exp, progress=lambda _m: None)
    assert row["status"] == "ok", row["reason"]
    assert row["contention"] == "stream" and row["contention_bytes"] == 1 << 20
    assert row["contention_gbps"] > 0.1  # it streamed: a megabyte is a few microseconds a pass
    assert _drivers() == []


@needs_two
def test_without_contention_the_driver_reports_none(shared_cache: Path, tmp_path: Path) -> None:
    cands = [scheme("[R_i, R_j, R_k]")]
    exp = exp_mod.Experiment(
        "plain", W, cands, timing=FAST_TIMING, results_dir=tmp_path, cache_root=shared_cache
    )
    (row,) = exp_mod.run_experiment(exp, progress=lambda _m: None)
    assert row["status"] == "ok" and row["contention"] is None and row.get("contention_gbps") is None


def test_a_contended_timing_is_another_row_and_another_unit() -> None:
    """The same candidate timed alone and with a co-runner: two row ids, two summary lines. A plain row's id
    is the one rows had before the co-runner existed (old results directories resume)."""
    args = ("exp", "key", "w", "hot", 0, "fp")
    assert store.row_id(*args) == store.row_id(*args, None) != store.row_id(*args, "stream")
    from tests.test_store import make_row

    plain = make_row()
    contended = make_row(contention="stream", contention_bytes=1 << 20, contention_gbps=3.0,
                         times_ns=[2000.0, 2100.0, 1900.0, 2050.0])  # fmt: skip
    tables = [store.validate_row(r).to_pandas() for r in (plain, contended)]
    import pandas as pd

    summary = analysis.summarize(pd.concat(tables, ignore_index=True))
    assert len(summary) == 2
    by = {
        (None if pd.isna(c) else c): t
        for c, t in zip(summary["contention"], summary["median_ns"], strict=True)
    }
    assert by[None] == pytest.approx(1025.0) and by["stream"] == pytest.approx(2025.0)


def _stored(tmp_path: Path, shared_cache: Path, cands: list[Candidate], **timing: object) -> None:
    exp = exp_mod.Experiment("search", W, cands, timing=dataclasses.replace(FAST_TIMING, **timing),
                             results_dir=tmp_path, cache_root=shared_cache)  # fmt: skip
    exp_mod.run_experiment(exp, progress=lambda _m: None)


def test_best_of_takes_the_fastest_plain_schemes_of_another_experiment(
    tmp_path: Path, shared_cache: Path
) -> None:
    fast, slow = scheme("[R_i, R_k, R_j]"), scheme("[R_j, R_k, R_i]")
    _stored(tmp_path, shared_cache, [fast, slow, Candidate("baseline", "numpy")])
    summary = analysis.summarize(store.load(tmp_path, "search"))
    by_time = (
        summary[summary["candidate_kind"] == "scheme"].sort_values("median_ns")["candidate_key"].tolist()
    )
    fp = detect().fingerprint
    (one,) = best_of({"experiment": "search"}, tmp_path, W, fp)
    assert one.key == by_time[0]  # the baseline never counts, whatever its time
    two = best_of({"experiment": "search", "n": 2}, tmp_path, W, fp)
    assert [c.key for c in two] == by_time and {c.key for c in two} == {fast.key, slow.key}
    with pytest.raises(NoWinners, match="no ok scheme for other on this machine"):
        best_of(
            {"experiment": "search"},
            tmp_path,
            Workload.make("other", "matmul", {"i": 16, "j": 16, "k": 8}),
            fp,
        )
    pooled = best_of({"experiment": ["search", "nothing-here"], "n": 2}, tmp_path, W, fp)
    assert [c.key for c in pooled] == by_time  # a list of experiments: the best of them all
    with pytest.raises(NoWinners, match=r"needs an experiment \(or a list\), n >= 1"):
        best_of({"experiment": "search", "n": 0}, tmp_path, W, fp)
    # variants: each winner once per option set, {} as measured, the others updating its options
    variants = best_of({"experiment": "search", "variants": [{}, {"prefetch": "i"}]}, tmp_path, W, fp)
    assert [c.key for c in variants][0] == by_time[0] and len({c.key for c in variants}) == 2
    assert variants[1].option("prefetch") == "i" and variants[1].text == variants[0].text
    assert dict(variants[1].options) == {**dict(variants[0].options), "prefetch": "i"}
    with pytest.raises(NoWinners, match="variants is a list of option mappings"):
        best_of({"experiment": "search", "variants": ["i"]}, tmp_path, W, fp)
    with pytest.raises(NoWinners, match="missing one of error, skip"):
        best_of({"experiment": "search", "missing": "ignore"}, tmp_path, W, fp)


def test_best_of_missing_skip_times_the_baselines_of_a_workload_without_winners(tmp_path: Path) -> None:
    """space.best_of.missing=skip: a workload the pooled experiment never ran is timed with its other
    candidates (a multirun goes on); without it, or with nothing else to time, a clear error names the
    command to run; a spec that cannot be read is an error either way."""
    from hydra import compose, initialize_config_dir

    from harness.cli import CONF_DIR, build_experiment

    def candidates(*extra: str) -> list[Candidate]:
        base = ["space=quick_matmul", "+space.best_of.experiment=none-yet", f"results_dir={tmp_path}"]
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return build_experiment(compose("config", overrides=[*base, *extra])).candidates

    skipped = candidates("+space.best_of.missing=skip", "space.schemes=[]", "baselines=[numpy]")
    assert [c.text for c in skipped] == ["numpy"]
    with pytest.raises(UsageError, match="no ok scheme for .* run it first"):
        candidates("space.schemes=[]", "baselines=[numpy]")
    with pytest.raises(UsageError, match="no ok scheme"):
        candidates("+space.best_of.missing=skip", "space.schemes=[]", "baselines=[]")
    with pytest.raises(UsageError, match="missing one of"):
        candidates("+space.best_of.missing=maybe", "baselines=[numpy]")


def test_best_of_each_takes_every_experiments_own_best_not_the_pools(tmp_path: Path) -> None:
    """space.best_of.each: the n best of each experiment of the list (a head-to-head of two searches), a
    scheme both found once; an experiment without rows for the workload is named."""
    rows = [
        _unit("a1", "scheme", "[A1]", "mm64", [100.0] * 3, experiment="e1"),
        _unit("a2", "scheme", "[A2]", "mm64", [200.0] * 3, experiment="e1"),
        _unit("s", "scheme", "[S]", "mm64", [150.0] * 3, experiment="e1"),
        _unit("b1", "scheme", "[B1]", "mm64", [900.0] * 3, experiment="e2"),  # slower than all of e1's
        _unit("s", "scheme", "[S]", "mm64", [950.0] * 3, experiment="e2"),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    pool = {"experiment": ["e1", "e2"], "n": 1}
    assert [c.text for c in best_of(pool, tmp_path, w, "fpA")] == ["[A1]"]
    assert [c.text for c in best_of({**pool, "each": True}, tmp_path, w, "fpA")] == ["[A1]", "[B1]"]
    two = best_of({**pool, "n": 2, "each": True}, tmp_path, w, "fpA")
    assert [c.text for c in two] == ["[A1]", "[S]", "[B1]"]  # [S], second of both, timed once
    with pytest.raises(NoWinners, match="best_of.each: experiment e3 has no row for mm64"):
        best_of({"experiment": ["e1", "e3"], "each": True}, tmp_path, w, "fpA")
    with pytest.raises(NoWinners, match="each true or false"):
        best_of({**pool, "each": "yes"}, tmp_path, w, "fpA")


def test_transfer_from_takes_the_best_of_each_other_workload_and_never_the_own(tmp_path: Path) -> None:
    """space.transfer_from: the n fastest schemes of each *other* workload of the same operator (the
    layer's own answer left out), on this machine, plain hot rows only."""
    rows = [
        _unit("own", "scheme", "[OWN]", "mm64", [100.0] * 3),  # the fastest of all, but this workload's
        _unit("a1", "scheme", "[A1]", "mmA", [900.0] * 3),
        _unit("a2", "scheme", "[A2]", "mmA", [800.0] * 3),
        _unit("b1", "scheme", "[B1]", "mmB", [700.0] * 3),
        _unit("b2", "scheme", "[B2]", "mmB", [50.0] * 3, contention="stream"),  # timed beside a co-runner
        _unit("c1", "scheme", "[C1]", "mmC", [10.0] * 3, machine_fingerprint="fpB"),  # another machine
        _unit("d1", "scheme", "[D1]", "convD", [10.0] * 3, op="conv2d"),  # another operator
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    spec = {"experiment": "exp1"}
    assert sorted(best_of_others(spec, tmp_path, w, "fpA")) == ["[A2]", "[B1]"]
    assert sorted(best_of_others({**spec, "n": 2}, tmp_path, w, "fpA")) == ["[A1]", "[A2]", "[B1]"]
    with pytest.raises(NoWinners, match="no ok matmul scheme on a workload other than mm64"):
        best_of_others(spec, tmp_path, w, "fpZ")
    with pytest.raises(NoWinners, match="transfer_from needs an experiment"):
        best_of_others({"experiment": "exp1", "n": 0}, tmp_path, w, "fpA")


def test_transfer_from_takes_more_of_the_nearest_workloads_first(tmp_path: Path) -> None:
    """space.transfer_from.nearest: the workloads nearest in shape come first and give n_nearest schemes
    each, the others n; without it the order is by name, as before; a bad count is named."""
    from harness.winners import shape_distance

    near, far = json.dumps({"i": 64, "j": 64, "k": 128}), json.dumps({"i": 512, "j": 8, "k": 64})
    rows = [
        _unit("f1", "scheme", "[F1]", "mmFar", [100.0] * 3, sizes=far),
        _unit("f2", "scheme", "[F2]", "mmFar", [200.0] * 3, sizes=far),
        _unit("n1", "scheme", "[N1]", "mmNear", [300.0] * 3, sizes=near),
        _unit("n2", "scheme", "[N2]", "mmNear", [400.0] * 3, sizes=near),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    assert shape_distance(w.size, json.loads(near)) == 1.0
    assert shape_distance(w.size, json.loads(far)) == 3.0 + 3.0
    spec = {"experiment": "exp1"}
    assert best_of_others(spec, tmp_path, w, "fpA") == ["[F1]", "[N1]"]  # by name: the seeds of earlier runs
    assert best_of_others({**spec, "nearest": 1}, tmp_path, w, "fpA") == ["[N1]", "[F1]"]
    assert best_of_others({**spec, "nearest": 1, "n_nearest": 2}, tmp_path, w, "fpA") == [
        "[N1]",
        "[N2]",
        "[F1]",
    ]
    with pytest.raises(NoWinners, match="nearest >= 0 and n_nearest >= 1"):
        best_of_others({**spec, "nearest": 1, "n_nearest": 0}, tmp_path, w, "fpA")


def test_transfer_from_is_for_the_refinement_and_names_what_is_missing(tmp_path: Path) -> None:
    from harness.search import SearchConfig, SearchError

    space = {"name": "conv_test", "transfer_from": {"experiment": "exp1"}}
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    exp = exp_mod.Experiment("t", w, [], results_dir=tmp_path, space=space, search=SearchConfig("random", 5))
    with pytest.raises(SearchError, match="read by search=refine only"):
        exp_mod._transferred(exp, detect())
    refine = dataclasses.replace(exp, search=SearchConfig("refine", 5))
    with pytest.raises(SearchError, match="no ok matmul scheme on a workload other than mm64"):
        exp_mod._transferred(refine, detect())
    assert exp_mod._transferred(dataclasses.replace(refine, space={"name": "conv_test"}), detect()) == []


def test_best_of_in_a_composed_experiment_names_the_command_to_run_first(tmp_path: Path) -> None:
    from tests.test_gemm_family import compose_candidates

    with pytest.raises(UsageError, match=r"run it first, e.g. `harness run -m \+sweeps=ttile_conv_random"):
        compose_candidates("+sweeps=ttile_conv_contention", "workload=yolo9000_12", f"results_dir={tmp_path}")


# -- harness versus: the best candidate against its baselines, round by round ------------------------------
def _unit(key: str, kind: str, text: str, workload: str, rounds: list[float], **extra: object) -> dict:
    from tests.test_store import make_row

    times = [t for t in rounds for _ in range(2)]
    stamps = [f"2026-11-26T12:0{i}:00+00:00" for i in range(len(rounds))]
    names = {"candidate_key": key, "candidate_kind": kind, "candidate_text": text, "label": text}
    if kind == "baseline":  # a versioned library (a baseline row without one reads as Debian's oneDNN 2.6)
        names.update(library=text.split("-")[0], library_version="3.2.0", library_source="pypi")
    return make_row(**names, workload=workload, times_ns=times, round_medians_ns=rounds, round_times=stamps,
                    **extra)  # fmt: skip


def test_versus_pairs_the_best_candidate_with_the_fastest_baseline_round_by_round(tmp_path: Path) -> None:
    from harness.commands import versus as vs

    rows = [
        _unit("a", "scheme", "[A]", "yolo9000_12", [900.0, 1000.0, 950.0]),
        _unit("b", "scheme", "[B]", "yolo9000_12", [2000.0, 2000.0, 2000.0]),
        _unit("o1", "baseline", "onednn", "yolo9000_12", [1000.0, 1050.0, 1000.0]),
        _unit("o2", "baseline", "onednn-blocked", "yolo9000_12", [3000.0, 3000.0, 3000.0]),
        _unit("n", "baseline", "numpy", "yolo9000_12", [10.0, 10.0, 10.0]),  # not a named baseline
        _unit("c", "scheme", "[C]", "resnet18_06", [1200.0, 1100.0, 1300.0]),
        _unit("o3", "baseline", "onednn", "resnet18_06", [1000.0, 1000.0, 1000.0]),
        _unit("c", "scheme", "[C]", "resnet18_06", [1500.0, 1500.0, 1500.0], contention="stream"),
        _unit("o3", "baseline", "onednn", "resnet18_06", [1000.0, 1000.0, 1000.0], contention="stream"),
        # ahead by the pooled medians (1050 / 1000), behind in two rounds of three (1.05, 0.917, 0.875)
        _unit("d", "scheme", "[D]", "resnet18_01", [1000.0, 1200.0, 800.0]),
        _unit("o4", "baseline", "onednn", "resnet18_01", [1050.0, 1100.0, 700.0]),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    table = vs.versus(analysis.summarize(store.load(tmp_path, "exp1")), vs.DEFAULT_BASELINES)
    by = {(r.workload, r.condition): r for r in table.itertuples()}
    assert set(by) == {
        ("resnet18_01", "hot cache"),
        ("yolo9000_12", "hot cache"),
        ("resnet18_06", "hot cache"),
        ("resnet18_06", "hot cache + stream co-runner"),
    }
    y = by[("yolo9000_12", "hot cache")]
    assert y.best == "[A]" and y.baseline == "onednn" and y.rounds == 3
    assert (y.round_ratio_low, y.round_ratio, y.round_ratio_high) == pytest.approx(
        (1.05, 1000 / 950, 1000 / 900)
    )
    assert by[("resnet18_06", "hot cache")].round_ratio == pytest.approx(1000 / 1200)
    assert by[("resnet18_06", "hot cache + stream co-runner")].round_ratio == pytest.approx(1000 / 1500)
    nets = vs.networks(table).set_index(["condition", "network"])
    assert nets.loc[("hot cache", "yolo9000"), "ahead_median"] == 1
    d = by[("resnet18_01", "hot cache")]
    assert d.ratio_median == pytest.approx(1.05) and d.round_ratio == pytest.approx(1100 / 1200)
    assert nets.loc[("hot cache", "resnet18"), "ahead_median"] == 0  # by the rounds, as documented
    assert nets.loc[("hot cache", "resnet18"), "ahead_every_round"] == 0
    lib = nets.loc[("hot cache", "yolo9000"), "baseline_weighted_pct"]
    assert nets.loc[("hot cache", "yolo9000"), "ceiling_ratio"] == pytest.approx(100 / lib)


def test_versus_says_when_there_is_nothing_to_compare(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from harness.commands import versus as vs

    with pytest.raises(SystemExit) as exc:
        vs.main(["--results", str(tmp_path), "--experiment", "nothing"])
    assert exc.value.code == 2 and "no rows of experiment nothing" in capsys.readouterr().err


SEARCHED = {"search_strategy": "random", "search_seed": 0}


def test_versus_within_n_keeps_the_first_proposals_of_a_search(tmp_path: Path) -> None:
    """--within 100: the best of a 1000-draw run's first 100 proposals (confirmed by confirm_within)."""
    from harness.commands import versus as vs

    rows = [
        _unit("early", "scheme", "[E]", "yolo9000_12", [1100.0] * 3, **SEARCHED, search_index=7),
        _unit("late", "scheme", "[L]", "yolo9000_12", [900.0] * 3, **SEARCHED, search_index=400),
        _unit("o1", "baseline", "onednn", "yolo9000_12", [1000.0] * 3),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    summary = analysis.summarize(store.load(tmp_path, "exp1"))
    assert vs.versus(summary, vs.DEFAULT_BASELINES)["best"].tolist() == ["[L]"]
    (line,) = vs.versus(summary, vs.DEFAULT_BASELINES, within=100).itertuples()
    assert line.best == "[E]" and line.round_ratio == pytest.approx(1000 / 1100)


def test_versus_all_takes_every_baseline_of_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--baselines all: the fastest library of any in the rows (the GEMM study's verdict); a named
    baseline absent from the rows fails and lists the ones present."""
    from harness.commands import versus as vs

    rows = [
        _unit("a", "scheme", "[A]", "gemm_square_1000", [1000.0] * 3),
        _unit("o", "baseline", "onednn", "gemm_square_1000", [1100.0] * 3),
        _unit("m", "baseline", "mkl", "gemm_square_1000", [800.0] * 3),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    vs.main(["--results", str(tmp_path), "--experiment", "exp1"])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "gemm_square_1000" in x)
    assert "baselines (the fastest counts): onednn, onednn-blocked" in out and " onednn " in line
    vs.main(["--results", str(tmp_path), "--experiment", "exp1", "--baselines", "all"])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "gemm_square_1000" in x)
    assert "baselines (the fastest counts): mkl, onednn" in out and " mkl " in line
    with pytest.raises(SystemExit) as exc:
        vs.main(["--results", str(tmp_path), "--experiment", "exp1", "--baselines", "blis"])
    assert exc.value.code == 2 and "(its baselines: mkl, onednn)" in capsys.readouterr().err


def test_best_of_pooled_ranks_by_the_baseline_of_each_schemes_own_run(tmp_path: Path) -> None:
    """Two searches of different days: the old one's scheme is faster in raw time, but its day was fast
    (its oneDNN too); pooled, the scheme with the better ratio to its own run's baseline wins."""
    rows = [
        _unit("a", "scheme", "[OLD]", "mm64", [900.0] * 3, experiment="old"),
        _unit("o", "baseline", "onednn", "mm64", [600.0] * 3, experiment="old"),  # a fast day
        _unit("b", "scheme", "[NEW]", "mm64", [1000.0] * 3, experiment="new"),
        _unit("o", "baseline", "onednn", "mm64", [1100.0] * 3, experiment="new"),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    (one,) = best_of({"experiment": ["old", "new"]}, tmp_path, w, "fpA")
    assert one.text == "[NEW]"  # 1000 / 1100 beats 900 / 600
    (alone,) = best_of({"experiment": "old"}, tmp_path, w, "fpA")
    assert alone.text == "[OLD]"
    store.write_row(tmp_path, _unit("c", "scheme", "[BARE]", "mm64", [950.0] * 3, experiment="bare"))
    (raw,) = best_of({"experiment": ["old", "new", "bare"]}, tmp_path, w, "fpA")
    assert raw.text == "[OLD]"  # one run without a baseline: raw times, as before


def test_h2h_pairs_each_searchs_best_in_the_shared_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """harness h2h: each search's own best (from its experiment) found in the shared rounds' rows, the
    first over the second round by round, and each over the faster oneDNN layout of those rounds."""
    import pandas as pd

    from studies.ttile_conv.commands import h2h

    rows = [
        _unit("t1", "scheme", "[T1]", "mm64", [100.0] * 3, experiment="tr"),
        _unit("t2", "scheme", "[T2]", "mm64", [300.0] * 3, experiment="tr"),
        _unit("u1", "scheme", "[U1]", "mm64", [200.0] * 3, experiment="un"),
        _unit("t1", "scheme", "[T1]", "mm64", [110.0, 100.0, 120.0], experiment="h"),
        _unit("u1", "scheme", "[U1]", "mm64", [220.0, 100.0, 240.0], experiment="h"),
        _unit("t2", "scheme", "[T2]", "mm64", [10.0] * 3, experiment="h"),  # not a search's best: ignored
        _unit("o", "baseline", "onednn", "mm64", [121.0, 110.0, 132.0], experiment="h"),
        _unit("ob", "baseline", "onednn-blocked", "mm64", [500.0] * 3, experiment="h"),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    h2h.main(
        [
            "--results",
            str(tmp_path),
            "--experiment",
            "h",
            "--searches",
            "tr,un",
            "--csv",
            str(tmp_path / "t.csv"),
        ]
    )
    out = capsys.readouterr().out
    assert "tr / un: x2.000 (geometric mean over 1 layers), better on 1 (0 in every round)" in out
    # per network, flop-weighted: tr's medians are 110 against oneDNN's 121 (x1.1 in each round), un's 220
    assert "  tr, mm64 (1 layers): x1.100, ahead on 1 (1 in every round)" in out
    assert "  un, mm64 (1 layers): x0.550, ahead on 0 (0 in every round)" in out
    assert "  the better of the two, mm64 (1 layers): x1.100, ahead on 1 (1 in every round)" in out
    store.write_row(tmp_path, _unit("u9", "scheme", "[U9]", "mm32", [50.0] * 3, experiment="un"))
    store.write_row(tmp_path, _unit("u9", "scheme", "[U9]", "mm32", [50.0] * 3, experiment="h"))
    h2h.main(["--results", str(tmp_path), "--experiment", "h", "--searches", "tr,un"])
    assert "left out (a search's best is not among the shared rounds' ok schemes" in capsys.readouterr().err
    line = pd.read_csv(tmp_path / "t.csv").iloc[0]
    assert line["tr / un"] == pytest.approx(2.0) and line["tr / un low"] == pytest.approx(1.0)
    assert line["tr / oneDNN"] == pytest.approx(1.1) and line["un / oneDNN"] == pytest.approx(0.55)
    with pytest.raises(SystemExit):
        h2h.main(["--results", str(tmp_path), "--experiment", "h", "--searches", "tr"])
    with pytest.raises(SystemExit):
        h2h.main(["--results", str(tmp_path), "--experiment", "nothing", "--searches", "tr,un"])


def test_best_of_and_transfer_from_read_another_machines_rows_when_asked(tmp_path: Path) -> None:
    """space.best_of.machine / transfer_from.machine: the winners another CPU found (its archive unpacked into
    the results directory), not this one's; a malformed fingerprint and a machine without rows are named."""
    other = "0123456789ab"
    rows = [
        _unit("h", "scheme", "[HERE]", "mm64", [100.0] * 3, experiment="e1"),
        _unit("t", "scheme", "[THERE]", "mm64", [500.0] * 3, experiment="e1", machine_fingerprint=other),
        _unit("u", "scheme", "[THERE2]", "mm32", [50.0] * 3, experiment="e1", machine_fingerprint=other),
    ]
    for r in rows:
        store.write_row(tmp_path, r)
    w = Workload.make("mm64", "matmul", {"i": 64, "j": 64, "k": 64})
    assert [c.text for c in best_of({"experiment": "e1"}, tmp_path, w, "fpA")] == ["[HERE]"]
    there = best_of({"experiment": "e1", "machine": other}, tmp_path, w, "fpA")
    assert [c.text for c in there] == ["[THERE]"]
    assert [c.text for c in best_of({"experiment": "e1", "machine": "fpA"}, tmp_path, w, "fpA")] == ["[HERE]"]
    assert best_of_others({"experiment": "e1", "machine": other}, tmp_path, w, "fpA") == ["[THERE2]"]
    with pytest.raises(NoWinners, match="no ok matmul scheme on a workload other than mm64"):
        best_of_others({"experiment": "e1"}, tmp_path, w, "fpA")  # this machine has mm64 only
    with pytest.raises(NoWinners, match="12-hex-digit fingerprint"):
        best_of({"experiment": "e1", "machine": "Zen 3"}, tmp_path, w, "fpA")
    with pytest.raises(NoWinners, match=r"machine ba9876543210 \(not this one, fpA; its rows come from"):
        best_of({"experiment": "e1", "machine": "ba9876543210"}, tmp_path, w, "fpA")
