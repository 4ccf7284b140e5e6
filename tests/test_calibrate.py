"""Peak calibration: the FMA loop keeps its accumulators in registers, results are cached per machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness import calibrate as cal
from harness.machine import detect

SPILLING_LOOP = """
.L3:
\tvmovaps\t-48(%rbp), %ymm1
\tvfmadd231ps\t%ymm0, %ymm0, %ymm1
\tvmovaps\t%ymm1, -48(%rbp)
\tvfmadd231ps\t(%rsp), %ymm0, %ymm2
\taddq\t$1, %rax
\tjne\t.L3
"""


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_peak_loop_keeps_accumulators_in_registers(isa: str) -> None:
    """Checked for both ISAs on any host: compiling AVX-512 needs no AVX-512 CPU."""
    asm = cal.function_asm(cal.peak_asm(), cal.PEAK_FUNCTIONS[isa])
    loops = cal.fma_loops(asm)
    assert len(loops) == 1
    fmas = [s for s in loops[0] if s.startswith("vfmadd")]
    assert len(fmas) == cal.PEAK_ACCUMULATORS[isa]
    reg = "%ymm" if isa == "avx2" else "%zmm"
    assert all(reg in s and "(" not in s for s in fmas)
    assert not cal.fma_loop_spills(asm)


def test_spill_detector_catches_memory_operands() -> None:
    assert cal.fma_loop_spills(SPILLING_LOOP)
    assert not cal.fma_loop_spills(SPILLING_LOOP.replace("-48(%rbp)", "%ymm5").replace("(%rsp)", "%ymm6"))
    with pytest.raises(ValueError, match="no loop"):
        cal.fma_loop_spills("\tvfmadd231ps\t%ymm0, %ymm0, %ymm1\n\tret\n")


def test_spill_detector_on_unoptimized_build(tmp_path: Path) -> None:
    """At -O0 every accumulator lives on the stack: the real compiler output must be flagged."""
    out = tmp_path / "peak.s"
    subprocess.run(["gcc", "-O0", "-S", str(cal.PEAK_SOURCE), "-o", str(out)], check=True)
    assert cal.fma_loop_spills(cal.function_asm(out.read_text(), "peak_avx2"))


def test_calibrate_measures_each_isa_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = detect()
    if not m.isas:
        pytest.skip(f"CPU {m.model_name!r} has neither AVX2+FMA nor AVX-512")
    quick = {"avx2": 5_000_000, "avx512": 2_500_000}
    peaks = cal.calibrate(m, cache_dir=tmp_path, iters=quick, trials=3)
    assert set(peaks) == set(m.isas)
    for isa, p in peaks.items():
        assert p["gflops"] > 0 and len(p["trials"]) == 3, isa
        assert p["gflops"] == max(p["trials"]) and p["cv"] >= 0

    path = tmp_path / f"calibration-{m.fingerprint}.json"
    assert json.loads(path.read_text())["peaks"] == peaks
    mtime = path.stat().st_mtime_ns

    def no_rerun(*args: object, **kwargs: object) -> None:
        raise AssertionError("calibrate() re-ran the benchmark despite its cache")

    monkeypatch.setattr(cal, "_measure", no_rerun)
    monkeypatch.setattr(cal, "peak_asm", no_rerun)
    assert cal.calibrate(m, cache_dir=tmp_path) == peaks
    assert path.stat().st_mtime_ns == mtime
