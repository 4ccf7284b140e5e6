"""Vendor libraries through the real pipeline: exact on odd shapes, one thread, absent is not a failure."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.check import CheckConfig
from harness.run import reported_impl
from kernels import baselines
from kernels.baselines import BLAS, BaselineUnavailable, find_library, render_baseline
from kernels.candidate import Candidate, Workload
from tests.conftest import run_candidates

# Odd sizes catch a swapped leading dimension or operand; the last is above libxsmm's small-matrix
# limit (m*n*k > 262144), so its tiled path is checked too.
SHAPES = [(17, 33, 9), (64, 48, 40), (71, 66, 67)]
FULL = CheckConfig(full_below=10**9)

# What each wrapper must call before its first sgemm so that the library uses one thread.
ONE_THREAD = {
    "openblas": "scipy_openblas_set_num_threads(1);",  # PyPI's scipy-openblas32: prefixed symbols
    "openblas-0.3.21": "openblas_set_num_threads(1);",
    "numpy": "scipy_openblas_set_num_threads64_(1);",
    "mkl": "MKL_Set_Num_Threads(1);",
    "blis": "bli_thread_set_num_threads(1);",
    "onednn": "omp_set_num_threads(1);",  # both oneDNN builds use GNU OpenMP (dnnl_config.h)
    "onednn-2.6": "omp_set_num_threads(1);",
}
ONEDNNS = ("onednn", "onednn-2.6")  # PyPI's 3.x and Debian's 2.6.3


def missing(name: str) -> str | None:
    """Why the library cannot be used here, or None when it is installed."""
    try:
        find_library(BLAS[name])
    except BaselineUnavailable as exc:
        return str(exc)
    return None


def matmul(i: int, j: int, k: int) -> Workload:
    return Workload.make(f"mm{i}x{j}x{k}", "matmul", {"i": i, "j": j, "k": k})


def test_the_debian_and_numpy_openblas_are_available() -> None:
    assert missing("openblas") is None and missing("numpy") is None
    for name in sorted(BLAS):
        print(f"{name}: {missing(name) or find_library(BLAS[name])}")


@pytest.mark.parametrize("name", sorted(BLAS))
def test_baseline_is_exact_on_odd_shapes(name: str, tmp_path: Path, shared_cache: Path) -> None:
    reason = missing(name)
    if reason:
        pytest.skip(reason)
    for i, j, k in SHAPES:
        (row,) = run_candidates(
            [Candidate("baseline", name)], matmul(i, j, k), tmp_path / f"{i}x{j}x{k}", shared_cache, FULL
        )
        assert row["status"] == "ok", (name, (i, j, k), row["reason"])
        assert row["check_mode"] == "full" and row["check_passed"] is True
        assert row["check_points"] == i * j


@pytest.mark.parametrize("name", sorted(BLAS))
def test_missing_library_is_unsupported_with_its_name(
    name: str, tmp_path: Path, shared_cache: Path, hidden_library: Callable[[str], None]
) -> None:
    hidden_library(name)
    (row,) = run_candidates([Candidate("baseline", name)], matmul(17, 33, 9), tmp_path, shared_cache)
    assert row["status"] == "unsupported"
    assert name in row["reason"] and "not installed" in row["reason"]


def test_library_without_its_companion_file_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    if missing("libxsmm"):
        pytest.skip(missing("libxsmm"))
    monkeypatch.setitem(
        baselines.BLAS, "libxsmm", dataclasses.replace(BLAS["libxsmm"], extra=("{dir}/libxsmm_gone.a",))
    )
    with pytest.raises(BaselineUnavailable, match="libxsmm is incomplete"):
        render_baseline(Candidate("baseline", "libxsmm"), matmul(8, 8, 8))


@pytest.mark.parametrize(
    "workload",
    [
        Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1}),
        Workload.make("ct", "contraction", {"i": 4, "j": 4, "k": 4}, spec="ik,kj->ij"),
    ],
    ids=["conv2d", "contraction"],
)
def test_non_matmul_workloads_are_unsupported(workload: Workload, tmp_path: Path, shared_cache: Path) -> None:
    # oneDNN is the one library that also computes conv2d (its direct convolution, tested below)
    names = [n for n in sorted(BLAS) if not (n in ONEDNNS and workload.op.name == "conv2d")]
    cands = [Candidate("baseline", name) for name in names]
    rows = run_candidates(cands, workload, tmp_path, shared_cache)
    assert len(rows) == len(names)
    for row in rows:
        assert row["status"] == "unsupported" and "matmul only" in row["reason"], row
        assert row["candidate_text"] in row["reason"]


@pytest.mark.parametrize("name", sorted(BLAS))
def test_wrapper_runs_the_library_on_one_thread(name: str) -> None:
    if missing(name):
        pytest.skip(missing(name))
    src = render_baseline(Candidate("baseline", name), matmul(17, 33, 9))
    libs = " ".join(src.libs)
    assert find_library(BLAS[name]) in libs
    if name == "libxsmm":
        # the sequential library: no libxsmmext (OpenMP), no BLAS for it to hand large products to
        assert "libxsmmext" not in libs and "openmp" not in libs and "libxsmmnoblas.a" in libs
        assert "libxsmm_init();" in src.code
    else:
        assert ONE_THREAD[name] in src.code


# -- oneDNN's direct convolution (the conv2d baseline) ------------------------------------------------------
# Odd channel counts and kernel sizes, both strides: a swapped weight layout (HWIO vs OIHW), a wrong input
# extent or an overwritten (instead of accumulated) output all fail the full check.
CONV_SHAPES = [
    ({"h": 5, "w": 7, "k": 13, "c": 5, "r": 3, "s": 2}, 1),
    ({"h": 4, "w": 3, "k": 16, "c": 8, "r": 3, "s": 3}, 2),
    ({"h": 3, "w": 6, "k": 9, "c": 3, "r": 1, "s": 1}, 2),
]


@pytest.mark.parametrize("name", ["onednn", "onednn-blocked", "onednn-2.6", "onednn-2.6-blocked"])
@pytest.mark.parametrize(("sizes", "stride"), CONV_SHAPES)
def test_onednn_direct_convolution_passes_the_check(
    name: str, sizes: dict[str, int], stride: int, tmp_path: Path, shared_cache: Path
) -> None:
    library = name.removesuffix("-blocked")
    if missing(library):
        pytest.skip(missing(library))
    w = Workload.make("cv", "conv2d", sizes, stride=stride)
    src = render_baseline(Candidate("baseline", name), w)
    assert "dnnl_convolution_direct" in src.code and "dnnl_post_ops_append_sum" in src.code
    assert "omp_set_num_threads(1);" in src.code
    (row,) = run_candidates([Candidate("baseline", name)], w, tmp_path, shared_cache, FULL)
    assert row["status"] == "ok", row["reason"]
    assert row["check_mode"] == "full" and row["check_passed"] is True
    # the row names the kernel oneDNN chose (jit:avx2, gemm:jit, ref...), not only the library
    assert row["impl"].startswith(name + " ") and len(row["impl"]) > len(name) + 1


@pytest.mark.parametrize("library", ONEDNNS)
def test_onednn_blocked_runs_in_its_own_activation_layout(
    library: str, tmp_path: Path, shared_cache: Path
) -> None:
    """onednn-blocked lets oneDNN pick its activation layout: when it picks a blocked one the src conversion
    is announced (so the timed calls really ran on oneDNN's layout); the output passes the full check."""
    if missing(library):
        pytest.skip(missing(library))
    w = Workload.make("cv", "conv2d", {"h": 6, "w": 6, "k": 16, "c": 16, "r": 3, "s": 3})
    plain, blocked = run_candidates(
        [Candidate("baseline", library), Candidate("baseline", f"{library}-blocked")],
        w,
        tmp_path,
        shared_cache,
        FULL,
    )
    assert plain["status"] == blocked["status"] == "ok", (plain["reason"], blocked["reason"])
    assert "src in its layout" not in plain["impl"]
    # oneDNN's choice depends on the CPU: jit:avx2 takes nChw8c for 8-multiple channels (so the conversion
    # must be announced); brgconv (avx512_core, and avx2 where 3.2 picks it, as on a Zen 2) takes plain
    # nhwc (onednn-blocked is then onednn itself)
    if "jit:avx2" in blocked["impl"]:
        assert "src in its layout" in blocked["impl"]
    with pytest.raises(BaselineUnavailable, match="convolution"):
        render_baseline(
            Candidate("baseline", "onednn-blocked"), Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
        )


def test_reported_impl_takes_the_last_announcement() -> None:
    err = "warning: x\nharness-impl: onednn gemm:jit\nharness-impl: onednn jit:avx2\n"
    assert reported_impl(err) == "onednn jit:avx2"
    assert reported_impl("no announcement\n") == "" and reported_impl(None) == ""


@pytest.mark.parametrize("library", ONEDNNS)
def test_onednn_convolution_without_its_header_is_unsupported(
    library: str, tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if missing(library):
        pytest.skip(missing(library))
    gone = dataclasses.replace(BLAS[library], include=(str(tmp_path / "nowhere"),))
    monkeypatch.setitem(baselines.BLAS, library, gone)
    w = Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1})
    (row,) = run_candidates([Candidate("baseline", library)], w, tmp_path, shared_cache)
    assert row["status"] == "unsupported" and "dnnl.h" in row["reason"]


def test_each_onednn_is_compiled_against_its_own_header() -> None:
    """Debian's 2.x dnnl.h is on every default include path: the 3.x wrapper must put its own first (a
    3.x wrapper built on the 2.x header would not compile, or worse, call with the wrong structures)."""
    w = Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1})
    for library, api in (("onednn", "dnnl_convolution_forward_primitive_desc_create"),
                         ("onednn-2.6", "dnnl_convolution_forward_desc_init")):  # fmt: skip
        if missing(library):
            continue
        src = render_baseline(Candidate("baseline", library), w)
        assert api in src.code and src.cflags[0] == f"-I{BLAS[library].include[0]}"
        assert f"libdnnl.so.{3 if library == 'onednn' else 2}" in " ".join(src.libs)


@pytest.mark.parametrize("name", sorted(ONE_THREAD))
def test_threads_option_sets_the_library_pool(name: str) -> None:
    """A parallel comparison runs the library on as many threads as the kernel it is compared with."""
    if missing(name):
        pytest.skip(missing(name))
    w = Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
    two = render_baseline(Candidate("baseline", name, (("threads", 2),)), w).code
    one = render_baseline(Candidate("baseline", name), w).code
    assert ONE_THREAD[name] in one and ONE_THREAD[name] not in two
    assert ONE_THREAD[name].replace("(1)", "(2)") in two


def test_threads_must_be_positive() -> None:
    w = Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
    with pytest.raises(ValueError, match="threads must be >= 1"):
        render_baseline(Candidate("baseline", "onednn", (("threads", 0),)), w)
