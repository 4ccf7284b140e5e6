"""Kernel builds: content-addressed cache, compile errors as results, AVX-512 compiles on any host."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.build import BuildResult, CompilerConfig, build, build_many, compile_only, isa_flags
from kernels.candidate import KernelSource

SCALE = """
int kernel(float *const *t, void *ws) {
    (void)ws;
    for (int i = 0; i < 16; i++) t[0][i] += 2.0f * t[1][i];
    return 0;
}
"""

AVX512 = """
#include <immintrin.h>
int kernel(float *const *t, void *ws) {
    (void)ws;
    __m512 x = _mm512_load_ps(t[1]);
    _mm512_store_ps(t[0], _mm512_fmadd_ps(x, x, _mm512_load_ps(t[0])));
    return 0;
}
"""


def test_build_caches_by_content(tmp_path: Path) -> None:
    src = KernelSource(SCALE, "avx2")
    first = build(src, CompilerConfig(), tmp_path)
    assert first.ok and first.so_path is not None and first.so_path.exists(), first.error
    assert not first.cached and first.cc == "gcc" and first.cc_version
    assert "-march=x86-64-v3" in first.flags and "-O3" in first.flags
    mtime = first.so_path.stat().st_mtime_ns

    again = build(src, CompilerConfig(), tmp_path)
    assert again.cached and again.so_path == first.so_path
    assert again.so_path.stat().st_mtime_ns == mtime

    other_flags = build(src, CompilerConfig(opt_flags=("-O2",)), tmp_path)
    other_code = build(KernelSource(SCALE + "\n", "avx2"), CompilerConfig(), tmp_path)
    assert len({first.so_path, other_flags.so_path, other_code.so_path}) == 3
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.c"))  # no leftovers


def test_compile_error_is_a_result(tmp_path: Path) -> None:
    res = build(KernelSource("int kernel(float *const *t, void *ws) { return undefined_name; }", "any"),
                CompilerConfig(), tmp_path)  # fmt: skip
    assert isinstance(res, BuildResult)
    assert not res.ok and res.so_path is None
    assert "undefined_name" in res.error and "error" in res.error
    assert not list(tmp_path.glob("*.so"))


def test_avx512_compiles_on_any_host(tmp_path: Path) -> None:
    res = build(KernelSource(AVX512, "avx512"), CompilerConfig(), tmp_path)
    assert res.ok, res.error
    assert compile_only(AVX512, "avx512").ok
    # The ISA flags are what make it compile: without them gcc refuses the AVX-512 intrinsics.
    assert not compile_only(AVX512, "avx2").ok


def test_build_many_keeps_order(tmp_path: Path) -> None:
    sources = [KernelSource(SCALE.replace("2.0f", f"{k}.0f"), "avx2") for k in range(4)]
    sources.append(KernelSource("syntax error", "avx2"))
    results = build_many(sources, CompilerConfig(), tmp_path, jobs=2)
    assert [r.ok for r in results] == [True, True, True, True, False]
    assert len({r.so_path for r in results[:4]}) == 4


def test_isa_flags() -> None:
    assert isa_flags("avx512")[0] == "-march=x86-64-v4"
    assert isa_flags("avx2") == ("-march=x86-64-v3",)
    assert isa_flags("any") == ()
    with pytest.raises(ValueError, match="unknown ISA"):
        isa_flags("neon")
