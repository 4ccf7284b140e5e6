"""The TVM convolution baseline: a MetaSchedule-tuned module called through the kernel ABI is checked like
any candidate, and a module computing the wrong convolution is caught."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.check import CheckConfig
from harness.commands import tvm_tune
from kernels import tvm_conv
from kernels.baselines import BaselineUnavailable, render_baseline
from kernels.candidate import Candidate, Workload
from tests.conftest import run_candidates

FULL = CheckConfig(full_below=10**9)  # every output point checked
# odd channel counts, unequal filter sides and stride 2: a swapped layout or a wrong input extent fails
ODD = Workload.make("cv_odd", "conv2d", {"h": 4, "w": 5, "k": 13, "c": 5, "r": 3, "s": 2}, stride=2)


def _tvm(module: Path) -> Candidate:
    return Candidate("baseline", "tvm", (("module", str(module)),))


@pytest.mark.heavy  # tunes and builds TVM modules: about 2 minutes
@pytest.mark.skipif(bool(tvm_conv.unavailable()), reason=str(tvm_conv.unavailable()))
def test_a_tuned_module_passes_the_check_and_a_wrong_one_fails(tmp_path: Path, shared_cache: Path) -> None:
    # two random schedules (replay-trace, no cost model): the plumbing, not the tuning, is under test
    quick = {"trials": 2, "out_dir": tmp_path / "tvm", "cost_model": "random", "strategy": "replay-trace"}
    good = tvm_conv.tune(ODD, **quick)
    bad = tvm_conv.tune(ODD, **quick, wrong_reduction=True)
    assert good.path.exists() and good.record["trials"] == 2 and good.record["module_sha256"]
    assert tvm_conv.tune(ODD, **quick).record == good.record  # reused, not tuned again
    src = render_baseline(_tvm(good.path), ODD)
    assert good.record["module_sha256"] in src.code  # a re-tuned module is a new source hash
    ok, wrong = run_candidates([_tvm(good.path), _tvm(bad.path)], ODD, tmp_path / "res", shared_cache, FULL)
    assert ok["status"] == "ok" and ok["check_passed"] is True, ok["reason"]
    assert wrong["status"] == "wrong", wrong["reason"]


def test_the_tvm_baseline_needs_its_module(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="option module"):
        render_baseline(Candidate("baseline", "tvm"), ODD)
    if not tvm_conv.unavailable():
        with pytest.raises(BaselineUnavailable, match="no module"):
            render_baseline(_tvm(tmp_path / "missing.so"), ODD)
    gemm = Workload.make("mm", "matmul", {"i": 4, "j": 4, "k": 4})
    with pytest.raises(BaselineUnavailable, match="convolution"):
        render_baseline(_tvm(tmp_path / "missing.so"), gemm)


@pytest.mark.parametrize(
    ("layers", "message"),
    [("nope", "no workload 'nope'"), ("gemm_rn50_t01", "not a convolution")],
)
def test_tvm_tune_rejects_bad_layers(layers: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        tvm_tune.main(["--layers", layers, "--results", "/nonexistent"])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_tvm_tune_reads_the_layers_hydra_composes() -> None:
    w = tvm_tune.load_workload("yolo9000_23")  # K padded to 28272 (erratum), stride 1, 1x1
    assert w.op.name == "conv2d" and dict(w.size)["k"] == 28272 and dict(w.op.params)["stride"] == 1
    assert dict(tvm_tune.load_workload("resnet18_05").op.params)["stride"] == 2


def test_trial_seconds_keep_tvms_order_and_mark_failures(tmp_path: Path) -> None:
    lines = [[0, [[], [0.5], {}, []]], [0, [[], [1e10], {}, []]], [0, [[], [0.25, 0.35], {}, []]]]
    (tmp_path / "database_tuning_record.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert tvm_conv.trial_seconds(tmp_path) == [0.5, None, pytest.approx(0.3)]


@pytest.mark.skipif(bool(tvm_conv.unavailable()), reason=str(tvm_conv.unavailable()))
def test_a_rows_module_and_trial_count_are_read_from_its_options() -> None:
    path = tvm_conv.module_path(Path("/elsewhere/tvm"), ODD, 64, 3, "xgb-evolutionary")
    options = json.dumps(dict(_tvm(path).options))
    assert tvm_conv.module_of(options) == str(path) and tvm_conv.trials_of(str(path)) == 64
    assert tvm_conv.module_of(None) is None and tvm_conv.module_of("{}") is None
    assert tvm_conv.trials_of("/x/handmade.so") is None


# tune() asks for TVM before it looks for a stored module: without `make tvm` this would fail, not skip
@pytest.mark.skipif(bool(tvm_conv.unavailable()), reason=str(tvm_conv.unavailable()))
def test_a_module_tuned_before_trial_times_were_kept_gets_them_from_its_database(tmp_path: Path) -> None:
    path = tvm_conv.module_path(tmp_path, ODD, 2, 0, "xgb-evolutionary")
    path.write_bytes(b"ELF")
    path.with_suffix(".json").write_text(json.dumps({"trials": 2}))
    (work := path.with_suffix(".tuning")).mkdir()
    (work / "database_tuning_record.json").write_text(json.dumps([0, [[], [0.5], {}, []]]) + "\n")
    rec = tvm_conv.tune(ODD, 2, tmp_path).record
    assert rec["trial_seconds"] == [0.5] and rec["runner"] == tvm_conv.RUNNER
    assert json.loads(path.with_suffix(".json").read_text()) == rec  # written back once


@pytest.mark.parametrize(
    ("text", "seeds"), [("0", [0]), ("0-3", [0, 1, 2, 3]), ("5,1,1", [1, 5]), ("0-1,4", [0, 1, 4])]
)
def test_tvm_tune_seeds(text: str, seeds: list[int]) -> None:
    assert tvm_tune.seed_list(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1-"])
def test_tvm_tune_rejects_bad_seeds(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="seeds are"):
        tvm_tune.seed_list(text)


FAKE_MODULE = r"""
#include <stdint.h>
#include <string.h>
#ifdef COUNT
extern int allocs;
#endif
/* a module's runtime hooks, filled by the wrapper; this fake asks for workspaces as a schedule might */
void *__TVMBackendAllocWorkspace, *__TVMBackendFreeWorkspace;
typedef void *(*alloc_t)(int, int, uint64_t, int, int);
typedef int (*free_t)(int, int, void *);
int __tvm_ffi_main(void *self, const void *args, int32_t n, void *result) {
  alloc_t get = (alloc_t)__TVMBackendAllocWorkspace;
  free_t put = (free_t)__TVMBackendFreeWorkspace;
  char *first[2] = {0, 0};
  for (int it = 0; it < 3; ++it) {           /* one workspace per loop iteration, freed at its end */
    char *x = get(1, 0, 1000, 2, 32), *y = get(1, 0, 300000, 2, 32);
    if (!x || !y || (uintptr_t)x % 64 || (uintptr_t)y % 64 || x == y) return 1;
    memset(x, 1, 1000);
    memset(y, 2, 300000);
    if (it && (x != first[0] || y != first[1])) return 2;   /* reused, not allocated again */
#ifdef COUNT
    if (allocs != 2) return 5;
#endif
    first[0] = x, first[1] = y;
    put(1, 0, y);
    put(1, 0, x);
  }
  char *live[40];                              /* more live at once than the pool keeps */
  for (int i = 0; i < 40; ++i) if (!(live[i] = get(1, 0, 64 * (i + 1), 2, 32))) return 3;
  for (int i = 0; i < 40; ++i) memset(live[i], 3, 64 * (i + 1));
  for (int i = 0; i < 40; ++i) put(1, 0, live[i]);
  char *big = get(1, 0, 1 << 20, 2, 32);       /* larger than any freed block: a new one */
  if (!big || (uintptr_t)big % 64) return 4;
  memset(big, 4, 1 << 20);
  put(1, 0, big);
  return 0;
}
"""


MAIN = r"""
#include <stdlib.h>
int kernel(float *const *t, void *ws);
#ifdef COUNT
int allocs;
void *aligned_alloc(size_t align, size_t n) {  /* the wrapper's allocations, counted */
  void *p;
  ++allocs;
  return posix_memalign(&p, align, n) ? NULL : p;
}
#endif
int main(void) { float a[1], b[1], c[1]; float *t[3] = {a, b, c}; return kernel(t, 0); }
"""


def test_the_wrapper_reuses_the_modules_workspaces_as_tvms_runtime_does(tmp_path: Path) -> None:
    """A schedule may ask for a workspace in every loop iteration: the wrapper's allocator must hand back
    aligned blocks and reuse freed ones (malloc and free each time made resnet18_01's module 1.47x slower
    under the harness than in TVM's own runner)."""
    if tvm_conv.unavailable():
        pytest.skip(str(tvm_conv.unavailable()))
    import subprocess

    (fake := tmp_path / "fake.so").write_bytes(b"not a real module")
    (tmp_path / "wrapper.c").write_text(tvm_conv.wrapper_source(fake, ODD))
    (tmp_path / "module.c").write_text(FAKE_MODULE)
    (tmp_path / "main.c").write_text(MAIN)
    include, _ = tvm_conv.ffi_paths()
    # under AddressSanitizer (an overrun of a block or its header), then counting the allocations
    for flags in (["-fsanitize=address"], ["-DCOUNT"]):
        exe = tmp_path / "a.out"
        cc = ["gcc", "-O1", *flags, f"-I{include}", "wrapper.c", "module.c", "main.c", "-o", str(exe)]
        subprocess.run(cc, cwd=tmp_path, check=True)
        run = subprocess.run([str(exe)], capture_output=True, text=True)
        assert run.returncode == 0, (flags, run.returncode, run.stderr[-2000:])


def test_retime_replaces_the_stored_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are keyed by candidate, so a module timed once is skipped on a rerun; --retime times it again
    (in a scratch results directory) and replaces the stored row, leaving no scratch behind."""
    from harness import store
    from tests.test_store import make_row

    module = tmp_path / "tvm" / "m.so"
    monkeypatch.setattr(tvm_conv, "unavailable", lambda: None)
    monkeypatch.setattr(tvm_conv, "tune", lambda *a, **k: tvm_conv.TunedModule(module, {"tuning_seconds": 1,
                        "tvm_best_latency_s": 1e-3}))  # fmt: skip
    runs: list[Path] = []

    def fake_run(exp, machine):  # noqa: ANN001, ANN202
        runs.append(exp.results_dir)
        assert exp.cache_dir == tmp_path / "cache"  # the calibration and builds of the real results
        store.write_row(exp.results_dir, make_row(experiment=exp.name, times_ns=[1000.0 * len(runs)] * 4))

    monkeypatch.setattr(tvm_tune, "run_experiment", fake_run)
    argv = ["--layers", "yolo9000_12_small", "--results", str(tmp_path)]
    tvm_tune.main(argv)
    tvm_tune.main([*argv, "--retime"])
    assert runs[0] == tmp_path and runs[1] != tmp_path and not runs[1].exists()
    (row,) = store.load(tmp_path, tvm_tune.EXPERIMENT).to_dict("records")
    assert list(row["times_ns"]) == [2000.0] * 4
