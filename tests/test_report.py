"""Statistics and the HTML report, on small synthetic result rows."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import analysis, report, store

FLOPS = 2 * 128 * 128 * 128
MACHINES = {
    "fp-zen3": ("AMD EPYC 7B13", "avx2", 100.0, {"l1d": 32768, "l2": 524288, "l3": 33554432}),
    "fp-emr": ("Intel Xeon Platinum 8581C", "avx512", 174.0, {"l1d": 49152, "l2": 2097152, "l3": 272629760}),
}
EVIL = "<script>alert(1)</script>"


def make_row(
    machine: str = "fp-zen3",
    candidate: str = "k0",
    label: str = "[U_{4,i}, V_j]",
    times: list[float] | None = None,
    status: str = "ok",
    reason: str = "",
    seed: int = 0,
    experiment: str = "exp1",
    workload: str = "mm128",
    timing_mode: str = "hot",
    kind: str = "scheme",
) -> dict[str, Any]:
    """A complete store row; failed rows get null timing columns as the schema requires."""
    cpu, isa, peak, caches = MACHINES[machine]
    row: dict[str, Any] = {
        "experiment": experiment,
        "candidate_key": candidate,
        "candidate_kind": kind,
        "candidate_text": label,
        "candidate_options": "{}",
        "label": label,
        "workload": workload,
        "op": "matmul",
        "op_params": "{}",
        "sizes": json.dumps({"i": 128, "j": 128, "k": 128}),
        "flops": FLOPS,
        "source_hash": f"src-{candidate}",
        "target": isa,
        "compiler": "gcc",
        "compiler_version": "12.2.0",
        "cflags": "-O3 -march=native",
        "machine_fingerprint": machine,
        "cpu_model": cpu,
        "machine": json.dumps({"isa": isa, "caches": caches}),
        "peak_gflops": peak,
        "timing_mode": timing_mode,
        "cold_method": "clflushopt" if timing_mode == "cold" else "",
        "counter_backend": "clock_gettime",
        "counters": "{}",
        "counters_unavailable": json.dumps({"papi": "no PMU in VM", "perf_event": "EACCES"}),
        "seed": seed,
        "check_mode": "sampled",
        "check_points": 1000,
        "check_eps": 1e-4,
        "check_max_err": 1e-7 if status == "ok" else 0.25,
        "check_passed": status == "ok",
        "status": status,
        "reason": reason,
        "flags": "[]",
        "timestamp": "2024-06-01T12:00:00+00:00",
        "harness_version": "0.1.0",
    }
    if status == "ok":
        row.update(
            store.perf_fields(times or [50_000.0, 52_000.0, 51_000.0, 55_000.0, 50_500.0], FLOPS, peak)
        )
    else:
        row.update(dict.fromkeys(store.PERF_COLUMNS))
    return row


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as the store would return them (validated by the same code path)."""
    tables = [store.validate_row(r) for r in rows]
    return store._to_pandas(__import__("pyarrow").concat_tables(tables))


def synthetic_rows() -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    return [
        make_row("fp-zen3", "k0", "[U_{4,i}, V_j]", list(rng.normal(60_000, 2_000, 12))),
        make_row("fp-zen3", "k1", EVIL, list(rng.normal(45_000, 1_000, 8))),
        make_row("fp-zen3", "kbad", "wrong-one", status="wrong", reason="max rel err 0.25 > 1e-4"),
        make_row("fp-zen3", "kblas", "openblas", list(rng.normal(40_000, 500, 8)), kind="baseline"),
        make_row("fp-zen3", "k0", "[U_{4,i}, V_j]", list(rng.normal(90_000, 3_000, 6)), timing_mode="cold"),
        make_row("fp-emr", "k0", "[U_{4,i}, V_j]", list(rng.normal(30_000, 900, 10))),
        make_row("fp-emr", "k1", EVIL, list(rng.normal(28_000, 700, 10))),
        make_row("fp-emr", "kcrash", "crasher", status="crash", reason="SIGSEGV <in kernel>"),
    ]


# -- analysis ------------------------------------------------------------------------------------------


def test_summary_ci_contains_median_and_is_nan_for_one_rep() -> None:
    df = frame(
        [
            make_row(candidate="many", times=[100.0, 120.0, 90.0, 110.0, 95.0, 105.0, 130.0]),
            make_row(candidate="one", times=[100.0]),
        ]
    )
    s = analysis.summarize(df).set_index("candidate_key")
    many = s.loc["many"]
    assert many["median_ns"] == 105.0 and many["min_ns"] == 90.0 and many["n_reps"] == 7
    assert many["median_ci_low_ns"] <= many["median_ns"] <= many["median_ci_high_ns"]
    assert many["median_ci_low_ns"] < many["median_ci_high_ns"]
    assert many["pct_peak_median_ci_low"] <= many["pct_peak_median"] <= many["pct_peak_median_ci_high"]
    assert many["pct_peak_median"] == pytest.approx(100 * FLOPS / 105.0 / 100.0)
    assert many["gflops_min"] == pytest.approx(FLOPS / 90.0)
    assert many["cov"] == pytest.approx(
        np.std([100, 120, 90, 110, 95, 105, 130], ddof=1) / np.mean([100, 120, 90, 110, 95, 105, 130])
    )
    one = s.loc["one"]
    assert one["n_reps"] == 1 and one["median_ns"] == 100.0
    assert math.isnan(one["median_ci_low_ns"]) and math.isnan(one["median_ci_high_ns"])
    # fixed seed: same data, same CI
    again = analysis.summarize(df).set_index("candidate_key").loc["many"]
    assert again["median_ci_low_ns"] == many["median_ci_low_ns"]


def test_wrong_rows_get_no_performance_but_are_counted() -> None:
    df = frame(synthetic_rows())
    s = analysis.summarize(df)
    assert len(s) == 8  # every row is its own unit (the cold run of k0 is separate from the hot one)
    bad = s[s["status"] != "ok"].set_index("candidate_key")
    assert set(bad.index) == {"kbad", "kcrash"}
    assert bad.loc["kbad", "status"] == "wrong" and "0.25" in bad.loc["kbad", "reason"]
    perf = ["median_ns", "gflops_median", "pct_peak_median", "pct_peak_min", "median_ci_low_ns"]
    assert bad[perf].isna().all().all()
    assert (bad["n_reps"] == 0).all()
    ok = s[s["status"] == "ok"]
    assert ok[perf].notna().all().all()

    reps = analysis.repetitions(df)
    assert not reps["candidate_key"].isin(["kbad", "kcrash"]).any()
    assert len(reps) == 12 + 8 + 8 + 6 + 10 + 10

    c = analysis.counts(df).loc["exp1"]
    assert (c["total"], c["ok"], c["wrong"], c["failed"]) == (8, 6, 1, 1)


def test_unit_wrong_under_one_seed_is_wrong() -> None:
    df = frame(
        [
            make_row(candidate="k", seed=0),
            make_row(candidate="k", seed=1, status="wrong", reason="seed 1 mismatch"),
        ]
    )
    line = analysis.summarize(df).iloc[0]
    assert line["status"] == "wrong" and line["n_rows"] == 2 and math.isnan(line["median_ns"])
    assert analysis.repetitions(df).empty


def test_a_unit_pools_its_rows_in_any_order_and_keeps_the_first_value_of_each_column() -> None:
    late = make_row(candidate="k", seed=1, times=[2.0e4] * 3)
    late.update(label=None, timestamp="2024-06-02T00:00:00+00:00", flags=json.dumps(["noisy: cov 0.09"]),
                search_seed=1, search_index=7)  # fmt: skip
    early = make_row(candidate="k", seed=0, times=[1.0e4] * 3)
    early.update(flags=json.dumps(["noisy: cov 0.09", "busy core"]), search_seed=0, search_index=3)
    rows = [make_row(candidate="z"), late, make_row(candidate="a"), early]
    s = analysis.summarize(frame(rows))
    assert list(s["candidate_key"]) == ["a", "k", "z"]  # one line per unit, in key order
    k = s.set_index("candidate_key").loc["k"]
    assert k["n_rows"] == 2 and k["n_reps"] == 6 and k["min_ns"] == 1.0e4  # both seeds' times pooled
    assert k["label"] == "[U_{4,i}, V_j]"  # the first row's label is null: the next one's
    assert k["timestamp"] == "2024-06-01T12:00:00+00:00"  # the earliest
    assert k["flags"] == "noisy: cov 0.09; busy core"
    assert json.loads(k["search_runs"]) == [[0, 3], [1, 7]]


def test_single_row_units_are_summarised_as_a_unit_of_several_rows_would_be() -> None:
    """summarize takes most units (one row each) a column at a time: every kind of row (rep counts from 1
    to 7, interleaved rounds with their times, flags, a search run, a failure, no flops, a NaN time, no peak)
    gives the line the unit-at-a-time path gives, in the same order, beside units of several rows."""
    rng = np.random.default_rng(3)
    rows = []
    for n in range(1, 8):
        rows.append(make_row(candidate=f"c{n}", times=list(rng.normal(5e4, 2e3, n))))
    rounds = make_row(candidate="r", times=list(rng.normal(5e4, 2e3, 9)))
    stamps = [f"2024-06-01T12:0{m}:00+00:00" for m in range(3)]
    rounds.update(round_medians_ns=[5.1e4, 4.9e4, 5.0e4], round_times=stamps)
    flagged = make_row(candidate="f")
    flagged.update(flags=json.dumps(["busy core", "busy core"]), search_seed=4, search_index=9)
    no_flops = make_row(candidate="nf")
    no_flops.update(flops=None)
    nan_time = make_row(candidate="nan", times=[5e4, 5.2e4, 5.1e4])
    nan_time["times_ns"] = [5e4, float("nan"), 5.1e4]  # not from a timing, but a store may hold it
    no_peak = make_row(candidate="np")
    no_peak.update(peak_gflops=None)
    rows += [
        rounds,
        flagged,
        no_flops,
        nan_time,
        no_peak,
        make_row(candidate="w", status="wrong", reason="max err"),
    ]
    rows += [make_row(candidate="multi", seed=0), make_row(candidate="multi", seed=1, times=[4e4] * 3)]
    df = frame(rows)
    summary = analysis.summarize(df)
    keyed = analysis._keyed(df)
    records = keyed[[c for c in analysis.SUMMARY_INPUTS if c in keyed]].to_dict("records")
    by_unit: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_unit.setdefault(str(r["candidate_key"]), []).append(r)
    expected = pd.DataFrame(
        [analysis._summary_line(by_unit[k]) for k in sorted(by_unit)], columns=analysis.SUMMARY_COLUMNS
    )
    expected[["n_reps", "n_rows"]] = expected[["n_reps", "n_rows"]].astype("int64")
    assert analysis._plain(keyed).sum() >= len(rows) - 3  # the column-wise path took the single rows it can
    pd.testing.assert_frame_equal(summary, expected)


def test_summary_keeps_the_candidate_options() -> None:
    """Fig 6.5 tells oneDNN on 1 and on 2 threads apart by the baseline's options (same text)."""
    two = make_row(candidate="lib2", label="onednn", kind="baseline")
    two["candidate_options"] = '{"threads": 2}'
    df = frame([make_row(candidate="lib1", label="onednn", kind="baseline"), two])
    options = analysis.summarize(df).set_index("candidate_key")["candidate_options"]
    assert options["lib1"] == "{}" and options["lib2"] == '{"threads": 2}'


def test_summaries_never_pool_machines() -> None:
    s = analysis.summarize(frame(synthetic_rows()))
    k0_hot = s[(s["candidate_key"] == "k0") & (s["timing_mode"] == "hot")]
    assert sorted(k0_hot["machine_fingerprint"]) == ["fp-emr", "fp-zen3"]
    emr = k0_hot.set_index("machine_fingerprint").loc["fp-emr"]
    assert emr["peak_gflops"] == 174.0


# -- report --------------------------------------------------------------------------------------------


def test_every_figure_of_a_report_is_drawn_with_the_reports_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drawing.RC reaches the forked workers that draw, and only the report's drawing: the settings
    are the caller's again afterwards."""
    import matplotlib

    from harness import drawing, experiment_figure

    seen = tmp_path / "seen"
    plot = experiment_figure.plot

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with seen.open("a", encoding="utf-8") as fh:
            fh.write(" ".join(str(matplotlib.rcParams[k]) for k in drawing.RC) + "\n")
        return plot(*args, **kwargs)

    monkeypatch.setattr(experiment_figure, "plot", recording)
    results = tmp_path / "results"
    for row in synthetic_rows():
        store.write_row(results, row)
    before = {k: matplotlib.rcParams[k] for k in drawing.RC}
    report.build_report(results, tmp_path / "report")
    drawn = seen.read_text(encoding="utf-8").splitlines()
    assert drawn and set(drawn) == {" ".join(str(v) for v in drawing.RC.values())}
    assert {k: matplotlib.rcParams[k] for k in drawing.RC} == before


def test_build_report(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for row in synthetic_rows():
        store.write_row(results, row)
    store.write_row(results, make_row(experiment="other", candidate="zz", label="not-selected"))
    out = tmp_path / "report"
    index = report.build_report(results, out, experiments=["exp1"])
    assert index == out / "index.html"
    html = index.read_text(encoding="utf-8")

    # static page: CSS next to it, relative links that resolve
    assert (out / "style.css").is_file()
    assert 'href="style.css"' in html
    links = re.findall(r'(?:src|href)="([^"#]+)"', html)
    assert links and all(not link.startswith(("/", "http", "file:")) for link in links)
    for link in links:
        assert (out / link).is_file(), link

    # one figure per machine, each plotting one machine only, without the failed candidates
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(pngs) == 2
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figures/{png.name}" in html
        data = pd.read_csv(png.with_suffix(".csv"))
        assert data["machine_fingerprint"].nunique() == 1
        assert not data["candidate_key"].isin(["kbad", "kcrash"]).any()
        assert "wrong-one" not in set(data["display"]) and "crasher" not in set(data["display"])
        assert (data["pct_peak_median"] > 0).all() and data["shown"].all()  # a few candidates: all named

    # both machines shown apart
    for fp, (cpu, _, peak, _) in MACHINES.items():
        assert fp in html and cpu in html
        assert f"{peak:.1f} GFLOP/s" in html
    assert html.count('class="machine"') == 2
    assert html.count('class="per-machine"') == 2

    # failures listed with status and escaped reason
    failed = html.split("<h3>Failed candidates</h3>")[1].split('class="prov-link"')[0]
    assert "wrong-one" in failed and "crasher" in failed
    assert "SIGSEGV &lt;in kernel&gt;" in failed and "max rel err 0.25" in failed

    # provenance: on its own page, linked from the index
    assert 'href="provenance.html"' in html
    prov = (out / "provenance.html").read_text(encoding="utf-8")
    assert "clock_gettime" in prov and "no PMU in VM" in prov and "clflushopt" in prov
    assert "-O3 -march=native" in prov and "12.2.0" in prov
    assert "src-k0" in html
    assert EVIL not in prov

    # escaping: the label never appears raw
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # experiment filter
    assert "not-selected" not in html


def test_report_of_the_columns_it_reads_is_the_report_of_every_column(tmp_path: Path) -> None:
    """build_report loads only REPORT_COLUMNS for the summary, and only DRAWN_COLUMNS for what the page
    draws after it: a column some part of the report reads and a list lacks fails here (a KeyError, or a
    page that differs from the one built from every column)."""
    results = tmp_path / "results"
    for row in synthetic_rows():
        store.write_row(results, row)
    projected = report.build_report(results, tmp_path / "a").read_text(encoding="utf-8")
    whole = report.render_report(store.load(results), tmp_path / "b", results_dir=results)
    assert projected == whole.read_text(encoding="utf-8")
    prov = [(tmp_path / d / "provenance.html").read_text(encoding="utf-8") for d in ("a", "b")]
    assert prov[0] == prov[1]
    assert set(report.DRAWN_COLUMNS) < set(report.REPORT_COLUMNS) < set(store.COLUMNS)
    # every text column as a category (a few synthetic rows code none at the default share)
    rows = store.load(results, columns=report.DRAWN_COLUMNS)
    coded = report._coded(rows, share=1.0)
    assert (coded.dtypes == "category").sum() >= 10
    page = report.render_report(coded, tmp_path / "c", results_dir=results, summarized=report.summarize(
        store.load(results, columns=report.REPORT_COLUMNS)))  # fmt: skip
    assert page.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")


def test_report_empty_store(tmp_path: Path) -> None:
    index = report.build_report(tmp_path / "nothing", tmp_path / "out")
    assert "No results stored" in index.read_text(encoding="utf-8")


def test_same_label_different_targets_are_told_apart() -> None:
    a = make_row(machine="fp-emr", candidate="ka")
    b = make_row(machine="fp-emr", candidate="kb")
    b["target"] = "avx2"
    names = report._display_labels(analysis.summarize(frame([a, b])))
    assert names[("exp1", "ka")] != names[("exp1", "kb")]
    assert names[("exp1", "kb")].endswith("[avx2]")


def test_round_ratio_pairs_rounds_in_order_and_summary_keeps_them() -> None:
    # A is 2x faster than B in every round although both slow down by x3 in round 2: the paired ratio
    # sees 2.0 throughout, where pooled medians would mix the slow round into both
    assert analysis.round_ratio([100.0, 300.0], [200.0, 600.0]) == (2.0, 2.0, 2.0)
    med, lo, hi = analysis.round_ratio([100.0, 100.0, 100.0], [90.0, 110.0, 130.0])
    assert (med, lo, hi) == pytest.approx((1.1, 0.9, 1.3))
    assert all(np.isnan(analysis.round_ratio([1.0], [1.0, 2.0])))  # not timed alike: no pairing
    old = make_row(candidate="old", times=[100.0, 110.0, 120.0])  # stored before rounds: one round
    new = make_row(candidate="new", times=[100.0, 110.0, 300.0, 310.0])
    new["round_medians_ns"] = [105.0, 305.0]
    s = analysis.summarize(frame([old, new])).set_index("candidate_key")
    assert list(s.loc["old", "round_medians_ns"]) == [110.0]
    assert list(s.loc["new", "round_medians_ns"]) == [105.0, 305.0]


def test_round_ratio_pairs_rounds_by_time_when_their_times_are_known() -> None:
    """A baseline re-timed beside two confirmations of a growing search has 5 rounds; a candidate of the
    second confirmation is paired with the baseline's rounds of its own minutes, not with rounds 1-3."""

    def at(*seconds: float) -> list[str]:
        return [f"2026-11-24T08:{int(s // 60):02d}:{s % 60:06.3f}+00:00" for s in seconds]

    base = [200.0, 200.0, 200.0, 400.0, 400.0]  # the host got 2x slower before the second confirmation
    base_t = ["2026-11-24T08:00:00+00:00", *at(60, 70, 1500, 1510)]  # rows before ms: seconds
    cand = [200.0, 200.0, 200.0]  # found and confirmed in the slow period: 2x faster than the baseline
    assert analysis.round_ratio(cand, base, at(1400, 1505, 1515), base_t) == (2.0, 2.0, 2.0)
    assert all(np.isnan(analysis.round_ratio(cand, base)))  # without times: 3 vs 5 rounds do not pair
    # a round more than PAIR_WINDOW_S from every baseline round is left out; none left: NaN
    assert analysis.round_ratio(cand, base, at(850, 1505, 1515), base_t) == (2.0, 2.0, 2.0)
    assert analysis.round_ratio([100.0], base, at(600), base_t)[0] == 2.0  # 530 s from the round at 70 s
    assert all(np.isnan(analysis.round_ratio([100.0], base, at(800), base_t)))
    # the summary carries the times of every round
    row = make_row(candidate="c", times=[100.0, 110.0, 300.0, 310.0])
    row.update(round_medians_ns=[105.0, 305.0], round_times=at(0, 60))
    s = analysis.summarize(frame([row])).iloc[0]
    assert list(s["round_times"]) == at(0, 60)


def test_round_ratio_pairs_the_passes_of_one_run_in_order_even_when_another_round_is_nearer() -> None:
    """The Zen 4's t01 of 2026-11-29 (gemm_tuned): a pass times its candidates in a new order, so our
    second round (38:48) fell nearer the library's first (37:46, a slow 403 ms) than its second (39:55).
    Three rounds each: paired pass by pass, not two of ours against the library's slow round."""

    def at(*clock: str) -> list[str]:
        return [f"2026-11-29T21:{c}+00:00" for c in clock]

    ours, lib = [346.7, 339.7, 363.2], [403.3, 348.7, 351.4]
    med, lo, hi = analysis.round_ratio(
        ours, lib, at("36:44", "38:48", "43:47"), at("37:46", "39:55", "41:58")
    )
    assert (med, lo, hi) == pytest.approx((348.7 / 339.7, 351.4 / 363.2, 403.3 / 346.7))
    # the same rounds, one pair more than PAIR_WINDOW_S apart: not one run's passes, paired by time
    far = analysis.round_ratio(ours, lib, at("36:44", "38:48", "59:00"), at("37:46", "39:55", "41:58"))
    # (our third round, 17 minutes from every library round, is left out)
    two = [403.3 / 346.7, 403.3 / 339.7]
    assert far == pytest.approx((sum(two) / 2, *two))


def test_a_noisy_round_with_many_repetitions_does_not_outweigh_the_others() -> None:
    # round 1 ran on a noisy host to 50 repetitions, rounds 2 and 3 converged in 5: pooled, the slow round
    # would be the median; each round weighs the same instead
    times = [200.0] * 50 + [100.0] * 5 + [102.0] * 5
    fields = store.perf_fields(times, 1000, None, None, [200.0, 100.0, 102.0])
    assert fields["median_ns"] == 102.0 and fields["n_reps"] == 60
    row = make_row(candidate="noisy", times=times)
    row.update(fields)
    s = analysis.summarize(frame([row])).iloc[0]
    assert s["median_ns"] == 102.0
    assert (s["median_ci_low_ns"], s["median_ci_high_ns"]) == (100.0, 200.0)  # the range of the rounds


def test_summary_in_parts_is_the_whole_summary(tmp_path: Path) -> None:
    """The report summarises its experiments in runs of about equal bytes, side by side: joined, they are
    the summary of every row at once (same lines, order and labels), and each experiment is in one run."""
    results = tmp_path / "results"
    for row in synthetic_rows():
        store.write_row(results, row)
    for i, name in enumerate(["a_small", "m_mid", "z_big"]):
        for k in range(1 + 4 * i):
            store.write_row(results, make_row(experiment=name, candidate=f"c{k}", label=f"[U_{{{k},i}}]"))
    names = store.experiments(results)
    parts = report._parts(results, None, 2)
    assert len(parts) == 2 and [e for p in parts for e in p] == names
    assert report._parts(results, None, 1) == [names]
    assert report._parts(results, ["z_big", "exp1", "absent"], 3) == [["exp1"], ["z_big"]]
    whole, whole_names = report._load_and_summarize(results, None)
    joined, joined_names = report._joined([report._load_and_summarize(results, p) for p in parts])
    pd.testing.assert_frame_equal(joined, whole)
    assert joined_names == whole_names
