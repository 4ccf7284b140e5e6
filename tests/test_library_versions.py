"""Every baseline row says which library it measured: name, exact version, source; old rows read as theirs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from harness import store
from harness.machine import detect
from kernels import baselines
from kernels.baselines import BASELINE_NAMES, library_info, versioned
from kernels.candidate import Candidate, Workload
from kernels.library_versions import LEGACY, _mkl_path, upgrade_legacy
from tests.conftest import run_candidates


def installed(name: str) -> bool:
    return library_info(name).version is not None


def test_each_installed_library_reports_its_version_and_source() -> None:
    # the project's setup installs these (Debian's packages and the extra "baselines")
    for name in ("openblas", "openblas-0.3.21", "numpy", "blis", "libxsmm", "onednn", "onednn-2.6"):
        info = library_info(name)
        print(name, info)
        assert info.version, (name, info)
        assert info.source == ("pypi" if name in ("openblas", "numpy", "onednn") else "debian")
    assert library_info("onednn").version.startswith("3.")
    assert library_info("onednn-2.6").version.startswith("2.6.")
    assert library_info("openblas-0.3.21").version == "0.3.21"
    # the code path each takes on this CPU is named (OpenBLAS's core, BLIS's arch, oneDNN's ISA)
    assert library_info("openblas").impl.startswith("core ")
    assert library_info("blis").impl.startswith("arch ")
    assert library_info("onednn").impl.startswith("effective ISA ")
    # a convolution-only name reports the library it runs
    assert library_info("onednn-2.6-blocked") == library_info("onednn-2.6")


def test_mkl_reports_its_version_and_code_path() -> None:
    if not installed("mkl"):
        pytest.skip("mkl is not installed (extra 'baselines')")
    info = library_info("mkl")
    assert info.version[:4].isdigit() and "build" in info.version
    paths = ("Vector Extensions", "SSE")
    if detect().vendor != "GenuineIntel":  # on other CPUs MKL may run (and name) its generic path
        paths += ("Architecture processors",)
    assert any(p in info.impl for p in paths), info.impl


def test_mkl_code_path_is_read_from_its_verbose_line() -> None:
    out = (
        "MKL_VERBOSE oneMKL 2026 Update 2 Product build 20260915 for Intel(R) 64 architecture "
        "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.45GHz lp64 "
        "intel_thread\n"
        "MKL_VERBOSE SGEMM(N,N,1,1,1,...) 1.2ms\n"
    )
    assert _mkl_path(out) == "Advanced Vector Extensions 2 (AVX2) enabled processors"
    assert _mkl_path("no verbose line\n") == ""


def test_the_version_is_part_of_a_baseline_candidates_key() -> None:
    plain = Candidate("baseline", "onednn")
    today = versioned(plain)
    assert today.option("version") == library_info("onednn").version
    assert today.key != plain.key  # an unversioned (old) row is never taken for today's library
    other = Candidate("baseline", "onednn", (("version", "3.0.0"),))
    assert other.key != today.key
    assert today.label() == f"onednn {library_info('onednn').version}"
    assert versioned(today) == today  # idempotent
    threads = versioned(Candidate("baseline", "onednn", (("threads", 2),)))
    assert threads.label() == f"onednn {library_info('onednn').version} (threads=2)"
    scheme = Candidate("scheme", "[R_i, R_j, R_k]")
    assert versioned(scheme) is scheme


def test_a_library_not_installed_is_versioned_as_such(hidden_library: Callable[[str], None]) -> None:
    hidden_library("mkl")
    assert library_info("mkl").version is None
    assert versioned(Candidate("baseline", "mkl")).option("version") == "not installed"


def test_measured_rows_carry_library_version_and_source(tmp_path: Path, shared_cache: Path) -> None:
    w = Workload.make("mm", "matmul", {"i": 9, "j": 17, "k": 5})
    names = ["openblas", "openblas-0.3.21", "onednn"]
    rows = run_candidates([versioned(Candidate("baseline", n)) for n in names], w, tmp_path, shared_cache)
    for name, row in zip(names, rows, strict=True):
        info = library_info(name)
        assert row["status"] == "ok", row["reason"]
        assert (row["library"], row["library_version"], row["library_source"]) == (
            info.library, info.version, info.source,
        )  # fmt: skip
        # no library line on stderr from sgemm: the row keeps the code path the probe saw
        assert row["impl"] == info.impl
    stored = store.load(tmp_path)
    assert set(stored["library_version"]) == {library_info(n).version for n in names}


def test_an_unknown_baseline_name_lists_the_known_ones() -> None:
    w = Workload.make("mm", "matmul", {"i": 8, "j": 8, "k": 8})
    with pytest.raises(ValueError, match="unknown baseline 'onednn-9'; known: .*onednn-2.6"):
        baselines.render_baseline(Candidate("baseline", "onednn-9"), w)
    with pytest.raises(ValueError, match="unknown baseline"):
        library_info("onednn-9")


def _old_row(text: str, options: dict[str, object] | None = None) -> dict[str, object]:
    cand = Candidate("baseline", text, tuple(sorted((options or {}).items())))
    return {
        "candidate_kind": "baseline", "candidate_text": text, "candidate_key": cand.key,
        "label": cand.label(),
        "candidate_options": json.dumps(options or {}), "library": None, "library_version": None,
        "library_source": None,
    }  # fmt: skip


def test_rows_stored_before_versions_read_as_the_debian_libraries_they_measured() -> None:
    rows = pd.DataFrame(
        [
            _old_row("onednn"),
            _old_row("onednn-blocked", {"threads": 2}),
            _old_row("openblas"),
            {**_old_row("onednn"), "library": "onednn", "library_version": "3.2.0", "library_source": "pypi"},
            {**_old_row("x"), "candidate_kind": "scheme"},
        ]  # fmt: skip
    )
    up = upgrade_legacy(rows.copy())
    texts = ["onednn-2.6", "onednn-2.6-blocked", "openblas-0.3.21", "onednn", "x"]
    assert list(up["candidate_text"]) == texts
    assert list(up["library_version"][:4]) == ["2.6.3", "2.6.3", "0.3.21", "3.2.0"]
    assert list(up["library_source"][:3]) == ["debian"] * 3
    # the key and label are today's for that library and version: a rerun of onednn-2.6 finds the row
    assert up.at[0, "candidate_key"] == Candidate("baseline", "onednn-2.6", (("version", "2.6.3"),)).key
    assert up.at[1, "label"] == "onednn-2.6-blocked 2.6.3 (threads=2)"
    if library_info("onednn-2.6").version == "2.6.3":
        assert up.at[0, "candidate_key"] == versioned(Candidate("baseline", "onednn-2.6")).key
    assert up.at[3, "candidate_key"] == rows.at[3, "candidate_key"]  # a row with its library: untouched
    assert up.at[4, "candidate_key"] == rows.at[4, "candidate_key"]


def test_legacy_names_are_todays_baseline_names() -> None:
    for name, _, _, _ in LEGACY.values():
        assert name in BASELINE_NAMES


def test_the_provenance_page_lists_each_library_with_version_source_and_code_path() -> None:
    from harness.provenance import libraries_used

    base = {"candidate_kind": "baseline", "cpu_model": "cpu", "experiment": "e"}
    rows = pd.DataFrame([
        {**base, "library": "onednn", "library_version": "3.2.0", "library_source": "pypi",
         "candidate_text": "onednn", "impl": "onednn brg:avx512_core (+ weight reorder)"},
        {**base, "library": "onednn", "library_version": "3.2.0", "library_source": "pypi",
         "candidate_text": "onednn", "impl": "onednn brg:avx512_core"},
        {**base, "library": "openblas", "library_version": "0.3.21", "library_source": "debian",
         "candidate_text": "openblas-0.3.21", "impl": "core Prescott"},
        {**base, "candidate_kind": "scheme", "library": None, "library_version": None, "library_source": None,
         "candidate_text": "[R_i]", "impl": ""},
    ])  # fmt: skip
    listed = libraries_used(rows)
    assert [(r["library"], r["library_version"], r["library_source"], r["n_rows"]) for r in listed] == [
        ("onednn", "3.2.0", "pypi", 2), ("openblas", "0.3.21", "debian", 1),
    ]  # fmt: skip
    assert listed[0]["impl"] == "onednn brg:avx512_core" and listed[1]["impl"] == "core Prescott"


def test_im2col_on_a_library_gemm_carries_that_librarys_version_in_its_key() -> None:
    plain = Candidate("conv_algo", "im2col", (("gemm", "openblas"),))
    today = versioned(plain)
    assert today.option("gemm_version") == library_info("openblas").version and today.key != plain.key
    assert today.label() == plain.label() == "im2col (gemm=openblas)"  # the figures find it by its label
    ours = Candidate("conv_algo", "im2col", (("gemm", "ours"),))
    assert versioned(ours) is ours


def test_a_probe_answer_is_kept_until_the_library_cpu_or_code_path_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernels import library_versions

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    lib = tmp_path / "libfake.so"
    lib.write_bytes(b"a library")
    calls: list[str] = []
    answer: dict[str, str] = {}

    def child(family: str, path: str, *args: str) -> dict[str, str]:
        calls.append(path)
        return {**answer, "version": f"1.{len(calls)}"} if "error" not in answer else dict(answer)

    monkeypatch.setattr(library_versions, "run_probe", child)
    probe = library_versions.probe
    assert probe("mkl", str(lib)) == {"version": "1.1"}
    assert probe("mkl", str(lib)) == {"version": "1.1"} and len(calls) == 1  # the cached answer
    assert json.loads(library_versions.probe_cache_file().read_text())  # kept on disk, for the next run
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")  # another code path
    assert probe("mkl", str(lib)) == {"version": "1.2"}
    lib.write_bytes(b"a new build of the library")
    assert probe("mkl", str(lib)) == {"version": "1.3"}
    assert probe("blis", str(lib)) == {"version": "1.4"}  # another probe of the same file
    answer["error"] = "probe of libfake.so failed"
    lib.write_bytes(b"a broken build")
    assert "error" in probe("mkl", str(lib)) and "error" in probe("mkl", str(lib))
    assert len(calls) == 6  # a failure is asked again
    lib.unlink()
    assert "error" in probe("mkl", str(lib))  # a file gone: said, not raised
