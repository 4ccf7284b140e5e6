"""harness.search: the strategies behind one interface, seeded, budgeted and resumable, end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import analysis, store
from harness.check import CheckConfig
from harness.experiment import Experiment, run_experiment
from harness.sanity import SanityConfig
from harness.search import STRATEGIES, Problem, SearchConfig, SearchError, make_strategy
from harness.search.model import metric_for
from kernels.candidate import Candidate, Workload
from tests.conftest import FAST_TIMING, run_candidates

ROOT = Path(__file__).resolve().parent.parent
TARGET = "avx2"  # every x86 machine that runs AVX-512 runs AVX2 too: the same schemes everywhere
OPTIONS = {"target": TARGET, "hoist": True, "fma": True, "partial": "none"}
# 7 = 3 + 4 (λ_seq of the fallback microkernels) on w, small everything else: full checks are cheap
TINY = Workload.make("tiny", "conv2d", {"h": 4, "w": 7, "k": 24, "c": 8, "r": 3, "s": 3})
SPACE = {"name": "conv_test", "schemes": [], "baselines": [], "conv": {"combination": "both"}}


def problem(space: dict | None = None, workload: Workload = TINY) -> Problem:
    return Problem(workload, space or SPACE, TARGET, OPTIONS, [], None)


def test_search_config_validation() -> None:
    assert SearchConfig.from_config(None) is None
    assert SearchConfig.from_config({"strategy": None, "budget": None}) is None  # search=none
    cfg = SearchConfig.from_config({"strategy": "random", "budget": 5, "seed": 2})
    assert cfg is not None and (cfg.strategy, cfg.budget, cfg.seed) == ("random", 5, 2)
    bads = [
        ({"strategy": "annealing"}, "allowed"),
        ({"strategy": "random", "budget": 0}, "budget"),
        ({"strategy": "random", "bogus": 1}, "unknown"),
        ({"batch": 0}, "batch"),
        ({"confirm": -1}, "confirm"),
    ]
    for bad, match in bads:
        with pytest.raises(SearchError, match=match):
            SearchConfig.from_config(bad)
    with pytest.raises(ValueError, match="conv"):
        make_strategy(problem({"name": "quick_matmul", "schemes": []}), SearchConfig("random", 3))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_is_seeded_and_proposes_legal_distinct_schemes(name: str) -> None:
    from harness.search._conv import conv_context

    ctx = conv_context(problem())

    def run(seed: int) -> list[str]:
        strat = make_strategy(problem(), SearchConfig(name, 6, seed))
        out = []
        for _ in range(6):
            got = strat.ask(1)
            if not got:
                break
            out += [c.text for c in got]
            for c in got:
                strat.tell(c, float(len(c.text) % 50))  # a deterministic fake performance
        return out

    first = run(1)
    assert first and len(first) == len(set(first))
    assert all(ctx.legal(t) for t in first)
    assert run(1) == first  # seeded: the same sequence again (what resuming relies on)


def test_model_filter_proposes_the_best_metric_first() -> None:
    strat = make_strategy(problem(), SearchConfig("model", 5, 0, params={"pool": 60}))
    got = strat.ask(60)
    scores = [metric_for(strat.problem, c.text) for c in got]
    assert scores == sorted(scores) and len(got) == len({c.key for c in got})


@pytest.mark.parametrize("name", ["random", "levels"])
def test_the_model_prior_proposes_the_best_metric_of_each_k_uniform_draws(name: str) -> None:
    """model_prior k: proposal i is the lowest-metric one of the uniform draws i*k .. i*k + k - 1 of the
    same seed (the first of equal scores), so the prior leans on the model and stays seeded."""
    k, n = 4, 6
    larger = problem(
        workload=Workload.make("l1x", "conv2d", {"h": 14, "w": 14, "k": 64, "c": 64, "r": 3, "s": 3})
    )
    uniform = make_strategy(larger, SearchConfig(name, k * n, 3)).ask(k * n)
    prior = make_strategy(larger, SearchConfig(name, n, 3, params={"model_prior": k})).ask(n)
    score = {c.key: metric_for(larger, c.text) for c in uniform}  # its input (64 KiB) overflows the L1
    groups = [uniform[i * k : (i + 1) * k] for i in range(n)]
    assert [c.key for c in prior] == [min(g, key=lambda c: score[c.key]).key for g in groups]
    assert len({score[c.key] for c in uniform}) > n  # the metric tells these draws apart: the test can fail
    for bad, match in [({"model_prior": 0}, "model_prior"), ({"model_prior": "8"}, "model_prior"),
                       ({"pool": 8}, "unknown")]:  # fmt: skip
        with pytest.raises(SearchError, match=match):
            make_strategy(problem(), SearchConfig(name, 5, 0, params=bad))


def test_tree_search_keeps_the_accumulators_over_the_reduction_and_takes_plans_in_turn() -> None:
    """The register level: right above the microkernel a reduction tile (c, r or s), never h, w or k, which
    would reload every accumulator per FMA step; and the plans' best candidates come first, one per plan."""
    two_plans = Workload.make("tiny12", "conv2d", {"h": 4, "w": 12, "k": 16, "c": 8, "r": 3, "s": 3})
    strat = make_strategy(problem(workload=two_plans), SearchConfig("tree", 40, 0))
    assert len(strat.ctx.plans) == 2
    texts = [c.text for c in strat.ask(40)]
    assert texts

    def split(text: str) -> tuple[list[str], str]:
        atoms = text.strip("[]").split(", ")
        first_u = next(i for i, a in enumerate(atoms) if a.startswith("U"))
        plan = ", ".join(a for a in atoms if a.startswith(("U", "V", "λ_seq")))
        return atoms[:first_u], plan

    for t in texts:
        above, _ = split(t)
        assert above and re.fullmatch(r"T_\{\d+,[crs]\}", above[-1]), t
    plans = [split(t)[1] for t in texts]
    n = len(set(plans))
    assert n > 1 and len(set(plans[:n])) == n  # every plan before any plan's second


def _experiment(
    tmp_path: Path, cache: Path, strategy: str, budget: int, space: dict | None = None
) -> Experiment:
    return Experiment(
        f"search_{strategy}", TINY, [], timing=FAST_TIMING, check=CheckConfig(), results_dir=tmp_path,
        cache_root=cache, search=SearchConfig(strategy, budget, seed=4, batch=3), space=space or SPACE,
        target=TARGET, base_options=OPTIONS, sanity=SanityConfig(probe=False),
    )  # fmt: skip


def test_random_search_end_to_end_checked_recorded_and_resumed(tmp_path: Path, shared_cache: Path) -> None:
    rows = run_experiment(_experiment(tmp_path, shared_cache, "random", 2), progress=lambda _m: None)
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert all(r["check_mode"] == "full" and r["check_passed"] for r in rows)
    assert [r["search_index"] for r in rows] == [0, 1]
    assert {(r["search_strategy"], r["search_budget"], r["search_seed"]) for r in rows} == {("random", 2, 4)}
    msgs: list[str] = []
    more = run_experiment(_experiment(tmp_path, shared_cache, "random", 3), progress=msgs.append)
    assert len(more) == 1 and more[0]["search_index"] == 2  # the first two were found in the store
    assert any("2 candidate(s) of the random search already measured" in m for m in msgs)
    stored = store.load(tmp_path, "search_random")
    assert sorted(stored["search_index"].tolist()) == [0, 1, 2]


def test_a_search_resumed_from_another_space_stops_at_its_first_draw_that_differs(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The space a search draws from holds this machine's microkernel selection, which is measured: a new VM
    measures it again and, on a noisy host, may select other microkernels, and the same seed then draws
    other schemes. A resumed search proposing another candidate than the stored one at a draw index stops
    before measuring it and says why (the rows carry the selection's hash); the same selection resumes. Rows
    without the hash (older) and another space configuration stop it too, with the general reason."""
    from harness import experiment as exp_mod
    from harness.selection import selection_digest

    first, second = [{"w": 3, "k": 3}, {"w": 4, "k": 3}], [{"w": 7, "k": 3}]
    digest = selection_digest(first)
    assert digest and digest != selection_digest(second)
    monkeypatch.setattr(exp_mod, "_selected_microkernels", lambda exp, m: first)
    rows = run_experiment(_experiment(tmp_path, shared_cache, "random", 2), progress=lambda _m: None)
    assert {r["search_selection"] for r in rows} == {digest}
    more = run_experiment(_experiment(tmp_path, shared_cache, "random", 3), progress=lambda _m: None)
    assert [r["search_index"] for r in more] == [2]  # the same selection: resumed
    monkeypatch.setattr(exp_mod, "_selected_microkernels", lambda exp, m: second)
    with pytest.raises(SearchError, match=rf"draw 0 of the stored random search .*selection {digest}"):
        run_experiment(_experiment(tmp_path, shared_cache, "random", 4), progress=lambda _m: None)
    assert len(store.load(tmp_path, "search_random")) == 3  # nothing measured from the other space

    older = tmp_path / "older"  # no selection (the fallback set): rows with a null hash
    monkeypatch.setattr(exp_mod, "_selected_microkernels", lambda exp, m: None)
    run_experiment(_experiment(older, shared_cache, "random", 2), progress=lambda _m: None)
    assert store.load(older, "search_random")["search_selection"].isna().all()
    single = {**SPACE, "conv": {"combination": "single", "partial": "masked"}}
    with pytest.raises(SearchError, match="draw 0 .*the space they were drawn from differs"):
        run_experiment(_experiment(older, shared_cache, "random", 3, single), progress=lambda _m: None)


def test_racing_times_only_the_candidates_near_the_best_in_full(tmp_path: Path, shared_cache: Path) -> None:
    """timing.race: a draw whose first two calls are both slower than race x the best median found before
    it stops there and is flagged; every other draw gets all its calls. A search without racing would
    time every draw 5 times (the check below fails if the driver ignores the threshold)."""
    race = 1.01  # tiny layer, microseconds per call: most draws after the first are slower than the best
    exp = _experiment(tmp_path, shared_cache, "random", 8)
    exp.timing = dataclasses.replace(FAST_TIMING, warmup=1, min_reps=5, max_reps=5, race=race)
    rows = run_experiment(exp, progress=lambda _m: None)
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    best, n_raced = None, 0
    for r in sorted(rows, key=lambda r: r["search_index"]):
        raced = any(f.startswith("raced") for f in json.loads(r["flags"]))
        first_two = min(r["times_ns"][:2])
        if raced:
            n_raced += 1
            assert best is not None and r["n_reps"] == 2 and first_two > race * best
        else:
            assert r["n_reps"] == 5 and (best is None or first_two <= race * best)
            best = r["median_ns"] if best is None else min(best, r["median_ns"])
    assert n_raced > 0, "no draw was raced"


def test_racing_needs_a_search(tmp_path: Path, shared_cache: Path) -> None:
    exp = _experiment(tmp_path, shared_cache, "random", 2)
    exp.search = None
    exp.timing = dataclasses.replace(FAST_TIMING, race=1.5)
    with pytest.raises(ValueError, match="timing.race"):
        run_experiment(exp, progress=lambda _m: None)


def test_search_rounds_retime_the_best_found_and_the_baselines(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """search.confirm=2 with timing.rounds=3: the two best of the search (by their first pass) and the
    library baseline get two more interleaved rounds; the other draws keep one. Each kernel runs at a
    steady speed of its own (1000, 1100, ... ns in the order first run): on a busy host a confirmed draw
    can fall behind one timed once, which is then confirmed too (the next test), and all four may be."""
    from harness import experiment as exp_mod

    real, speed = exp_mod.run_kernel, {}

    def run(so_path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        res = real(so_path, *args, **kwargs)
        t = speed.setdefault(str(so_path), 1000.0 + 100 * len(speed))
        return dataclasses.replace(res, times_ns=[t] * len(res.times_ns))

    monkeypatch.setattr(exp_mod, "run_kernel", run)
    space = {**SPACE, "library_baselines": ["onednn"]}
    e = _experiment(tmp_path, shared_cache, "random", 4, space)
    e.search = dataclasses.replace(e.search, confirm=2)
    e.timing = dataclasses.replace(e.timing, rounds=3)
    msgs: list[str] = []
    run_experiment(e, progress=msgs.append)
    stored = store.load(tmp_path, "search_random")
    ok = stored[stored["status"] == "ok"]
    drawn = ok[ok["candidate_kind"] == "scheme"].copy()
    assert len(drawn) == 4, stored[["candidate_text", "status", "reason"]]
    drawn["rounds"] = [len(r) for r in drawn["round_medians_ns"]]
    drawn["first"] = [r[0] for r in drawn["round_medians_ns"]]
    assert set(drawn["rounds"]) <= {1, 3} and (drawn["rounds"] == 1).any()
    # the two fastest of the first pass are confirmed (more if they ran slower in their rounds than a
    # draw timed once: then it is confirmed too), and so is the best by median
    confirmed = set(drawn[drawn["rounds"] == 3]["candidate_key"])
    assert set(drawn.nsmallest(2, "first")["candidate_key"]) <= confirmed
    assert drawn.loc[drawn["median_ns"].idxmin(), "rounds"] == 3
    lib = stored[stored["candidate_kind"] == "baseline"]
    assert len(lib) == 1
    if lib["status"].iloc[0] == "ok":  # oneDNN is installed by the project's setup; elsewhere unsupported
        assert len(lib["round_medians_ns"].iloc[0]) == 3
    assert any("round 3/3" in m for m in msgs)


def test_a_draw_that_overtakes_the_confirmed_best_is_confirmed_too(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Draws time 1000, 1100, 1200, 1300 ns; the first, confirmed, runs 5000 ns in its second round and
    falls behind the second draw, timed once: a second confirmation pass times that one, and stops."""
    from harness import experiment as exp_mod

    real, calls = exp_mod.run_kernel, []
    times = [1000.0, 1100.0, 1200.0, 1300.0, 5000.0, 1100.0, 1.0, 1.0]

    def run(*args, **kwargs):
        res = real(*args, **kwargs)
        calls.append(1)
        return dataclasses.replace(res, times_ns=[times[len(calls) - 1]] * len(res.times_ns))

    monkeypatch.setattr(exp_mod, "run_kernel", run)
    e = _experiment(tmp_path, shared_cache, "random", 4)
    e.search = dataclasses.replace(e.search, confirm=1)
    e.timing = dataclasses.replace(e.timing, rounds=2)
    msgs: list[str] = []
    run_experiment(e, progress=msgs.append)
    assert len(calls) == 6
    assert any("confirming again (2/3)" in m for m in msgs)
    drawn = store.load(tmp_path, "search_random").set_index("search_index")["round_medians_ns"]
    assert [list(drawn[i]) for i in range(4)] == [[1000.0, 5000.0], [1100.0, 1100.0], [1200.0], [1300.0]]


def test_confirm_within_confirms_the_best_of_the_first_draws_too(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Draws time 1200, 1300, 1000, 1400 ns: search.confirm=1 alone confirms only the third (the best
    found); confirm_within=[2] also confirms the first, the best of the first two draws (a "best of 2"
    a figure would report), and nothing else."""
    from harness import experiment as exp_mod

    real, calls = exp_mod.run_kernel, []
    times = [1200.0, 1300.0, 1000.0, 1400.0]

    def run(*args, **kwargs):
        res = real(*args, **kwargs)
        calls.append(1)
        t = times[len(calls) - 1] if len(calls) <= len(times) else 1100.0
        return dataclasses.replace(res, times_ns=[t] * len(res.times_ns))

    monkeypatch.setattr(exp_mod, "run_kernel", run)
    e = _experiment(tmp_path, shared_cache, "random", 4)
    e.search = dataclasses.replace(e.search, confirm=1, confirm_within=(2,))
    e.timing = dataclasses.replace(e.timing, rounds=2)
    run_experiment(e, progress=lambda _m: None)
    assert len(calls) == 6
    drawn = store.load(tmp_path, "search_random").set_index("search_index")["round_medians_ns"]
    assert [len(drawn[i]) for i in range(4)] == [2, 1, 2, 1]


def test_confirm_within_is_validated() -> None:
    assert SearchConfig.from_config({"strategy": "random", "confirm_within": [1000, 100]}).confirm_within == (
        100,
        1000,
    )
    for bad in ([0], ["100"], 100, [True]):
        with pytest.raises(SearchError, match="confirm_within"):
            SearchConfig.from_config({"strategy": "random", "confirm_within": bad})


def test_a_growing_search_retimes_the_baselines_beside_each_confirmation(
    tmp_path: Path, shared_cache: Path
) -> None:
    """Resuming a confirmed search to a larger budget confirms the new draws and times the baseline again
    in the same passes (its rounds grow from 2 to 3), every round with its time, so the new draws are
    paired with the baseline's rounds of their own minutes; draws confirmed before are left alone."""
    space = {**SPACE, "library_baselines": ["onednn"]}

    def run(budget: int) -> pd.DataFrame:
        e = _experiment(tmp_path, shared_cache, "random", budget, space)
        e.search = dataclasses.replace(e.search, confirm=10)  # every draw is among the best 10
        e.timing = dataclasses.replace(e.timing, rounds=2)
        run_experiment(e, progress=lambda _m: None)
        return store.load(tmp_path, "search_random").set_index("candidate_key")

    first = run(2)
    lib_key = first.index[first["candidate_kind"] == "baseline"][0]
    if first.loc[lib_key, "status"] != "ok":
        pytest.skip("oneDNN is not installed here (the project's setup installs it)")
    assert len(first.loc[lib_key, "round_medians_ns"]) == 2
    second = run(3)
    new = second.index.difference(first.index)
    assert len(new) == 1
    lib = second.loc[lib_key]
    assert len(lib["round_medians_ns"]) == 3 and len(lib["round_times"]) == 3
    assert list(lib["round_times"][:2]) == list(first.loc[lib_key, "round_times"])
    for key in first.index.drop(lib_key):  # confirmed in the first run: untouched
        assert list(second.loc[key, "round_medians_ns"]) == list(first.loc[key, "round_medians_ns"])
    drawn = second.loc[new[0]]
    assert len(drawn["round_medians_ns"]) == 2
    # the new draw's second round pairs with the baseline's third (same pass), not its second
    when = pd.to_datetime(pd.Series([*drawn["round_times"], *lib["round_times"]]), format="ISO8601")
    assert abs(when[1] - when[4]) < abs(when[1] - when[3])
    assert not np.isnan(
        analysis.round_ratio(
            drawn["round_medians_ns"], lib["round_medians_ns"], drawn["round_times"], lib["round_times"]
        )[0]
    )


SPACE_VARIANTS = {
    "all": {"combination": "both"},
    "single_masked": {"combination": "single", "partial": "masked"},
    "lambda": {"combination": "lambda"},
    "free": {"divisibility": "free"},
    "fixed": {"permutation": "fixed"},
    "packed": {"packing": "any"},
    "parallel": {"parallel": 2},  # Tpar (OpenMP), run here on one thread: the check is what matters
}


def test_every_sampler_in_every_space_passes_the_full_check(tmp_path: Path, shared_cache: Path) -> None:
    """A draw in each space variant (both samplers), compiled together and checked on every output point."""
    import random

    from harness.search._conv import candidate, conv_context
    from kernels.conv_space import draw

    cands = []
    for i, conv in enumerate(SPACE_VARIANTS.values()):
        ctx = conv_context(problem({**SPACE, "conv": conv}))
        sampler = ("random", "levels")[i % 2]  # each sampler in three spaces (compiling all 12 is slow)
        text, _ = draw(ctx, sampler, random.Random(i))
        cands.append(candidate(problem(), ctx, text))
    rows = run_candidates(cands, TINY, tmp_path, shared_cache, check=CheckConfig(full_below=10**6))
    assert len(rows) == len(cands) == len(SPACE_VARIANTS)
    bad = [(r["label"], r["status"], r["reason"]) for r in rows if r["status"] != "ok"]
    assert not bad
    assert all(r["check_mode"] == "full" for r in rows)
    assert any("partial=masked" in r["label"] for r in rows) and any("Pack_" in r["label"] for r in rows)
    assert any(r["label"].startswith("[Tpar_{2,") for r in rows)


@pytest.mark.slow
def test_optuna_and_levels_free_space_end_to_end(tmp_path: Path, shared_cache: Path) -> None:
    rows = run_experiment(_experiment(tmp_path, shared_cache, "optuna", 2), progress=lambda _m: None)
    free = {**SPACE, "conv": {"divisibility": "free", "combination": "both"}}
    rows += run_experiment(_experiment(tmp_path, shared_cache, "levels", 2, free), progress=lambda _m: None)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert any("Tvar" in r["candidate_text"] or "R_" in r["candidate_text"] for r in rows[2:])


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip


def test_cli_bad_search_input_is_one_line_exit_2() -> None:
    r = _harness("run", "workload=yolo9000_18_small", "space=conv_all", "search=random", "search.budget=0")
    assert r.returncode == 2 and "search.budget" in r.stderr and r.stderr.strip().count("\n") == 0


def test_a_conv_search_without_this_machines_selection_says_it_uses_the_fallback(tmp_path: Path) -> None:
    """The space asks for the selected microkernels; with none stored a run says so (and how to select)."""
    from harness import machine as machine_mod
    from harness.experiment import _falls_back
    from harness.selection import selection_path
    from kernels.microkernels import make_conv

    exp = _experiment(tmp_path, tmp_path / "cache", "random", 1)
    m = machine_mod.detect()
    assert _falls_back(exp, m)
    forced = _experiment(
        tmp_path, tmp_path / "cache", "random", 1, {**SPACE, "conv": {"microkernels": "forced"}}
    )
    assert not _falls_back(forced, m)
    path = selection_path(exp.cache_dir, m.fingerprint, TARGET)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"selected": [make_conv(TARGET, w=3, k=4).to_dict()]}))
    assert not _falls_back(exp, m)


def test_a_search_with_embedded_broadcasts_reads_the_selection_measured_with_them(tmp_path: Path) -> None:
    """codegen.broadcast=embedded fits other register tiles: its selection is a file of its own, and a
    search with that option reads it (and only it)."""
    import dataclasses

    from harness import machine as machine_mod
    from harness.experiment import _falls_back, _selected_microkernels
    from harness.selection import selection_path
    from kernels.microkernels import make_conv

    m = machine_mod.detect()
    plain = _experiment(tmp_path, tmp_path / "cache", "random", 1)
    embedded = dataclasses.replace(plain, base_options={**OPTIONS, "broadcast": "embedded"})
    path = selection_path(plain.cache_dir, m.fingerprint, TARGET, "conv2d", "embedded")
    assert path.name == f"microkernels-{m.fingerprint}-{TARGET}-conv2d-embedded.json"
    assert path != selection_path(plain.cache_dir, m.fingerprint, TARGET)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"selected": [make_conv(TARGET, w=7, k=4).to_dict()]}))
    assert _selected_microkernels(embedded, m) == [dict(make_conv(TARGET, w=7, k=4).size)]
    assert not _falls_back(embedded, m)
    assert _selected_microkernels(plain, m) is None and _falls_back(plain, m)


# -- refine: random draws, then mutations of the best -------------------------------------------------------
PRIORS = {"combination": "both", "reduction_inner": 0.5, "pack_weights": 0.5}
TWO_PLANS = Workload.make("tiny12", "conv2d", {"h": 4, "w": 12, "k": 16, "c": 8, "r": 3, "s": 3})


def test_refine_params_are_validated() -> None:
    bads = [({"bogus": 1}, "unknown"), ({"sampler": "tree"}, "sampler"), ({"explore": -1}, "explore"),
            ({"top": 0}, "top"), ({"restart": 2}, "restart"), ({"mutations": ["grow"]}, "mutations"),
            ({"mutations": "tile"}, "mutations"), ({"mutations": []}, "mutations")]  # fmt: skip
    for params, match in bads:
        with pytest.raises(SearchError, match=match):
            make_strategy(problem(), SearchConfig("refine", 5, 0, params=params))


@pytest.mark.parametrize("conv", [PRIORS, *SPACE_VARIANTS.values()], ids=["priors", *SPACE_VARIANTS])
def test_every_mutation_keeps_the_scheme_legal_and_in_its_space(conv: dict) -> None:
    """Each mutation of many draws: legal when it applies (the strategy also checks; here the operators
    themselves are held to it), reordering only where the space searches permutations, packing only where
    it packs; and over the draws each mutation the space allows applies at least once."""
    import random

    from harness.search import refine
    from harness.search._conv import conv_context
    from kernels.conv_space import draw

    ctx = conv_context(problem({**SPACE, "conv": conv}, workload=TWO_PLANS))
    rng = random.Random(0)
    applied: set[str] = set()
    for _ in range(30):
        text, plan = draw(ctx, "random", rng)
        nest = refine.Nest.of(text, plan)
        assert nest.text() == text  # the cut loses nothing
        for name, op in refine.mutations(ctx, list(refine.MUTATIONS)).items():
            child = op(ctx, nest, rng)
            if child is None or (child := refine.refixed(ctx, child)) is None:
                continue
            applied.add(name)
            assert ctx.legal(child.text()), (name, text, child.text())
            if ctx.space.permutation == "fixed":  # a fixed order stays the fixed order
                assert refine.refixed(ctx, child) == child
    allowed = set(refine.mutations(ctx, list(refine.MUTATIONS)))
    assert ("pack" in allowed) == bool(conv.get("pack_weights"))
    assert set(refine.mutations(ctx)) == allowed - {"tile", "reduce"}  # the directed ones: when asked
    if conv.get("permutation") == "fixed":
        assert not {"swap", "move", "split", "reduce"} & allowed
    # drawn plans kept there
    kept = {"plan", "tile"} if conv.get("parallel") or conv.get("divisibility") else set()
    never = allowed - applied - kept
    assert not never, never


def test_tile_mutation_draws_register_tiles_uniformly_and_reduce_puts_c_r_s_innermost() -> None:
    """On the AVX2 stem (λ_seq remainders on) the 3 x 4-vector tile is 2 of 98 plans: ``plan`` reaches it
    about once in 50 mutations, ``tile`` about once in as many as there are tiles. ``reduce`` leaves the
    innermost c, r and s loops right above the microkernel, the other loops in their order."""
    import random
    from collections import Counter

    from harness.search import refine
    from kernels import conv_space as cs

    layer = next(x for x in cs.load_layers() if x.name == "yolo9000_00")
    w = Workload.make(layer.name, "conv2d", layer.sizes)
    space = cs.ConvSpace(microkernels="all", lambda_remainder=True, reduction_inner=0.5)
    ctx = cs.context(space, w, "avx2", None)
    tiles = {refine.tile_of(p) for p in ctx.plans}
    four = [p for p in ctx.plans if p.size["k"] == 4]
    assert len(ctx.plans) > 5 * len(tiles) and 0 < len(four) <= 2
    rng = random.Random(3)
    text, plan = cs.draw(ctx, "random", rng)
    while plan.size["k"] == 4 or not plan.single:
        text, plan = cs.draw(ctx, "random", rng)
    nest = refine.Nest.of(text, plan)
    hits: Counter[str] = Counter()
    n = 600
    for name in ("plan", "tile"):
        for _ in range(n):
            child = refine.MUTATIONS[name](ctx, nest, rng)
            assert child is not None and ctx.legal(child.text())
            hits[name] += child.plan.size["k"] == 4
    assert hits["plan"] < 0.05 * n  # 2 of 97 other plans
    k4 = {refine.tile_of(p) for p in four}  # (each 3 x 4 plan pairs it with another remainder: 2 tiles)
    assert hits["tile"] > 0.5 * n * len(k4) / (len(tiles) - 1)
    child = refine.MUTATIONS["reduce"](ctx, nest, rng)
    assert child is not None and ctx.legal(child.text())
    dims = [a.dim for a in child.outer if a.kind in refine.LOOPS]
    assert set(dims[-3:]) == {"c", "r", "s"}
    rest = [a for a in child.outer if a not in child.outer[-3:]]
    assert rest == [a for a in nest.outer if a in rest]  # the others keep their order


def test_refine_shares_the_random_draws_then_mutates_only_the_best(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ``explore`` proposals are search=random's with the same seed; after them every proposal
    (restart=0, top=1) is a legal, new mutation of the best measured so far, which moves when a child wins."""
    from harness.search import refine
    from harness.search._conv import conv_context

    prob = problem({**SPACE, "conv": PRIORS}, workload=TWO_PLANS)
    rnd = [c.text for c in make_strategy(prob, SearchConfig("random", 6, 3)).ask(6)]
    strat = make_strategy(prob, SearchConfig("refine", 20, 3, params={"explore": 6, "top": 1, "restart": 0}))
    first = strat.ask(6)
    assert [c.text for c in first] == rnd
    best = first[2]
    for c in first:
        strat.tell(c, 90.0 if c is best else 10.0)
    parents: list[str] = []
    real = refine.mutate
    monkeypatch.setattr(
        refine, "mutate", lambda ctx, text, *a, **k: parents.append(text) or real(ctx, text, *a, **k)
    )
    ctx = conv_context(prob)
    seen = {c.key for c in first}
    for _ in range(3):
        kids = strat.ask(2)
        assert len(kids) == 2 and all(ctx.legal(k.text) and k.key not in seen for k in kids)
        seen |= {k.key for k in kids}
        for k in kids:
            strat.tell(k, 5.0)
    assert set(parents) == {best.text}
    winner = strat.ask(1)[0]
    strat.tell(winner, 95.0)  # a child better than its parent is the next parent
    strat.ask(1)
    assert parents[-1] == winner.text


def test_the_plan_of_a_drawn_scheme_is_read_back_from_its_text() -> None:
    """refine's seeds come as texts (another search's winners): their plan, microkernel and λ_seq cover, is
    the one they were drawn on; a scheme of no plan of the space has none."""
    import random

    from harness.search import refine
    from harness.search._conv import conv_context
    from kernels.conv_space import draw

    for conv in (PRIORS, {**PRIORS, "partial": "masked", "lambda_remainder": True}):
        ctx = conv_context(problem({**SPACE, "conv": conv}, workload=TWO_PLANS))
        rng = random.Random(1)
        for _ in range(40):
            text, plan = draw(ctx, "random", rng)
            assert refine.plan_of(ctx, text) == plan, text
    ctx = conv_context(problem({**SPACE, "conv": PRIORS}, workload=TWO_PLANS))
    assert refine.plan_of(ctx, "[R_h, R_w, R_k, R_c, R_r, R_s, U_{16,k}, V_k]") is None


def test_a_scheme_of_another_microkernel_set_keeps_the_plan_its_text_spells() -> None:
    """Seeds from another machine (space.best_of.machine) were drawn on its microkernel selection: plan_of
    reads their plan from the text itself (unrolls, λ_seq cover, partial dimensions) when no plan of this
    space's set fits, so a refinement here can start from them."""
    import random

    from harness.search import refine
    from harness.search._conv import conv_context
    from kernels.conv_space import draw

    conv = {**PRIORS, "partial": "masked", "lambda_remainder": True}
    wide = conv_context(problem({**SPACE, "conv": {**conv, "microkernels": "all"}}, workload=TWO_PLANS))
    forced = {**conv, "microkernels": "forced", "forced": ["U_{1,w}, U_{1,k}, V_k"]}
    few = conv_context(problem({**SPACE, "conv": forced}, workload=TWO_PLANS))
    rng = random.Random(3)
    foreign = 0
    for _ in range(60):
        text, plan = draw(wide, "random", rng)
        foreign += plan not in few.plans
        assert refine.plan_of(few, text) == plan, text
    assert foreign > 20  # most of the draws are of plans the small set does not have
    assert refine.plan_of(few, "[R_h, R_w, R_k, R_c, R_r, R_s, U_{16,k}, V_k]") is None


def test_the_pack_mutation_places_the_panels_where_the_draws_do() -> None:
    """With constant_weights the draws pack the whole weights outermost and keep them (constant=K): the
    pack mutation does the same, so a refined scheme is not charged a copy per call that the draws'
    schemes do not pay; without it, above the outermost h or w loop."""
    import random

    from harness.search import refine
    from harness.search._conv import candidate, conv_context
    from kernels.conv_space import draw
    from kernels.scheme import parse_scheme

    for kept in (True, False):
        prob = problem({**SPACE, "conv": {**PRIORS, "constant_weights": kept}}, workload=TWO_PLANS)
        ctx = conv_context(prob)
        rng = random.Random(2)
        packed = 0
        for _ in range(30):
            text, plan = draw(ctx, "random", rng)
            if "PackT" in text:
                continue
            child = refine.MUTATIONS["pack"](ctx, refine.Nest.of(text, plan), rng)
            if child is None:
                continue
            atoms = parse_scheme(child.text())
            at = next(i for i, a in enumerate(atoms) if a.kind == "PackT")
            if kept:
                assert at == 0 and dict(candidate(prob, ctx, child.text()).options).get("constant") == "K"
            else:
                assert atoms[at + 1].dim in ("h", "w") and all(a.dim not in ("h", "w") for a in atoms[:at])
            packed += 1
        assert packed > 5


def test_refine_from_seeds_measures_them_first_then_mutates_the_best() -> None:
    """params.seeds: the space's schemes (another search's winners, through space.best_of) are the first
    proposals, with their own options; with explore 0 every proposal after them mutates the best."""
    import random

    from harness.search._conv import conv_context
    from kernels.conv_space import draw

    base = problem({**SPACE, "conv": PRIORS}, workload=TWO_PLANS)
    ctx = conv_context(base)
    rng = random.Random(7)
    texts = list(dict.fromkeys(draw(ctx, "random", rng)[0] for _ in range(3)))
    seeds = [Candidate("scheme", t, tuple(sorted({**OPTIONS, "seeded": 1}.items()))) for t in texts]
    lib = Candidate("baseline", "onednn")
    prob = Problem(TWO_PLANS, base.space, TARGET, OPTIONS, [lib, *seeds], None)
    params = {"seeds": True, "explore": 0, "top": 1, "restart": 0}
    strat = make_strategy(prob, SearchConfig("refine", 20, 3, params=params))
    first = strat.ask(len(seeds))
    assert first == seeds  # the very candidates, options and all
    for n, c in enumerate(first):
        strat.tell(c, 90.0 if n == 1 else 10.0)
    kids = strat.ask(4)
    assert len(kids) == 4 and not {k.key for k in kids} & {s.key for s in seeds}
    assert all(ctx.legal(k.text) for k in kids)
    with pytest.raises(SearchError, match="seeds"):
        make_strategy(base, SearchConfig("refine", 5, 0, params={"seeds": True}))  # nothing to start from
    with pytest.raises(SearchError, match="seeds"):
        make_strategy(base, SearchConfig("refine", 5, 0, params={"seeds": "yes"}))


def test_transfer_maps_another_workloads_scheme_onto_this_one() -> None:
    """space.transfer_from: a scheme drawn for one layer, on another layer of the space: the same register
    tile (suffix), its loops' order kept (each dimension's loops where they were), legal there; a scheme
    whose tile no plan of the space has maps to nothing."""
    import random

    from harness.search import refine
    from harness.search._conv import conv_context
    from kernels.conv_space import draw
    from kernels.scheme import parse_scheme

    src = conv_context(problem({**SPACE, "conv": PRIORS}, workload=TWO_PLANS))
    big = Workload.make("big24", "conv2d", {"h": 8, "w": 24, "k": 32, "c": 16, "r": 3, "s": 3})
    dst = conv_context(problem({**SPACE, "conv": PRIORS}, workload=big))
    rng = random.Random(3)
    mapped = 0
    for _ in range(30):
        text, plan = draw(src, "random", rng)
        got = refine.transfer(dst, text, rng)
        if got is None:
            continue
        out, new = got
        assert dst.legal(out) and new.suffix() == plan.suffix() and new in dst.plans
        # each dimension's innermost loop keeps its place among the others (outer levels may merge away)
        first = list(dict.fromkeys(a.dim for a in reversed(parse_scheme(text)) if a.kind in refine.LOOPS))
        then = list(dict.fromkeys(a.dim for a in reversed(parse_scheme(out)) if a.kind in refine.LOOPS))
        assert [d for d in first if d in then] == [d for d in then if d in first], (text, out)
        mapped += 1
    assert mapped >= 20
    assert refine.transfer(dst, "[R_h, R_k, R_c, R_r, R_s, U_{9,w}, U_{2,k}, V_k]", rng) is None


def test_refine_starts_from_the_transferred_schemes_and_says_when_none_fits() -> None:
    """The mapped schemes of other layers are the first proposals (counted in the budget), then draws."""
    import random

    from harness.search._conv import conv_context
    from kernels.conv_space import draw

    src = conv_context(problem({**SPACE, "conv": PRIORS}, workload=TWO_PLANS))
    rng = random.Random(5)
    texts = list(dict.fromkeys(draw(src, "random", rng)[0] for _ in range(4)))
    big = Workload.make("big24", "conv2d", {"h": 8, "w": 24, "k": 32, "c": 16, "r": 3, "s": 3})
    base = problem({**SPACE, "conv": PRIORS}, workload=big)
    prob = dataclasses.replace(base, transfer=texts)
    strat = make_strategy(prob, SearchConfig("refine", 20, 3, params={"explore": 2}))
    n = strat.n_seeds
    assert 1 <= n <= len(texts)
    first = strat.ask(n + 2)
    assert first[:n] == strat_seeds(prob) and len({c.key for c in first}) == n + 2
    foreign = dataclasses.replace(base, transfer=["[R_h, R_k, R_c, R_r, R_s, U_{9,w}, U_{2,k}, V_k]"])
    with pytest.raises(SearchError, match="none of the 1 schemes of the other workloads"):
        make_strategy(foreign, SearchConfig("refine", 5, 0))


def strat_seeds(prob: Problem) -> list[Candidate]:
    """The candidates a fresh refine strategy on ``prob`` starts from (the same seed: the same mapping)."""
    return list(make_strategy(prob, SearchConfig("refine", 20, 3, params={"explore": 2})).seeds)


def test_refine_end_to_end_checked_and_resumed(tmp_path: Path, shared_cache: Path) -> None:
    exp = _experiment(tmp_path, shared_cache, "refine", 4)
    exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search, params={"explore": 2}))
    rows = run_experiment(exp, progress=lambda _m: None)
    assert len(rows) == 4 and all(r["status"] == "ok" and r["check_passed"] for r in rows), rows
    assert {r["search_strategy"] for r in rows} == {"refine"}
    more = run_experiment(dataclasses.replace(exp, search=dataclasses.replace(exp.search, budget=5)),
                          progress=lambda _m: None)  # fmt: skip
    assert len(more) == 1 and more[0]["search_index"] == 4  # the same four again from the store, one new


def test_a_new_plan_repanels_the_packed_weights() -> None:
    """The weights' panels are the microkernel's k: a plan mutation under PackT_K changes them with it (the
    panel rule is checked only when the code is generated, so the mutation itself must keep it)."""
    from harness.search import refine
    from harness.search._conv import conv_context
    from kernels.codegen import analyze_for, generate
    from kernels.targets import get_target

    wl = Workload.make("tiny6", "conv2d", {"h": 4, "w": 6, "k": 32, "c": 8, "r": 3, "s": 3})
    ctx = conv_context(problem({**SPACE, "conv": PRIORS}, workload=wl))
    a, b = ctx.plans
    assert a.footprint("k", ctx.lanes) != b.footprint("k", ctx.lanes)
    text = (
        f"[T_{{4,h}}, PackT_K[k/{a.footprint('k', ctx.lanes)},r,s,c,k], "
        + ", ".join(
            [f"T_{{{n},{d}}}" for d, n in ctx.remaining(a).items() if n > 1 and d != "h"] + a.suffix()
        )
        + "]"
    )
    assert ctx.legal(text)
    import random

    rng = random.Random(0)
    kids = {refine._plan(ctx, refine.Nest.of(text, a), rng).text() for _ in range(5)}
    for kid in kids:
        assert f"k/{b.footprint('k', ctx.lanes)}," in kid
        generate(analyze_for(kid, wl, get_target(TARGET)), wl, get_target(TARGET))


def test_a_resumed_refine_proposes_what_it_proposed_though_rounds_changed_the_ranking(
    tmp_path: Path, shared_cache: Path
) -> None:
    """Confirmation rounds pool later rounds into a row's median; a resumed adaptive search is told the
    first round, as when it proposed, so it proposes the same candidates again and measures nothing."""
    exp = _experiment(tmp_path, shared_cache, "refine", 6)
    exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search, params={"explore": 3, "top": 1,
                                                                                 "restart": 0}))  # fmt: skip
    rows = run_experiment(exp, progress=lambda _m: None)
    assert len(rows) == 6
    first = [r for r in rows if r["search_index"] < 3]
    best = max(first, key=lambda r: r["pct_peak_median"])
    # a second round 100x slower than the slowest draw for the best of the draws: its pooled median falls
    # last (a factor of the best's own time did not: a draw 6x faster than the rest stayed first)
    slowest = max(r["round_medians_ns"][0] for r in first)
    for r in first:
        medians = [r["round_medians_ns"][0], 100 * slowest if r is best else r["round_medians_ns"][0]]
        r.update(store.perf_fields(r["times_ns"], r["flops"], r["peak_gflops"], None, medians))
        store.write_row(tmp_path, r)
    assert min(first, key=lambda r: r["pct_peak_median"]) is best
    msgs: list[str] = []
    again = run_experiment(exp, progress=msgs.append)
    assert again == [] and any("6 candidate(s) of the refine search already measured" in m for m in msgs)
