"""The cache model (harness.cachesim): hand-computed counts on tiny traces, the thesis's cycle model,
configurations, and the convolution's address stream."""

from __future__ import annotations

import numpy as np
import pytest

from harness import cachesim as cs
from studies.permutations import kernels as perm


def one_level(size: int, line: int, ways: int, policy: str = "LRU", latency: float = 1) -> cs.CacheConfig:
    return cs.CacheConfig("t", (cs.Level("L1", size, line, ways, policy, latency),), memory_latency=100)


def test_streaming_n_lines_gives_n_misses() -> None:
    cfg = one_level(1024, 64, 2)  # 16 lines
    counts = cs.simulate_stream(cfg, np.arange(100) * 64)
    assert counts == {"L1_hits": 0, "L1_accesses": 100, "MEM_accesses": 100}


def test_same_line_hits_after_first_miss() -> None:
    cfg = one_level(1024, 64, 2)
    counts = cs.simulate_stream(cfg, np.array([0, 4, 8, 60, 64, 0]))  # line 0 x4, line 1, line 0
    assert counts["MEM_accesses"] == 2 and counts["L1_hits"] == 4


def test_direct_mapped_conflicts_where_two_ways_do_not() -> None:
    # two lines 1024 B apart map to the same set of a 1 KiB direct-mapped cache: every access misses
    trace = np.array([0, 1024] * 10)
    assert cs.simulate_stream(one_level(1024, 64, 1), trace)["MEM_accesses"] == 20
    # with two ways (512 B apart = same set of 4 sets x 2 ways) only the first two miss
    assert cs.simulate_stream(one_level(512, 64, 2), np.array([0, 256] * 10))["MEM_accesses"] == 2


def test_lru_capacity_two_levels() -> None:
    # L1 holds 4 lines, L2 holds 16: sweeping 8 lines twice misses L1 every time (LRU) and hits L2 the
    # second time
    cfg = cs.CacheConfig(
        "t",
        (cs.Level("L1", 256, 64, 4, "LRU", 3), cs.Level("L2", 1024, 64, 4, "LRU", 10)),
        memory_latency=30,
    )
    h = cs.Hierarchy(cfg)
    h.load(np.tile(np.arange(8) * 64, 2))
    c = h.counts()
    assert (c["L1_hits"], c["L2_hits"], c["MEM_accesses"]) == (0, 8, 8)
    assert h.memory_cycles(c) == 8 * 10 + 8 * 30


def test_conv_nest_cycles_hand_computed() -> None:
    # 16 output channels, everything else 1: per MAC output read, input, weight, output write (no
    # reduction loop innermost, so no partial-sum run); output and weights span 2 lines of 32 B each,
    # input 1 line: 5 cold misses among 64 accesses.
    nest = cs.ConvNest(perm.LOOPS, {"k": 16, "c": 1, "h": 1, "w": 1, "r": 1, "s": 1})
    res = cs.simulate_nest(nest, cs.load_config("loki"))
    assert (res["L1_accesses"], res["L1_hits"], res["L2_hits"], res["MEM_accesses"]) == (64, 59, 0, 5)
    # 16 MACs x 2 instructions + 6 loops x 16 iterations x 2 instructions
    assert res["non_memory_instructions"] == 16 * 2 + 6 * 16 * 2
    assert res["cycles"] == 224 + 3 * 59 + 10 * 0 + 30 * 5


def test_partial_sums_touch_the_output_once_per_run() -> None:
    sizes = {"k": 2, "c": 3, "h": 2, "w": 2, "r": 2, "s": 2}
    with_ps = cs.ConvNest(perm.LOOPS, sizes).stream(0, 48)
    without = cs.ConvNest(perm.LOOPS, sizes, partial_sums=False).stream(0, 48)
    # base order o,i,y,x,ky,kx: the run is ky,kx (4 MACs): 2 output accesses per 4 MACs instead of 8
    assert len(without) == 48 * 4 and len(with_ps) == 48 * 2 + 12 * 2


def test_stream_matches_the_loop_nest() -> None:
    # the vectorised stream equals a plain Python loop nest over the same order
    sizes = {"k": 3, "c": 2, "h": 2, "w": 3, "r": 2, "s": 1}
    order = ("x", "ky", "o", "i", "kx", "y")
    nest = cs.ConvNest(order, sizes, partial_sums=False)
    bo, bi, bw = nest.base_addresses()
    trips = nest.trips
    expect = []
    for idx in np.ndindex(*trips):
        v = dict(zip(order, idx, strict=True))
        o, i, y, x, ky, kx = (v[n] for n in perm.LOOPS)
        out = bo + 4 * ((y * 3 + x) * 3 + o)
        inp = bi + 4 * (((y + ky) * 3 + (x + kx)) * 2 + i)
        wt = bw + 4 * (((ky * 1 + kx) * 2 + i) * 3 + o)
        expect += [out, inp, wt, out]
    assert nest.stream(0, nest.macs).tolist() == expect


def test_threads_idle_when_outer_loop_is_short() -> None:
    sizes = {"k": 4, "c": 4, "h": 4, "w": 4, "r": 1, "s": 1}
    nest = cs.ConvNest(("ky", "o", "i", "y", "x", "kx"), sizes)
    assert [b - a for a, b in cs.thread_ranges(nest, 2)] == [256, 0]
    res = cs.simulate_nest(nest, cs.load_config("loki"), threads=2)
    assert res["idle_threads"] == 1 and res["macs_simulated"] == 256


def test_a_capped_simulation_still_sees_idle_threads() -> None:
    """8 threads on an order whose outermost loop has 3 iterations: 3 threads do all the work. Capped,
    every busy thread simulates cap / 8 MACs, so the prefix alone would make this order look as fast as
    one that splits the work 8 ways; scaled to each thread's whole chunk it is about 8/3 slower, as it is
    without a cap."""
    sizes = {"k": 16, "c": 4, "h": 6, "w": 6, "r": 3, "s": 3}
    short = cs.ConvNest(("ky", "o", "i", "y", "x", "kx"), sizes)  # 3 outer iterations
    even = cs.ConvNest(("o", "ky", "i", "y", "x", "kx"), sizes)  # 16: 2 per thread
    cap = 8 * 200
    scales = cs.chunk_scales(short, 8, cap)
    assert scales == [short.macs / 3 / 200] * 3 + [1.0] * 5
    assert cs.chunk_scales(short, 8) == [1.0] * 8
    loki = cs.load_config("loki")
    for c in (cap, None):
        a, b = (cs.simulate_nest(n, loki, threads=8, cap=c) for n in (short, even))
        assert 2.0 < a["cycles"] / b["cycles"] < 3.5, (c, a["cycles"], b["cycles"])
    capped = cs.simulate_nest(short, loki, threads=8, cap=cap)
    assert capped["cycles_simulated"] == max(capped["cycles_per_thread"])
    assert capped["cycles"] == pytest.approx(max(capped["cycles_per_thread"]) * scales[0])


def test_configs_load_and_bad_ones_fail() -> None:
    loki = cs.load_config("loki")
    assert [lv.sets for lv in loki.levels] == [2048, 2048]
    assert cs.load_config("loki_64_960").levels[1].sets == 3840
    assert cs.load_config("host").levels  # built from this machine's detected caches
    with pytest.raises(cs.CacheConfigError, match="unknown cache configuration"):
        cs.load_config("nope")
    with pytest.raises(cs.CacheConfigError, match="power of two"):
        cs.config_from_dict({"levels": [{"name": "L1", "size": 960, "line": 48, "ways": 1, "latency": 1}],
                             "memory_latency": 1})  # fmt: skip
