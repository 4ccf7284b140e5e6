"""The measurement driver: correct output, hot/cold timing, and every failure mode as a RunResult."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness import run as run_mod
from harness.build import CompilerConfig, build
from harness.interrupt import Interrupted
from harness.machine import detect
from harness.run import RunLimits, RunResult, TimingConfig, run_kernel
from kernels.candidate import KernelSource

M, N, K = 24, 40, 17  # odd sizes: an indexing bug cannot hide behind symmetry

MATMUL = f"""
int kernel(float *const *t, void *ws) {{
    (void)ws;
    float *C = t[0];
    const float *A = t[1], *B = t[2];
    for (int i = 0; i < {M}; i++)
        for (int j = 0; j < {N}; j++)
            for (int k = 0; k < {K}; k++) C[i * {N} + j] += A[i * {K} + k] * B[k * {N} + j];
    return 0;
}}
"""

FAST = dict(warmup=1, min_reps=5, max_reps=20, rel_ci=1.0, max_seconds=5.0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def private_tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's tensor files in its own directory, so leftovers are visible and never shared."""
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setattr(run_mod, "TMP_ROOT", root)
    return root


def _so(code: str, cache: Path, target: str = "avx2") -> Path:
    res = build(KernelSource(code, target), CompilerConfig(), cache)
    assert res.ok and res.so_path is not None, res.error
    return res.so_path


def _matmul_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((M, N), (M, K), (K, N))]


def _run(code: str, cache: Path, tensors: list[np.ndarray] | None = None, **kw: object) -> RunResult:
    timing = kw.pop("timing", TimingConfig(**FAST))
    return run_kernel(_so(code, cache), tensors or [np.zeros(16, np.float32)], 0, timing,
                      workdir=cache, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_matmul_output_matches_numpy(cache: Path, private_tmp_root: Path) -> None:
    c, a, b = _matmul_inputs()
    res = run_kernel(_so(MATMUL, cache), [c, a, b], 0, TimingConfig(**FAST), workdir=cache)
    assert res.status == "ok", res.reason
    assert res.output is not None and res.output.shape == (M, N)
    expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(res.output, expected, rtol=1e-4, atol=1e-4)
    # The inputs of the caller are untouched: the kernel ran on the driver's copies.
    assert np.array_equal(c, _matmul_inputs()[0])
    assert not any(private_tmp_root.iterdir()), "temporary tensor files left behind"


@pytest.mark.parametrize(
    ("mode", "method"), [("hot", "clflushopt"), ("cold", "clflushopt"), ("cold", "sweep")]
)
def test_modes_time_at_least_min_reps(cache: Path, mode: str, method: str) -> None:
    timing = TimingConfig(mode=mode, cold_method=method, flush_bytes=4 << 20, **FAST)  # type: ignore[arg-type]
    res = run_kernel(_so(MATMUL, cache), _matmul_inputs(), 0, timing, workdir=cache)
    assert res.status == "ok", res.reason
    assert res.n_reps == len(res.times_ns) == len(res.tsc) >= timing.min_reps
    assert all(t > 0 for t in res.times_ns) and all(t > 0 for t in res.tsc)
    assert res.tsc_hz is not None and 1e8 < res.tsc_hz < 1e10
    if mode == "hot":
        assert res.cold_method == "none"
    else:
        assert res.cold_method == method or (method == "clflushopt" and res.cold_method == "clflush")


def test_stopping_rule_is_bounded(cache: Path) -> None:
    never_precise = TimingConfig(warmup=0, min_reps=2, max_reps=7, rel_ci=0.0, max_seconds=30.0)
    res = _run(MATMUL, cache, _matmul_inputs(), timing=never_precise)
    assert res.status == "ok" and res.n_reps == 7
    out_of_time = TimingConfig(warmup=0, min_reps=1000, max_reps=10**6, rel_ci=0.0, max_seconds=0.2)
    res = _run("#include <unistd.h>\nint kernel(float *const *t, void *w) { usleep(20000); return 0; }",
               cache, timing=out_of_time)  # fmt: skip
    assert res.status == "ok" and 1 <= res.n_reps < 50


def test_tensors_and_workspace_are_aligned(cache: Path) -> None:
    code = """
    #include <stdint.h>
    #include <string.h>
    int kernel(float *const *t, void *ws) {
        for (int i = 0; i < 3; i++) if ((uintptr_t)t[i] % 1024) return 2;
        if (!ws || (uintptr_t)ws % 1024) return 3;
        memset(ws, 0xff, 100000);
        t[0][0] = 42.0f;
        return 0;
    }
    """
    tensors = [np.zeros(3, np.float32), np.zeros(5, np.float32), np.zeros(7, np.float32)]
    res = run_kernel(_so(code, cache), tensors, 100000, TimingConfig(**FAST), workdir=cache)
    assert res.status == "ok", res.reason
    assert res.output is not None and res.output[0] == 42.0


def test_segfault_is_a_crash(cache: Path, private_tmp_root: Path) -> None:
    res = _run("int kernel(float *const *t, void *w) { *(volatile int *)0 = 1; return 0; }", cache)
    assert res.status == "crash" and "SIGSEGV" in res.reason
    assert res.output is None
    assert not any(private_tmp_root.iterdir()), "temporary tensor files left behind"


def test_a_driver_stopped_from_outside_records_nothing(cache: Path, private_tmp_root: Path) -> None:
    """SIGTERM (a scheduler's cancel, a user's kill) is not the kernel's fault: no crash row, the run
    stops; a kernel's own signal (test above) stays a crash."""
    code = "#include <signal.h>\nint kernel(float *const *t, void *w) { raise(SIGTERM); return 0; }"
    with pytest.raises(Interrupted, match="stopped by SIGTERM; nothing was recorded"):
        _run(code, cache)
    assert not any(private_tmp_root.iterdir()), "temporary tensor files left behind"


def test_hang_is_a_timeout(cache: Path) -> None:
    code = "int kernel(float *const *t, void *w) { volatile int x = 0; for (;;) x++; return 0; }"
    res = _run(code, cache, limits=RunLimits(timeout_s=2))
    assert res.status == "timeout" and "2s" in res.reason


def test_nonzero_return_is_a_kernel_error(cache: Path) -> None:
    res = _run("int kernel(float *const *t, void *w) { return 1; }", cache)
    assert res.status == "kernel_error" and "1" in res.reason and res.output is None


def test_memory_limit_applies(cache: Path) -> None:
    code = """
    #include <stdlib.h>
    int kernel(float *const *t, void *w) { void *p = malloc((size_t)2 << 30); free(p); return p == NULL; }
    """
    # freed: the driver calls the kernel once per repetition, and a leak of 2 GiB a call ran into the default
    # limit (80% of RAM) after a few more retimed repetitions on a busy CI host
    assert _run(code, cache).status == "ok"
    res = _run(code, cache, limits=RunLimits(memory_bytes=512 << 20))
    assert res.status == "kernel_error"


def test_missing_library_is_an_error(cache: Path, tmp_path: Path) -> None:
    res = run_kernel(tmp_path / "nope.so", [np.zeros(4, np.float32)], 0, TimingConfig(**FAST), workdir=cache)
    assert res.status == "error" and "dlopen" in res.reason


@pytest.mark.parametrize("counters", [["perf_event"], ["papi", "perf_event"]])
def test_counters_present_or_explained(cache: Path, counters: list[str]) -> None:
    """Passes with or without a PMU: either the counters are there, or every tried backend says why."""
    res = _run(MATMUL, cache, _matmul_inputs(), counters=counters)
    assert res.status == "ok", res.reason
    if res.counter_backend == "none":
        assert res.counters == {}
        assert list(res.counters_unavailable) == counters
        assert all(reason.strip() for reason in res.counters_unavailable.values())
    else:
        assert res.counter_backend in counters
        assert len(res.counters["cycles"]) == len(res.counters["instructions"]) == res.n_reps
        assert all(c > 0 for c in res.counters["cycles"])
        assert set(res.counters_unavailable) == set(counters[: counters.index(res.counter_backend)])


def test_avx512_kernel_runs_where_supported(cache: Path) -> None:
    code = """
    #include <immintrin.h>
    int kernel(float *const *t, void *ws) {
        (void)ws;
        __m512 x = _mm512_load_ps(t[1]);
        _mm512_store_ps(t[0], _mm512_fmadd_ps(x, x, _mm512_load_ps(t[0])));
        return 0;
    }
    """
    so = _so(code, cache, target="avx512")  # building needs no AVX-512, only running does
    if "avx512" not in detect().isas:
        pytest.skip(f"CPU {detect().model_name!r} cannot execute AVX-512 (isas: {detect().isas})")
    x = np.arange(16, dtype=np.float32)
    res = run_kernel(so, [np.ones(16, np.float32), x], 0, TimingConfig(warmup=0, min_reps=1, max_reps=1),
                     workdir=cache)  # fmt: skip
    assert res.status == "ok", res.reason
    np.testing.assert_array_equal(res.output, 1 + x * x)


def test_hot_warm_up_lasts_at_least_warmup_seconds(cache: Path) -> None:
    """Warm-up is calls AND time: a microsecond kernel is called for at least warmup_seconds."""
    counting = "int kernel(float *const *t, void *w) { (void)w; t[0][0] += 1.0f; return 0; }"
    import time

    timing = TimingConfig(mode="hot", warmup=1, warmup_seconds=0.3, min_reps=1, max_reps=1, rel_ci=1.0)
    start = time.monotonic()
    res = _run(counting, cache, timing=timing)
    assert res.status == "ok", res.reason
    assert time.monotonic() - start >= 0.3  # the driver kept calling the kernel for 0.3 s


COUNTING_SLEEPER = """
#include <stdio.h>
#include <unistd.h>
int kernel(float *const *t, void *w) {{
    (void)t; (void)w;
    static int calls;
    FILE *f = fopen("{path}", "w");
    fprintf(f, "%d", ++calls);
    fclose(f);
    usleep({us});
    return 0;
}}
"""


@pytest.mark.parametrize(("sleep_us", "give_up_ns", "raced"), [(3000, 1e6, True), (0, 1e9, False)])
def test_racing_gives_up_on_slow_calls_only(
    cache: Path, tmp_path: Path, sleep_us: int, give_up_ns: float, raced: bool
) -> None:
    """A kernel slower than give_up_ns is called once to check, 3 times to warm up (as any) and twice
    timed; a fast one gets the whole protocol (at least 5 timed calls)."""
    calls = tmp_path / "calls"
    code = COUNTING_SLEEPER.format(path=calls, us=sleep_us)
    timing = TimingConfig(mode="hot", warmup=3, min_reps=5, max_reps=20, rel_ci=1.0, max_seconds=5.0)
    res = run_kernel(_so(code, cache), [np.zeros(16, np.float32)], 0, timing, (), RunLimits(), cache,
                     give_up_ns=give_up_ns)  # fmt: skip
    assert res.status == "ok", res.reason
    assert res.raced is raced
    if raced:
        assert res.n_reps == 2 and int(calls.read_text()) == 1 + 3 + 2
        assert min(res.times_ns) > give_up_ns
    else:
        assert res.n_reps >= 5 and int(calls.read_text()) == 1 + 3 + res.n_reps


def test_race_must_be_a_multiple_above_one() -> None:
    with pytest.raises(ValueError, match="timing.race must be > 1"):
        TimingConfig(race=0.9)
    with pytest.raises(ValueError, match="timing.retime must be > 1"):
        TimingConfig(retime=1.0)
    with pytest.raises(ValueError, match="timing.retime_wait must be >= 0"):
        TimingConfig(retime_wait=-1.0)


# -- threads: a parallel (OpenMP) kernel runs on as many cores as asked, a serial one on one -------------
OMP_PROBE = """
#include <omp.h>
#include <sched.h>
int kernel(float *const *t, void *ws) {
    (void)ws;
    /* out[0]: threads of a parallel region; out[1 + n]: the CPU thread n ran on */
    #pragma omp parallel
    {
        #pragma omp single
        t[0][0] = (float)omp_get_num_threads();
        t[0][1 + omp_get_thread_num() % 15] = (float)sched_getcpu();
    }
    return 0;
}
"""


def _omp_so(cache: Path) -> Path:
    res = build(KernelSource(OMP_PROBE, "any", cflags=("-fopenmp",)), CompilerConfig(), cache)
    assert res.ok and res.so_path is not None, res.error
    return res.so_path


def test_serial_runs_keep_their_single_core_pinning(cache: Path) -> None:
    probe = [np.full(16, -1, np.float32)]
    res = run_kernel(_omp_so(cache), probe, 0, TimingConfig(**FAST), (), workdir=cache)
    assert res.status == "ok", res.reason
    assert res.threads == 1 and res.cpus == [run_mod.default_cpu()]
    assert res.output is not None and res.output[0] == 1 and res.output[1] == run_mod.default_cpu()


def test_parallel_runs_use_the_cores_asked_for(cache: Path) -> None:
    import os

    n = len(os.sched_getaffinity(0))
    if n < 2:
        pytest.skip(f"this process may use {n} CPU: no parallel run possible")
    timing = TimingConfig(**FAST, threads=2)
    res = run_kernel(_omp_so(cache), [np.full(16, -1, np.float32)], 0, timing, (), workdir=cache)
    assert res.status == "ok", res.reason
    assert res.threads == 2 and res.cpus == run_mod.cpus_for(timing) and len(res.cpus) == 2
    assert res.output is not None and res.output[0] == 2
    assert set(res.output[1:3].astype(int)) == set(res.cpus)  # one thread bound to each CPU of the set


def test_too_many_threads_is_an_error(cache: Path) -> None:
    import os

    timing = TimingConfig(**FAST, threads=len(os.sched_getaffinity(0)) + 1)
    res = run_kernel(_omp_so(cache), [np.zeros(16, np.float32)], 0, timing, (), workdir=cache)
    assert res.status == "error" and "threads" in res.reason


# -- fresh workspace and batches (seed 001's protocol) ----------------------------------------------------
FRESH_PROBE = """
#include <string.h>
int kernel(float *const *t, void *ws) {
    /* a freshly mapped workspace reads as zero; leave a mark that a reused one would show */
    unsigned char *b = ws;
    for (int i = 0; i < 100000; i += 4096) if (b[i]) return 4;
    memset(ws, 0xff, 100000);
    t[0][0] += 1.0f;
    return 0;
}
"""


def test_fresh_mode_maps_a_new_workspace_per_call(cache: Path) -> None:
    kw = dict(warmup=0, min_reps=3, max_reps=3, rel_ci=1.0, max_seconds=5.0)
    # the check run and the first timed call share the first mapping: the driver remaps before each rep
    fresh = run_kernel(_so(FRESH_PROBE, cache), [np.zeros(4, np.float32)], 100000,
                       TimingConfig(mode="fresh", **kw), workdir=cache)  # type: ignore[arg-type]  # fmt: skip
    assert fresh.status == "ok", fresh.reason
    reused = run_kernel(_so(FRESH_PROBE, cache), [np.zeros(4, np.float32)], 100000,
                        TimingConfig(mode="cold", **kw), workdir=cache)  # type: ignore[arg-type]  # fmt: skip
    assert reused.status == "kernel_error"


COUNTING = """
static int calls;
int kernel(float *const *t, void *ws) { (void)ws; (void)t; return ++calls > LIMIT ? 5 : 0; }
"""


@pytest.mark.parametrize(("batch", "limit", "status"), [(3, 7, "ok"), (3, 6, "kernel_error"), (1, 3, "ok")])
def test_a_batch_calls_the_kernel_batch_times_per_sample(
    cache: Path, batch: int, limit: int, status: str
) -> None:
    """One check call, then 2 samples of `batch` calls each (cold mode: no warm-up calls)."""
    timing = TimingConfig(mode="cold", warmup=0, min_reps=2, max_reps=2, rel_ci=1.0, batch=batch)
    res = _run(COUNTING.replace("LIMIT", str(limit)), cache, timing=timing)
    assert res.status == status, res.reason
    if status == "ok":
        assert res.n_reps == 2


def test_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch must be >= 1"):
        TimingConfig(batch=0)
