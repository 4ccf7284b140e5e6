"""harness.distributions on synthetic distributions with known answers (seed 000 §5.4.6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness import distributions as dist
from reports.figures import FigureContext

N = 10_000
GRID = 100.0 * np.arange(1, N + 1) / N  # the uniform distribution on (0, 100], as a sample


def test_histogram_bins_of_4_percent_are_a_density() -> None:
    density, edges = dist.histogram(GRID)
    assert edges[0] == 0 and np.allclose(np.diff(edges), 4.0)
    assert np.sum(density * 4.0) == pytest.approx(1.0)
    assert np.allclose(density[:25], 1 / 100, rtol=1e-2)  # uniform: height 1/100 per % everywhere
    # the thesis's reading: height 0.045 on a 4% bin = 18% of the space
    x = np.r_[np.full(18, 22.0), np.full(82, 60.0)]
    d, e = dist.histogram(x)
    assert d[np.searchsorted(e, 22.0, side="right") - 1] == pytest.approx(0.045)


def test_ecdf_and_survival() -> None:
    x, f = dist.ecdf([3.0, 1.0, 2.0, 2.0])
    assert list(x) == [1, 2, 2, 3] and list(f) == [0.25, 0.5, 0.75, 1.0]
    assert list(dist.survival([1.0, 2.0, 2.0, 3.0], [0, 1, 2, 2.5, 3, 4])) == [1, 1, 0.75, 0.25, 0.25, 0]
    assert dist.survival(GRID, [50.0])[0] == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize("tau", dist.TAUS)
@pytest.mark.parametrize("n", [1, 5, 25, 100, 1000])
def test_expect_matches_the_closed_form_of_a_uniform_space(n: int, tau: float) -> None:
    """Uniform on (0, 100]: P(max_n >= p) = 1 - (p/100)^n = τ  <=>  p = 100 (1 - τ)^{1/n}."""
    assert dist.expect(GRID, n, tau) == pytest.approx(100 * (1 - tau) ** (1 / n), abs=100 / N + 1e-9)


def test_expect_is_the_quantile_at_the_thesis_level_and_saturates() -> None:
    assert dist.quantile_level(25, 0.9) == pytest.approx(0.912, abs=1e-3)  # the notes' worked example
    x = np.array([10.0, 20.0, 30.0, 40.0])
    values = dist.expect(x, [1, 2, 10, 10**6], 0.9)
    assert list(values) == sorted(values) and values[-1] == 40.0
    assert dist.expect(x, 1, 0.5) == 20.0  # the median (lower value)
    with pytest.raises(ValueError):
        dist.expect(x, 0, 0.5)
    with pytest.raises(ValueError):
        dist.expect(x, 3, 1.0)


def test_expected_best_of_n() -> None:
    # continuous uniform (0, 100): E[max_n] = 100 n / (n + 1)
    for n in (1, 4, 50):
        assert dist.expected_best(GRID, n) == pytest.approx(100 * n / (n + 1), abs=0.05)
    # a two-point sample: max of 2 draws is 1 unless both draws are 0 -> 3/4
    assert dist.expected_best([0.0, 1.0], 2) == pytest.approx(0.75)
    # against brute force on a small sample
    rng = np.random.default_rng(0)
    x = rng.gamma(2.0, 10.0, size=30)
    draws = rng.choice(x, size=(200_000, 5)).max(axis=1).mean()
    assert dist.expected_best(x, 5) == pytest.approx(draws, rel=0.01)


def test_bootstrap_ci_covers_the_truth_and_is_reproducible() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 100, size=400)
    lo, hi = dist.bootstrap_ci(x, "expect", n=10, tau=0.5, n_resamples=500)
    truth = 100 * 0.5 ** (1 / 10)
    assert lo <= truth <= hi and hi - lo < 10
    assert dist.bootstrap_ci(x, "expect", n=10, tau=0.5, n_resamples=500) == (lo, hi)
    lo, hi = dist.bootstrap_ci(x, "median", n_resamples=500)
    assert lo <= 50 <= hi
    with pytest.raises(ValueError):
        dist.bootstrap_ci(x, "nope")


def test_best_of_first_and_weighted_average() -> None:
    assert dist.best_of_first([5.0, float("nan"), 9.0, 30.0], 3) == 9.0
    # fewer draws than asked is not a best of n
    assert np.isnan(dist.best_of_first([5.0, 9.0], 3))
    perf = {"a": 50.0, "b": 80.0, "c": float("nan")}
    assert dist.weighted_average(perf, {"a": 3, "b": 1, "c": 100}) == pytest.approx((150 + 80) / 4)


# -- the conv DSE figures follow the numbers (synthetic summaries, no measurement) ---------------------------
def _summary(
    experiment: str,
    workload: str,
    perfs: list[float],
    kind: str = "scheme",
    texts: list[str] | None = None,
    seed: int = 0,
    fp: str = "m1",
):  # noqa: ANN202
    import json

    import pandas as pd

    texts = texts or [f"[T_{{{i},c}}]" for i in range(len(perfs))]
    return pd.DataFrame({
        "experiment": experiment, "machine_fingerprint": fp, "workload": workload, "cpu_model": "cpu",
        "candidate_key": [f"{experiment}-{workload}-{kind}-{seed}-{i}" for i in range(len(perfs))],
        "timing_mode": "hot", "label": texts, "candidate_text": texts, "candidate_kind": kind, "status": "ok",
        "pct_peak_median": perfs, "flops": 2.0e9, "search_strategy": "random",
        "search_runs": [json.dumps([[seed, i]]) for i in range(len(perfs))],
    })  # fmt: skip


def test_fig6_3_verdict_follows_the_comparison_with_onednn(tmp_path) -> None:  # noqa: ANN001
    import pandas as pd

    from studies.ttile_conv import figures as fig

    def figure(ours: float, onednn: float, draws: int = 100, short: int | None = None):  # noqa: ANN202
        parts = []
        for layer, n in (("yolo9000_12", draws), ("resnet18_02", draws), ("resnet18_03", short or draws)):
            parts.append(_summary(fig.RANDOM, layer, [ours - 10] * (n - 1) + [ours]))
            parts.append(_summary(fig.RANDOM, layer, [onednn], kind="baseline", texts=["onednn"]))
        (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f

    assert figure(80.0, 60.0).verdict == "reproduced"
    assert "of 1000" not in figure(80.0, 60.0).measured and "nan" not in figure(80.0, 60.0).measured
    assert figure(50.0, 60.0).verdict == "differs"
    # a quick run (3 draws) shows the best of 3, labelled, and cannot reproduce a best-of-100 claim
    f = figure(80.0, 60.0, draws=3)
    assert f.verdict == "partial" and "best of 3 " in f.measured
    # a layer stopped before its 100th draw is left out of the comparison, and said so
    f = figure(80.0, 60.0, short=52)
    assert f.verdict == "partial" and "left out (fewer than 100 draws): resnet18_03" in f.measured
    assert "2/2 layers" in f.measured
    assert "raced" not in f.measured
    # raced draws (timing.race) are counted per layer and said
    parts = [_summary(fig.RANDOM, "resnet18_02", [50.0, 70.0, 20.0, 30.0]),
             _summary(fig.RANDOM, "resnet18_02", [60.0], kind="baseline", texts=["onednn"])]  # fmt: skip
    parts[0]["flags"] = ["", "", "raced: slower than 3e+06 ns after 2 calls, timing stopped", ""]
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
    assert "25% of the draws raced" in f.measured
    assert pd.read_csv(tmp_path / Path(f.csv).name)["raced"].tolist() == [1]  # out_dir = tmp_path


def test_fig6_3_judges_against_todays_onednn_with_the_old_one_and_torch_beside(tmp_path) -> None:  # noqa: ANN001
    """With oneDNN 3.x measured, the verdict is against it (the faster of its two layouts), not against the
    slower 2.6 nor torch, which are bars of their own with their versions; without 3.x (an archive from
    before), against the 2.6 rows, named as such."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    def lib(layer: str, text: str, perf: float, version: str) -> pd.DataFrame:
        one = _summary(fig.RANDOM, layer, [perf], kind="baseline", texts=[text])
        one["candidate_key"] = f"{text}-{layer}"
        return one.assign(library_version=version)

    def parts(today: bool) -> list[pd.DataFrame]:
        out = []
        for layer in ("yolo9000_12", "resnet18_02"):
            out.append(_summary(fig.RANDOM, layer, [70.0] * 99 + [80.0]))
            out += [
                lib(layer, "onednn-2.6", 60.0, "2.6.3"),
                lib(layer, "onednn-2.6-blocked", 65.0, "2.6.3"),
                lib(layer, "torch", 50.0, "2.13.0+cpu"),
                lib(layer, "torch-packed", 75.0, "2.13.0+cpu"),
            ]
            if today:
                out += [lib(layer, "onednn", 85.0, "3.2.0"), lib(layer, "onednn-blocked", 90.0, "3.2.0")]
        return out

    (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts(today=True), ignore_index=True), tmp_path))
    table = {r["layer"]: r for r in f.table if "layer" in r}
    assert table["resnet18_02"]["onednn"] == 90.0 and table["resnet18_02"]["onednn-2.6"] == 65.0
    assert table["resnet18_02"]["torch"] == 75.0
    assert f.verdict == "differs" and "beats oneDNN 3.2.0 on 0/2 layers" in f.measured
    assert "beats onednn-2.6 2.6.3 on 2/2" in f.measured and "beats torch 2.13.0+cpu on 2/2" in f.measured
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts(today=False), ignore_index=True), tmp_path))
    assert f.verdict == "reproduced" and "beats oneDNN 2.6.3 on 2/2 layers" in f.measured
    assert all(pd.isna(r["onednn"]) for r in f.table if "layer" in r)


def test_fig6_3_shows_tvm_where_a_tuned_module_was_measured(tmp_path) -> None:  # noqa: ANN001
    """harness tvm-tune's rows (experiment tvm_conv) add a TVM bar on the layers they cover, the best module
    per layer with its trials; the verdict still compares with oneDNN."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    parts = []
    for layer in ("yolo9000_12", "resnet18_02"):
        parts.append(_summary(fig.RANDOM, layer, [70.0] * 99 + [80.0]))
        parts.append(_summary(fig.RANDOM, layer, [60.0], kind="baseline", texts=["onednn"]))
    mods = ["tvm (module=/r/tvm/yolo9000_12-t64-s0-xgb-evolutionary.so)",
            "tvm (module=/r/tvm/yolo9000_12-t200-s0-xgb-evolutionary.so)"]  # fmt: skip
    tvm = _summary(fig.TVM, "yolo9000_12", [75.0, 85.0], kind="baseline", texts=mods)
    tvm["candidate_text"] = "tvm"
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat([*parts, tvm], ignore_index=True), tmp_path))
    table = {r["layer"]: r for r in f.table if "layer" in r}
    assert table["yolo9000_12"]["tvm"] == 85.0 and table["yolo9000_12"]["tvm trials"] == 200
    assert pd.isna(table["resnet18_02"]["tvm"])
    assert "TVM (MetaSchedule, 200 trials) on 1 layers: best of 100 beats it on 0" in f.measured
    assert f.verdict == "reproduced" and fig.TVM in f.experiments


def test_fig6_3_pairs_the_confirmation_rounds_with_onednn(tmp_path) -> None:  # noqa: ANN001
    """The best of 100 and the faster oneDNN re-timed in 3 interleaved rounds: ahead in every round, behind
    in every round, or rounds that disagree, counted per layer (a round's times in ns: lower is faster)."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    rounds = {  # layer: (the best draw's round medians, oneDNN's)
        "yolo9000_12": ([90.0, 95.0, 92.0], [100.0, 100.0, 100.0]),  # ahead in every round
        "resnet18_02": ([110.0, 120.0, 105.0], [100.0, 100.0, 100.0]),  # behind in every round
        "resnet18_03": ([90.0, 130.0, 95.0], [100.0, 100.0, 100.0]),  # a slow round: disagree
    }
    parts = []
    for layer, (ours, lib) in rounds.items():
        draws = _summary(fig.RANDOM, layer, [50.0] * 99 + [80.0])
        draws["round_medians_ns"] = [[1.0]] * 99 + [ours]
        one = _summary(fig.RANDOM, layer, [70.0], kind="baseline", texts=["onednn"])
        one["round_medians_ns"] = [lib]
        parts += [draws, one]
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
    assert (
        "in 3-3 interleaved rounds on 3 layers: ahead in every round on 1, behind in every round on 1, "
        "rounds disagree on 1" in f.measured
    )
    table = {r["layer"]: r for r in f.table if "layer" in r}
    assert table["resnet18_03"]["ratio min"] == pytest.approx(100 / 130, abs=0.01)
    assert table["resnet18_03"]["ratio max"] == pytest.approx(100 / 90, abs=0.01)


def test_fig6_3_pairs_the_best_of_1000_with_the_onednn_rounds_of_its_own_minutes(tmp_path) -> None:  # noqa: ANN001
    """A layer searched to 100 draws and confirmed, then resumed to 1000 and confirmed again: oneDNN has 5
    rounds, 3 from each confirmation's minutes (the host 2x slower at the second). Each best is paired
    with the oneDNN rounds nearest in time: both are ahead, though the best of 1000 is slower in ns than
    oneDNN's first rounds."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    def at(*minutes: int) -> list[str]:
        return [f"2026-11-24T{8 + m // 60:02d}:{m % 60:02d}:00+00:00" for m in minutes]

    perfs = [50.0] * 1000
    perfs[40], perfs[700] = 80.0, 85.0
    draws = _summary(fig.RANDOM, "yolo9000_12", perfs)
    draws["round_medians_ns"] = [[1.0]] * 1000
    draws["round_times"] = [None] * 1000
    draws.at[40, "round_medians_ns"], draws.at[40, "round_times"] = [90.0, 90.0, 90.0], at(5, 10, 11)
    draws.at[700, "round_medians_ns"], draws.at[700, "round_times"] = [150.0] * 3, at(95, 100, 101)
    one = _summary(fig.RANDOM, "yolo9000_12", [70.0], kind="baseline", texts=["onednn"])
    one["round_medians_ns"] = [[100.0, 100.0, 100.0, 200.0, 200.0]]
    one["round_times"] = [at(0, 10, 11, 100, 101)]
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat([draws, one], ignore_index=True), tmp_path))
    row = next(r for r in f.table if r.get("layer") == "yolo9000_12")
    assert row["ratio min"] == pytest.approx(100 / 90, abs=0.01)
    assert row["ratio 1000 min"] == pytest.approx(200 / 150, abs=0.01)
    assert "best of 1000 paired by round time on 1 layers: ahead in every round on 1" in f.measured


def test_fig6_3_compares_a_partial_best_of_1000_with_onednn_on_the_same_layers(tmp_path) -> None:  # noqa: ANN001
    """Best of 1000 on one ResNet-18 layer of two: its average is set beside oneDNN on that layer only,
    not beside the whole network's oneDNN average."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    parts = [
        _summary(fig.RANDOM, "resnet18_02", [50.0] * 999 + [80.0]),
        _summary(fig.RANDOM, "resnet18_02", [70.0], kind="baseline", texts=["onednn"]),
        _summary(fig.RANDOM, "resnet18_03", [50.0] * 99 + [60.0]),
        _summary(fig.RANDOM, "resnet18_03", [90.0], kind="baseline", texts=["onednn"]),
    ]
    (f,) = fig.best_vs_onednn(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
    assert "(of 1000 on 1/2 layers: 80.0% vs oneDNN 70.0% on those) vs oneDNN 80.0%" in f.measured


def test_strategies_figure_compares_bests_raw_and_against_each_runs_onednn(tmp_path) -> None:  # noqa: ANN001
    import pandas as pd

    from studies.ttile_conv import figures as fig

    parts = []
    # layer a: the model's best is 10 points higher, but its run's oneDNN was as much faster (host drift)
    for layer, rnd, mod, lib_r, lib_m in (
        ("yolo9000_12", 60.0, 70.0, 60.0, 70.0),
        ("resnet18_02", 80.0, 79.0, 80.0, 80.0),
    ):
        parts.append(_summary(fig.RANDOM, layer, [rnd - 5, rnd]))
        parts.append(_summary("ttile_conv_model", layer, [mod, mod - 5]))
        parts.append(_summary(fig.RANDOM, layer, [lib_r], kind="baseline", texts=["onednn"]))
        parts.append(_summary("ttile_conv_model", layer, [lib_m], kind="baseline", texts=["onednn"]))
    (f,) = fig.strategies(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
    assert "within 2 points of (or above) the model filter's top 100 on 1/2 layers" in f.measured
    own_run = "against the oneDNN of its own run, random within 2% of (or above) the model filter on 2/2"
    assert own_run in f.measured
    assert f.verdict == "reproduced"
    row = next(r for r in f.table if r["workload"] == "yolo9000_12")
    assert row["model filter (top 100) / its oneDNN"] == pytest.approx(1.0)


def test_fig6_5_sets_the_best_parallel_candidate_beside_onednn_on_as_many_threads(tmp_path) -> None:  # noqa: ANN001
    import json

    import pandas as pd

    from studies.ttile_conv import figures as fig

    def figure(par_a: float, par_b: float, with_library: bool = True):  # noqa: ANN202
        parts = []
        for layer, seq, par, lib1, lib2 in (("resnet18_02", 90.0, par_a, 85.0, 160.0),
                                            ("resnet18_03", 80.0, par_b, 70.0, 150.0)):  # fmt: skip
            parts.append(_summary(fig.RANDOM, layer, [seq - 20, seq]))
            parts.append(_summary("ttile_conv_parallel", layer, [par, par - 30]))
            libs = _summary("ttile_conv_parallel", layer, [lib1, lib2] if with_library else [lib1],
                            kind="baseline", texts=["onednn"] * (2 if with_library else 1))  # fmt: skip
            libs["candidate_options"] = [json.dumps({}), json.dumps({"threads": 2})][: len(libs)]
            parts.append(libs)
        (f,) = fig.parallel(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f

    f = figure(165.0, 120.0)  # ahead of the 2-thread oneDNN on one layer, 20% behind on the other
    assert f.verdict == "partial" and "on par (>= x0.95) or ahead on 1/2 layers" in f.measured
    row = next(r for r in f.table if r["workload"] == "resnet18_03")
    assert row["onednn 1t"] == 70.0 and row["onednn 2t"] == 150.0 and row["speed-up"] == pytest.approx(1.5)
    assert figure(165.0, 145.0).verdict == "reproduced"  # 145 / 150 = 0.967: on par
    assert figure(100.0, 100.0).verdict == "differs"
    # without the parallel library the figure only gives the speed-up over the best sequential candidate
    f = figure(165.0, 120.0, with_library=False)
    assert f.verdict == "partial" and "oneDNN on 2 threads not measured" in f.measured


def test_search_throughput_leaves_out_a_stop_and_resume() -> None:
    import pandas as pd

    from studies.ttile_conv.figures import _rate_per_minute

    # 4 rows 10 s apart, a 3-hour pause (the run resumed in a later session), 2 more rows 10 s apart
    hms = ("10:00:00", "10:00:10", "10:00:20", "10:00:30", "13:00:30", "13:00:40")
    t = pd.to_datetime([f"2026-01-01 {x}" for x in hms])
    assert _rate_per_minute(pd.Series(t)) == pytest.approx(6.0)  # 4 gaps of work in 40 s
    assert np.isnan(_rate_per_minute(pd.Series(t[:1])))


def test_single_vs_forced_and_convergence_verdicts(tmp_path) -> None:  # noqa: ANN001
    import pandas as pd

    from studies.ttile_conv import figures as fig

    combined = _summary(fig.RANDOM, "yolo9000_18", [80.0, 85.0], texts=["[λ_seq_w.[(1,5),(2,6)], Uλ_w]"] * 2)
    forced = _summary("ttile_conv_u17h", "yolo9000_18", [60.0, 68.0])
    (f,) = fig.single_vs_all(FigureContext(pd.concat([combined, forced], ignore_index=True), tmp_path))
    assert f.verdict == "reproduced" and f.ours == 17.0
    forced = _summary("ttile_conv_u17h", "yolo9000_18", [90.0])
    (f,) = fig.single_vs_all(FigureContext(pd.concat([combined, forced], ignore_index=True), tmp_path))
    assert f.verdict == "differs"

    def conv(random_best: float, optuna_best: float) -> str:
        parts = [
            _summary("ttile_conv_convergence_random", "yolo9000_12", [10.0, random_best], seed=s)
            for s in (0, 1)
        ]
        parts += [
            _summary("ttile_conv_convergence_optuna", "yolo9000_12", [optuna_best, 5.0], seed=s)
            for s in (0, 1)
        ]
        for i, p in enumerate(parts):  # distinct candidates per run
            p["candidate_key"] = p["candidate_key"] + f"-{i}"
        (f,) = fig.convergence(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f.verdict

    assert conv(80.0, 60.0) == "reproduced"
    assert conv(40.0, 70.0) == "differs"


def test_fig6_2_draws_tvm_from_its_tuning_records_and_judges_random_against_it(tmp_path) -> None:  # noqa: ANN001
    """TVM's curve comes from each harness-timed module's tuning record (its own per-trial times, in % of
    the row's peak); with TVM there, the verdict compares random with TVM, not with Optuna; a module tuned
    without the learned cost model is not an auto-tuner run and is left out."""
    import json

    import pandas as pd

    from studies.ttile_conv import figures as fig

    out = tmp_path / "report" / "figures"  # the context's results_dir is tmp_path
    (tmp_path / "tvm").mkdir()
    parts = [_summary("ttile_conv_convergence_random", "yolo9000_12", [10.0, 60.0], seed=s) for s in (0, 1)]
    parts += [_summary("ttile_conv_convergence_optuna", "yolo9000_12", [20.0, 30.0], seed=s) for s in (0, 1)]
    for seed, how, secs in ((0, "xgb-evolutionary", [0.2, None, 0.04]), (1, "xgb-evolutionary", [0.1, 0.05]),
                            (2, "random-replay-trace", [0.01])):  # fmt: skip
        stem = f"yolo9000_12-t3-s{seed}-{how}"
        cost, strategy = how.split("-", 1)
        rec = {"seed": seed, "trials": 3, "cost_model": cost, "strategy": strategy, "trial_seconds": secs}
        (tmp_path / "tvm" / f"{stem}.json").write_text(json.dumps(rec))
        row = _summary(fig.TVM, "yolo9000_12", [45.0], kind="baseline", texts=["tvm"], seed=seed)
        row["label"] = f"tvm (module=/elsewhere/tvm/{stem}.so)"
        parts.append(row)
    summary = pd.concat(parts, ignore_index=True)
    summary["peak_gflops"] = 100.0  # 2 GFLOP: 0.04 s is 50% of peak
    for i in range(len(summary)):
        summary.loc[i, "candidate_key"] += f"-{i}"
    (f,) = fig.convergence(FigureContext(summary, out))
    best = {(r["strategy"], r["seed"]): r["perf0"] for r in f.table}
    assert best[("tvm", 0)] == pytest.approx(50.0) and best[("tvm", 1)] == pytest.approx(40.0)
    assert ("tvm", 2) not in best  # the random-cost-model module
    assert f.ours == pytest.approx(60.0 - 45.0) and f.verdict == "reproduced"
    assert "TVM's own timing" in f.measured and "tvm 45.0% (2 runs of >= 2)" in f.measured
    assert fig.TVM in f.experiments


def test_fig6_15_18_compares_the_best_of_as_many_draws(tmp_path) -> None:  # noqa: ANN001
    """The searched permutation ran to 1000 draws and the fixed one to 300: the best searched draw among
    the first 300 (proposal order), not among all 1000, is set beside the fixed one's best."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    searched = [50.0] * 2 + [70.0] + [95.0]  # the 95 comes after the fixed search's budget of 3
    fixed = [60.0, 80.0, 40.0]
    parts = [_summary(fig.RANDOM, "resnet18_02", searched),
             _summary("ttile_conv_fixed_perm", "resnet18_02", fixed)]  # fmt: skip
    (f,) = fig.fixed_permutation(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
    (row,) = f.table
    assert row["max searched"] == 95.0 and row["max searched, first n fixed"] == 70.0
    assert row["n fixed"] == 3 and row["n searched"] == 4
    assert "higher on 0/1 layers" in f.measured and f.verdict == "partial"


def test_refine_figure_compares_what_each_run_gained_after_the_shared_draws(tmp_path) -> None:  # noqa: ANN001
    """Both runs share their first 50 draws; the refined one finds 90 at its 80th proposal where random's
    best after them is 70. Each run is measured against its own best of the shared draws, so a refined run
    on a host twice as slow that day still shows its gain."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    def figure(late: float, slow: float = 1.0):  # noqa: ANN202
        parts = []
        for layer in ("yolo9000_12", "resnet18_02"):
            rnd = [60.0] * 50 + [70.0] + [65.0] * 149
            ref = [(v * slow) for v in [60.0] * 50 + [65.0] * 29 + [late] + [65.0] * 120]
            shared = [f"[T_{{{i},c}}]" for i in range(50)]
            parts.append(
                _summary(
                    fig.REFINE["random"], layer, rnd, texts=shared + [f"[T_{{{i},h}}]" for i in range(150)]
                )
            )
            parts.append(
                _summary(
                    fig.REFINE["refined"], layer, ref, texts=shared + [f"[T_{{{i},w}}]" for i in range(150)]
                )
            )
            for exp in fig.REFINE.values():
                parts.append(_summary(exp, layer, [100.0 * (slow if exp == fig.REFINE["refined"] else 1)],
                                      kind="baseline", texts=["onednn"]))  # fmt: skip
        (f,) = fig.refine(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f

    f = figure(90.0)
    assert f.verdict == "reproduced" and "within 1% of random or ahead on 2/2" in f.measured
    row = next(r for r in f.table if r["workload"] == "resnet18_02" and r["proposals"] == 100)
    assert row["shared draws"] == 50
    assert row["random gain"] == pytest.approx(70 / 60, abs=1e-3) and row["refined gain"] == pytest.approx(
        1.5
    )
    assert row["refined / its oneDNN"] == pytest.approx(0.9)
    assert "(best of 200 on 2 layers:" in f.measured
    assert figure(90.0, slow=0.5).verdict == "reproduced"  # the gain, not the day's speed
    assert figure(66.0).verdict == "differs"  # no better than the random draws after the shared ones


@pytest.mark.parametrize("name", ["ttile_conv_remainder", "ttile_conv_directed", "ttile_conv_masked",
                                  "ttile_conv_levers_refine", "ttile_conv_model_prior",
                                  "ttile_conv_levers_refine100",
                                  "ttile_conv_levers_transfer100"])  # fmt: skip
def test_lever_figure_divides_each_runs_ratio_to_its_own_onednn(name: str, tmp_path) -> None:  # noqa: ANN001
    """With the lever the best reaches 1.10 of its run's oneDNN where the run without reached 1.00, on a
    day the host ran everything at half speed: the figure compares the ratios (x1.10), not the days. A
    best-of-100 lever is judged against the uniform best of 1000: a uniform run of 100 draws caps it."""
    import json

    import pandas as pd

    from studies.ttile_conv import figures as fig

    without, with_ = fig.LEVERS[name]
    draw = {"ttile_conv_remainder": fig.remainder, "ttile_conv_directed": fig.directed,
            "ttile_conv_masked": fig.masked, "ttile_conv_levers_refine": fig.levers_refine,
            "ttile_conv_model_prior": fig.model_prior,
            "ttile_conv_levers_refine100": fig.levers_refine100,
            "ttile_conv_levers_transfer100": fig.levers_transfer100}[name]  # fmt: skip

    def figure(with_ratio: float, slow: float = 0.5, last: float | None = None, drawn: int = 1000):  # noqa: ANN202
        parts = []
        for layer in ("yolo9000_00", "resnet18_02"):
            mine = last if last is not None and layer == "resnet18_02" else with_ratio
            for series, exp in fig.LEVERS[name].items():
                ratio, speed = (mine, slow) if series == with_ else (1.0, 1.0)
                lib_ns = 1000.0 / speed
                sides = (("scheme", lib_ns / ratio, "[T_{2,c}]"), ("baseline", lib_ns, "onednn"))
                for kind, ns, text in sides:
                    p = _summary(exp, layer, [1e5 / ns], kind=kind, texts=[text])
                    p["median_ns"] = ns
                    p["round_medians_ns"] = [[ns * f for f in (1.0, 1.02, 0.99)]]
                    p["round_times"] = None
                    if series == without and kind == "scheme":  # the uniform best found at the last draw
                        p["search_runs"] = json.dumps([[0, drawn - 1]])
                    parts.append(p)
        (f,) = draw(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f

    f = figure(1.10)
    assert f.name == name and f.ours == pytest.approx(1.10, rel=1e-3) and f.verdict == "reproduced"
    assert "better on 2" in f.measured
    assert f"ahead of oneDNN (median of the round ratios) 2 {with_}, 0 {without}" in f.measured
    row = next(r for r in f.table if r["workload"] == "resnet18_02")
    assert row["gain"] == pytest.approx(1.10, rel=1e-3)
    if name in fig.LEVER_WITHIN:  # the best of 100 within 3% of the best of 1000 on >= 18 of 23 layers
        assert figure(0.975).verdict == "reproduced" and figure(0.96).verdict == "partial"
        assert figure(0.9).verdict == "differs" and ">= 0.97 on at least 78% of the layers" in f.statistic
        # a mean within 3% is not enough when a layer is missed: 1 of 2 within is below 18 of 23
        mixed = figure(1.06, last=0.92)
        assert mixed.ours > 0.97 and mixed.verdict == "partial" and "within 3% on 1 of 2" in mixed.measured
        assert "the uniform search drew 1000-1000 per layer" in f.measured
        short = figure(1.10, drawn=100)  # every layer within, but against a uniform best of 100
        assert short.verdict == "partial" and "fewer than 1000 on 2 (there its best" in short.measured
    else:
        assert figure(1.0).verdict == "partial" and figure(0.9).verdict == "differs"


def test_goal_figure_counts_the_layers_ahead_and_the_best_of_100_against_the_best_of_all(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """Issue 32's goal figure: ahead of oneDNN (round ratios), the flop-weighted ratio per network, and the
    best of the first 100 draws within 3% of the best of all; here with 120 draws on 3 layers standing in
    for 1000 on 23. A best found only after draw 100 keeps the best of 100 behind; too few draws cannot
    reach the goal whatever the ratios."""
    import pandas as pd

    from studies.ttile_conv import figures as fig

    goal = {"ahead": 2, "weighted": 1.05, "within": 0.03, "draws": 120, "layers": 3}
    monkeypatch.setitem(fig.CLAIMS["ttile_conv_goal"], "paper_numbers", goal)

    def figure(first: float, later: float, draws: int = 120):  # noqa: ANN202
        parts = []
        for layer in ("yolo9000_12", "resnet18_02", "resnet18_03"):
            ratios = [0.9] * draws
            ratios[50] = first
            if draws > 110:
                ratios[110] = later
            for kind, rs, texts in (("scheme", ratios, None), ("baseline", [1.0], ["onednn"])):
                ns = [1000.0 / r for r in rs]
                p = _summary(fig.GOAL, layer, [1e5 / n for n in ns], kind=kind, texts=texts)
                p["median_ns"] = ns
                p["round_medians_ns"] = [[n * f for f in (1.0, 1.01, 0.99)] for n in ns]
                p["round_times"] = None
                parts.append(p)
        (f,) = fig.goal(FigureContext(pd.concat(parts, ignore_index=True), tmp_path))
        return f

    f = figure(1.08, 1.10)
    assert f.verdict == "reproduced" and f.name == "ttile_conv_goal"
    assert (
        "ahead on 3/3 layers" in f.measured
        and "best of 100 within 3% of the best of 120 on 3/3" in f.measured
    )
    row = next(r for r in f.table if r["layer"] == "resnet18_02")
    assert row["best / oneDNN"] == pytest.approx(1.10, rel=1e-3)
    assert row["best of 100 / oneDNN"] == pytest.approx(1.08, rel=1e-3)
    late = figure(1.0, 1.10)  # the best of 100 is 9% behind the best of all: the search is too slow
    assert late.verdict == "partial" and "within 3% of the best of 120 on 0/3" in late.measured
    assert figure(0.8, 0.9).verdict == "differs"
    short = figure(1.08, 1.10, draws=100)  # every ratio met, but not on the draws the goal names
    assert short.verdict == "partial" and "no layer has 120 draws yet" in short.measured


def test_prefetch_figure_pairs_each_variant_with_the_winner_as_measured_round_by_round(tmp_path) -> None:  # noqa: ANN001
    """Two layers, the winner as measured and two prefetch variants in one run: `next` 5% faster in every
    round, `I:next@L2` 2% slower; a slow last round for all (the host) leaves the paired ratios alone."""
    import json

    import pandas as pd

    from studies.ttile_conv import figures as fig

    def parts(gains: dict[str, float]):  # noqa: ANN202
        out = []
        for layer in ("yolo9000_23", "resnet18_12"):
            for variant, gain in gains.items():
                opts = {"partial": "masked"} | ({"prefetch": variant} if variant else {})
                p = _summary("ttile_conv_prefetch", layer, [50.0 * gain], texts=["[T_{2,c}]"])
                p["candidate_key"] = f"{layer}-{variant}"
                p["candidate_options"] = json.dumps(opts)
                p["contention"] = None
                p["round_medians_ns"] = [[1000.0 / gain * f for f in (1.0, 1.01, 1.6)]]
                p["round_times"] = None
                out.append(p)
        return pd.concat(out, ignore_index=True)

    (f,) = fig.prefetch(FigureContext(parts({"": 1.0, "next": 1.05, "I:next@L2": 0.98}), tmp_path))
    assert f.name == "ttile_conv_prefetch" and f.verdict == "reproduced"
    assert f.ours == pytest.approx(1.05, rel=1e-6) and "best variant, next" in f.unit
    assert (
        "next: x1.050 (geometric mean over 2 layers; faster in every round on 2, slower in every"
        in f.measured
    )
    assert "I:next@L2: x0.980" in f.measured and "slower in every round on 2)" in f.measured
    row = next(r for r in f.table if r["workload"] == "resnet18_12" and r["variant"] == "next")
    assert row["low"] == pytest.approx(1.05) and row["high"] == pytest.approx(1.05)
    (g,) = fig.prefetch(FigureContext(parts({"": 1.0, "next": 0.995}), tmp_path / "g"))
    assert g.verdict == "partial"
    (h,) = fig.prefetch(FigureContext(parts({"": 1.0, "next": 0.9}), tmp_path / "h"))
    assert h.verdict == "differs"
    no_base = parts({"next": 1.05})  # no winner as measured to pair with: no figure
    assert fig.prefetch(FigureContext(no_base, tmp_path / "n")) == []
