"""Shared test helpers: run a candidate through the real pipeline (render, build, driver, check)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.check import CheckConfig
from harness.experiment import Experiment, run_experiment
from harness.machine import detect
from harness.run import TimingConfig
from kernels.candidate import Candidate, Workload

# The precompiled <immintrin.h> (harness.build) shared by every test, worker and run: most tests build in a
# cache of their own, and the header is keyed by flags and compiler, so sharing it changes no build
os.environ.setdefault("HARNESS_PCH_DIR", str(Path(tempfile.gettempdir()) / f"harness-pch-{os.getuid()}"))

FAST_TIMING = TimingConfig(mode="hot", warmup=0, min_reps=1, max_reps=1, max_seconds=1.0)
HOST_TARGET = detect().best_isa or "avx2"


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache per test session, so the driver, calibration and identical kernels are built once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def hidden_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[str], None]]:
    """``hide(name)``: baseline ``name``'s library is looked for where no file is, for this test only. The
    probed versions are cached per process, so the cache is cleared on the way in and out: a library hidden
    here must not stay "not installed" for the next test on this xdist worker."""
    import dataclasses

    from kernels import baselines

    def hide(name: str) -> None:
        nowhere = (str(tmp_path / "nowhere" / "lib*.so*"),)
        monkeypatch.setitem(baselines.BLAS, name, dataclasses.replace(baselines.BLAS[name], patterns=nowhere))
        baselines._library_info.cache_clear()

    yield hide
    monkeypatch.undo()
    baselines._library_info.cache_clear()


def run_candidates(
    candidates: list[Candidate],
    workload: Workload,
    results_dir: Path,
    cache_dir: Path | None = None,
    check: CheckConfig | None = None,
    timing: TimingConfig = FAST_TIMING,
    name: str = "test",
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows of a one-off experiment (one timed repetition); use a fresh ``results_dir`` per call."""
    exp = Experiment(
        name,
        workload,
        candidates,
        timing=timing,
        check=check or CheckConfig(),
        seed=seed,
        results_dir=results_dir,
        cache_root=cache_dir,
    )
    return run_experiment(exp, progress=lambda _msg: None)


def scheme(text: str, target: str = HOST_TARGET, **options: object) -> Candidate:
    return Candidate("scheme", text, tuple(sorted({"target": target, **options}.items())))
