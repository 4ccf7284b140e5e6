"""Compile kernel sources to shared objects, content-addressed so a sweep never compiles a kernel twice.

Compilation only needs the ISA's *flags*, never the CPU: AVX-512 kernels are built (and checked to
compile) on AVX2-only hosts too; only running them needs the hardware.

Parsing ``<immintrin.h>`` is ~90% of gcc's time on a generated kernel (0.6 of 0.7 s on a Zen 3), so gcc gets
it precompiled, once per flag set (``-include`` of a header whose ``.gch`` sits beside it; clang's ``.pch``
the same way: 1.2 -> 0.4 s): the shared object is the one built without it (stripped, byte for byte), so
neither the cache key nor the recorded flags say so.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness import interrupt
from harness.interrupt import Interrupted
from kernels.candidate import KernelSource

ERROR_TAIL = 4000  # characters of compiler stderr kept in a BuildResult
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device", as the compiler prints it
COMPILE_TIMEOUT_S = 300  # plus one second per COMPILE_LINES_PER_S lines of source: big code takes longer
COMPILE_LINES_PER_S = 100


# Precompiled <immintrin.h>: kept in $HARNESS_PCH_DIR if set ("off": none), else in the cache's pch/ folder
PCH_ENV = "HARNESS_PCH_DIR"
PCH_INCLUDE = "#include <immintrin.h>"
# only a source whose first line of code is that include: ``-include`` then changes nothing (a source that
# defines _GNU_SOURCE first, as the driver does, would lose what it asked of the C library's headers)
_PCH_FIRST = re.compile(r"(?:\s|/\*.*?\*/|//[^\n]*)*" + re.escape(PCH_INCLUDE) + r"\s", re.S)
_LINK_ONLY = ("-shared", "-c", "-S")  # what a header's compilation must not be given
# what gcc and clang say of a precompiled header they cannot read (cut short, say)
_UNREADABLE = ("PCH file", "precompiled header", "AST file")
_pch_lock = threading.Lock()  # build_many's threads: one of them builds a missing header, the rest wait


def compile_timeout(code: str) -> float:
    """Seconds the compiler gets for ``code``: a base, plus time in proportion to the source's lines."""
    return COMPILE_TIMEOUT_S + code.count("\n") / COMPILE_LINES_PER_S


@dataclass(frozen=True)
class CompilerConfig:
    cc: str = "gcc"
    opt_flags: tuple[str, ...] = ("-O3",)
    extra_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    so_path: Path | None
    error: str
    cc: str
    cc_version: str
    flags: str
    seconds: float
    cached: bool = False


def isa_flags(isa: str) -> tuple[str, ...]:
    """Flags for code that needs ``isa``: named x86-64 levels, so they compile on any x86 host.

    ``-mtune=native`` is avoided on purpose: the cache key would not say which host tuned the code.
    AVX-512 asks for 512-bit auto-vectorization because gcc's generic tuning prefers 256-bit vectors.
    """
    if isa == "avx512":
        return ("-march=x86-64-v4", "-mprefer-vector-width=512")
    if isa == "avx2":
        return ("-march=x86-64-v3",)
    if isa in ("any", "", None):
        return ()
    raise ValueError(f"unknown ISA {isa!r}; known: avx512, avx2, any")


@functools.cache
def cc_version(cc: str = "gcc") -> str:
    """First line of ``cc --version``: part of every cache key and result row."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    return (out.stdout.splitlines() or ["unknown"])[0].strip()


def _lib_args(libs: Sequence[str]) -> list[str]:
    """``openblas`` and ``-lopenblas`` both mean the same library (renderers may write either)."""
    return [lib if lib.startswith("-") else f"-l{lib}" for lib in libs]


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def _pch_suffix(cc: str) -> str | None:
    """Where ``cc -include h`` finds ``h`` precompiled: ``h.gch`` for gcc, ``h.pch`` for clang."""
    version = cc_version(cc).lower()
    if "clang" in version:
        return ".pch"
    return ".gch" if "gcc" in version or version.startswith("cc ") else None


def _pch_root(cache_dir: Path | None) -> Path | None:
    env = os.environ.get(PCH_ENV)
    if env:
        return None if env == "off" else Path(env)
    return None if cache_dir is None else Path(cache_dir) / "pch"


def pch_include(cc: str, flags: Sequence[str], code: str, cache_dir: Path | None) -> list[str]:
    """``["-include", header]`` of <immintrin.h> precompiled for ``flags`` (built on first use), or ``[]``
    where it does not apply (neither gcc nor clang, a source that does not start with the include, no place
    to keep it, a failed build: the compiler then parses the header as always)."""
    root = _pch_root(cache_dir)
    suffix = _pch_suffix(cc)
    if root is None or suffix is None or not _PCH_FIRST.match(code):
        return []
    # the flags that shape the header's meaning (macros, ISA, optimisation); the link ones do not
    flags = [f for f in flags if f not in _LINK_ONLY and not f.startswith(("-Wl,", "-l", "-L"))]
    folder = root / _key(PCH_INCLUDE, flags, cc_version(cc))
    header, gch = folder / "intrin.h", folder / f"intrin.h{suffix}"
    with _pch_lock:
        if not gch.exists() and not _build_pch(cc, flags, header, gch):
            return []
    return ["-include", str(header)]


def _build_pch(cc: str, flags: list[str], header: Path, gch: Path) -> bool:
    """Precompile ``header`` to ``gch`` (written under a temporary name, so a reader never sees half)."""
    try:
        header.parent.mkdir(parents=True, exist_ok=True)
        if not header.exists():
            fd, tmp = tempfile.mkstemp(suffix=".h.tmp", dir=header.parent)
            with os.fdopen(fd, "w") as f:
                f.write(PCH_INCLUDE + "\n")
            os.replace(tmp, header)
        fd, tmp = tempfile.mkstemp(suffix=f"{gch.suffix}.tmp", dir=header.parent)
        os.close(fd)
        try:
            cmd = [cc, *flags, "-x", "c-header", str(header), "-o", tmp]
            proc = subprocess.run(cmd, capture_output=True, timeout=COMPILE_TIMEOUT_S, check=False)
            if proc.returncode == 0:
                os.replace(tmp, gch)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return gch.exists()


def _compile(
    cmd_head: list[str], code: str, cmd_tail: list[str], out: Path, workdir: Path, pch: Sequence[str] = ()
) -> str | None:
    """Run the compiler on ``code`` (with the precompiled header ``pch`` if given); None on success, else
    the stderr tail. A precompiled header the compiler cannot read is removed and the source compiled
    without it."""
    error = _compile_once([*cmd_head, *pch], code, cmd_tail, out, workdir)
    if error is not None and pch and any(m in error for m in _UNREADABLE):
        for suffix in (".gch", ".pch"):
            Path(f"{pch[-1]}{suffix}").unlink(missing_ok=True)
        error = _compile_once(cmd_head, code, cmd_tail, out, workdir)
    return error


def _compile_once(
    cmd_head: list[str], code: str, cmd_tail: list[str], out: Path, workdir: Path
) -> str | None:
    interrupt.check()
    workdir.mkdir(parents=True, exist_ok=True)
    fd, src_name = tempfile.mkstemp(suffix=".c", dir=workdir)
    src = Path(src_name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(code)
        cmd = [*cmd_head, str(src), "-o", str(out), *cmd_tail]
        timeout = compile_timeout(code)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            lines = code.count("\n")
            return (
                f"compiler timed out after {timeout:.0f}s (the limit for a {lines}-line source: "
                f"{COMPILE_TIMEOUT_S}s + 1s per {COMPILE_LINES_PER_S} lines)"
            )
        except OSError as exc:
            return f"cannot run {cmd_head[0]}: {exc}"
        if proc.returncode < 0:  # killed (by a user, the OOM killer): not the candidate's fault, no row
            # a stop signal sent to the whole job (a scheduler's cancel or time-limit warning) may reach the
            # compiler before the harness's handler has run: name the signal either way
            interrupt.raise_if_stopped(proc.returncode, f"the compiler (building {out.name})")
            raise Interrupted(
                f"the compiler was killed by signal {-proc.returncode} while building {out.name}; nothing "
                "was recorded for it: run the same command again"
            )
        if proc.returncode != 0:
            error = proc.stderr or proc.stdout or f"exit {proc.returncode}"
            if NO_SPACE in error:  # the disk, not the candidate: no compile_error row, the run stops
                raise OSError(errno.ENOSPC, f"{NO_SPACE} (the compiler writing {out.name})", str(workdir))
            return error[-ERROR_TAIL:]
        return None
    finally:
        src.unlink(missing_ok=True)


def _cached_compile(
    code: str, flags: list[str], libs: list[str], cc: str, cache_dir: Path, suffix: str
) -> BuildResult:
    """Compile ``code`` to ``cache_dir/<key><suffix>`` unless it is there already."""
    start = time.perf_counter()
    version = cc_version(cc)
    out = cache_dir / f"{_key(code, flags, libs, version)}{suffix}"
    flag_text = " ".join([*flags, *libs])
    if out.exists():
        return BuildResult(True, out, "", cc, version, flag_text, time.perf_counter() - start, cached=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # A unique temp name then os.replace: concurrent builders of the same key never see a partial file.
    fd, tmp_name = tempfile.mkstemp(suffix=suffix + ".tmp", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        pch = pch_include(cc, flags, code, cache_dir)
        error = _compile([cc, *flags], code, libs, tmp, cache_dir, pch)
        if error is None:
            os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    ok = error is None
    return BuildResult(
        ok, out if ok else None, error or "", cc, version, flag_text, time.perf_counter() - start
    )


def kernel_flags(src: KernelSource, compiler: CompilerConfig) -> list[str]:
    """Full flag list for a kernel shared object (ISA flags first so the source's own can override)."""
    return [
        *compiler.opt_flags,
        *isa_flags(src.target),
        *src.cflags,
        *compiler.extra_flags,
        "-fPIC",
        "-shared",
    ]


def build(src: KernelSource, compiler: CompilerConfig, cache_dir: Path) -> BuildResult:
    """Compile ``src`` to a shared object in ``cache_dir``; a compile error is a result, not an exception."""
    return _cached_compile(
        src.code, kernel_flags(src, compiler), _lib_args(src.libs), compiler.cc, Path(cache_dir), ".so"
    )


def build_many(
    sources: Sequence[KernelSource],
    compiler: CompilerConfig,
    cache_dir: Path,
    jobs: int | None = None,
) -> list[BuildResult]:
    """Build in parallel (gcc runs in child processes, so threads suffice); results in input order."""
    jobs = jobs or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda s: build(s, compiler, cache_dir), sources))


def compile_only(code: str, isa: str, compiler: CompilerConfig | None = None) -> BuildResult:
    """Check that ``code`` compiles for ``isa`` (object file thrown away): works for any ISA on any host."""
    compiler = compiler or CompilerConfig()
    flags = [*compiler.opt_flags, *isa_flags(isa), *compiler.extra_flags, "-fPIC", "-c"]
    start = time.perf_counter()
    pch = pch_include(compiler.cc, flags, code, None)  # only where $HARNESS_PCH_DIR says
    with tempfile.TemporaryDirectory(prefix="compile-only-") as tmp:
        error = _compile([compiler.cc, *flags], code, [], Path(tmp) / "out.o", Path(tmp), pch)
    return BuildResult(
        error is None,
        None,
        error or "",
        compiler.cc,
        cc_version(compiler.cc),
        " ".join(flags),
        time.perf_counter() - start,
    )


def build_executable(
    source: Path, cache_dir: Path, flags: Sequence[str] = ("-O2",), libs: Sequence[str] = (), cc: str = "gcc"
) -> BuildResult:
    """Compile a harness tool (driver, peak benchmark) once per source/flags/compiler into ``cache_dir``."""
    return _cached_compile(
        Path(source).read_text(), list(flags), _lib_args(libs), cc, Path(cache_dir), ".exe"
    )
