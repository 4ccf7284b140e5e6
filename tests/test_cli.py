"""The `harness` command and the workflow: what a user types, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness import store

ROOT = Path(__file__).resolve().parent.parent
HARNESS = [sys.executable, "-m", "harness.cli"]
FAST = ["timing.warmup=0", "timing.min_reps=2", "timing.max_reps=3"]


def harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


def test_show_prints_the_generated_c(tmp_path: Path) -> None:
    out = harness(
        "show",
        "workload=matmul_small",
        "scheme=[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]",
        f"results_dir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr
    assert "int kernel(float *const *tensors, void *workspace)" in out.stdout
    assert "fmadd_ps" in out.stdout
    assert "[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["scheme=[R_i, T_{5,k}, V_j]"], "rule: divisibility"),
        (["scheme=[R_i, R_j, Q_k]"], "rule: syntax"),
        (["scheme=[R_i, R_j, R_k, V_i]"], "rule: V-stride1"),
        (["workload.sizes.i=0", "scheme=[R_i, R_j, R_k]"], "must be a positive integer"),
        (["workload.sizes.i=-3", "scheme=[R_i, R_j, R_k]"], "must be a positive integer"),
        (["target=neon", "scheme=[R_i, R_j, R_k]"], "target must be"),
        (["op.name=winograd"], "unknown operator"),
        (["workload=resnet9000"], "unknown workload 'resnet9000'; allowed: "),
        (["space=quick_conv,nope"], "unknown space 'nope'; allowed: "),
        (["timing.mode=warm"], "timing.mode='warm' is not allowed; allowed: hot, cold"),
        (["compiler.cc=no-such-cc"], "compiler.cc='no-such-cc' is not installed"),
        (["baselines=[blis9]"], "unknown library 'blis9'; allowed: "),
        (["baselines=[{name:blis9,threads:2}]"], "unknown library 'blis9'; allowed: "),
        (["counters.backends=[pmu]"], "unknown backend 'pmu'"),
        (["check.init=gaussian"], "check.init='gaussian' is not allowed"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    out = harness("run", "workload=matmul_small", *args, f"results_dir={tmp_path}")
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("harness: error:")]
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert not (tmp_path / "rows").exists()
    assert "Traceback" not in out.stderr


def test_unknown_config_key_is_bad_input(tmp_path: Path) -> None:
    out = harness("run", "workload=matmul_small", "no_such_key=3", f"results_dir={tmp_path}")
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: Could not override 'no_such_key'"), lines


RUN_ARGS = ["workload=matmul_192", "space=quick_matmul", "baselines=[]", "experiment=cli_test", *FAST]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `harness run` of the quick matmul space (5 schemes x 2 variants) into a fresh results
    directory, read by the three tests below (pytest's --dist loadfile keeps a file on one worker: the run,
    calibration included, is done once)."""
    results = tmp_path_factory.mktemp("ran")
    first = harness("run", *RUN_ARGS, f"results_dir={results}")
    assert first.returncode == 0, first.stderr
    return results


def test_run_stores_checked_rows_and_resumes(ran: Path) -> None:
    df = store.load(ran, "cli_test")
    # 5 schemes x 2 variants of the space, all legal on matmul_192
    assert len(df) == 10
    assert set(df["status"]) == {"ok"}, df[["label", "status", "reason"]]
    assert df["check_passed"].all()
    for col in ("candidate_key", "source_hash", "compiler_version", "cflags", "machine_fingerprint", "seed"):
        assert df[col].notna().all(), col
    second = harness("run", *RUN_ARGS, f"results_dir={ran}")
    assert second.returncode == 0, second.stderr
    assert "10 candidate(s) already measured, skipped" in second.stderr
    assert len(store.load(ran, "cli_test")) == 10


def test_rows_are_valid_parquet(ran: Path) -> None:
    files = list((ran / "rows" / "cli_test").glob("*.parquet"))
    assert len(files) == 10  # one file a row: a crash loses at most the row being written
    for f in files:
        assert list(pd.read_parquet(f).columns) == list(store.COLUMNS)


def test_multirun_sweeps_an_option(tmp_path: Path) -> None:
    out = harness(
        "run",
        "-m",
        "workload=matmul_small",
        "scheme=[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]",
        "codegen.hoist=true,false",
        "experiment=mr",
        f"results_dir={tmp_path}",
        *FAST,
    )
    assert out.returncode == 0, out.stderr
    df = store.load(tmp_path, "mr")
    assert sorted(df["label"]) == sorted(
        [
            "[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]",
            "[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j] (hoist=False)",
        ]
    )
    assert set(df["status"]) == {"ok"}


def test_report_command_builds_html(ran: Path) -> None:
    rep = harness("report", "--results", str(ran))
    assert rep.returncode == 0, rep.stderr
    html = (ran / "report" / "index.html").read_text()
    assert "cli_test" in html and "matmul_192" in html
    assert list((ran / "report" / "figures").glob("*.png"))


SNAKEMAKE = Path(sys.executable).parent / "snakemake"


@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed in this environment")
# a Snakemake dry run of every target takes ~22 s per profile: the full and slurm ones run with -m heavy (CI)
@pytest.mark.parametrize(
    "profile",
    ["quick", pytest.param("full", marks=pytest.mark.heavy), pytest.param("slurm", marks=pytest.mark.heavy)],
)
def test_snakemake_dry_run_lists_every_target(profile: str, tmp_path: Path) -> None:
    import yaml

    catalogue = yaml.safe_load((ROOT / "workflow" / "config.yaml").read_text())
    jobs = catalogue["jobs"]["full" if profile == "slurm" else profile]
    for target in ["all", *catalogue["figures"], *catalogue["papers"]]:
        out = subprocess.run(
            [
                str(SNAKEMAKE),
                "--profile",
                f"profiles/{profile}",
                "-n",
                target,
                "--config",
                f"results={tmp_path}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        text = out.stdout + out.stderr
        if target == "all":
            needed = list(jobs)
        elif target in catalogue["figures"]:
            needed = catalogue["figures"][target]
        else:
            needed = [j for f in catalogue["papers"][target] for j in catalogue["figures"][f]]
        for name in needed:
            assert f"{tmp_path}/done/{name}.txt" in text, (target, name)


@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed in this environment")
@pytest.mark.parametrize("profile", ["quick", "full"])
def test_conv_searches_wait_for_this_machines_microkernel_selection(profile: str, tmp_path: Path) -> None:
    """The catalogue's ``after:``: a search job's inputs include the microkernel selection job's output."""
    dry_run = [str(SNAKEMAKE), "--profile", f"profiles/{profile}", "-n", "ttile_fig6_3"]
    out = subprocess.run(
        [*dry_run, "--config", f"results={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    jobs = (out.stdout + out.stderr).split("rule job:")
    search = [j for j in jobs if f"output: {tmp_path}/done/ttile_conv_random.txt" in j]
    assert len(search) == 1
    inputs = search[0].split("input:")[1].split("output:")[0]
    assert f"{tmp_path}/done/ttile_fig5_2.txt" in inputs
    assert any(f"output: {tmp_path}/done/ttile_fig5_2.txt" in j for j in jobs)


def test_a_job_reusing_simulations_runs_after_the_job_that_makes_them() -> None:
    """``--sim-from E`` reads experiment E's simulations: without an ``after:`` on E's job Snakemake may run
    it first, and both jobs simulate the same orders (the quick run's -O0 job spent 27 s doing so)."""
    import yaml

    part = yaml.safe_load((ROOT / "studies" / "permutations" / "catalogue.yaml").read_text())
    checked = 0
    for profile, jobs in part["jobs"].items():
        for name, args in jobs.items():
            if "--sim-from" not in args:
                continue
            source = args[args.index("--sim-from") + 1]
            makers = [
                n for n, a in jobs.items()
                if "--sim-from" not in a and (a[a.index("--experiment") + 1] if "--experiment" in a
                                              else "permutations") == source
            ]  # fmt: skip
            assert makers, (profile, name, source)
            assert set(makers) & set(part.get("after", {}).get(name, [])), (profile, name, makers)
            checked += 1
    assert checked >= 2  # the quick and full -O0 jobs


def test_the_select_job_runs_after_every_search_whose_winners_it_retimes() -> None:
    """ttile_conv_select times the best 4 schemes of each experiment its sweep names
    (``space.best_of.experiment``, ttile_conv_contention's pool): a search job of the same profile that
    could run after it would leave its winners out, and Snakemake would not run it again. The contention
    job then confirms the select job's winners, after it."""
    import yaml

    part = yaml.safe_load((ROOT / "studies" / "ttile_conv" / "catalogue.yaml").read_text())
    sweep = yaml.safe_load((ROOT / "conf" / "sweeps" / "ttile_conv_contention.yaml").read_text())
    searched = set(sweep["space"]["best_of"]["experiment"])
    checked = 0
    for profile, jobs in part["jobs"].items():
        if "ttile_conv_select" not in jobs:
            continue
        searches = {name for name in jobs if name in searched}
        assert searches, profile
        assert searches <= set(part["after"]["ttile_conv_select"]), (profile, searches)
        assert "space.best_of.experiment=[ttile_conv_select]" in jobs["ttile_conv_contention"]
        assert part["after"]["ttile_conv_contention"] == ["ttile_conv_select"]
        checked += 1
    assert checked  # the full profile re-times the winners


def test_quote_schemes_keeps_other_overrides() -> None:
    from harness.cli import quote_schemes

    assert quote_schemes(["scheme=[R_i, T_{4,k}]", "seed=3", "-m"]) == [
        "scheme='[R_i, T_{4,k}]'",
        "seed=3",
        "-m",
    ]


def test_study_commands_time_with_the_timing_group_harness_run_uses() -> None:
    """One protocol whichever way a measurement starts: a study command's timing is the composed group
    (conf/timing/<mode>.yaml) with the study's own repetitions on top."""
    from harness import config

    hot = config.timing("hot", max_reps=7)
    group = config.composed(["timing=hot"])["timing"]
    assert hot.max_reps == 7
    assert hot.warmup_seconds == group["warmup_seconds"] and hot.retime == group["retime"]
    assert config.timing("fresh").mode == "fresh"


def test_help_lists_each_plug_in_command_with_its_docstring_without_importing_it() -> None:
    """``harness --help`` reads each command's first docstring line from its source (importing them all,
    pandas and matplotlib with them, took 5.8 s)."""
    import importlib

    from harness.cli import plugin_commands, plugin_modules

    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from harness.cli import plugin_commands; plugin_commands(); "
         "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "[]"
    listed = plugin_commands()
    assert set(listed) == set(plugin_modules()) and len(listed) >= 8
    for name, module in plugin_modules().items():
        doc = (importlib.import_module(module).__doc__ or "").strip()
        assert listed[name] == (doc.splitlines()[0] if doc else ""), name


def test_the_embedded_broadcast_sweep_is_the_levers_search_with_its_own_experiment_and_code() -> None:
    """Every sweep file composes; ttile_conv_random_embedded is ttile_conv_random_levers's space and search
    with broadcasts read by the FMAs, on AVX-512, under an experiment of its own (its rows apart)."""
    from harness.config import composed

    sweeps = sorted((ROOT / "conf" / "sweeps").glob("*.yaml"))
    every = {p.stem: composed([f"+sweeps={p.stem}"]) for p in sweeps}
    emb, lev = every["ttile_conv_random_embedded"], every["ttile_conv_random_levers"]
    assert emb["experiment"] == "ttile_conv_random_embedded" != lev["experiment"]
    assert emb["codegen"]["broadcast"] == "embedded" and lev["codegen"]["broadcast"] is None
    assert emb["target"] == "avx512"
    assert emb["space"] == lev["space"] and emb["search"] == lev["search"] and emb["timing"] == lev["timing"]


def test_the_prefetch_sweep_retimes_the_contention_pool_as_measured_and_with_each_prefetch() -> None:
    """ttile_conv_prefetch is a lever on the winners ttile_conv_contention re-times: the same pool, the
    winner as measured first ({}), then each prefetch option, beside oneDNN in rounds."""
    from harness.config import composed

    pf = composed(["+sweeps=ttile_conv_prefetch", "workload=yolo9000_23"])
    ct = composed(["+sweeps=ttile_conv_contention", "workload=yolo9000_23"])
    assert pf["experiment"] == "ttile_conv_prefetch"
    assert pf["space"]["best_of"]["experiment"] == ct["space"]["best_of"]["experiment"]
    variants = pf["space"]["best_of"]["variants"]
    assert variants[0] == {} and all(set(v) == {"prefetch"} for v in variants[1:])
    assert pf["timing"]["rounds"] >= 3 and pf["baselines"] == ct["baselines"]


def test_the_refine100_sweep_is_the_levers_search_refined_at_a_budget_of_100() -> None:
    """ttile_conv_levers_refine100 asks the goal's "best of 100" of the refinement: the levers search's
    space, code generation and rounds, search=refine with 100 proposals (50 of them the same draws), its
    best 5 confirmed, under an experiment of its own."""
    from harness.config import composed

    ref = composed(["+sweeps=ttile_conv_levers_refine100", "workload=yolo9000_23"])
    lev = composed(["+sweeps=ttile_conv_random_levers", "workload=yolo9000_23"])
    assert ref["experiment"] == "ttile_conv_levers_refine100" != lev["experiment"]
    assert ref["space"] == lev["space"] and ref["codegen"] == lev["codegen"]
    assert ref["timing"] == lev["timing"]
    assert ref["search"]["strategy"] == "refine" and lev["search"]["strategy"] == "random"
    assert ref["search"]["budget"] == 100 and ref["search"]["confirm"] == 5
    assert ref["search"]["params"]["explore"] == 50 and ref["search"]["seed"] == lev["search"]["seed"]


def test_the_transfer100_sweep_is_refine100_started_from_the_other_layers_winners() -> None:
    """ttile_conv_levers_transfer100: refine100's search, space and code generation, the other layers' best
    of the levers search as its first proposals (space.transfer_from), 50 proposals before any mutation."""
    from harness.config import composed

    tr = composed(["+sweeps=ttile_conv_levers_transfer100", "workload=yolo9000_23"])
    ref = composed(["+sweeps=ttile_conv_levers_refine100", "workload=yolo9000_23"])
    assert tr["experiment"] == "ttile_conv_levers_transfer100"
    assert tr["space"].pop("transfer_from") == {"experiment": "ttile_conv_random_levers", "n": 1}
    assert tr["space"] == ref["space"] and tr["codegen"] == ref["codegen"] and tr["timing"] == ref["timing"]
    assert tr["search"]["params"].pop("explore") == 28 and ref["search"]["params"].pop("explore") == 50
    assert tr["search"] == ref["search"]


def test_the_h2h_sweep_times_each_searchs_own_best_in_the_select_sweeps_rounds() -> None:
    """ttile_conv_h2h: the transfer refinement's best and the uniform search's best of each layer (each,
    not the pool's best), alone, in ttile_conv_select's rounds beside the same baselines."""
    from harness.config import composed

    h2h = composed(["+sweeps=ttile_conv_h2h", "workload=yolo9000_23"])
    sel = composed(["+sweeps=ttile_conv_select", "workload=yolo9000_23"])
    assert h2h["experiment"] == "ttile_conv_h2h"
    assert h2h["space"].pop("best_of") == {
        "experiment": ["ttile_conv_levers_transfer100", "ttile_conv_random_levers"],
        "n": 1,
        "each": True,
    }
    sel["space"].pop("best_of")
    assert h2h["space"] == sel["space"] and h2h["timing"] == sel["timing"]
    assert h2h["baselines"] == sel["baselines"]


def test_the_select_sweep_times_the_contention_pools_best_4_alone_under_its_own_experiment() -> None:
    """ttile_conv_select chooses each layer's winner in shared rounds (the best 4 of ttile_conv_contention's
    pool, alone, beside the same baselines), for ttile_conv_contention to confirm in rounds of its own."""
    from harness.config import composed

    sel = composed(["+sweeps=ttile_conv_select", "workload=yolo9000_23"])
    ct = composed(["+sweeps=ttile_conv_contention", "workload=yolo9000_23"])
    assert sel["experiment"] == "ttile_conv_select" != ct["experiment"]
    assert sel["space"]["best_of"]["experiment"] == ct["space"]["best_of"]["experiment"]
    assert sel["space"]["best_of"]["n"] == 4 and ct["space"]["best_of"]["n"] == 1
    assert sel["timing"]["contention"] == "none" and sel["timing"]["rounds"] >= 3
    assert sel["baselines"] == ct["baselines"]


def test_the_ported_sweeps_time_another_machines_winners_here_under_experiments_of_their_own() -> None:
    """ttile_conv_ported and gemm_ported: another CPU's winners (space.best_of.machine) timed here in rounds
    beside the same baselines as the sweeps they start from, nothing of the space itself for GEMM."""
    from harness.config import composed

    conv = composed(["+sweeps=ttile_conv_ported", "workload=yolo9000_23"])
    select = composed(["+sweeps=ttile_conv_select", "workload=yolo9000_23"])
    assert conv["experiment"] == "ttile_conv_ported" and conv["space"]["best_of"]["machine"] == "85c29e923036"
    assert conv["timing"] == select["timing"] and conv["baselines"] == select["baselines"]
    gemm = composed(["+sweeps=gemm_ported", "workload=gemm_rn50_t03"])
    tuned = composed(["+sweeps=gemm_tuned", "workload=gemm_rn50_t03"])
    assert gemm["experiment"] == "gemm_ported" and gemm["space"]["schemes"] == []
    assert gemm["space"]["best_of"]["experiment"] == ["gemm_tuned", "gemm_squares"]
    assert gemm["baselines"] == tuned["baselines"] and gemm["timing"] == tuned["timing"]
    swept = (ROOT / "sweeps" / "gemm_ported.yaml").read_text()
    assert all(f"gemm_rn50_t{i:02d}" in swept for i in range(1, 12)) and "gemm_square_2000" in swept
