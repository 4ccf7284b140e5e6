"""PyTorch as a baseline (kernels.torch_baseline) through the real pipeline: build, driver, full check."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.check import CheckConfig
from kernels import torch_baseline
from kernels.baselines import BaselineUnavailable
from kernels.candidate import Candidate, Workload
from tests.conftest import run_candidates

# tens of seconds: out of `make test`, run by CI with `pytest -m heavy`
pytestmark = pytest.mark.heavy

FULL = CheckConfig(full_below=10**9)
KIND = "baseline"  # the names torch and torch-packed are baselines (kernels.baselines.render_baseline)


@pytest.fixture
def fresh_lookup() -> Iterator[None]:
    """Forget what was found about torch, before and after (a test may hide it)."""
    caches = (torch_baseline.torch_dir, torch_baseline.unavailable, torch_baseline.onednn_version)
    for cached in caches:
        cached.cache_clear()
    yield
    for cached in caches:
        cached.cache_clear()


def needs_torch() -> None:
    if reason := torch_baseline.unavailable():
        pytest.skip(reason)


def run_one(name: str, workload: Workload, results: Path, cache: Path) -> dict[str, object]:
    (row,) = run_candidates([Candidate(KIND, name)], workload, results, cache, FULL)
    return row


@pytest.mark.parametrize(("i", "j", "k"), [(17, 33, 9), (71, 66, 67)])
def test_torch_matmul_is_exact_on_odd_shapes(
    i: int, j: int, k: int, tmp_path: Path, shared_cache: Path
) -> None:
    needs_torch()
    w = Workload.make(f"mm{i}x{j}x{k}", "matmul", {"i": i, "j": j, "k": k})
    row = run_one("torch", w, tmp_path, shared_cache)
    assert row["status"] == "ok", row["reason"]
    assert row["check_mode"] == "full" and row["check_passed"] is True and row["check_points"] == i * j
    assert str(row["impl"]).startswith(f"torch {torch_baseline.version()} matmul addmm_"), row["impl"]


# A strided layer with 3 channels (odd extents: a swapped HWIO/OIHW or a wrong input stride fails the
# check), small enough that ATen 2.13 runs its own im2col convolution (Slow2d); and one whose input
# (27x27x32 > 20480 elements) makes at::conv2d call oneDNN, so both of the plain wrapper's paths are checked.
SMALL = Workload.make("c", "conv2d", {"h": 5, "w": 6, "k": 16, "c": 3, "r": 3, "s": 3}, stride=2)
LARGE = Workload.make("c", "conv2d", {"h": 13, "w": 13, "k": 16, "c": 32, "r": 3, "s": 3}, stride=2)


@pytest.mark.parametrize(
    ("name", "workload", "impl"),
    [
        ("torch", SMALL, "channels_last at::conv2d -> Slow2d"),
        ("torch", LARGE, "channels_last at::conv2d -> Mkldnn"),
        ("torch-packed", SMALL, "packed weights (oneDNN blocked) mkldnn::_convolution_pointwise_.binary"),
    ],
    ids=["torch-small", "torch-large", "torch-packed-small"],
)
def test_torch_conv_passes_the_full_check(
    name: str, workload: Workload, impl: str, tmp_path: Path, shared_cache: Path
) -> None:
    needs_torch()
    row = run_one(name, workload, tmp_path, shared_cache)
    assert row["status"] == "ok", row["reason"]
    assert row["check_mode"] == "full" and row["check_passed"] is True
    # the row says which code ran under the name: ATen's backend, and the oneDNN inside torch
    assert impl in str(row["impl"]) and "oneDNN 3." in str(row["impl"]), row["impl"]


def test_without_torch_both_names_are_unavailable(
    fresh_lookup: None, tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch_baseline, "find_spec", lambda name: None)
    assert torch_baseline.unavailable() == "torch is not installed (no module torch)"
    for name in torch_baseline.NAMES:
        with pytest.raises(BaselineUnavailable, match=f"baseline {name}: torch is not installed"):
            torch_baseline.render_candidate(Candidate(KIND, name), SMALL)
    # through the pipeline: an unsupported row naming torch, not a failure
    row = run_one("torch-packed", SMALL, tmp_path, shared_cache)
    assert row["status"] == "unsupported" and "torch is not installed" in str(row["reason"])


def test_torch_without_headers_is_unavailable(
    fresh_lookup: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    monkeypatch.setattr(torch_baseline, "torch_dir", lambda: tmp_path / "torch")
    assert "no C++ headers" in str(torch_baseline.unavailable())
    with pytest.raises(BaselineUnavailable, match="baseline torch: .*no C\\+\\+ headers"):
        torch_baseline.render_torch("torch", SMALL, 1)


def test_other_operators_are_unsupported() -> None:
    contraction = Workload.make("ct", "contraction", {"i": 4, "j": 4, "k": 4}, spec="ik,kj->ij")
    with pytest.raises(
        BaselineUnavailable, match="baseline torch implements matmul and conv2d only, not contraction"
    ):
        torch_baseline.render_torch("torch", contraction, 1)
    matmul = Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
    with pytest.raises(BaselineUnavailable, match="torch-packed is a convolution, not matmul"):
        torch_baseline.render_torch("torch-packed", matmul, 1)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        torch_baseline.render_candidate(Candidate(KIND, "torch", (("threads", 0),)), matmul)


def test_wrapper_sets_the_thread_count_and_links_torch() -> None:
    needs_torch()
    matmul = Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
    one = torch_baseline.render_candidate(Candidate(KIND, "torch"), matmul)
    two = torch_baseline.render_candidate(Candidate(KIND, "torch", (("threads", 2),)), matmul)
    assert "at::set_num_threads(1);" in one.code and "at::set_num_threads(2);" in two.code
    assert one.target == "any" and one.cflags[:3] == ("-x", "c++", "-std=c++17")
    lib = torch_baseline.torch_dir() / "lib"  # type: ignore[operator]
    assert f"-Wl,--no-as-needed,{lib / 'libtorch_cpu.so'}" in one.libs and f"-Wl,-rpath,{lib}" in one.libs


def test_lookups_do_not_import_torch() -> None:
    """Finding torch, its version and its oneDNN's must not import it (seconds, and memory, per process)."""
    code = (
        "import sys\nfrom kernels import torch_baseline as t\n"
        "print(t.unavailable(), t.version(), t.onednn_version())\nassert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    if torch_baseline.unavailable() is None:
        reason, version, onednn = out.stdout.split()
        assert reason == "None" and version == torch_baseline.version() and onednn.count(".") == 2
