"""CPU detection: sane fields on any CPU; ISA rules and cache parsing from synthetic inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import machine
from harness.machine import Machine, detect, isas_from_flags, read_thp_mode, register_count, vector_lanes


def test_detect_fields_are_sane() -> None:
    m = detect()
    assert isinstance(m, Machine)
    assert m.vendor and m.model_name
    assert m.family >= 0 and m.model >= 0
    assert isinstance(m.flags, frozenset)
    assert set(m.isas) <= {"avx512", "avx2"}
    assert m.best_isa == (m.isas[0] if m.isas else None)
    assert m.n_cpus >= 1
    assert m.memory_bytes > 1 << 20
    assert m.hypervisor == ("hypervisor" in m.flags)
    assert m.kernel
    assert m.caches and all(c.size_bytes > 0 and c.line_bytes > 0 for c in m.caches)
    assert m.llc_bytes == max(c.size_bytes for c in m.caches if c.level == max(x.level for x in m.caches))
    assert m.cache_bytes(1) is not None and m.cache_bytes(1) <= m.llc_bytes
    assert m.cache_bytes(9) is None


def test_detect_is_cached_and_consistent_with_flags() -> None:
    m = detect()
    assert detect() is m
    assert m.isas == isas_from_flags(m.flags)
    for isa in m.isas:
        assert machine.ISA_REQUIREMENTS[isa] <= m.flags


def test_as_dict_is_json_and_fingerprint_stable() -> None:
    m = detect()
    d = json.loads(json.dumps(m.as_dict()))
    assert d["fingerprint"] == m.fingerprint and len(m.fingerprint) == 12
    assert d["isas"] == list(m.isas)
    assert [c["size_bytes"] for c in d["caches"]] == [c.size_bytes for c in m.caches]


def test_fingerprint_ignores_irrelevant_flags_but_not_isa() -> None:
    m = detect()
    noisy = Machine(**{**m.__dict__, "flags": m.flags | {"some_mitigation_flag"}})
    assert noisy.fingerprint == m.fingerprint
    other = Machine(**{**m.__dict__, "flags": m.flags ^ {"avx512f"}})
    assert other.fingerprint != m.fingerprint


def test_isa_rules() -> None:
    avx2 = frozenset({"avx2", "fma", "sse4_2"})
    assert isas_from_flags(avx2) == ("avx2",)
    assert isas_from_flags(frozenset({"avx2"})) == ()  # AVX2 without FMA cannot run our kernels
    full = avx2 | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}
    assert isas_from_flags(full) == ("avx512", "avx2")
    assert isas_from_flags(full - {"avx512vl"}) == ("avx2",)


def test_isa_table() -> None:
    assert (vector_lanes("avx512"), register_count("avx512")) == (16, 32)
    assert (vector_lanes("avx2"), register_count("avx2")) == (8, 16)
    with pytest.raises(ValueError, match="unknown ISA"):
        vector_lanes("sse")


def _write_index(root: Path, i: int, level: int, kind: str, size: str) -> None:
    d = root / f"index{i}"
    d.mkdir(parents=True)
    values = {
        "level": level,
        "type": kind,
        "size": size,
        "coherency_line_size": 64,
        "ways_of_associativity": 8,
        "shared_cpu_list": "0",
    }
    for name, value in values.items():
        (d / name).write_text(f"{value}\n")


def test_cache_parsing_and_fallback(tmp_path: Path) -> None:
    _write_index(tmp_path, 0, 1, "Data", "48K")
    _write_index(tmp_path, 1, 2, "Unified", "2048K")
    _write_index(tmp_path, 2, 3, "Unified", "260M")
    caches, source = machine._read_caches(tmp_path)
    assert source == "sysfs"
    assert [c.size_bytes for c in caches] == [48 << 10, 2 << 20, 260 << 20]
    caches, source = machine._read_caches(tmp_path / "missing")
    assert "defaults" in source and caches


def test_the_transparent_huge_pages_mode_is_read_and_kept_out_of_the_fingerprint(tmp_path: Path) -> None:
    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    assert read_thp_mode(thp) == "madvise"
    thp.write_text("[always] madvise never\n")
    assert read_thp_mode(thp) == "always"
    assert read_thp_mode(tmp_path / "absent") == "unknown"
    m = detect()
    assert json.loads(json.dumps(m.as_dict()))["transparent_hugepages"] == m.transparent_hugepages
    other = Machine(
        **{**m.__dict__, "transparent_hugepages": "never" if m.transparent_hugepages != "never" else "always"}
    )
    assert other.fingerprint == m.fingerprint  # a host setting: the same CPU keeps its results
