"""Loop permutations (seed 004): SJT order, orders as schemes of R atoms, correctness of the generated
kernels on a tiny layer, the permutation option, and the study's analyses."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.check import CheckConfig
from kernels.candidate import Workload
from kernels.codegen import analyze_for, render_scheme
from kernels.targets import get_target
from reports.figures import FigureContext
from studies.permutations import kernels as perm
from studies.permutations import study as permstudy
from tests.conftest import FAST_TIMING, HOST_TARGET, run_candidates

TINY = {"k": 3, "c": 2, "h": 3, "w": 4, "r": 2, "s": 3}


def test_sjt_adjacent_swaps_and_all_distinct() -> None:
    orders = perm.sjt()
    assert len(orders) == 720 and len(set(orders)) == 720
    assert orders[0] == perm.LOOPS
    for a, b in itertools.pairwise(orders):
        diff = [k for k in range(6) if a[k] != b[k]]
        assert (
            len(diff) == 2 and diff[1] == diff[0] + 1 and (a[diff[0]], a[diff[1]]) == (b[diff[1]], b[diff[0]])
        )


def test_sjt_small_matches_the_textbook_sequence() -> None:
    assert ["".join(p) for p in perm.sjt("123")] == ["123", "132", "312", "321", "231", "213"]


def test_order_index_is_the_itertools_position() -> None:
    for k, order in enumerate(perm.lexicographic()):
        assert perm.order_index(order) == k
    assert perm.order_of_scheme(perm.scheme_text(perm.THESIS_BEST_AVERAGE)) == perm.THESIS_BEST_AVERAGE


def test_every_order_is_a_legal_scheme_of_r_atoms() -> None:
    w = Workload.make("tiny", "conv2d", TINY)
    target = get_target("avx2")
    for order in perm.sjt():
        an = analyze_for(perm.scheme_text(order), w, target)
        assert [a.kind for a in an.scheme] == ["R"] * 6 and an.vector_dim is None


def test_partial_sums_hoist_the_accumulator_out_of_the_reduction_run() -> None:
    w = Workload.make("tiny", "conv2d", TINY)
    base = perm.candidate(perm.LOOPS, partial_sums=True)
    assert "output accumulators kept in registers" in render_scheme(base, w).code
    plain = perm.candidate(perm.LOOPS, partial_sums=False)
    assert "output accumulators kept in registers" not in render_scheme(plain, w).code


def test_orders_compute_the_reference(tmp_path: Path, shared_cache: Path) -> None:
    """8 orders spread along SJT, with and without partial sums, fully checked on a tiny layer (all 720
    behind -m slow)."""
    w = Workload.make("perm-tiny", "conv2d", TINY)
    orders = perm.sjt()[::90]
    cands = [perm.candidate(o, ps, HOST_TARGET) for o in orders for ps in (True, False)]
    rows = run_candidates(cands, w, tmp_path, shared_cache, CheckConfig(full_below=10**6), FAST_TIMING)
    assert len(rows) == 16
    bad = [(r["candidate_text"], r["status"], r["reason"]) for r in rows if r["status"] != "ok"]
    assert not bad
    assert all(r["check_mode"] == "full" and r["check_passed"] for r in rows)


@pytest.mark.slow
def test_all_720_orders_compute_the_reference(tmp_path: Path, shared_cache: Path) -> None:
    w = Workload.make("perm-tiny", "conv2d", TINY)
    cands = [perm.candidate(o, True, HOST_TARGET) for o in perm.sjt()]
    rows = run_candidates(cands, w, tmp_path, shared_cache, CheckConfig(full_below=10**6), FAST_TIMING)
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows if r["status"] != "ok"][:3]


def test_permutation_option() -> None:
    assert perm.select_orders("fixed") == [perm.LOOPS]
    assert perm.select_orders("fixed", order="y,i,ky,o,x,kx") == [perm.THESIS_BEST_AVERAGE]
    assert perm.select_orders("fixed", order="h c r k w s") == [perm.THESIS_BEST_AVERAGE]
    assert len(perm.select_orders("searched")) == 720
    sample = perm.select_orders("searched", sample=10, seed=3)
    assert len(sample) == 10 and sample == perm.select_orders("searched", sample=10, seed=3)
    assert perm.select_orders("best-average") == [perm.THESIS_BEST_AVERAGE]
    ranking = {perm.LOOPS: 0.5, perm.THESIS_BEST_WORST: 0.9}
    assert perm.select_orders("best-average", ranking=ranking) == [perm.THESIS_BEST_WORST]
    with pytest.raises(perm.PermutationError, match="allowed: fixed, searched, best-average"):
        perm.select_orders("random")
    with pytest.raises(perm.PermutationError, match="not a permutation"):
        perm.parse_order("o,i,y,x,ky")


def test_layer_sets() -> None:
    assert len(perm.layer_set("table4.1")) == 8
    assert len(perm.layer_set("table4.2")) == 216
    assert len(perm.layer_set("table4.3")) == 36
    assert perm.layer_set("fire9-conv3x3-2")["fire9-conv3x3-2"] == {
        "h": 13, "w": 13, "k": 256, "r": 3, "s": 3, "c": 64,
    }  # fmt: skip
    with pytest.raises(perm.PermutationError, match="unknown layer"):
        perm.layer_set("resnet9000")


def test_analyses_on_a_synthetic_table() -> None:
    orders = [perm.order_text(o) for o in perm.sjt()[:4]]
    df = pd.DataFrame({
        "order": orders * 2, "layer": ["a"] * 4 + ["b"] * 4,
        "cycles": [10, 20, 40, 12, 30, 15, 60, 16],
    })  # fmt: skip
    table = permstudy.speedup_table(df)
    assert table.loc[orders[0], "a"] == 1.0 and table.loc[orders[1], "b"] == 1.0
    w = permstudy.winners(table)
    # averages: o0 (1 + .5)/2 = .75, o1 (.5 + 1)/2 = .75, o3 (10/12 + 15/16)/2 = .885
    assert w["top_average"]["order"] == orders[3]
    assert w["top_worst"]["order"] == orders[3]
    pairs = permstudy.best_pairs(table)
    assert len(pairs) == 6
    top = pairs.sort_values("average").iloc[-1]
    assert {top["a"], top["b"]} == {orders[0], orders[1]} and top["average"] == 1.0


def test_hypergeometric_sampling_matches_the_thesis() -> None:
    # §5.3.2: 80 good orders of 720; 10 draws -> > 68.3 %, 26 draws -> > 95.4 %
    assert permstudy.p_good_in_sample(80, 720, 10) == pytest.approx(0.694, abs=1e-3)
    assert permstudy.p_good_in_sample(80, 720, 26) == pytest.approx(0.9559, abs=1e-3)


def test_simulation_ranks_and_stores(tmp_path: Path) -> None:
    from harness import cachesim

    cfg = cachesim.load_config("loki")
    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 3, "s": 3}
    paths = permstudy.run_simulations(tmp_path, "t", {"small": sizes}, [cfg], say=lambda _m: None)
    df = permstudy.load_sim(tmp_path, "t")
    assert len(df) == 720 and paths[0].exists()
    assert sorted(df["sjt_index"]) == list(range(720)) and df["cycles"].gt(0).all()
    assert np.isfinite(df["cycles"]).all() and df["cycles"].nunique() > 10
    # a rerun skips the stored file
    msgs: list[str] = []
    permstudy.run_simulations(tmp_path, "t", {"small": sizes}, [cfg], say=msgs.append)
    assert "skipped" in msgs[0]
    # another experiment (e.g. timing at -O0) reuses the stored simulation instead of recomputing it
    msgs.clear()
    permstudy.run_simulations(tmp_path, "t-O0", {"small": sizes}, [cfg], say=msgs.append, reuse_from="t")
    assert "reused from t" in msgs[0]
    again = permstudy.load_sim(tmp_path, "t-O0")
    assert again.drop(columns="experiment").equals(df.drop(columns="experiment"))
    both = permstudy.load_sim(tmp_path, drop=["cycles", "no_such_column"])  # every experiment, fewer columns
    assert len(both) == 1440 and sorted(set(both["experiment"])) == ["t", "t-O0"]
    assert "cycles" not in both and list(both.index) == list(range(1440))
    assert both[both["experiment"] == "t"].reset_index(drop=True).equals(df.drop(columns="cycles"))


def test_figures_read_the_simulations_once_until_a_file_changes(tmp_path: Path) -> None:
    """The seven permutation figures share one read of the simulations per process, and a simulation
    stored since (a new file, or a file rewritten) is read again."""
    from harness import cachesim
    from studies.permutations import figures as fp_mod

    cfg = cachesim.load_config("loki")
    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    ctx = FigureContext(pd.DataFrame(), tmp_path / "report" / "figures", results_dir=tmp_path)
    permstudy.run_simulations(tmp_path, "t", {"a": sizes}, [cfg], say=lambda _m: None)
    first = fp_mod._sim(ctx)
    assert fp_mod._sim(ctx) is not first and fp_mod._load_sim.cache_info().hits >= 1  # one read, two views
    permstudy.run_simulations(tmp_path, "t", {"b": sizes}, [cfg], say=lambda _m: None)
    assert sorted(fp_mod._sim(ctx)["layer"].unique()) == ["a", "b"] and len(first) == 720


def test_simulation_workers_give_the_same_rows_and_a_dead_worker_raises(tmp_path: Path) -> None:
    """Two workers (from a fork server, shared by every layer of the call) give the rows one process
    gives; a worker that dies fails the call instead of hanging it."""
    from concurrent.futures.process import BrokenProcessPool

    from harness import cachesim

    cfg = cachesim.load_config("loki")
    small = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    one = permstudy.simulate_layer("a", small, cfg, 1)
    permstudy.run_simulations(tmp_path, "t", {"a": small, "b": small}, [cfg], jobs=2, say=lambda _m: None)
    two = permstudy.load_sim(tmp_path, "t")
    cols = ["order", "cycles", "perm_index", "sjt_index"]
    for name in ("a", "b"):
        got = two[two["layer"] == name][cols].sort_values("order").reset_index(drop=True)
        assert got.equals(one[cols].sort_values("order").reset_index(drop=True))
    # One task, so its death is seen by result(): with several submitted at once, a later submit can race
    # the executor's clean-up and fail with OSError (closed handle) instead; CI saw that once.
    with permstudy.sim_pool(2) as pool, pytest.raises(BrokenProcessPool):
        pool.submit(os._exit, 1).result(timeout=120)


def test_simulation_progress_gives_an_eta_for_what_is_left(tmp_path: Path) -> None:
    from harness import cachesim

    cfg = cachesim.load_config("loki")
    small = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    layers = {"a": small, "b": small, "c": small}
    permstudy.run_simulations(tmp_path, "t", {"b": small}, [cfg], say=lambda _m: None)  # stored: not left
    msgs: list[str] = []
    permstudy.run_simulations(tmp_path, "t", layers, [cfg], say=msgs.append)
    assert "ETA" in msgs[0] and "for 1 more" in msgs[0]  # c is left, b is stored
    assert "skipped" in msgs[1] and "ETA" not in msgs[2]


def test_command_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from studies.permutations.commands import permutations as cmd

    for argv in (["--layers", "resnet9000"], ["--cache", "nope"], ["--threads", "0"], ["--time", "x"]):
        with pytest.raises(SystemExit) as exc:
            cmd.main([*argv, "--results", str(tmp_path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("harness permutations: error:") and "\n" not in err


def test_best_average_from_stored_simulations(tmp_path: Path) -> None:
    from harness import cachesim

    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 3, "s": 3}
    permstudy.run_simulations(
        tmp_path, "t", {"small": sizes}, [cachesim.load_config("loki")], say=lambda _m: None
    )
    ranking = permstudy.average_speedups(tmp_path, "t")
    assert len(ranking) == 720 and max(ranking.values()) == 1.0
    (best,) = perm.select_orders("best-average", ranking=ranking)
    assert ranking[best] == 1.0
    assert permstudy.average_speedups(tmp_path, "t", cache="host") == {}


def test_parallel_orders_use_tpar_on_an_output_loop(tmp_path: Path, shared_cache: Path) -> None:
    from kernels.scheme import SchemeError, parse_scheme

    text = perm.parallel_scheme_text(("y", "i", "ky", "o", "x", "kx"), TINY)
    assert text == "[Tpar_{3,h}, R_c, R_r, R_k, R_w, R_s]"
    with pytest.raises(perm.PermutationError, match="omp atomic"):
        perm.parallel_scheme_text(("i", "y", "ky", "o", "x", "kx"), TINY)
    try:
        parse_scheme(text)
    except SchemeError:
        pytest.skip("this checkout's scheme language has no Tpar atom")
    w = Workload.make("perm-tiny", "conv2d", TINY)
    cand = perm.candidate(perm.LOOPS)
    par = type(cand)("scheme", text, cand.options)
    (row,) = run_candidates([par], w, tmp_path, shared_cache, CheckConfig(full_below=10**6), FAST_TIMING)
    assert row["status"] == "ok" and row["check_passed"], row["reason"]


def test_spearman_pairs_each_timed_experiment_with_its_own_simulations() -> None:
    """Timing the same layer twice (e.g. -O3 in `permutations`, -O0 in `permutations-O0`) gives two
    correlations, each against its experiment's simulation, never one over the mixed rows."""
    orders = [perm.order_text(o) for o in perm.sjt()[:6]]
    cycles = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    sim = pd.DataFrame(
        [{"experiment": e, "layer": "L", "partial_sums": True, "threads": 1, "cache": "loki", "order": o,
          "cycles": c}
         for e in ("permutations", "permutations-O0") for o, c in zip(orders, cycles, strict=True)]
    )  # fmt: skip
    timed = pd.DataFrame(
        [{"experiment": f"{e}-L", "sim_experiment": e, "layer": "L", "partial_sums": True, "threads": 1,
          "machine_fingerprint": "fp", "cpu_model": "cpu", "order": o, "median_ns": ns}
         for e, sign in (("permutations", 1), ("permutations-O0", -1))
         for o, ns in zip(orders, (sign * c for c in cycles), strict=True)]
    )  # fmt: skip
    rho = permstudy.spearman_by_layer(sim, timed).set_index("experiment")["spearman"]
    assert rho["permutations"] == pytest.approx(1.0) and rho["permutations-O0"] == pytest.approx(-1.0)


def test_a_simulation_resumed_on_another_host_makes_one_figure(tmp_path: Path) -> None:
    """Table 4.3 ran 39 of its simulations on a Zen 3 and 69 on a Zen 4: a named cache configuration's
    simulation does not depend on the host, so the experiment is one figure (under the host that ran most
    of it, or that timed its orders), while rows of the ``host`` configuration keep their own machine."""
    from harness import cachesim
    from studies.permutations import figures as fp_mod

    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    layers = {name: {**sizes, "k": k} for name, k in (("a", 4), ("b", 8), ("c", 12))}
    permstudy.run_simulations(tmp_path, "t", layers, [cachesim.load_config("loki")], say=lambda _m: None)
    here = str(permstudy.load_sim(tmp_path, "t")["machine_fingerprint"].iloc[0])
    (moved,) = (tmp_path / permstudy.SIM_DIR / "t").glob("a-*.parquet")  # layer a, as if another host ran it
    table = pd.read_parquet(moved).assign(machine_fingerprint="feedface0000", cpu_model="other cpu")
    table.to_parquet(moved)
    sim = permstudy.load_sim(tmp_path, "t")
    assert sim["machine_fingerprint"].nunique() == 2  # what the figures grouped by before

    out = tmp_path / "report" / "figures"
    out.mkdir(parents=True)
    (fig,) = fp_mod.pairs(FigureContext(pd.DataFrame(), out, results_dir=tmp_path))
    assert fig.machine == here and "(3 layers)" in fig.measured

    pooled = fp_mod.pool_hosts(sim, pd.DataFrame())
    assert set(pooled["machine_fingerprint"]) == {here} and set(pooled["cpu_model"]) == set(
        sim.loc[sim["machine_fingerprint"] == here, "cpu_model"]
    )
    assert sim["machine_fingerprint"].nunique() == 2  # the loaded (cached) frame is left as it was
    # the host configuration is built from the machine's caches: its rows keep their machine
    host = sim.assign(cache=np.where(sim["layer"] == "a", "host", sim["cache"]))
    kept = fp_mod.pool_hosts(host, pd.DataFrame())
    assert set(kept.loc[kept["layer"] == "a", "machine_fingerprint"]) == {"feedface0000"}
    # orders timed on the other host: the simulations go beside them
    timed = pd.DataFrame([{"status": "ok", "experiment": "t-a", "machine_fingerprint": "feedface0000"}])
    assert set(fp_mod.pool_hosts(sim, timed)["machine_fingerprint"]) == {"feedface0000"}


def test_pairs_and_sorted_speedups_put_measured_beside_simulated(tmp_path: Path) -> None:
    """Fig 5.3/5.4 from simulation and, on the orders timed on every layer, from measured time: the
    measured panel is computed from the timed medians (here the reverse of the simulated ranking), not
    copied from the simulation."""
    from harness import cachesim
    from studies.permutations import figures as fp_mod

    layers = {
        "a": {"k": 4, "c": 4, "h": 4, "w": 4, "r": 3, "s": 3},
        "b": {"k": 8, "c": 2, "h": 5, "w": 3, "r": 1, "s": 1},
    }
    permstudy.run_simulations(
        tmp_path, "permutations", layers, [cachesim.load_config("loki")], say=lambda _m: None
    )
    sim = permstudy.load_sim(tmp_path, "permutations")
    fingerprint = str(sim["machine_fingerprint"].iloc[0])
    timed_orders = perm.sjt()[::8]  # 90 orders timed on both layers
    rows = []
    for layer in layers:
        cycles = sim[sim["layer"] == layer].set_index("order")["cycles"]
        for o in timed_orders:
            rows.append({
                "status": "ok", "workload": f"perm-{layer}", "label": perm.scheme_text(o),
                "median_ns": 1e9 / float(cycles[perm.order_text(o)]),  # reversed ranking
                "machine_fingerprint": fingerprint, "cpu_model": "test cpu",
                "experiment": permstudy.timed_experiment_name("permutations", layer),
            })  # fmt: skip
    big = {"k": 6, "c": 3, "h": 4, "w": 5, "r": 2, "s": 2}  # a third layer, timed on 10 orders only
    permstudy.run_simulations(
        tmp_path, "permutations", {"c": big}, [cachesim.load_config("loki")], say=lambda _m: None
    )
    for k, o in enumerate(timed_orders[:10]):
        rows.append({**rows[0], "workload": "perm-c", "label": perm.scheme_text(o), "median_ns": 1.0 + k,
                     "experiment": permstudy.timed_experiment_name("permutations", "c")})  # fmt: skip
    summary = pd.DataFrame(rows)
    out = tmp_path / "report" / "figures"
    out.mkdir(parents=True)

    timed = permstudy.timed_frame(summary)
    measured = permstudy.speedup_table(timed[timed["layer"] != "c"], metric="median_ns")
    assert measured.shape == (90, 2)
    pr = permstudy.best_pairs(measured)
    best = pr.loc[pr["average"].idxmax()]
    (fig53,) = fp_mod.pairs(FigureContext(summary, out))
    assert "simulated (loki) (3 layers)" in fig53.measured
    assert (
        f"measured (2 layers): best pair {best['a']} + {best['b']}: average {best['average']:.3f}"
        in fig53.measured
    )
    data = pd.read_csv(out.parent / fig53.csv)
    assert set(data["source"]) == {"simulated (loki)", "measured"}

    (fig54,) = fp_mod.sorted_speedups(FigureContext(summary, out))
    good = int((measured >= CLAIMS_GOOD()).sum(axis=0).min())
    assert f"measured: hardest of 2 layers has {good}/90 orders" in fig54.measured
    assert "simulated (loki): hardest of 3 layers has" in fig54.measured and "/720 orders" in fig54.measured

    tw = permstudy.winners(measured)["top_average"]
    (fig47,) = fp_mod.winners(FigureContext(summary, out))
    assert (
        f"measured (90 orders timed on 2 layers): top average {tw['order']} {tw['average']:.3f}"
        in fig47.measured
    )
    assert "timed on fewer orders, left out of the measured panel: c (10 orders)" in fig47.measured

    # nothing timed: the simulated panel alone, as before
    (alone,) = fp_mod.pairs(FigureContext(summary.iloc[0:0], out))
    assert "measured" not in alone.measured


def CLAIMS_GOOD() -> float:  # noqa: N802
    from reports.figures import CLAIMS

    return float(CLAIMS["permutations_fig5_4"]["paper_numbers"]["good"])


def test_fig4_3_is_a_heatmap_beyond_a_dozen_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Table 4.2's 216 layers as one panel each made a figure 500 inches tall (68 s of the report of every
    archive): past MAX_PANELS the layers are the rows of one heatmap of cycles / the layer's best, every
    order of every layer still in the CSV, the verdict's statistic unchanged."""
    from harness import cachesim
    from studies.permutations import figures as fp_mod

    layers = {
        "a": {"k": 4, "c": 4, "h": 4, "w": 4, "r": 3, "s": 3},
        "b": {"k": 8, "c": 2, "h": 5, "w": 3, "r": 1, "s": 1},
    }
    permstudy.run_simulations(
        tmp_path, "permutations", layers, [cachesim.load_config("loki")], say=lambda _m: None
    )
    out = tmp_path / "report" / "figures"
    out.mkdir(parents=True)
    ctx = FigureContext(pd.DataFrame(), out, results_dir=tmp_path)
    (panels,) = fp_mod.signatures(ctx)
    monkeypatch.setattr(fp_mod, "MAX_PANELS", 1)
    (heat,) = fp_mod.signatures(ctx)
    assert heat.measured == panels.measured and heat.ours == pytest.approx(panels.ours)
    table = pd.read_csv(out / Path(heat.csv).name)
    assert len(table) == 2 * 720 and set(table["layer"]) == {"a", "b"}
    curves = [
        (la, g["sjt_index"].to_numpy(), g["cycles_norm"].to_numpy(), [])
        for la, g in table.sort_values("sjt_index").groupby("layer")
    ]
    fig = fp_mod._signature_heatmap(curves, "loki")
    grid = fig.axes[0].images[0].get_array()
    assert grid.shape == (2, 720)
    assert np.allclose(grid[1], curves[1][2]) and np.nanmin(grid) == pytest.approx(1.0)


def test_a_stopped_simulation_exits_soon_and_leaves_no_worker_running(tmp_path: Path) -> None:
    """SIGTERM during a layer's 720 orders: the run stops between results, the pool drops the queued
    orders, and no worker is left simulating after the harness has said it stopped (two were, at 61% CPU
    each, before the pool was left with cancel_futures)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    cmd = [sys.executable, "-m", "harness.cli", "permutations", "--layers", "quick-3x3", "--cache", "loki",
           "--time", "0", "--jobs", "2", "--results", str(tmp_path)]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while len(me.children(recursive=True)) < 3 and time.monotonic() < deadline:  # fork server + 2 workers
        time.sleep(0.2)
    workers = me.children(recursive=True)
    assert len(workers) >= 3, "the simulation workers never started"
    time.sleep(1.0)  # inside the layer's orders
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "stopped by SIGTERM" in err and "stopped where it was" not in err, err
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [p.cmdline()[:3] for p in alive]
    assert not list(tmp_path.glob("permutations/sim/*/*.parquet"))  # the unfinished layer is not stored


def test_a_report_of_simulations_alone_draws_their_figures(tmp_path: Path) -> None:
    """A results directory holding only permutation simulations (an archive of a Table 4.3 run unpacked
    alone) has no rows: its report still draws the simulations' figures, and no builder fails on the empty
    rows."""
    from harness import cachesim
    from harness.report import build_report

    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    layers = {"a": sizes, "b": {**sizes, "k": 8}}
    loki = [cachesim.load_config("loki")]
    permstudy.run_simulations(tmp_path, "permutations", layers, loki, say=lambda _m: None)
    html = build_report(tmp_path, tmp_path / "report").read_text()
    assert "figure builder" not in html  # "N figure builders failed"
    assert list((tmp_path / "report" / "figures").glob("*.png")), "no figure drawn from the simulations"
