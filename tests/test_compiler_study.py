"""The §4.3 compiler study (harness compiler-study, studies/ttile_compiler/figures.py), the
selection's wall time and the microkernel report sections (studies/ttile_microkernels/figures.py).

Real builds and runs use one tiny microkernel and one timed repetition; the figure verdicts are tested on
synthetic summaries whose numbers are chosen so each statement holds or fails on purpose.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import analysis, selection, store
from harness import microbench as mb
from harness.build import CompilerConfig
from harness.machine import detect
from harness.sanity import SanityConfig
from kernels import microkernels as mk
from reports.figures import FigureContext
from studies.ttile_compiler import figures as fig_compiler
from studies.ttile_compiler.commands import compiler_study as cs
from studies.ttile_microkernels import figures as fig_microkernels
from tests.conftest import FAST_TIMING, HOST_TARGET

INSTALLED = [cc for cc in cs.COMPILERS if shutil.which(cc)]


def fast_config(tmp_path: Path, cache: Path) -> mb.BenchConfig:
    return mb.BenchConfig(
        results_dir=tmp_path / "res", cache_dir=cache, timing=FAST_TIMING,
        sanity=SanityConfig(probe=False), retry_busy=0, warmup_flops=0,
    )  # fmt: skip


# -- configurations and real builds ------------------------------------------------------------------------
def test_configurations_cover_the_study() -> None:
    confs = cs.configurations()
    assert len(confs) == 16 == len(set(confs))
    assert {(c.cc, c.opt) for c in confs} == set(itertools.product(cs.COMPILERS, cs.OPT_LEVELS))
    assert len({c.experiment for c in confs}) == 4  # compiler and level in the row's experiment
    assert cs.Configuration("clang", "O2", hoist=True, fma=True).compiler == CompilerConfig("clang", ("-O2",))
    no_fma = CompilerConfig("gcc", ("-O3",), ("-ffp-contract=fast",))  # gcc's own default, restored
    assert cs.Configuration("gcc", "O3", hoist=True, fma=False).compiler == no_fma


def test_study_configurations_produce_distinct_builds(tmp_path: Path, shared_cache: Path) -> None:
    """Every configuration is its own build (flags or source differ), recorded in the row, and checked."""
    kernel = mk.make_conv(HOST_TARGET, k=1, w=2)
    confs = cs.configurations(INSTALLED, cs.OPT_LEVELS)
    frame = cs.run_study([kernel], confs, fast_config(tmp_path, shared_cache))
    assert len(frame) == len(confs)
    assert (frame["status"] == "ok").all(), frame["reason"].tolist()
    assert frame["check_passed"].all()

    rows = store.load(tmp_path / "res")
    assert len(rows) == len(confs)
    for conf in confs:
        mine = rows[rows["experiment"] == conf.experiment]
        opts = mine["candidate_options"].map(json.loads)
        row = mine[(opts.str["hoist"] == conf.hoist) & (opts.str["fma"] == conf.fma)]
        assert len(row) == 1
        assert row["compiler"].iloc[0] == conf.cc
        assert row["cflags"].iloc[0].split()[0] == f"-{conf.opt}"  # the level is the row's first flag
    builds = set(zip(rows["compiler"], rows["cflags"], rows["source_hash"], strict=True))
    assert len(builds) == len(confs)
    # hoist and fma change the generated C, compiler and level change the build of the same C
    level = rows["cflags"].str.split().str[0]
    assert rows.assign(level=level).groupby(["compiler", "level"])["source_hash"].nunique().eq(4).all()
    # without FMA emission the compiler's own contraction is restored after the generator's -ffp-contract=off
    no_fma = rows[rows["candidate_options"].map(json.loads).str["fma"] == False]  # noqa: E712
    assert no_fma["cflags"].str.split().str[-3].str.startswith("-ffp-contract=").all()
    assert (no_fma["cflags"].str.split().str[-3] != "-ffp-contract=off").all()
    if len(INSTALLED) == 2:
        assert rows.groupby("compiler")["compiler_version"].nunique().eq(1).all()
        assert rows["compiler_version"].nunique() == 2

    table = cs.table(frame)
    assert len(table) == len(confs) and (table["count"] == 1).all()

    # the figure builder on the real (one-repetition) rows: one figure, a verdict, an image and a table
    summary = analysis.summarize(rows)
    figs = fig_compiler.compilers(FigureContext(summary, tmp_path / "report" / "figures"))
    assert len(figs) == 1
    f = figs[0]
    assert f.verdict in ("reproduced", "partial", "differs")
    assert (tmp_path / "report" / f.image).is_file() and len(f.table) == len(confs)
    assert "C: hoisting" in f.measured


def test_missing_compiler_and_bad_level_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    for argv, needle in (
        (["--compilers", "gcc,no-such-cc-4242"], "'no-such-cc-4242' is not installed"),
        (["--opts", "O2,O9"], "unknown optimisation level 'O9'"),
        (["--n", "0"], "--n must be at least 1"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["compiler-study", *argv, "--results", str(tmp_path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("harness: error:") and needle in err and "\n" not in err
    assert not (tmp_path / "rows").exists()  # nothing was measured


def test_optimisation_level_is_a_config_choice() -> None:
    from hydra import compose, initialize_config_dir

    from harness.cli import CONF_DIR, build_experiment

    for group in ("gcc", "clang"):
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            default = compose("config", overrides=[f"compiler={group}"])
            o2 = compose("config", overrides=[f"compiler={group}", "compiler.opt=O2"])
        assert build_experiment(default).compiler == CompilerConfig(group, ("-O3",))
        assert build_experiment(o2).compiler == CompilerConfig(group, ("-O2",))


def test_hydra_run_rejects_a_missing_compiler(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["show", "compiler.cc=no-such-cc-4242", "workload=matmul_small"])
    assert exc.value.code == 2
    assert "no-such-cc-4242" in capsys.readouterr().err


# -- synthetic summaries for the figures ---------------------------------------------------------------------
def summary_row(**kw: object) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(analysis.SUMMARY_COLUMNS)
    row.update(timing_mode="hot", status="ok", candidate_kind="scheme", target="avx2", cpu_model="Test CPU",
               machine_fingerprint="fp-a", flags="", reason="")  # fmt: skip
    row.update(kw)
    pct = row.get("pct_peak_median")
    if pct is not None:
        row.setdefault("pct_peak_median_ci_low", float(pct) - 1)  # type: ignore[arg-type]
        row["pct_peak_median_ci_low"] = float(pct) - 1  # type: ignore[arg-type]
        row["pct_peak_median_ci_high"] = float(pct) + 1  # type: ignore[arg-type]
    return row


def compiler_summary(pct_of: object, fp: str = "fp-a") -> pd.DataFrame:
    """Two microkernels x 16 configurations, % of peak from ``pct_of(cc, opt, fma, hoist, kernel)``."""
    rows = []
    for conf in cs.configurations():
        off = [f"{k}=False" for k, v in (("hoist", conf.hoist), ("fma", conf.fma)) if not v]
        for kernel in ("U_{1,w}, U_{2,k}, V_k", "U_{3,w}, U_{1,k}, V_k"):
            label = f"[T_{{512,c}}, {kernel}]" + (f" ({','.join(off)})" if off else "")
            rows.append(summary_row(
                experiment=conf.experiment, workload=f"ukbench-{kernel}", label=label, machine_fingerprint=fp,
                candidate_key=f"{conf.experiment}{label}",
                pct_peak_median=pct_of(conf.cc, conf.opt, conf.fma, conf.hoist, kernel),  # type: ignore[operator]
            ))  # fmt: skip
    return pd.DataFrame(rows)


def thesis_like(cc: str, opt: str, fma: bool, hoist: bool, kernel: str) -> float:
    """The thesis's story: mul+add only fused at -O3, hoisting doubles the first microkernel."""
    pct = 90.0
    if not fma and opt == "O2":
        pct = 50.0
    if not hoist and kernel.startswith("U_{1,w}"):
        pct /= 2
    return pct


def held(pct_of: object) -> list[bool]:
    data = fig_compiler.study_frame(compiler_summary(pct_of))
    return [ok for _, ok, _ in fig_compiler.checks(data)]


def test_compiler_figure_verdicts_follow_the_numbers(tmp_path: Path) -> None:
    figs = fig_compiler.compilers(FigureContext(compiler_summary(thesis_like), tmp_path))
    assert [f.verdict for f in figs] == ["reproduced"]
    assert "x2.00" in figs[0].measured and (tmp_path / Path(figs[0].image).name).is_file()
    assert len(figs[0].table) == 16
    assert held(thesis_like) == [True, True, True]

    def no_hoist_gain(*a: object) -> float:
        return thesis_like(*a[:3], True, a[4])  # type: ignore[arg-type]

    assert held(no_hoist_gain) == [True, True, False]

    def slow_o2(cc: str, opt: str, fma: bool, hoist: bool, kernel: str) -> float:
        return 60.0 if opt == "O2" else 90.0  # O2 slow even with FMA emitted; hoisting changes nothing

    assert held(slow_o2) == [False, True, False]
    assert held(lambda *_a: 80.0) == [True, False, False]

    def inverse(cc: str, opt: str, fma: bool, hoist: bool, kernel: str) -> float:
        return (95.0 if opt == "O2" else 60.0) * (0.9 if hoist else 1.0)

    assert held(inverse) == [False, False, False]
    assert fig_compiler.verdict_of([("A", True, ""), ("B", True, "")]) == "reproduced"
    assert fig_compiler.verdict_of([("A", True, ""), ("C", False, "")]) == "partial"
    assert fig_compiler.verdict_of([("B", False, ""), ("C", False, "")]) == "differs"

    # only one compiler and level measured: A and B cannot be judged, the verdict rests on C
    one = compiler_summary(thesis_like)
    one = one[one["experiment"] == cs.experiment_name("gcc", "O3")]
    results = fig_compiler.checks(fig_compiler.study_frame(one))
    assert [name[0] for name, _, _ in results] == ["C"]


def test_compiler_figure_is_per_machine_and_ignores_failed_rows(tmp_path: Path) -> None:
    both = pd.concat([compiler_summary(thesis_like, "fp-a"), compiler_summary(thesis_like, "fp-b")])
    both.loc[both.index[:3], "status"] = "wrong"
    figs = fig_compiler.compilers(FigureContext(both, tmp_path))
    assert sorted(f.machine for f in figs) == ["fp-a", "fp-b"]
    assert (
        fig_compiler.compilers(
            FigureContext(compiler_summary(thesis_like).assign(experiment="other"), tmp_path)
        )
        == []
    )


def test_best_microkernel_section_states_target_and_count(tmp_path: Path) -> None:
    def rows(pcts: list[float | None]) -> pd.DataFrame:
        return pd.DataFrame([
            summary_row(experiment="microkernels-conv2d-avx2", workload=f"ukbench-k{i}", label=f"[k{i}]",
                        candidate_key=f"k{i}", pct_peak_median=p, status="ok" if p is not None else "wrong")
            for i, p in enumerate(pcts)
        ])  # fmt: skip

    figs = fig_microkernels.best_microkernel(FigureContext(rows([95.0, 88.0, 86.0, 60.0, None]), tmp_path))
    assert [f.verdict for f in figs] == ["reproduced"]
    assert "95.0%" in figs[0].measured and "3 of 4 measured microkernels pass 85%" in figs[0].measured

    def verdicts(pcts: list[float | None]) -> list[str]:
        return [f.verdict for f in fig_microkernels.best_microkernel(FigureContext(rows(pcts), tmp_path))]

    assert verdicts([87.0, 70.0]) == ["partial"]
    assert verdicts([70.0]) == ["differs"]
    assert verdicts([None]) == []


# -- the selection's wall time -----------------------------------------------------------------------------
def fake_bench(reused: bool):  # noqa: ANN201
    """run_microbench without kernels: every microkernel 'ok' at a made-up %, ``reused`` as told."""

    def run(mks, cfg=None, progress=None, machine=None):  # noqa: ANN001, ANN202
        out = []
        for n, m in enumerate(mks):
            out.append({
                "name": m.name, "op": m.op, "isa": m.isa, "suffix": m.suffix,
                **{f"u_{d}": v for d, v in m.sizes},
                "workload": f"ukbench-{m.name}", "scheme": m.suffix, "status": "ok", "reason": "",
                "check_mode": "full", "check_passed": True, "n_reps": 5, "median_ns": 1000.0,
                "gflops_median": 50.0, "pct_peak_median": 95.0 - 10 * n, "pct_peak_min": 96.0 - 10 * n,
                "peak_gflops": 100.0, "cov": 0.01, "flags": [], "busy": False, "drift": False,
                "machine_fingerprint": "x", "timestamp": "2026-01-01T00:00:00+00:00", "reused": reused,
            })  # fmt: skip
        frame = pd.DataFrame(out)
        frame.attrs["compile_s"] = 0.5
        return frame

    return run


def test_wall_time_is_stored_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = detect()
    monkeypatch.setattr(mb, "run_microbench", fake_bench(reused=False))
    summary = mb.command(HOST_TARGET, quick=True, cap=3, out=None, results_dir=tmp_path)
    wall = summary["wall"]
    assert wall["n_microkernels"] == 3 and wall["n_measured"] == 3 and wall["n_reused"] == 0
    assert wall["compile_s"] == 0.5 and wall["cpus_available"] >= 1 and wall["timing_cpus"] == 1
    assert min(wall["enumerate_s"], wall["select_s"], wall["benchmark_s"]) >= 0
    assert wall["total_s"] == pytest.approx(wall["enumerate_s"] + wall["benchmark_s"] + wall["select_s"])

    monkeypatch.setattr(mb, "run_microbench", fake_bench(reused=True))
    mb.command(HOST_TARGET, quick=True, cap=3, out=None, results_dir=tmp_path)
    record = selection.load_selection(HOST_TARGET, "conv2d", tmp_path / "cache", m)
    assert record is not None and [w["n_reused"] for w in record["wall_time"]] == [0, 3]
    assert record["n_selected"] == 2  # 95 and 85 reach 85%; the wall-time history survives save_selection
    assert len(mb.wall_times(tmp_path / "cache")) == 2

    # the report section finds the record from the figure directory of a report built in the same results
    rows = pd.DataFrame([summary_row(experiment=f"microkernels-conv2d-{HOST_TARGET}", workload="ukbench-a",
                                     label="[a]", candidate_key="a", pct_peak_median=90.0,
                                     machine_fingerprint=m.fingerprint)])  # fmt: skip
    fig_dir = tmp_path / "report" / "figures"
    figs = fig_microkernels.selection_cost(FigureContext(rows, fig_dir))
    assert len(figs) == 1
    f = figs[0]
    assert "3 microkernels" in f.measured and "3059" in f.measured and len(f.table) == 2
    assert f.verdict in ("reproduced", "partial", "differs") and (fig_dir / Path(f.image).name).is_file()
    other = rows.assign(machine_fingerprint="other")
    assert fig_microkernels.selection_cost(FigureContext(other, fig_dir)) == []


def test_study_takes_the_stored_selection_best_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = detect()
    monkeypatch.setattr(mb, "run_microbench", fake_bench(reused=False))
    said: list[str] = []
    # nothing stored yet: the selection of the same profile runs first (and stores its rows and wall time)
    mks = cs.study_microkernels(HOST_TARGET, "conv2d", 5, tmp_path, m, said.append, quick=True)
    assert "harness microkernels --quick" in said[0]
    record = selection.load_selection(HOST_TARGET, "conv2d", tmp_path / "cache", m)
    assert record is not None and record["n_selected"] == 2  # the fake's 95% and 85%
    assert mks == [mk.Microkernel.from_dict(d) for d in record["selected"]]
    assert len(cs.study_microkernels(HOST_TARGET, "conv2d", 1, tmp_path, m, said.append)) == 1

    # an empty selection (nothing reached the threshold): the best measured ones, and it says so
    frame = fake_bench(reused=False)(mb.quick_set(HOST_TARGET))
    selection.save_selection(frame, HOST_TARGET, "conv2d", 1000.0, tmp_path / "cache", m)
    said.clear()
    best = cs.study_microkernels(HOST_TARGET, "conv2d", 3, tmp_path, m, said.append)
    assert [k.name for k in best] == list(frame.sort_values("pct_peak_median", ascending=False)["name"][:3])
    assert said and "best measured" in said[0]
