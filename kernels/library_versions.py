"""Which library a baseline row measured: its name, exact version, where it came from, and its code path.

A verdict such as "beats oneDNN" means little without "which oneDNN". The version is read from the library
itself at run time (``dnnl_version()``, ``openblas_get_config()``, ``MKL_Get_Version_String()``,
``bli_info_get_version_str()``), in a child process so that loading two builds of one library (Debian's
oneDNN 2.6 beside PyPI's 3.x, each with its OpenMP) never happens in the harness's own process. The same
child reports the code path the library takes on this CPU (OpenBLAS's core, BLIS's architecture, MKL's
instruction set from its verbose line, oneDNN's effective ISA), which on AMD and on CPUs newer than the
library is the first thing to know (Debian's OpenBLAS 0.3.21 runs its Prescott SSE3 kernels on an Emerald
Rapids).

Rows stored before these columns existed name the libraries of their day: :data:`LEGACY` says which (the
Debian packages, with their versions), so an old ``onednn`` row reads as ``onednn-2.6`` and is never taken
for today's oneDNN.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Prefix of the probe's answer on its stdout (libraries may print there too, MKL's verbose line does).
_ANSWER = "library-probe: "
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class LibraryInfo:
    """What one baseline is: the row columns ``library``, ``library_version``, ``library_source``, and the
    code path it takes here (the row's ``impl`` when the kernel reports none itself)."""

    library: str  # onednn, openblas, mkl, blis, libxsmm, torch, tvm
    version: str | None  # None: not installed here
    source: str  # debian | pypi
    impl: str = ""


# -- probes, run in a child process: python -m kernels.library_versions FAMILY PATH [PREFIX SUFFIX] ------
def _probe_onednn(path: str) -> dict[str, str]:
    import ctypes

    class Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                    ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                    ("gpu_runtime", ctypes.c_uint)]  # fmt: skip

    lib = ctypes.CDLL(path)
    lib.dnnl_version.restype = ctypes.POINTER(Version)
    v = lib.dnnl_version().contents
    lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
    isa = lib.dnnl_get_effective_cpu_isa()
    return {
        "version": f"{v.major}.{v.minor}.{v.patch}",
        "impl": f"effective ISA {_ONEDNN_ISA.get(isa, hex(isa))}",
    }


# dnnl_cpu_isa_t values (dnnl_types.h of 2.6 and 3.x; the masks differ between versions only above these)
_ONEDNN_ISA = {0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0x407: "avx2_vnni", 0x27: "avx512_core",
               0x67: "avx512_core_vnni", 0xE7: "avx512_core_bf16", 0x1EF: "avx512_core_fp16",
               0xFEF: "avx512_core_amx", 0x3EF: "avx512_core_amx (2.6)"}  # fmt: skip


def _probe_openblas(path: str, prefix: str = "", suffix: str = "") -> dict[str, str]:
    import ctypes

    lib = ctypes.CDLL(path)
    config, core = (getattr(lib, f"{prefix}openblas_get_{what}{suffix}") for what in ("config", "corename"))
    config.restype = core.restype = ctypes.c_char_p
    words = config().decode().split()  # "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Prescott MAX_THREADS=64"
    return {"version": words[1], "impl": f"core {core().decode()}"}


def _probe_mkl(path: str) -> dict[str, str]:
    import ctypes

    lib = ctypes.CDLL(path)
    buf = ctypes.create_string_buffer(512)
    lib.MKL_Get_Version_String(buf, len(buf))
    text = buf.value.decode()  # "... Math Kernel Library Version 2026.2-Product Build 20260915 for ..."
    found = re.search(r"Version (\S+?)-Product Build (\d+)", text)
    version = f"{found.group(1)} (build {found.group(2)})" if found else text
    # MKL names its code path only in its verbose line, printed on the first call (MKL_VERBOSE=1 is set by
    # the parent): one 1x1x1 sgemm on one thread
    lib.MKL_Set_Num_Threads(1)
    one = (ctypes.c_float * 1)(1.0)
    lib.cblas_sgemm(101, 111, 111, 1, 1, 1, ctypes.c_float(1.0), one, 1, one, 1, ctypes.c_float(0.0), one, 1)
    return {"version": version}


def _probe_blis(path: str) -> dict[str, str]:
    import ctypes

    lib = ctypes.CDLL(path)
    lib.bli_info_get_version_str.restype = lib.bli_arch_string.restype = ctypes.c_char_p
    arch = lib.bli_arch_string(lib.bli_arch_query_id()).decode()
    return {"version": lib.bli_info_get_version_str().decode(), "impl": f"arch {arch}"}


_PROBES = {"onednn": _probe_onednn, "openblas": _probe_openblas, "mkl": _probe_mkl, "blis": _probe_blis}


def _probe_main(argv: list[str]) -> None:
    family, *args = argv
    answer = _PROBES[family](*args)
    sys.stdout.flush()
    print(_ANSWER + json.dumps(answer), flush=True)


def _mkl_path(stdout: str) -> str:
    """MKL's code path from its verbose line: 'MKL_VERBOSE oneMKL 2026 ... for Intel(R) 64 architecture
    Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support for ... processors, Lnx ...'."""
    for line in stdout.splitlines():
        if line.startswith("MKL_VERBOSE") and " architecture " in line:
            path = line.split(" architecture ", 1)[1].split(", Lnx")[0]
            return re.sub(r"Intel\(R\) ", "", path).strip()
    return ""


#: environment variables that choose a library's code path, so its ``impl`` (MKL_ENABLE_INSTRUCTIONS,
#: ONEDNN_MAX_CPU_ISA, OPENBLAS_CORETYPE, BLIS_ARCH_TYPE...): part of a cached probe's key
_CODE_PATH_VARS = ("MKL_", "ONEDNN_", "DNNL_", "OPENBLAS_", "BLIS_")


def probe_cache_file() -> Path:
    """Where probe answers are kept between runs (``$XDG_CACHE_HOME/harness``, else ``~/.cache/harness``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "harness" / "library-probes.json"


def probe_key(family: str, path: str, *args: str) -> str:
    """What a probe's answer depends on: the library file (resolved path, size, modification time), the
    probe, this CPU (its fingerprint, which keys the harness's other per-CPU caches), the code-path
    environment variables and the Python that loads it."""
    from harness.machine import detect

    st = os.stat(path)
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_CODE_PATH_VARS))
    parts = [family, os.path.realpath(path), st.st_size, st.st_mtime_ns, args, detect().fingerprint, env,
             sys.executable]  # fmt: skip
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def probe(family: str, path: str, *args: str) -> dict[str, str]:
    """One library's version and code path, {"version": ..., "impl": ...}, or {"error": why}: from the
    probe cache when nothing it depends on changed (MKL's probe alone takes 0.85 s, and every ``harness
    run`` with baselines asked again), else from a child process (:func:`run_probe`)."""
    try:
        key = probe_key(family, path, *args)
    except OSError as exc:
        return {"error": f"probe of {path} failed: {exc}"}
    cache = probe_cache_file()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), dict):
        return dict(known[key])
    out = run_probe(family, path, *args)
    if "error" not in out:  # a failure is asked again next time (a library being installed meanwhile)
        known = known if isinstance(known, dict) else {}
        known[key] = out
        # written whole (rename): a reader never sees half a file; two runs writing at once lose one entry
        with contextlib.suppress(OSError):
            cache.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=cache.parent, delete=False, suffix=".tmp") as f:
                json.dump(known, f, indent=1, sort_keys=True)
            os.replace(f.name, cache)
    return out


def run_probe(family: str, path: str, *args: str) -> dict[str, str]:
    """Run one library's probe in a child process: {"version": ..., "impl": ...}, or {"error": why}."""
    env = {**os.environ, "MKL_VERBOSE": "1", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kernels.library_versions", family, path, *args],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"probe of {path} failed: {exc}"}
    answers = [line[len(_ANSWER) :] for line in proc.stdout.splitlines() if line.startswith(_ANSWER)]
    if proc.returncode != 0 or not answers:
        return {"error": f"probe of {path} failed: {(proc.stderr or proc.stdout).strip()[-300:]}"}
    out: dict[str, str] = json.loads(answers[-1])
    if family == "mkl":
        out["impl"] = _mkl_path(proc.stdout)
    return out


def header_version(header: str, macro: str) -> str | None:
    """A version a static library records only in its header (libxsmm: LIBXSMM_CONFIG_VERSION)."""
    try:
        text = open(header).read()  # noqa: SIM115 - a small header read once
    except OSError:
        return None
    found = re.search(rf'#define\s+{macro}\s+"([^"]+)"', text)
    return found.group(1) if found else None


def package_version(dist: str) -> str | None:
    """The installed version of a PyPI distribution (TVM, whose library has no version call we link)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# -- rows stored before library versions were recorded ----------------------------------------------------
#: candidate_text of an old baseline row -> (its name today, library, version, source). Until 2026-11-26 the
#: names meant Debian 12's packages (oneDNN 2.6.3, OpenBLAS 0.3.21, BLIS 0.9.0, libxsmm 1.17), MKL the
#: unpinned PyPI wheel, numpy the OpenBLAS numpy shipped, tvm the pinned apache-tvm.
LEGACY: dict[str, tuple[str, str, str, str]] = {
    "onednn": ("onednn-2.6", "onednn", "2.6.3", "debian"),
    "onednn-blocked": ("onednn-2.6-blocked", "onednn", "2.6.3", "debian"),
    "openblas": ("openblas-0.3.21", "openblas", "0.3.21", "debian"),
    "blis": ("blis", "blis", "0.9.0", "debian"),
    "libxsmm": ("libxsmm", "libxsmm", "1.17", "debian"),
    "mkl": ("mkl", "mkl", "unrecorded (PyPI, unpinned)", "pypi"),
    "numpy": ("numpy", "openblas", "unrecorded (numpy's)", "pypi"),
    "tvm": ("tvm", "tvm", "0.27.0.post1", "pypi"),
}


#: the columns :func:`upgrade_legacy` rewrites, in the order it computes them
_UPGRADED = ("candidate_text", "candidate_options", "candidate_key", "label", "library", "library_version",
             "library_source")  # fmt: skip
#: the row columns :func:`upgrade_legacy` reads and rewrites
LEGACY_COLUMNS: tuple[str, ...] = ("candidate_kind", *_UPGRADED)


def upgrade_legacy(rows: Any) -> Any:
    """Old baseline rows (no ``library``) under today's names, with the library they measured, in place.

    Their candidate key and label are recomputed as today's candidate of that library and version would
    have them (kernels.baselines.versioned), so a rerun of that library finds them and today's library of
    the old name never does. ``rows``: a DataFrame with the store's columns; returned for chaining.
    """
    from kernels.candidate import Candidate

    if rows.empty or "library" not in rows:
        return rows
    old = rows.index[(rows["candidate_kind"] == "baseline") & rows["library"].isna()]
    texts = rows.loc[old, "candidate_text"].astype(str)
    known = texts.isin(list(LEGACY)).to_numpy()
    if not known.any():
        return rows
    old, pairs = old[known], list(zip(texts[known], rows.loc[old[known], "candidate_options"], strict=True))
    upgraded: dict[tuple[str, Any], tuple[str, ...]] = {}  # a few distinct baselines over many rows
    for text, given in pairs:
        if (text, given) not in upgraded:
            name, library, version, source = LEGACY[text]
            options = json.loads(given or "{}")
            options["version"] = version
            cand = Candidate("baseline", name, tuple(sorted(options.items())))
            upgraded[text, given] = (name, json.dumps(options, sort_keys=True), cand.key, cand.label(),
                                     library, version, source)  # fmt: skip
    # one assignment a column: a row at a time rebuilt each Arrow-backed column 1000 times (12 s of every
    # archive's report)
    for j, column in enumerate(_UPGRADED):
        rows.loc[old, column] = [upgraded[pair][j] for pair in pairs]
    return rows


if __name__ == "__main__":
    _probe_main(sys.argv[1:])
