"""PARLOOPER loop strings (seed 003): the grammar of §II, the nest semantics of Listing 2, and generated
GEMM kernels checked against the reference (our BRGEMM core and libxsmm's)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.build import CompilerConfig, build
from harness.check import CheckConfig, check_output, make_tensors
from harness.machine import detect
from harness.run import TimingConfig, run_kernel
from kernels.baselines import BLAS, BaselineUnavailable, find_library
from kernels.candidate import Workload, render
from reports.figures import FigureContext
from studies.loop_strings import kernels as lsm

ONE_RUN = TimingConfig(mode="hot", warmup=0, min_reps=1, max_reps=1, max_seconds=1.0)


@pytest.mark.parametrize(
    "text",
    ["abc", "cab", "bcabcb", "bcaBCb", "bcaBCb@schedule(dynamic,1)", "bc|aBCb", "aBC", "aCb",
     "bC{R:16}aB{C:4}cb", "bC{R:2}B{C:2}cbA{L:2}", "aBCbcbc"],
)  # fmt: skip
def test_paper_strings_parse(text: str) -> None:
    ls = lsm.parse_loop_string(text, "abc")
    assert (
        "".join(o.letter for o in ls.occurrences)
        == text.split("@")[0].replace("|", "").lower().translate(str.maketrans("", "", "{}:0123456789RCL"))
        or ls.mode == "grid"
    )


def test_listing2_structure() -> None:
    ls = lsm.parse_loop_string("bcaBCb@schedule(dynamic,1)")
    assert [(o.letter, o.level, o.parallel) for o in ls.occurrences] == [
        ("b", 0, False), ("c", 0, False), ("a", 0, False), ("b", 1, True), ("c", 1, True), ("b", 2, False),
    ]  # fmt: skip
    assert ls.mode == "omp" and ls.clauses == "schedule(dynamic,1)" and ls.count("b") == 3
    grid = lsm.parse_loop_string("bC{R:16}aB{C:4}cb")
    assert grid.mode == "grid" and grid.grid_threads == 64


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "syntax"), ("ab", "every-loop"), ("abd", "unknown-loop"), ("ab-c", "syntax"),
        ("aBcC", "collapse"), ("aBBc", "collapse"), ("abc@", "directive"),
        ("abc@schedule(static)", "directive"),
        ("aB@x@y c", "directive"), ("ab{R:2}c", "grid"), ("aB{X:2}c", "grid"), ("aB{R:2}C{R:2}", "grid"),
        ("aB{R:2}C", "mode"), ("aB|C", "barrier"), ("aB{R:2}c|", "barrier"), ("aB{R:0}c", "grid"),
        ("aB{R:2}C{C:2}@schedule(dynamic)", "directive"),
    ],
)  # fmt: skip
def test_illegal_strings_name_their_rule(text: str, rule: str) -> None:
    with pytest.raises(lsm.LoopStringError, match=rf"\[rule: {rule}\]"):
        lsm.parse_loop_string(text, "abc")


def test_nest_semantics_visit_every_block_once() -> None:
    specs = {"a": lsm.LoopSpec(0, 4, 2), "b": lsm.LoopSpec(0, 8, 1, (4, 2)), "c": lsm.LoopSpec(0, 6, 1, (3,))}
    ls = lsm.parse_loop_string("bcaBCb")
    seq = lsm.body_indices(ls, specs)
    got = sorted((d["a"], d["b"], d["c"]) for d in seq)
    assert got == sorted((a, b, c) for a in (0, 2) for b in range(8) for c in range(6))
    # the outermost b walks blocks of 4: the first 4 * 6 * 2 bodies stay in b < 4
    assert all(d["b"] < 4 for d in seq[: 4 * 6 * 2])


def test_imperfect_nesting_is_rejected() -> None:
    ls = lsm.parse_loop_string("bcabcb")
    with pytest.raises(lsm.LoopStringError, match=r"rule: nesting"):
        lsm.check_specs(ls, {"a": lsm.LoopSpec(0, 4, 1), "b": lsm.LoopSpec(0, 8, 1, (4, 3)),
                             "c": lsm.LoopSpec(0, 6, 1, (3,))})  # fmt: skip
    with pytest.raises(lsm.LoopStringError, match=r"rule: blocks"):
        lsm.check_specs(ls, {"a": lsm.LoopSpec(0, 4, 1), "b": lsm.LoopSpec(0, 8, 1, (4,)),
                             "c": lsm.LoopSpec(0, 6, 1, (3,))})  # fmt: skip


def test_enumeration_follows_the_constraints() -> None:
    sizes = {"i": 128, "j": 128, "k": 128}
    params = lsm.GemmParams(bm=16, bn=16, bk=16)
    cands = lsm.enumerate_gemm(sizes, params)
    assert len(cands) > 100
    for c in cands:
        ls = lsm.parse_loop_string(c.text)
        assert ls.count("a") <= 2 and ls.count("b") <= 3 and ls.count("c") <= 3 and ls.mode == "serial"
    par = lsm.enumerate_gemm(sizes, params, parallel=True, limit=50, seed=1)
    assert len(par) == 50 and all(lsm.parse_loop_string(c.text).mode == "omp" for c in par)
    assert all("A" not in c.text for c in par)  # only M and N loops may be parallel
    assert lsm.block_choices(8, 1, 1) == [(2,), (4,)]


def _run(cand: lsm.Candidate, w: Workload, cache: Path, threads: int = 1) -> tuple[str, bool]:
    src = render(cand, w)
    built = build(src, CompilerConfig(), cache / "so")
    assert built.ok, built.error
    m = detect()
    if "avx2" not in m.isas:
        pytest.skip("this CPU cannot execute AVX2")
    if threads > len(os.sched_getaffinity(0)):
        pytest.skip(f"needs {threads} CPUs (this process may use {len(os.sched_getaffinity(0))})")
    tensors = make_tensors(w, 0, CheckConfig())
    timing = TimingConfig(**{**ONE_RUN.__dict__, "threads": threads})
    res = run_kernel(built.so_path, tensors, src.workspace_bytes, timing, (), None, cache)
    assert res.status == "ok", res.reason
    chk = check_output(w, tensors, res.output, CheckConfig(full_below=10**6), 0)
    return chk.mode, chk.passed


@pytest.mark.parametrize(
    ("text", "blocks"),
    [("abc", ((), (), ())), ("cab", ((), (), ())), ("bcabcb", ((), (4, 2), (2,))),
     ("bcaBCb", ((), (4, 2), (2,))),
     # the reduction loop a inside the dynamic parallel loops: with a outside them ("bc|aBCb@schedule(
     # dynamic,1)") the nowait omp for hands a C block to another thread in the next a step while the
     # first still adds into it, a race the full check caught in 2 of 15 runs (static schedules are safe)
     ("bc|BCab@schedule(dynamic,1)", ((), (4, 2), (2,))), ("bC{R:2}aB{C:2}cb", ((), (4, 2), (2,))),
     ("aCb", ((2,), (), ()))],
)  # fmt: skip
@pytest.mark.parametrize("layout", lsm.LAYOUTS)
def test_generated_gemm_is_correct(
    text: str, blocks: tuple, layout: str, tmp_path: Path, shared_cache: Path
) -> None:
    w = Workload.make("ls-gemm", "matmul", {"i": 64, "j": 64, "k": 48})
    params = lsm.GemmParams(bm=8, bn=16, bk=8, k_step=1 if blocks[0] else 2, blocks=blocks, layout=layout)
    cand = lsm.gemm_candidate(text, params)
    mode, passed = _run(cand, w, shared_cache, threads=2 if text != text.lower() else 1)
    assert mode == "full" and passed


def test_libxsmm_core_is_correct(shared_cache: Path) -> None:
    try:
        find_library(BLAS["libxsmm"])
    except BaselineUnavailable as exc:
        pytest.skip(str(exc))
    w = Workload.make("ls-gemm", "matmul", {"i": 64, "j": 64, "k": 64})
    for layout in lsm.LAYOUTS:
        params = lsm.GemmParams(16, 16, 16, 2, ((), (2,), (2,)), core="libxsmm", layout=layout)
        cand = lsm.gemm_candidate("bcabc", params)
        mode, passed = _run(cand, w, shared_cache)
        assert mode == "full" and passed, layout


def test_a_wrong_nest_is_caught(shared_cache: Path) -> None:
    """The check is able to fail: dropping the last K block leaves the output wrong."""
    w = Workload.make("ls-gemm", "matmul", {"i": 16, "j": 16, "k": 32})
    cand = lsm.gemm_candidate("abc", lsm.GemmParams(bm=8, bn=16, bk=8))
    src = render(cand, w)
    bad = src.code.replace("ind_a < 4", "ind_a < 3").replace("a0 < 4;", "a0 < 3;")
    assert bad != src.code
    built = build(type(src)(bad, src.target, src.cflags, src.libs), CompilerConfig(), shared_cache / "so")
    tensors = make_tensors(w, 0, CheckConfig())
    res = run_kernel(built.so_path, tensors, 0, ONE_RUN, (), None, shared_cache)
    assert res.status == "ok"
    assert not check_output(w, tensors, res.output, CheckConfig(full_below=10**6), 0).passed
    assert np.isfinite(res.output).all()


# -- the performance model (§II-E) ----------------------------------------------------------------------
def test_model_threads_cover_every_body_once() -> None:
    from studies.loop_strings import model as pm

    specs = {"a": lsm.LoopSpec(0, 4, 2), "b": lsm.LoopSpec(0, 8, 1, (4, 2)), "c": lsm.LoopSpec(0, 6, 1, (3,))}
    serial = sorted(tuple(d.values()) for d in lsm.body_indices(lsm.parse_loop_string("bcabcb"), specs))
    for text, nt in (("bcaBCb", 3), ("bC{R:2}aB{C:3}cb", 2), ("bC{R:2}aB{C:3}cb", 6)):
        ls = lsm.parse_loop_string(text)
        got = sorted(tuple(d.values()) for t in range(nt) for d in pm.thread_bodies(ls, specs, t, nt))
        assert got == serial, text


def test_model_counts_compulsory_and_capacity_misses() -> None:
    """A cache holding every slice charges each string the same compulsory transfers (one per distinct
    slice, every other access an L1 hit); a one-slice cache charges more."""
    from harness import cachesim
    from studies.loop_strings import model as pm

    p = lsm.GemmParams(bm=16, bn=16, bk=16)
    sizes = {"i": 64, "j": 64, "k": 64}
    slice_bytes = 4 * 16 * 16
    specs = lsm.gemm_specs(p, sizes)

    def cfg(n_slices: int) -> cachesim.CacheConfig:
        return cachesim.CacheConfig("t", (cachesim.Level("L1", n_slices * slice_bytes, 64, 1, "LRU", 1),), 10)

    big = [
        pm.predict(lsm.parse_loop_string(t), specs, p, cfg(1024), max_levels=1) for t in ("abc", "cba", "bca")
    ]
    assert len({b.cycles for b in big}) == 1 and big[0].calls == 4 * 4 * 4
    compute = 64 * 2.0 * 16**3 / pm.PEAK_FLOPS_PER_CYCLE
    distinct = 3 * 16  # A, B and C each 4 x 4 slices
    hits = 64 * 3 - distinct
    assert big[0].cycles == pytest.approx(
        compute + distinct * slice_bytes / pm.BANDWIDTH["MEM"] + hits * slice_bytes / pm.BANDWIDTH["L1"]
    )
    small = pm.predict(lsm.parse_loop_string("abc"), specs, p, cfg(1), max_levels=1)
    assert small.cycles > big[0].cycles
    assert pm.top_classes({"x": 1.0, "y": 1.0, "z": 2.0, "w": 3.0}, n=2) == {"x", "y", "z"}


@pytest.mark.parametrize(
    ("text", "stride", "core", "c_step", "layout"),
    [("abcdef", 1, "c", 1, "plain"), ("bcdefa", 2, "c", 2, "plain"), ("cdBEfa", 1, "c", 1, "plain"),
     ("fedcba", 1, "libxsmm", 2, "plain"), ("bcdefa", 2, "c", 2, "blocked"), ("cdBEfa", 1, "c", 1, "blocked"),
     ("fedcba", 1, "libxsmm", 2, "blocked")],
)  # fmt: skip
def test_generated_conv_is_correct(
    text: str, stride: int, core: str, c_step: int, layout: str, shared_cache: Path
) -> None:
    if core == "libxsmm":
        try:
            find_library(BLAS["libxsmm"])
        except BaselineUnavailable as exc:
            pytest.skip(str(exc))
    w = Workload.make("ls-conv", "conv2d", {"h": 3, "w": 7, "k": 32, "c": 16, "r": 3, "s": 3}, stride=stride)
    params = lsm.ConvParams(bc=8, bk=16, bw=7, c_step=c_step, core=core, layout=layout)
    cand = lsm.conv_candidate(text, params)
    assert lsm.conv_params(cand) == params
    mode, passed = _run(cand, w, shared_cache, threads=2 if text != text.lower() else 1)
    assert mode == "full" and passed


def test_conv_enumeration() -> None:
    sizes = {"h": 7, "w": 7, "k": 64, "c": 64, "r": 3, "s": 3}
    cands = lsm.enumerate_conv(sizes, lsm.ConvParams(bc=32, bk=32, bw=7))
    assert len(cands) == 720 * 2  # every order, batch over one or both channel blocks
    par = lsm.enumerate_conv(sizes, lsm.ConvParams(bc=32, bk=32, bw=7), parallel=True, limit=30)
    assert all(lsm.parse_loop_string(c.text, lsm.CONV_LETTERS).mode == "omp" for c in par)


def test_fig7_compares_with_the_faster_onednn_per_layer(tmp_path: Path) -> None:
    """oneDNN on NHWC and in its own layouts: each layer's best string is compared with the faster one."""
    from studies.loop_strings import figures as fig_parlooper

    def row(layer: str, kind: str, text: str, ns: float) -> dict[str, object]:
        return {"experiment": f"{fig_parlooper.CONV_PREFIX}{layer}", "status": "ok", "candidate_kind": kind,
                "candidate_text": text, "label": text, "median_ns": ns, "gflops_median": 1e3 / ns,
                "machine_fingerprint": "fp", "cpu_model": "cpu", "timing_mode": "hot"}  # fmt: skip

    summary = pd.DataFrame(
        [row("l1", "loop_string", "aBC", 100.0), row("l1", "baseline", "onednn", 200.0),
         row("l1", "baseline", "onednn-blocked", 150.0),
         row("l2", "loop_string", "aBC", 100.0), row("l2", "baseline", "onednn", 80.0),
         row("l2", "baseline", "onednn-blocked", 120.0)]
    )  # fmt: skip
    (fig,) = fig_parlooper.conv_vs_onednn(FigureContext(summary, tmp_path))
    assert fig.ours == pytest.approx((1.5 * 0.8) ** 0.5)  # l1 vs blocked (150), l2 vs NHWC (80)
    assert "onednn 1.26x" in fig.measured and "onednn-blocked 1.34x" in fig.measured


def test_a_libxsmm_core_is_measured_against_this_machines_best_peak() -> None:
    """libxsmm's JIT runs AVX-512 where the CPU has it: its strings' % of peak read 150-160% of the AVX2
    peak on an Emerald Rapids (the full profile's first run). Target "any" makes the row's peak the
    machine's best ISA, as for the library baselines; the glue stays AVX2 code; our own core stays AVX2."""
    w = Workload.make("ls-gemm", "matmul", {"i": 64, "j": 64, "k": 64})
    for core, target in (("libxsmm", "any"), ("c", "avx2")):
        params = lsm.GemmParams(16, 16, 16, 2, ((), (2,), (2,)), core=core)
        try:
            src = render(lsm.gemm_candidate("bcabc", params), w)
        except BaselineUnavailable as exc:
            pytest.skip(str(exc))
        assert src.target == target and (core == "c" or "-march=x86-64-v3" in src.cflags), (core, src)


def test_the_models_predictions_are_reused_only_for_the_same_strings_cache_and_threads(
    tmp_path: Path,
) -> None:
    """The model ranked 1000 strings of a 1024^3 GEMM for half an hour; a rerun (after a stop) reuses what
    the first run stored, and only when it predicted exactly these candidates with this cache."""
    from harness import cachesim
    from studies.loop_strings import model as parlooper_model
    from studies.loop_strings.commands.loop_strings import Progress, stored_model

    sizes = {"i": 64, "j": 64, "k": 64}
    cands = lsm.enumerate_gemm(sizes, lsm.GemmParams(16, 16, 16, 1), limit=5, seed=0)
    cfg = cachesim.load_config("host")
    seen: list[tuple[int, int]] = []
    ranked = parlooper_model.rank(cands, sizes, cfg, 1, lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(cands), len(cands)) and len(ranked) == len(cands)
    Progress("x")(len(cands), len(cands))  # prints, does not fail
    path = tmp_path / "m.parquet"
    assert stored_model(path, cands, cfg, 1) is None  # nothing stored
    rows = [{"candidate_key": c.key, "cache_key": cfg.key, "threads": 1, "model_rank": k}
            for k, (c, _) in enumerate(ranked)]  # fmt: skip
    pd.DataFrame(rows).to_parquet(path)
    assert stored_model(path, cands, cfg, 1) is not None
    assert stored_model(path, cands[:-1], cfg, 1) is None and stored_model(path, cands, cfg, 2) is None
    path.write_bytes(path.read_bytes()[:40])  # cut by a crash
    assert stored_model(path, cands, cfg, 1) is None


def test_the_model_on_two_workers_and_resumed_gives_the_same_ranking(tmp_path: Path) -> None:
    """``--jobs 2`` spreads the strings over two processes, and a ranking stopped half-way resumes from
    the predictions it kept: both give the predictions and order of one uninterrupted process."""
    from harness import cachesim
    from studies.loop_strings import model as parlooper_model
    from studies.loop_strings.commands.loop_strings import PartialModel

    sizes = {"i": 64, "j": 64, "k": 64}
    cands = lsm.enumerate_gemm(sizes, lsm.GemmParams(16, 16, 16, 1), limit=6, seed=1)
    cfg = cachesim.load_config("host")
    one = parlooper_model.rank(cands, sizes, cfg, 1)
    two = parlooper_model.rank(cands, sizes, cfg, 1, jobs=2)
    assert [(c.key, p) for c, p in two] == [(c.key, p) for c, p in one]

    partial = PartialModel(tmp_path / "p.parquet", cfg, 1)
    stop_after = 3

    def add_then_stop(c: object, pr: parlooper_model.Prediction) -> None:
        partial.add(c, pr)
        if len(partial.rows) == stop_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        try:
            parlooper_model.rank(cands, sizes, cfg, 1, on_result=add_then_stop)
        except BaseException:
            partial.save()
            raise
    resumed = PartialModel(tmp_path / "p.parquet", cfg, 1)
    known = resumed.load()
    assert len(known) == stop_after
    simulated: list[str] = []
    again = parlooper_model.rank(
        cands, sizes, cfg, 1, known=known, on_result=lambda c, _p: simulated.append(c.key)
    )
    assert len(simulated) == len(cands) - stop_after and not set(simulated) & set(known)
    assert [(c.key, p) for c, p in again] == [(c.key, p) for c, p in one]
    assert PartialModel(tmp_path / "p.parquet", cfg, 2).load() == {}  # other threads: not reused
    resumed.finish()
    assert not (tmp_path / "p.parquet").exists()
