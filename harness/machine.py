"""What CPU we are on: ISA, cache hierarchy and a fingerprint for every result row.

The machines of this project change CPU from one session to the next (AVX-512 Intel, AVX2-only AMD), so
code generation, flush sizes and peak calibration read the CPU at run time instead of assuming one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

CPUINFO = Path("/proc/cpuinfo")
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
SYSFS_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# Flags each ISA level needs, so that generated code for it is known to run here.
ISA_REQUIREMENTS: dict[str, frozenset[str]] = {
    "avx512": frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl"}),
    "avx2": frozenset({"avx2", "fma"}),
}
ISA_ORDER = ("avx512", "avx2")  # best first

# Per ISA: fp32 lanes per vector register and architectural vector registers (register-file constraints).
_ISA_TABLE: dict[str, tuple[int, int]] = {"avx512": (16, 32), "avx2": (8, 16)}

# Flags that change which code runs or how fast: they enter the fingerprint, the rest (bugs, mitigations,
# hypervisor quirks) would make the same CPU look different across kernels.
_FINGERPRINT_FLAG = re.compile(r"^(avx|fma|amx|sse|ssse|bmi|f16c|clflushopt|clwb|prefetch)")

# Used only where sysfs gives no cache information (containers, non-Linux): typical server values.
_DEFAULT_CACHES = (
    (1, "Data", 32 * 1024, 8, "0"),
    (1, "Instruction", 32 * 1024, 8, "0"),
    (2, "Unified", 1024 * 1024, 16, "0"),
    (3, "Unified", 32 * 1024 * 1024, 16, ""),
)


def vector_lanes(isa: str) -> int:
    """fp32 lanes of one vector register of ``isa`` (vectorization width for code generation)."""
    return _isa_entry(isa)[0]


def register_count(isa: str) -> int:
    """Architectural vector registers of ``isa`` (bounds the accumulators a microkernel can keep)."""
    return _isa_entry(isa)[1]


def _isa_entry(isa: str) -> tuple[int, int]:
    try:
        return _ISA_TABLE[isa]
    except KeyError:
        raise ValueError(f"unknown ISA {isa!r}; known: {', '.join(_ISA_TABLE)}") from None


#: (vendor, cpu family, model) -> microarchitecture: a VM's CPU name often hides it ("AMD EPYC",
#: "Intel(R) Xeon(R) Processor"), and results differ by it (Zen 4 double-pumps AVX-512, Zen 5 does not)
MICROARCHITECTURES: dict[tuple[str, int, int], str] = {
    ("AuthenticAMD", 23, 49): "Zen 2",
    ("AuthenticAMD", 25, 1): "Zen 3",
    ("AuthenticAMD", 25, 17): "Zen 4",
    ("AuthenticAMD", 25, 160): "Zen 4c",
    ("AuthenticAMD", 26, 2): "Zen 5",
    ("AuthenticAMD", 26, 17): "Zen 5c",
    ("GenuineIntel", 6, 85): "Skylake-SP / Cascade Lake",
    ("GenuineIntel", 6, 106): "Ice Lake-SP",
    ("GenuineIntel", 6, 143): "Sapphire Rapids",
    ("GenuineIntel", 6, 207): "Emerald Rapids",
    ("GenuineIntel", 6, 173): "Granite Rapids",
}


def microarchitecture(vendor: str, family: int, model: int) -> str | None:
    """The microarchitecture of a CPU identification (None when the table does not know it)."""
    return MICROARCHITECTURES.get((str(vendor), int(family), int(model)))


@dataclass(frozen=True)
class Cache:
    level: int
    type: str  # "Data", "Instruction" or "Unified"
    size_bytes: int
    line_bytes: int
    ways: int
    shared_cpu_list: str


@dataclass(frozen=True)
class Machine:
    vendor: str
    model_name: str
    family: int
    model: int
    flags: frozenset[str]
    isas: tuple[str, ...]
    caches: tuple[Cache, ...]
    cache_source: str  # "sysfs" or why defaults were used
    n_cpus: int
    memory_bytes: int
    hypervisor: bool
    kernel: str
    # The kernel's transparent huge pages mode (always / madvise / never): whether the driver's 4 KiB-aligned
    # buffers may sit on 2 MiB pages, which changes the TLB reach of a blocked kernel. A host setting, not a
    # CPU property: recorded with every row, kept out of the fingerprint.
    transparent_hugepages: str = "unknown"

    @property
    def best_isa(self) -> str | None:
        """Widest ISA this CPU executes (None on a CPU with neither AVX2+FMA nor AVX-512)."""
        return self.isas[0] if self.isas else None

    def cache_bytes(self, level: int) -> int | None:
        """Data (or unified) cache size at ``level``; None if the CPU has no such level."""
        for c in self.caches:
            if c.level == level and c.type in ("Data", "Unified"):
                return c.size_bytes
        return None

    @property
    def llc_bytes(self) -> int:
        """Last-level cache size: what a cold-cache sweep must exceed."""
        data = [c for c in self.caches if c.type in ("Data", "Unified")]
        return max(data, key=lambda c: c.level).size_bytes if data else 0

    @property
    def fingerprint(self) -> str:
        """Short hash naming this CPU model: results, calibrations and caches are keyed by it."""
        flags = sorted(f for f in self.flags if _FINGERPRINT_FLAG.match(f))
        caches = [(c.level, c.type, c.size_bytes) for c in self.caches]
        blob = json.dumps([self.vendor, self.model_name, self.family, self.model, flags, caches])
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def as_dict(self) -> dict[str, object]:
        """JSON-able description, stored beside every result."""
        d = asdict(self)
        d["flags"] = sorted(self.flags)
        d["caches"] = [asdict(c) for c in self.caches]
        d["isas"] = list(self.isas)
        d["best_isa"] = self.best_isa
        d["llc_bytes"] = self.llc_bytes
        d["fingerprint"] = self.fingerprint
        return d


def _parse_cpuinfo(text: str) -> dict[str, str]:
    """Fields of the first processor block (all vCPUs of a VM report the same model)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text)
    if not m:
        raise ValueError(f"cannot parse cache size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def _read_index(idx: Path) -> Cache:
    def read(name: str) -> str:
        return (idx / name).read_text().strip()

    return Cache(
        level=int(read("level")),
        type=read("type"),
        size_bytes=_parse_size(read("size")),
        line_bytes=int(read("coherency_line_size")),
        ways=int(read("ways_of_associativity")),
        shared_cpu_list=read("shared_cpu_list"),
    )


def _read_caches(root: Path = SYSFS_CACHE) -> tuple[tuple[Cache, ...], str]:
    caches = []
    for idx in sorted(root.glob("index*")):
        try:
            caches.append(_read_index(idx))
        except (OSError, ValueError):
            continue  # an index without size (some VMs) says nothing useful
    if caches:
        return tuple(sorted(caches, key=lambda c: (c.level, c.type))), "sysfs"
    defaults = tuple(Cache(lvl, t, size, 64, ways, shared) for lvl, t, size, ways, shared in _DEFAULT_CACHES)
    return defaults, f"defaults ({root} missing or unreadable)"


def read_thp_mode(path: Path = SYSFS_THP) -> str:
    """The bracketed choice of ``always [madvise] never``; ``unknown`` where the file is absent."""
    try:
        m = re.search(r"\[(\w+)\]", path.read_text())
    except OSError:
        return "unknown"
    return m.group(1) if m else "unknown"


def isas_from_flags(flags: frozenset[str]) -> tuple[str, ...]:
    """The ISAs among ISA_ORDER whose required flags are all present, best first."""
    return tuple(isa for isa in ISA_ORDER if ISA_REQUIREMENTS[isa] <= flags)


@functools.cache
def detect() -> Machine:
    """Describe the CPU this process runs on (cached: the CPU does not change under a process)."""
    try:
        info = _parse_cpuinfo(CPUINFO.read_text())
    except OSError:
        info = {}
    flags = frozenset(info.get("flags", "").split())
    caches, source = _read_caches()
    return Machine(
        vendor=info.get("vendor_id", platform.processor() or "unknown"),
        model_name=info.get("model name", platform.processor() or "unknown"),
        family=int(info.get("cpu family", "0") or 0),
        model=int(info.get("model", "0") or 0),
        flags=flags,
        isas=isas_from_flags(flags),
        caches=caches,
        cache_source=source,
        n_cpus=psutil.cpu_count(logical=True) or 1,
        memory_bytes=psutil.virtual_memory().total,
        hypervisor="hypervisor" in flags,
        kernel=platform.release(),
        transparent_hugepages=read_thp_mode(),
    )
