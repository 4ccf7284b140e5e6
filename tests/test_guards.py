"""Guards before work (issue 37): absurd schemes, oversized tensors and unwritable results directories are
refused with exit 2 and one line before anything is generated, compiled, calibrated or measured."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

from harness import build, cli
from kernels.candidate import Candidate, Workload
from kernels.guards import SizeLimits, SizeRefused, check_candidate, check_memory
from tests.test_cli import harness

SMALL = Workload.make("matmul_small", "matmul", {"i": 48, "j": 64, "k": 32})
BIG = "scheme=[R_j, R_i, R_k, U_{512,i}, U_{64,j}, V_j]"
MM = "workload=matmul_small"


def sizes(i: int, j: int, k: int) -> list[str]:
    return [f"workload.sizes.i={i}", f"workload.sizes.j={j}", f"workload.sizes.k={k}"]


def scheme(text: str, target: str = "avx2", partial: str = "none") -> Candidate:
    options = {"target": target, "hoist": True, "fma": True, "partial": partial}
    return Candidate("scheme", text, tuple(sorted(options.items())))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([MM, "scheme=[R_j, R_i, R_k, U_{100000,i}, V_j]", "codegen.partial=masked"],
         "U_{100000,i} unroll the microkernel body to 100000 vector statements (limit limits.unrolled=4096"),
        ([MM, *sizes(4096, 4096, 4096), BIG], "U_{512,i}, U_{64,j} unroll the microkernel body to 32768"),
        ([MM, "workload.sizes.i=80", "target=avx2", "scheme=[R_j, R_i, R_k, U_{40,i}, U_{4,j}, V_j]"],
         "U_{40,i}, U_{4,j} hold 160 output vectors in registers, 10.0x the 16 of avx2"),
        ([MM, *sizes(100000, 100000, 100000)], "take 111.8 GiB, over the"),
        ([MM, "limits.unrolled=0"], "limits.unrolled must be a positive integer or null"),
    ],
    ids=["issue-unroll", "issue-4096", "accumulators", "memory", "bad-limit"],
)  # fmt: skip
def test_absurd_work_is_refused_in_one_line_before_anything_is_built(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    for command in ("show", "run"):
        out = harness(command, *args, f"results_dir={tmp_path}")
        assert out.returncode == 2, out.stderr
        assert needle in out.stderr and out.stderr.strip().count("\n") == 0, out.stderr
        assert out.stdout == ""
    assert not (tmp_path / "rows").exists() and not list(tmp_path.rglob("*.so"))  # nothing built or stored


def test_a_lifted_limit_lets_the_scheme_through(tmp_path: Path) -> None:
    text = "scheme=[R_j, R_i, R_k, U_{6,i}, U_{2,j}, V_j]"
    refused = harness("show", "workload=matmul_small", text, "limits.unrolled=8", f"results_dir={tmp_path}")
    assert refused.returncode == 2 and "12 vector statements (limit limits.unrolled=8" in refused.stderr
    shown = harness("show", "workload=matmul_small", text, "limits.unrolled=null", f"results_dir={tmp_path}")
    assert shown.returncode == 0 and "fmadd_ps" in shown.stdout, shown.stderr


def test_the_guard_counts_unrolls_accumulators_and_tensors() -> None:
    limits = SizeLimits(unrolled=64, accumulators=1.0, memory_bytes=10**6)
    check_candidate(
        scheme("[R_j, R_i, T_{32,k}, U_{6,i}, U_{2,j}, V_j]"), SMALL, limits
    )  # 12 of 16 registers
    with pytest.raises(SizeRefused, match="hold 24 output vectors"):
        check_candidate(scheme("[R_j, R_i, R_k, U_{12,i}, U_{2,j}, V_j]"), SMALL, limits)
    with pytest.raises(SizeRefused, match="U_{4,k}, U_{6,i}, U_{2,j} unroll the microkernel body to 48"):
        check_candidate(scheme("[R_j, R_i, T_{8,k}, U_{4,k}, U_{6,i}, U_{2,j}, V_j]"), SMALL,
                        SizeLimits(unrolled=32))  # fmt: skip
    # a reduction unroll multiplies the body, not the accumulators
    check_candidate(scheme("[R_j, R_i, T_{8,k}, U_{4,k}, U_{6,i}, U_{2,j}, V_j]"), SMALL, limits)
    # Uλ counts its largest unroll
    conv = Workload.make("c", "conv2d", {"h": 4, "w": 7, "k": 32, "c": 8, "r": 3, "s": 3})
    lam = scheme("[T_{4,h}, T_{8,c}, T_{3,r}, T_{3,s}, λ_seq_w.[(1,3),(1,4)], Uλ_w, U_{4,k}, V_k]")
    with pytest.raises(SizeRefused, match="hold 16 output vectors"):
        check_candidate(lam, conv, SizeLimits(accumulators=0.9))
    check_candidate(lam, conv, SizeLimits(accumulators=1.0))
    check_candidate(scheme("[R_q]"), SMALL, limits)  # illegal: legality reports it, not the guard
    # a scalar micro-tile (seed 002's "ukernel" stage: 12 x 32 scalars) is bounded by the unroll limit only
    tile = Workload.make("m", "matmul", {"i": 48, "j": 64, "k": 8})
    check_candidate(scheme("[R_k, U_{12,i}, U_{32,j}]"), tile, SizeLimits())
    check_memory(SMALL, limits)
    with pytest.raises(SizeRefused, match="over the 0.0 GiB"):
        check_memory(SMALL, SizeLimits(memory_bytes=1000))


def test_an_unwritable_results_directory_is_refused_before_hydra(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    for target, needle in [
        (tmp_path / "missing" / "results", "does not exist (create it first)"),
        (Path(__file__), "is a file, not a directory"),
        (Path("/proc/harness-results"), "cannot be written"),
    ]:
        for args in (
            ["run", "workload=matmul_small", f"results_dir={target}"],
            ["calibrate", "--results", str(target)],
        ):
            out = harness(*args)
            assert out.returncode == 2 and needle in out.stderr, (args, out.stderr)
            assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert not (tmp_path / "missing").exists()

    def read_only(*_a, **_k):  # noqa: ANN002, ANN003, ANN202 (a read-only mount, as root cannot chmod one)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", read_only)
    with pytest.raises(cli.UsageError, match="cannot be written: Read-only file system"):
        cli.writable_results(tmp_path)


def test_the_compile_timeout_grows_with_the_source_and_says_so(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    assert build.compile_timeout("x\n" * 1000) == build.COMPILE_TIMEOUT_S + 1000 / build.COMPILE_LINES_PER_S
    monkeypatch.setattr(build, "COMPILE_TIMEOUT_S", 0.5)
    slow_cc = [sys.executable, "-c", "import time; time.sleep(30)"]  # takes the source and -o as argv
    error = build._compile(slow_cc, "int x;\n" * 10, [], tmp_path / "out.so", tmp_path)
    assert error == "compiler timed out after 1s (the limit for a 10-line source: 0.5s + 1s per 100 lines)"
