"""Kernel builds: content-addressed cache, compile errors as results, AVX-512 compiles on any host."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.build import (
    PCH_ENV,
    BuildResult,
    CompilerConfig,
    build,
    build_many,
    compile_only,
    isa_flags,
    kernel_flags,
    pch_include,
)
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


# -- the precompiled <immintrin.h> -------------------------------------------------------------------------
AVX2 = AVX512.replace("512", "256")


def _stripped(so: Path, out: Path) -> bytes:
    """The shared object without its symbol table (which names the temporary source file of each build)."""
    subprocess.run(["strip", "-o", str(out), str(so)], check=True)
    return out.read_bytes()


@pytest.fixture(params=[("gcc", ".gch"), ("clang", ".pch")], ids=["gcc", "clang"])
def pch_compiler(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str, CompilerConfig, list[str]]:
    """(compiler, its header suffix, its config, a kernel's flags), headers kept in tmp_path/pch."""
    cc, suffix = request.param
    if not shutil.which(cc):
        pytest.skip(f"{cc} is not installed")
    monkeypatch.setenv(PCH_ENV, str(tmp_path / "pch"))
    compiler = CompilerConfig(cc=cc)
    return cc, suffix, compiler, kernel_flags(KernelSource(AVX2, "avx2"), compiler)


def test_the_precompiled_header_changes_no_build(
    pch_compiler: tuple[str, str, CompilerConfig, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cc, suffix, compiler, flags = pch_compiler
    with_pch = build(KernelSource(AVX2, "avx2"), compiler, tmp_path / "a")
    args = pch_include(cc, flags, AVX2, None)
    assert args and args[0] == "-include" and Path(args[1] + suffix).exists()  # built once, then used
    assert len(list((tmp_path / "pch").rglob(f"*{suffix}"))) == 1 and not list(
        (tmp_path / "pch").rglob("*.tmp")
    )
    assert pch_include(cc, [*flags, "-ffp-contract=off"], AVX2, None) != args  # keyed by the flags
    if cc == "gcc":  # gcc -H marks a precompiled header it used with "!"
        src = tmp_path / "k.c"
        src.write_text(AVX2)
        shown = subprocess.run([cc, *flags, *args, "-H", str(src), "-o", str(tmp_path / "k.so")],
                               capture_output=True, text=True, check=True).stderr  # fmt: skip
        assert f"! {args[1]}.gch" in shown
    monkeypatch.setenv(PCH_ENV, "off")
    assert pch_include(cc, flags, AVX2, None) == []
    without = build(KernelSource(AVX2, "avx2"), compiler, tmp_path / "b")
    assert with_pch.ok and without.ok and with_pch.flags == without.flags  # recorded flags say nothing of it
    assert with_pch.so_path.name == without.so_path.name  # the same cache key
    assert _stripped(with_pch.so_path, tmp_path / "1.so") == _stripped(without.so_path, tmp_path / "2.so")


def test_the_precompiled_header_goes_where_it_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PCH_ENV, raising=False)
    flags = ["-O3", "-march=x86-64-v3", "-fPIC", "-shared"]
    assert pch_include("gcc", flags, AVX2, tmp_path)[1].startswith(str(tmp_path / "pch"))  # the cache's
    assert pch_include("gcc", flags, SCALE, tmp_path) == []  # no intrinsics: nothing to gain
    assert pch_include("gcc", flags, "#define _GNU_SOURCE\n" + AVX2, tmp_path) == []  # must come first
    assert pch_include("gcc", flags, "/* a\n b */\n// c\n" + AVX2, tmp_path)  # comments may
    assert pch_include("gcc", flags, AVX2, None) == []  # no cache, no $HARNESS_PCH_DIR
    if shutil.which("clang"):  # clang's own format, beside gcc's
        clang = pch_include("clang", flags, AVX2, tmp_path)
        assert clang and Path(clang[1] + ".pch").exists() and not Path(clang[1] + ".gch").exists()
    assert pch_include("no-such-compiler", flags, AVX2, tmp_path) == []


def test_an_unreadable_precompiled_header_is_dropped(
    pch_compiler: tuple[str, str, CompilerConfig, list[str]], tmp_path: Path
) -> None:
    cc, suffix, compiler, flags = pch_compiler
    pch = Path(pch_include(cc, flags, AVX2, None)[1] + suffix)
    pch.write_bytes(pch.read_bytes()[:100_000])  # truncated: the compiler stops ("cannot read PCH file")
    res = build(KernelSource(AVX2, "avx2"), compiler, tmp_path / "cache")
    assert res.ok, res.error
    assert not pch.exists()  # removed, so the next build makes a whole one
    assert pch_include(cc, flags, AVX2, None) and pch.stat().st_size > 100_000
