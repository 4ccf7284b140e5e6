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
