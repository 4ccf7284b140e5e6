"""The one cache model: a multi-level hierarchy simulated by pycachesim (RRZE-HPC, import ``cachesim``).

Used without kerncraft's kernel analysis: the caller computes the address stream of a loop nest in numpy
(:func:`conv_stream`) and feeds it in large batches (``iterload`` runs the loop in C), so a 720-order
sweep of a small layer takes seconds.

Cycle model of the Papaphilippou thesis (seed 004, Table 2.1): every access pays the latency of the level
that serves it, with no overlap, and every non-memory instruction costs one cycle:
``cycles = non-memory instructions + sum_level hits(level) x latency(level) + memory accesses x latency``.
Reads and writes are not distinguished (the thesis's simulator did not either): every access is a load,
so no write-back traffic exists.

Configurations live in ``conf/cache/*.yaml``: levels (size, line, ways, policy, latency) outermost last,
and the memory latency; ``from_machine: true`` builds the levels from ``harness.machine.detect()`` (this
machine's data/unified caches) with the latencies given in the file.

Threads (thesis §3.4): OpenMP ``schedule(static)`` on the outermost loop, so thread t runs a contiguous
chunk of the flat iteration space. Their streams are interleaved round-robin in slices of
``slice_accesses`` into the one shared hierarchy (Loki's L1 and L2 are shared by the tile's cores), each
slice's hits charged to its thread; the kernel's cycles are the maximum over threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "cache"
POLICIES = ("LRU", "MRU", "RR", "FIFO")
ELEMENT_BYTES = 4  # float32 here, int in the thesis: both 4 bytes
PAGE = 4096
LAYOUTS = ("harness", "thesis")
# Instructions that are not memory accesses (thesis cycle model): the multiply and the add of a MAC, and
# per loop iteration an increment plus a compare-and-branch.
INSTR_PER_MAC = 2
INSTR_PER_LOOP_ITERATION = 2
BLOCK_MIN = 4096  # iterations of the innermost block a stream is built from (see ConvNest._block)


class CacheConfigError(ValueError):
    """A malformed cache configuration."""


@dataclass(frozen=True)
class Level:
    name: str
    size: int  # bytes
    line: int  # bytes
    ways: int  # 1 = direct mapped
    policy: str
    latency: float  # cycles of a hit at this level

    @property
    def sets(self) -> int:
        return self.size // (self.line * self.ways)


@dataclass(frozen=True)
class CacheConfig:
    name: str
    levels: tuple[Level, ...]  # L1 first
    memory_latency: float
    source: str = ""

    @property
    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def describe(self) -> str:
        parts = [
            f"{lv.name} {lv.size // 1024}K/{lv.line}B/{'DM' if lv.ways == 1 else f'{lv.ways}-way'}"
            f"/{lv.policy}/{lv.latency:g}c"
            for lv in self.levels
        ]
        return ", ".join(parts) + f", mem {self.memory_latency:g}c"


def _level(raw: Mapping[str, Any], where: str) -> Level:
    try:
        lv = Level(
            str(raw["name"]), int(raw["size"]), int(raw["line"]), int(raw["ways"]),
            str(raw.get("policy", "LRU")).upper(), float(raw["latency"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise CacheConfigError(f"{where}: a level needs name, size, line, ways, latency ({exc})") from None
    if lv.policy not in POLICIES:
        raise CacheConfigError(f"{where}: policy {lv.policy!r} unknown; allowed: {', '.join(POLICIES)}")
    if lv.line <= 0 or lv.line & (lv.line - 1):
        raise CacheConfigError(f"{where}: line size {lv.line} is not a power of two")
    if lv.ways <= 0 or lv.size <= 0 or lv.size % (lv.line * lv.ways):
        raise CacheConfigError(f"{where}: size {lv.size} is not a multiple of line x ways")
    return lv


def config_from_dict(raw: Mapping[str, Any], machine: Any = None) -> CacheConfig:
    """A configuration from its YAML mapping (``from_machine`` uses ``machine`` or detects this one)."""
    name = str(raw.get("name", "unnamed"))
    if raw.get("from_machine"):
        from harness import machine as machine_mod

        m = machine or machine_mod.detect()
        lat = {int(k): float(v) for k, v in (raw.get("latencies") or {}).items()}
        data = sorted((c for c in m.caches if c.type in ("Data", "Unified")), key=lambda c: c.level)
        if not data:
            raise CacheConfigError(f"{name}: this machine reports no data caches ({m.cache_source})")
        levels = []
        for c in data:
            if c.level not in lat:
                raise CacheConfigError(f"{name}: no latency given for level {c.level} (latencies: {{...}})")
            policy = str(raw.get("policy", "LRU"))
            levels.append(
                _level(
                    {
                        "name": f"L{c.level}",
                        "size": c.size_bytes,
                        "line": c.line_bytes,
                        "ways": c.ways,
                        "policy": policy,
                        "latency": lat[c.level],
                    },
                    name,
                )  # fmt: skip
            )
        source = f"{raw.get('source', '')} [{m.model_name}, {m.cache_source}]".strip()
        return CacheConfig(name, tuple(levels), float(raw["memory_latency"]), source)
    if not raw.get("levels"):
        raise CacheConfigError(f"{name}: no levels")
    levels = tuple(_level(lv, name) for lv in raw["levels"])
    return CacheConfig(name, levels, float(raw["memory_latency"]), str(raw.get("source", "")))


def load_config(name_or_path: str | Path, machine: Any = None) -> CacheConfig:
    """``conf/cache/<name>.yaml`` or a path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = CONF_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
        raise CacheConfigError(f"unknown cache configuration {str(name_or_path)!r}; known: {known}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    raw.setdefault("name", path.stem)
    return config_from_dict(raw, machine)


# -- the simulator --------------------------------------------------------------------------------------
def _seed_rand(seed: int) -> None:
    """pycachesim's RR policy draws victims with libc ``rand()``: seed it so runs are reproducible."""
    # without a libc symbol table the randomness stays unseeded
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).srand(ctypes.c_uint(seed))


class Hierarchy:
    """A pycachesim hierarchy built from a :class:`CacheConfig`; feed it byte addresses."""

    def __init__(self, cfg: CacheConfig, seed: int = 0) -> None:
        from cachesim import Cache, CacheSimulator, MainMemory

        _seed_rand(seed)
        self.cfg = cfg
        mem = MainMemory()
        below = None
        caches = []
        # pycachesim builds from the last level up: each level needs the one it loads from
        for lv in reversed(cfg.levels):
            c = Cache(lv.name, lv.sets, lv.ways, lv.line, lv.policy, load_from=below, store_to=below)
            if below is None:
                mem.load_to(c)
                mem.store_from(c)
            below = c
            caches.append(c)
        self.caches = list(reversed(caches))
        self.sim = CacheSimulator(self.caches[0], mem)

    def load(self, addresses: np.ndarray) -> None:
        if len(addresses):
            # iterload walks any Python iterable in C: a memoryview of the int64 buffer yields plain ints
            # without the numpy scalars of an array (slow) or the whole list .tolist() builds first (1.7x
            # slower than this on 590k addresses)
            self.caches[0].backend.iterload(memoryview(np.ascontiguousarray(addresses, dtype=np.int64)), 1)

    def counts(self) -> dict[str, int]:
        """Cumulative hits per level and memory accesses (``MEM``)."""
        out = {f"{c.name}_hits": int(c.backend.HIT_count) for c in self.caches}
        out["L1_accesses"] = int(self.caches[0].backend.LOAD_count)
        out["MEM_accesses"] = int(self.caches[-1].backend.MISS_count)
        return out

    def memory_cycles(self, counts: Mapping[str, int]) -> float:
        lat = sum(counts[f"{lv.name}_hits"] * lv.latency for lv in self.cfg.levels)
        return lat + counts["MEM_accesses"] * self.cfg.memory_latency


def simulate_stream(cfg: CacheConfig, addresses: np.ndarray, seed: int = 0) -> dict[str, int]:
    """Hit counts of one address stream on a cold hierarchy."""
    h = Hierarchy(cfg, seed)
    h.load(addresses)
    return h.counts()


# -- the convolution's access stream --------------------------------------------------------------------
CONV_LOOPS = ("o", "i", "y", "x", "ky", "kx")
_DIM = {"o": "k", "i": "c", "y": "h", "x": "w", "ky": "r", "kx": "s"}
_OUTPUT_LOOPS = frozenset({"o", "y", "x"})


@dataclass(frozen=True)
class ConvNest:
    """One loop order of the direct convolution on a layer (sizes by conv2d dimension: k c h w r s)."""

    order: tuple[str, ...]
    sizes: Mapping[str, int]
    layout: str = "harness"
    partial_sums: bool = True
    bases: tuple[int, int, int] = field(default=(0, 0, 0))  # out, in, weights byte bases; 0 = auto

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(CONV_LOOPS):
            raise ValueError(f"order {self.order} is not a permutation of {CONV_LOOPS}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} unknown; allowed: {', '.join(LAYOUTS)}")

    @property
    def trips(self) -> list[int]:
        return [int(self.sizes[_DIM[n]]) for n in self.order]

    @property
    def macs(self) -> int:
        return math.prod(self.trips)

    def strides(self) -> list[int]:
        """Flat-iteration stride of each loop (product of the trip counts inside it)."""
        out, acc = [], 1
        for n in reversed(self.trips):
            out.append(acc)
            acc *= n
        return out[::-1]

    def tensor_elements(self) -> tuple[int, int, int]:
        s = self.sizes
        k, c, h, w, r, q = (int(s[d]) for d in "kchwrs")
        if self.layout == "thesis":  # input has the output's extent: no halo (the thesis's quirk)
            return k * h * w, c * h * w + (r - 1) * w + (q - 1), k * c * r * q
        return h * w * k, (h + r - 1) * (w + q - 1) * c, r * q * c * k

    def base_addresses(self) -> tuple[int, int, int]:
        """Page-aligned, consecutive arrays (as an allocator would place them) unless given."""
        if any(self.bases):
            return self.bases
        sizes = [n * ELEMENT_BYTES for n in self.tensor_elements()]
        bases, at = [], PAGE
        for n in sizes:
            bases.append(at)
            at += -(-n // PAGE) * PAGE
        return bases[0], bases[1], bases[2]

    def indices(self, start: int, stop: int) -> dict[str, np.ndarray]:
        t = np.arange(start, stop, dtype=np.int64)
        return {n: (t // st) % tr for n, st, tr in zip(self.order, self.strides(), self.trips, strict=True)}

    def addresses(self, ix: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self.sizes
        k, c, h, w, r, q = (int(s[d]) for d in "kchwrs")
        o, i, y, x, ky, kx = (ix[n] for n in CONV_LOOPS)
        if self.layout == "thesis":
            out = o * h * w + y * w + x
            inp = i * h * w + w * (y + ky) + x + kx
            wt = ((o * c + i) * r + ky) * q + kx
        else:  # conv2d: O[h][w][k], I[h+r][w+s][c], K[r][s][c][k]
            out = (y * w + x) * k + o
            inp = ((y + ky) * (w + q - 1) + (x + kx)) * c + i
            wt = ((ky * q + kx) * c + i) * k + o
        bo, bi, bw = self.base_addresses()
        return bo + ELEMENT_BYTES * out, bi + ELEMENT_BYTES * inp, bw + ELEMENT_BYTES * wt

    def run_length(self) -> int:
        """Iterations of one partial-sum run: the innermost trailing loops that do not index the output."""
        if not self.partial_sums:
            return 1
        n = 1
        for name, trip in zip(reversed(self.order), reversed(self.trips), strict=True):
            if name in _OUTPUT_LOOPS:
                break
            n *= trip
        return n

    def _block(self) -> tuple[int, np.ndarray, np.ndarray]:
        """The innermost loops as one block: its size S, its (S, 4) address columns (output read, input,
        weight, output write) relative to the block's origin, and which of them are issued.

        Addresses are affine in the loop indices, so iteration t = q*S + r has the address of r in the
        block plus the offset of block q: a stream is built with one broadcast add, not per-index
        divisions. S covers at least one partial-sum run, so the issue mask is the same in every block."""
        cached = self.__dict__.get("_block_cache")
        if cached is not None:
            return cached
        run = self.run_length()
        size, m = 1, 0
        for trip in reversed(self.trips):
            if size >= max(BLOCK_MIN, run):
                break
            size *= trip
            m += 1
        inner = self.order[len(self.order) - m :]
        ix = {n: np.zeros(1, dtype=np.int64) for n in self.order}
        grids = np.indices(self.trips[len(self.order) - m :]).reshape(m, -1) if m else np.zeros((0, 1))
        for n, g in zip(inner, grids, strict=True):
            ix[n] = g.astype(np.int64)
        out, inp, wt = self.addresses(ix)
        n_it = size
        out, inp, wt = (np.broadcast_to(a, (n_it,)) for a in (out, inp, wt))
        cols = np.stack([out, inp, wt, out], axis=1)
        r = np.arange(n_it, dtype=np.int64)
        mask = np.ones_like(cols, dtype=bool)
        mask[:, 0] = r % run == 0
        mask[:, 3] = r % run == run - 1
        # addresses() added the bases: keep them in the block, so block offsets are base-free
        result = (size, cols, mask)
        object.__setattr__(self, "_block_cache", result)  # frozen dataclass: a private memo
        return result

    def _block_offsets(self, q: np.ndarray, size: int) -> np.ndarray:
        """(len(q), 4) address offsets of blocks q (outer loop indices unravelled from q)."""
        m_outer = 0
        acc = 1
        for trip in reversed(self.trips):
            if acc >= size:
                break
            acc *= trip
            m_outer += 1
        outer = self.order[: len(self.order) - m_outer]
        trips = self.trips[: len(self.order) - m_outer]
        ix = {n: np.zeros(1, dtype=np.int64) for n in self.order}
        rest = q.astype(np.int64)
        for n, trip in zip(reversed(outer), reversed(trips), strict=True):
            ix[n] = rest % trip
            rest = rest // trip
        bo, bi, bw = self.base_addresses()
        out, inp, wt = self.addresses(ix)
        out, inp, wt = out - bo, inp - bi, wt - bw
        return np.stack([np.broadcast_to(a, q.shape) for a in (out, inp, wt, out)], axis=1)

    def stream(self, start: int, stop: int) -> np.ndarray:
        """Byte addresses of iterations [start, stop), in program order.

        Per MAC: input, weight; the output is read before and written after each partial-sum run (every
        MAC without partial sums: read-modify-write)."""
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        size, cols, mask = self._block()
        q0, q1 = start // size, (stop - 1) // size + 1
        q = np.arange(q0, q1, dtype=np.int64)
        full = cols[None, :, :] + self._block_offsets(q, size)[:, None, :]
        keep = np.broadcast_to(mask, full.shape).copy()
        keep[0, : start - q0 * size] = False
        keep[-1, stop - (q1 - 1) * size :] = False
        return full[keep]

    def non_memory_instructions(self, start: int, stop: int) -> int:
        """MAC arithmetic plus loop overhead of iterations [start, stop) (each loop's iterations entered)."""
        if stop <= start:
            return 0
        loops = sum((stop - 1) // st - start // st + 1 for st in self.strides())
        return INSTR_PER_MAC * (stop - start) + INSTR_PER_LOOP_ITERATION * loops


def thread_ranges(nest: ConvNest, threads: int, cap: int | None = None) -> list[tuple[int, int]]:
    """Static chunks of the outermost loop, as flat iteration ranges, each capped at cap / threads MACs.

    A thread whose chunk is empty (outermost trip count < threads) gets an empty range and stays idle."""
    n0 = nest.trips[0]
    inner = nest.strides()[0]
    chunk = -(-n0 // threads)
    out = []
    for t in range(threads):
        a, b = min(n0, t * chunk) * inner, min(n0, (t + 1) * chunk) * inner
        if cap is not None:
            b = min(b, a + max(1, cap // threads))
        out.append((a, b))
    return out


def chunk_scales(nest: ConvNest, threads: int, cap: int | None = None) -> list[float]:
    """Per thread, its whole chunk's MACs over the MACs it simulates (1 for an idle thread): what its
    simulated cycles are multiplied by to estimate the whole kernel. With a cap every busy thread
    simulates cap / threads MACs, so without this an order that leaves threads idle (outermost trip count
    below the thread count) would look as fast as one that splits the work evenly."""
    full, capped = thread_ranges(nest, threads), thread_ranges(nest, threads, cap)
    return [(b - a) / (d - c) if d > c else 1.0 for (a, b), (c, d) in zip(full, capped, strict=True)]


def simulate_nest(
    nest: ConvNest,
    cfg: CacheConfig,
    threads: int = 1,
    cap: int | None = None,
    seed: int = 0,
    batch: int = 1 << 20,
    slice_accesses: int = 4096,
) -> dict[str, Any]:
    """Simulate a loop order on a layer: counts, cycles and what was simulated. ``cycles`` estimates the
    whole kernel: each thread's simulated cycles scaled to its whole chunk (:func:`chunk_scales`), the
    maximum over threads; ``cycles_simulated`` is the maximum of the simulated prefixes themselves."""
    h = Hierarchy(cfg, seed)
    ranges = thread_ranges(nest, threads, cap)
    per_thread_mem = [0.0] * threads
    totals = {k: 0 for k in h.counts()}
    if threads == 1:
        a, b = ranges[0]
        for s in range(a, b, batch):
            h.load(nest.stream(s, min(b, s + batch)))
        totals = h.counts()
        per_thread_mem[0] = h.memory_cycles(totals)
    else:
        # whole streams per thread (capped), then round-robin slices into the shared hierarchy
        streams = [nest.stream(a, b) for a, b in ranges]
        pos = [0] * threads
        before = h.counts()
        while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
            for t, s in enumerate(streams):
                if pos[t] >= len(s):
                    continue
                h.load(s[pos[t] : pos[t] + slice_accesses])
                pos[t] += slice_accesses
                now = h.counts()
                delta = {k: now[k] - before[k] for k in now}
                per_thread_mem[t] += h.memory_cycles(delta)
                before = now
        totals = h.counts()
    instr = [nest.non_memory_instructions(a, b) for a, b in ranges]
    cycles = [m + i for m, i in zip(per_thread_mem, instr, strict=True)]
    whole = [c * f for c, f in zip(cycles, chunk_scales(nest, threads, cap), strict=True)]
    return {
        **totals,
        "non_memory_instructions": int(sum(instr)),
        "cycles": float(max(whole)),
        "cycles_simulated": float(max(cycles)),
        "cycles_per_thread": [float(c) for c in cycles],
        "macs_simulated": int(sum(b - a for a, b in ranges)),
        "macs_total": nest.macs,
        "threads": threads,
        "idle_threads": sum(1 for a, b in ranges if b <= a),
    }


def speedups(values: Sequence[float]) -> np.ndarray:
    """The thesis's speedup of each order vs the layer's best: best / value, in (0, 1]."""
    v = np.asarray(values, dtype=float)
    return np.nanmin(v) / v
