"""counters=cachegrind (issue 37): cache counts without a PMU, in the counters column, marked simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cachegrind, store
from tests.test_cli import FAST, harness

pytestmark = pytest.mark.skipif(cachegrind.valgrind() is None, reason="valgrind is not installed")
SCHEMES = "space.schemes=['[R_j, R_i, T_{32,k}, U_{6,i}, U_{1,j}, V_j]']"


@pytest.mark.heavy
def test_a_run_without_a_pmu_counts_each_hot_call_under_cachegrind(tmp_path: Path) -> None:
    args = ["workload=matmul_small", "space=quick_matmul", SCHEMES, "baselines=[]", "target=avx2"]
    out = harness("run", *args, "counters=cachegrind", "experiment=cg", *FAST, f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = store.load(tmp_path, "cg").to_dict("records")  # the scheme with hoisting on and off
    assert len(rows) == 2 and {r["counter_backend"] for r in rows} == {cachegrind.BACKEND}
    (row,) = [r for r in rows if r["status"] == "ok" and '"hoist": true' in r["candidate_options"]]
    counts = {k: v[0] for k, v in json.loads(row["counters"]).items()}
    assert set(counts) >= {"Ir", "Dr", "Dw", "D1mr", "DLmr"}
    # 48 x 64 x 32 matmul, 8-lane vectors: at least one vector load of B per FMA group and the C tile once
    fmas = 48 * 64 * 32 // 8
    assert fmas // 4 < counts["Dr"] < 20 * fmas and counts["Dw"] >= 48 * 64 // 8
    # cold misses of one hot call are at most the tensors' lines (12 KB + 8 KB + 6 KB: all fit in L1)
    assert counts["DLmr"] <= (48 * 32 + 32 * 64 + 48 * 64) * 4 // 64


def test_avx512_code_is_not_simulated_and_says_why(tmp_path: Path) -> None:
    from harness.experiment import _simulated_counters
    from kernels.candidate import KernelSource

    row = {"counters_unavailable": "{}", "counters": "{}"}
    src = KernelSource(code="", target="avx512")

    class Built:
        so_path = tmp_path / "k.so"

    class Exp:
        cache_dir = tmp_path

    _simulated_counters(Exp, src, Built, [], row)  # type: ignore[arg-type]
    assert "AVX-512" in json.loads(row["counters_unavailable"])["cachegrind"] and row["counters"] == "{}"


def test_a_killed_valgrind_stops_a_run_instead_of_storing_a_row_without_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interruption is not a failure of the kernel: harness run must not store the row with its
    counters marked unavailable (a resumed run would skip it and never count it)."""
    from harness.experiment import _simulated_counters
    from kernels.candidate import KernelSource

    def killed(*_: object) -> None:
        raise cachegrind.CachegrindKilled("valgrind was killed by signal 15")

    monkeypatch.setattr(cachegrind, "count", killed)
    row = {"counters_unavailable": "{}", "counters": "{}"}

    class Built:
        so_path = tmp_path / "k.so"

    class Exp:
        cache_dir = tmp_path

    with pytest.raises(cachegrind.CachegrindKilled):
        _simulated_counters(Exp, KernelSource(code="", target="avx2"), Built, [], row)  # type: ignore[arg-type]
    assert row["counters_unavailable"] == "{}"


def test_an_unknown_backend_is_named() -> None:
    out = harness("run", "workload=matmul_small", "counters.backends=[pmu]")
    assert out.returncode == 2 and "allowed: papi, perf_event, cachegrind" in out.stderr


@pytest.mark.heavy
def test_cachegrind_agrees_with_the_pycachesim_hierarchy_on_a_loop_order(tmp_path: Path) -> None:
    """The two cache models of the harness on one kernel: a permutation-study loop order of a conv layer
    whose tensors exceed L1, run under cachegrind, and its address stream simulated by pycachesim with
    cachegrind's D1/LL (hot: the second pass counted). Their L1 misses agree within 2% (5 orders of a
    larger layer agreed within 0.7%, session note 19)."""
    from harness.cachesim import ConvNest, Hierarchy, config_from_dict
    from studies.permutations.kernels import scheme_text

    sizes = {"h": 8, "w": 8, "k": 64, "c": 32, "r": 3, "s": 3}  # 16 + 13 + 74 KB: over L1, in LL
    order = ("o", "y", "x", "i", "ky", "kx")
    args = ["workload=conv_small", *(f"workload.sizes.{d}={n}" for d, n in sizes.items()),
            f"scheme={scheme_text(order)}", "baselines=[]", "target=avx2", "counters=cachegrind",
            "experiment=cgval", *FAST, f"results_dir={tmp_path}"]  # fmt: skip
    out = harness("run", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = store.load(tmp_path, "cgval").to_dict("records")
    cg = {k: v[0] for k, v in json.loads(row["counters"]).items()}
    level = {"line": 64, "policy": "LRU"}
    levels = [{**level, "name": "L1", "size": 32768, "ways": 8, "latency": 4},
              {**level, "name": "LL", "size": 33554432, "ways": 16, "latency": 40}]  # fmt: skip
    h = Hierarchy(config_from_dict({"name": "cachegrind", "memory_latency": 100, "levels": levels}))
    nest = ConvNest(order, sizes)
    stream = nest.stream(0, nest.macs)
    h.load(stream)
    before = h.counts()
    h.load(stream)
    after = h.counts()
    sim = (after["L1_accesses"] - before["L1_accesses"]) - (after["L1_hits"] - before["L1_hits"])
    assert sim > 10_000  # the layer does not fit: misses to compare
    assert cg["D1mr"] + cg["D1mw"] == pytest.approx(sim, rel=0.02)
