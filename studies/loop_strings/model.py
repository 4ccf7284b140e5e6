"""The PARLOOPER performance model (seed 003, §II-E): rank loop strings before measuring them.

For each thread, replay the loop nest to get the chronological trace of tensor *slices* the BRGEMM
bodies touch (A[im][ik], B[ik][in], C[im][in], one entry per block, not per cache line), run it through
fully associative LRU caches of the machine's capacities (``harness.cachesim``, one cache model: each
slice is one "line" of a pycachesim hierarchy whose capacity is counted in slices), and cost each BRGEMM
call as ``max(flops / peak, sum over levels of bytes served by the level / its bandwidth)``. The kernel's
predicted time is the maximum over threads. The paper gives neither its cost combiner nor its constants:
ours (max of compute and summed transfer, per-level bandwidths in bytes per cycle below) are assumptions,
and only the ranking is used (the paper's claim: the model's top-5 contain the measured best).

Threads: PAR-MODE 1 splits the collapsed parallel loops statically (``schedule(static)``; a dynamic
schedule is modelled as static), PAR-MODE 2 by the thread grid, as the generated code does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness import cachesim, interrupt, workers
from studies.loop_strings import kernels as lsm

# Bytes per cycle each level can feed one core (AVX2-class x86: 2 x 32 B loads/cycle from L1; typical
# L2/L3/DRAM sustained rates), and fp32 flops per cycle (2 FMA units x 8 lanes x 2).
BANDWIDTH = {"L1": 64.0, "L2": 32.0, "L3": 16.0, "MEM": 8.0}
PEAK_FLOPS_PER_CYCLE = 32.0
SLICE_LINE = 64  # address units per slice fed to pycachesim


@dataclass(frozen=True)
class Prediction:
    cycles: float
    gflops_per_ghz: float  # flops / cycle: the model's "performance"
    calls: int
    threads: int


def thread_bodies(
    ls: lsm.LoopString, specs: Mapping[str, lsm.LoopSpec], tid: int, nthreads: int
) -> list[dict[str, int]]:
    """The body indices thread ``tid`` of ``nthreads`` executes, in order."""
    lsm.check_specs(ls, specs)
    occ = ls.occurrences
    par_pos = [k for k, o in enumerate(occ) if o.parallel]
    out: list[dict[str, int]] = []
    grid_cols = {g: 1 for g in lsm.GRID_AXES}
    for o in occ:
        if o.grid:
            grid_cols[o.grid] = o.ways
    nt = ls.grid_threads
    grid_ids = []
    if ls.mode == "grid":
        for virt in range(tid, nt, nthreads):
            grid_ids.append({
                "R": virt // (grid_cols["C"] * grid_cols["L"]),
                "C": (virt // grid_cols["L"]) % grid_cols["C"],
                "L": virt % grid_cols["L"],
            })  # fmt: skip

    def bounds(k: int, env: dict[str, int]) -> range:
        o = occ[k]
        sp = specs[o.letter]
        n = ls.count(o.letter)
        lo = sp.start if o.level == 0 else env[f"{o.letter}{o.level - 1}"]
        hi = sp.end if o.level == 0 else lo + sp.blocks[o.level - 1]
        step = sp.blocks[o.level] if o.level < n - 1 else sp.step
        return range(lo, hi, step)

    def rec(k: int, env: dict[str, int], gid: dict[str, int] | None) -> None:
        if k == len(occ):
            out.append({x: env[f"{x}{ls.count(x) - 1}"] for x in ls.letters})
            return
        o = occ[k]
        if ls.mode == "omp" and k == par_pos[0]:
            # the collapsed loops: their (rectangular) product, split statically over the threads
            ks = par_pos
            ranges = []
            for j in ks:
                ranges.append(list(bounds(j, env)))
            space = list(itertools.product(*ranges))
            chunk = -(-len(space) // nthreads)
            for vals in space[tid * chunk : (tid + 1) * chunk]:
                for j, v in zip(ks, vals, strict=True):
                    env[f"{occ[j].letter}{occ[j].level}"] = v
                rec(ks[-1] + 1, env, gid)
            return
        r = bounds(k, env)
        if o.grid and gid is not None:
            n = len(r)
            ch = -(-n // o.ways)
            r = r[gid[o.grid] * ch : (gid[o.grid] + 1) * ch]
        for v in r:
            env[f"{o.letter}{o.level}"] = v
            rec(k + 1, env, gid)

    if ls.mode == "grid":
        for gid in grid_ids:
            rec(0, {}, gid)
    elif ls.mode == "omp" or tid == 0:
        rec(0, {}, None)
    return out


def _levels(cfg: cachesim.CacheConfig, slice_bytes: int) -> cachesim.CacheConfig:
    """The configuration as fully associative LRU caches counted in slices (one slice per line)."""
    levels = []
    for lv in cfg.levels:
        ways = max(1, lv.size // slice_bytes)
        levels.append(cachesim.Level(lv.name, ways * SLICE_LINE, SLICE_LINE, ways, "LRU", lv.latency))
    return cachesim.CacheConfig(cfg.name + "-slices", tuple(levels), cfg.memory_latency)


def predict(
    ls: lsm.LoopString, specs: Mapping[str, lsm.LoopSpec], p: lsm.GemmParams, cfg: cachesim.CacheConfig,
    nthreads: int = 1, max_levels: int = 2, combiner: str = "sum",
) -> Prediction:  # fmt: skip
    """Predicted cycles of a loop-string GEMM (maximum over threads).

    ``combiner``: ``sum`` (compute and transfers do not overlap) or ``max`` (perfect overlap, a
    roofline per call). With ``max`` a single core running blocks of 32 is compute-bound for every string
    and the model cannot tell them apart, so ``sum`` is the default."""
    if combiner not in ("sum", "max"):
        raise ValueError(f"combiner must be sum or max, got {combiner!r}")
    slice_bytes = 4 * max(p.bm * p.bk, p.bk * p.bn, p.bm * p.bn)
    cfg_s = _levels(cachesim.CacheConfig(cfg.name, cfg.levels[:max_levels], cfg.memory_latency), slice_bytes)
    flops_call = 2.0 * p.bm * p.bn * p.bk * p.k_step
    ids: dict[tuple[str, int, int], int] = {}
    worst, calls = 0.0, 0
    for tid in range(nthreads):
        h = cachesim.Hierarchy(cfg_s)  # private caches per thread (sharing is ignored, as in the paper)
        before = h.counts()
        cycles = 0.0
        for ind in thread_bodies(ls, specs, tid, nthreads):
            ik, im, jn = ind["a"], ind["b"], ind["c"]
            keys = [("A", im, ik + t) for t in range(p.k_step)] + [("B", ik + t, jn) for t in range(p.k_step)]
            keys.append(("C", im, jn))
            h.load([ids.setdefault(key, len(ids)) * SLICE_LINE for key in keys])
            now = h.counts()
            served = {lv.name: now[f"{lv.name}_hits"] - before[f"{lv.name}_hits"] for lv in cfg_s.levels}
            served["MEM"] = now["MEM_accesses"] - before["MEM_accesses"]
            before = now
            move = sum(n * slice_bytes / BANDWIDTH.get(name, BANDWIDTH["MEM"]) for name, n in served.items())
            compute = flops_call / PEAK_FLOPS_PER_CYCLE
            cycles += compute + move if combiner == "sum" else max(compute, move)
            calls += 1
        worst = max(worst, cycles)
    total_flops = flops_call * calls
    return Prediction(worst, total_flops / worst if worst else 0.0, calls, nthreads)


def top_classes(predicted: Mapping[Any, float], n: int = 5, rel: float = 1e-3) -> set[Any]:
    """Keys whose prediction falls in the n best *classes* (distinct predicted values, within ``rel``)."""
    values = sorted(set(predicted.values()))
    classes: list[float] = []
    for v in values:
        if not classes or v > classes[-1] * (1 + rel):
            classes.append(v)
    cut = classes[min(n, len(classes)) - 1] * (1 + rel) if classes else 0.0
    return {k for k, v in predicted.items() if v <= cut}


def predict_candidate(
    c: Any, sizes: Mapping[str, int], cfg: cachesim.CacheConfig, nthreads: int = 1
) -> Prediction:
    """The prediction of one enumerated GEMM loop string (a ``Candidate`` of ``enumerate_gemm``)."""
    p = lsm.gemm_params(c)
    return predict(lsm.parse_loop_string(c.text), lsm.gemm_specs(p, sizes), p, cfg, nthreads)


def _predict_job(job: tuple[Any, Mapping[str, int], cachesim.CacheConfig, int]) -> Prediction:
    return predict_candidate(*job)


def rank(
    candidates: Sequence[Any],
    sizes: Mapping[str, int],
    cfg: cachesim.CacheConfig,
    nthreads: int = 1,
    progress: Callable[[int, int], None] | None = None,
    jobs: int = 1,
    known: Mapping[str, Prediction] | None = None,
    on_result: Callable[[Any, Prediction], None] | None = None,
) -> list[tuple[Any, Prediction]]:
    """Candidates with their predictions, best (fewest cycles) first. The model simulates every BRGEMM call
    (64^3 of them per string for a 2048^3 GEMM in blocks of 32, about 4 s a string): ``progress(done,
    total)`` is called after each candidate, ``on_result(candidate, prediction)`` after each new one (to
    keep it: a stopped ranking resumes from ``known``, predictions by candidate key, which are not
    simulated again). ``jobs`` > 1 spreads the candidates over that many worker processes; the predictions
    are the same (each candidate's simulation is independent and deterministic)."""
    known = known or {}
    todo = [c for c in candidates if c.key not in known]
    preds = {c.key: known[c.key] for c in candidates if c.key in known}
    done = len(preds)
    if progress is not None and done:
        progress(done, len(candidates))
    pool = workers.process_pool(jobs, [__name__]) if jobs > 1 and len(todo) > 1 else None
    try:
        if pool is None:
            results = (predict_candidate(c, sizes, cfg, nthreads) for c in todo)
        else:
            results = pool.map(_predict_job, [(c, dict(sizes), cfg, nthreads) for c in todo])
        for c, pr in zip(todo, results, strict=True):
            interrupt.check()  # thousands of simulated nests: a stop requested meanwhile is honoured here
            preds[c.key] = pr
            done += 1
            if on_result is not None:
                on_result(c, pr)
            if progress is not None:
                progress(done, len(candidates))
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)  # a stop drops the strings not yet started
    return sorted(((c, preds[c.key]) for c in candidates), key=lambda cp: cp[1].cycles)
