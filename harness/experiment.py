"""One experiment: candidates x workload -> rendered, built, run, checked, timed, stored.

This is the only place that strings the pipeline together; the CLI, Snakemake and tests all call
:func:`run_experiment`, so a Snakemake run and a Hydra multirun produce identical rows.

With a search strategy (``Experiment.search``, Hydra group ``search``; see :mod:`harness.search`) the
candidates are proposed by the strategy within its budget, measured in batches and told back; rows record
the strategy, budget, seed and proposal index, and a rerun tells the strategy the stored results instead of
measuring them again (resumable). Without one, the space's candidate list is measured as it is.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import allocation, cachegrind, store
from harness import machine as machine_mod
from harness.build import BuildResult, CompilerConfig, build_many
from harness.calibrate import cache_probe_bytes, calibrate, probe_cache, probe_peak
from harness.check import CheckConfig, check_output, make_tensors
from harness.run import RunLimits, RunResult, TimingConfig, cpus_for, run_kernel
from harness.sanity import CoreWatch, SanityConfig, drift_flags, row_flags
from harness.search import Problem, SearchConfig, SearchError, Strategy, make_strategy
from harness.selection import selection_digest
from harness.sentinel import Sentinel
from kernels.baselines import BaselineUnavailable, library_info, versioned
from kernels.candidate import Candidate, KernelSource, Workload, render
from kernels.scheme import SchemeError

HARNESS_VERSION = "0.1.0"


@dataclass
class Experiment:
    name: str
    workload: Workload
    candidates: list[Candidate]
    timing: TimingConfig = field(default_factory=TimingConfig)
    counters: tuple[str, ...] = ("papi", "perf_event")
    check: CheckConfig = field(default_factory=CheckConfig)
    compiler: CompilerConfig = field(default_factory=CompilerConfig)
    limits: RunLimits = field(default_factory=RunLimits)
    seed: int = 0
    sanity: SanityConfig = field(default_factory=SanityConfig)
    results_dir: Path = Path("results")
    cache_root: Path | None = None  # compiled kernels, driver, calibration; default results_dir/cache
    # A search strategy proposes the candidates (None: measure ``candidates``, the space's list, as is).
    search: SearchConfig | None = None
    space: dict[str, Any] = field(default_factory=dict)  # the space configuration a strategy samples
    target: str = "avx2"  # ISA the strategy's schemes are generated for
    base_options: dict[str, Any] = field(default_factory=dict)  # code-generation options of its schemes

    @property
    def cache_dir(self) -> Path:
        return self.cache_root or self.results_dir / "cache"


@functools.cache
def harness_commit() -> str | None:
    """The git commit of this harness checkout, ``-dirty`` when its tracked files are modified (None
    outside a git checkout, e.g. an installed wheel)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def base_row(exp: Experiment, cand: Candidate, m: machine_mod.Machine) -> dict[str, Any]:
    w = exp.workload
    return {
        "experiment": exp.name,
        "harness_commit": harness_commit(),
        "candidate_key": cand.key,
        "candidate_kind": cand.kind,
        "candidate_text": cand.text,
        "candidate_options": json.dumps(dict(cand.options), sort_keys=True),
        "label": cand.label(),
        "workload": w.name,
        "op": w.op.name,
        "op_params": json.dumps(dict(w.op.params), sort_keys=True),
        "sizes": json.dumps(w.size),
        "flops": w.flops,
        "source_hash": None,
        "target": str(cand.option("target", "any")),
        "compiler": exp.compiler.cc,
        "compiler_version": None,
        "cflags": None,
        "machine_fingerprint": m.fingerprint,
        "cpu_model": m.model_name,
        "machine": json.dumps(m.as_dict(), sort_keys=True, default=str),
        "peak_gflops": None,
        "timing_mode": exp.timing.mode,
        "cold_method": exp.timing.cold_method if exp.timing.mode != "hot" else "",
        "timing_batch": exp.timing.batch,
        "contention": _contention(exp),
        "counter_backend": "none",
        "counters": None,
        "counters_unavailable": "{}",
        "seed": exp.seed,
        "check_mode": None,
        "check_points": None,
        "check_eps": exp.check.eps,
        "check_max_err": None,
        "check_passed": None,
        "status": "error",
        "reason": "",
        "flags": "[]",
        "times_ns": None,
        "n_reps": None,
        "min_ns": None,
        "median_ns": None,
        "mean_ns": None,
        "cov": None,
        "rel_ci": None,
        "gflops_min": None,
        "gflops_median": None,
        "pct_peak_min": None,
        "pct_peak_median": None,
        "timestamp": _now(),
        "harness_version": HARNESS_VERSION,
        "allocation": allocation.as_column(),
        **_library_columns(cand),
    }


def _library_columns(cand: Candidate) -> dict[str, Any]:
    """A baseline row says which library it ran: name, exact version, source (None for other rows)."""
    if cand.kind != "baseline":
        return {}
    try:
        info = library_info(cand.text)
    except ValueError:  # an unknown name: the row says unsupported, with the known names
        return {}
    return {"library": info.library, "library_version": info.version, "library_source": info.source}


def render_or_failure(cand: Candidate, w: Workload) -> KernelSource | tuple[str, str]:
    """The source, or (status, reason) when the candidate cannot be rendered here."""
    try:
        return render(cand, w)
    except SchemeError as exc:
        return "error", str(exc)
    except BaselineUnavailable as exc:
        return "unsupported", str(exc)
    except ValueError as exc:  # a library baseline not (yet) known here, e.g. onednn before it lands
        if cand.kind == "baseline":
            return "unsupported", str(exc)
        raise


def peak_for(peaks: dict[str, dict[str, Any]], target: str, m: machine_mod.Machine) -> float | None:
    """Calibrated peak of the ISA a kernel uses; library calls are measured against the best ISA here."""
    isa = target if target in peaks else m.best_isa
    entry = peaks.get(isa or "", {})
    value = entry.get("gflops")
    return float(value) if value else None


def _row_id(exp: Experiment, cand: Candidate, m: machine_mod.Machine) -> str:
    return store.row_id(
        exp.name, cand.key, exp.workload.name, exp.timing.mode, exp.seed, m.fingerprint, _contention(exp)
    )


def _contention(exp: Experiment) -> str | None:
    """The row's ``contention``: the co-runner's kind, null without one (as rows from before it existed)."""
    return None if exp.timing.contention == "none" else exp.timing.contention


@dataclass
class Session:
    """One run of an experiment: what its helpers share. The experiment, this machine, its calibrated
    peaks, the tensors every kernel is checked on (one draw per run), the drift sentinel and where progress
    lines go."""

    exp: Experiment
    machine: machine_mod.Machine
    peaks: dict[str, dict[str, Any]]
    tensors: Sequence[Any]
    watch: Sentinel
    say: Callable[[str], None]


def run_experiment(
    exp: Experiment, progress: Callable[[str], None] | None = None, machine: machine_mod.Machine | None = None
) -> list[dict[str, Any]]:
    """Measure every candidate not yet stored; returns the rows written (skipped ones are not re-run, except
    that stored rows with fewer than ``timing.rounds`` rounds get the missing rounds)."""
    m = machine or machine_mod.detect()
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if exp.search is not None and exp.timing.rounds > 1 and not exp.search.confirm:
        raise ValueError(
            "timing.rounds > 1 re-times a fixed candidate list in interleaved passes; a search measures "
            "candidates as it proposes them: with a search, set search.confirm=K to re-time its best K "
            "candidates and the baselines in the rounds (or use timing.rounds=1)"
        )
    if exp.search is None and exp.timing.race is not None:
        raise ValueError(
            "timing.race gives up on candidates slower than the best a search has found so far; without a "
            "search every candidate is timed in full: drop timing.race or choose a search"
        )
    strategy = _make_search(exp, m) if exp.search is not None else None  # bad search input fails first
    if strategy is not None and _falls_back(exp, m):
        say(
            f"[{exp.name}] note: no {exp.target} microkernel selection for this machine in "
            f"{exp.cache_dir}, so the space uses kernels.conv_space.FALLBACK; `harness microkernels --isa "
            f"{exp.target}{f' --broadcast {b}' if (b := _broadcast(exp)) else ''} --results "
            f"{exp.results_dir}` selects this machine's (the thesis selects first)"
        )
    for aside in store.set_aside_unreadable(exp.results_dir, exp.name):
        say(f"[{exp.name}] set aside an unreadable row file (truncated?); its candidate is measured again: "
            f"{aside}")  # fmt: skip
    if len(store.row_files(exp.results_dir, exp.name)) >= store.COMPACT_AT:  # so each launch loads fast
        say(f"[{exp.name}] {store.compact(exp.results_dir, exp.name)} stored rows moved into one table")
    peaks = calibrate(m, cache_dir=exp.cache_dir)
    todo: list[tuple[Candidate, str]] = []
    for cand in exp.candidates:
        rid = _row_id(exp, cand, m)
        if not store.has_row(exp.results_dir, exp.name, rid):
            todo.append((cand, rid))
    skipped = len(exp.candidates) - len(todo)
    if skipped:
        say(f"[{exp.name}] {skipped} candidate(s) already measured, skipped")

    exp_flags: list[str] = []
    probe = (lambda: probe_peak(m.best_isa, exp.cache_dir)) if exp.sanity.probe and m.best_isa else None
    first = None
    if (todo or exp.search is not None) and probe is not None:
        entry = peaks.get(m.best_isa, {})
        first = probe()
        exp_flags = drift_flags(exp.sanity, entry.get("gflops"), [first], entry.get("other_busy_pct"))
        for f in exp_flags:
            say(f"[{exp.name}] warning: {f}")
    # the cache probe reads with AVX2 loads: a CPU without them has the peak probe only
    nbytes = cache_probe_bytes(m)
    cache = (lambda: probe_cache(nbytes, exp.cache_dir)) if exp.sanity.probe and "avx2" in m.isas else None
    watch = Sentinel(probe, exp.sanity.sentinel_s, exp.sanity.max_peak_drift, exp_flags, first, cache=cache)
    s = Session(exp, m, peaks, make_tensors(exp.workload, exp.seed, exp.check), watch, say)
    if strategy is not None:
        rows = _run_search(s, todo, strategy)
        for n in range(CONFIRM_PASSES if exp.timing.rounds > 1 else 0):
            libs, found, leaders = _confirmed(s)
            short = [r for r in leaders if _rounds_of(r) < exp.timing.rounds]
            if n and not short:
                break  # the best found (and the best of each run prefix confirm_within names) is confirmed
            if n:
                say(
                    f"[{exp.name}] {len(short)} best-of row(s) now have fewer than {exp.timing.rounds} "
                    f"rounds (those confirmed ran slower in theirs): confirming again "
                    f"({n + 1}/{CONFIRM_PASSES})"
                )
            rows = _interleaved_rounds(s, rows, [c for c, _ in found], beside=libs)
        return rows
    rows = _measure_batch(s, [c for c, _ in todo], time.monotonic())
    if exp.timing.rounds > 1:
        rows = _interleaved_rounds(s, rows, exp.candidates)
    return rows


@dataclass
class Race:
    """Racing of a search (``timing.race``): a candidate gives up once its calls are slower than
    ``factor`` x the best median time the search has found (baselines do not count: the search does not
    know them)."""

    factor: float
    best_ns: float | None = None

    def give_up_ns(self) -> float | None:
        return None if self.best_ns is None else self.factor * self.best_ns

    def seen(self, row: dict[str, Any]) -> None:
        ns = row.get("median_ns")
        if row["status"] == "ok" and row["candidate_kind"] != "baseline" and ns is not None and ns == ns:
            self.best_ns = float(ns) if self.best_ns is None else min(self.best_ns, float(ns))


def _measure_batch(
    s: Session,
    cands: list[Candidate],
    start: float,
    extra: Sequence[dict[str, Any]] | None = None,
    progress: tuple[int, int, dict[str, int]] | None = None,
    race: Race | None = None,
) -> list[dict[str, Any]]:
    """Render, build (in parallel), run, check and store ``cands``; ``extra`` adds columns per row,
    ``progress`` = (done before, total, counts) continues a longer progress count and ``race`` gives up
    early on candidates far slower than the best so far."""
    exp, watch = s.exp, s.watch
    rendered = [render_or_failure(c, exp.workload) for c in cands]
    sources = [r for r in rendered if isinstance(r, KernelSource)]
    builds = iter(build_many(sources, exp.compiler, exp.cache_dir / "so"))
    done, total, counts = progress or (0, len(cands), {"ok": 0, "failed": 0})
    rows = []
    for i, (cand, src) in enumerate(zip(cands, rendered, strict=True)):
        n = done + i + 1
        row = base_row(exp, cand, s.machine)
        if extra is not None:
            row.update(extra[i])
        if isinstance(src, tuple):
            row["status"], row["reason"] = src
        else:
            row["target"] = src.target
            give_up = race.give_up_ns() if race is not None else None
            watch.tick()
            _measure(s, src, next(builds), row, give_up)
            row["flags"] = json.dumps(watch.flags + json.loads(row["flags"]))
            watch.mark(row)
            if race is not None:
                race.seen(row)
        store.write_row(exp.results_dir, row)
        rows.append(row)
        counts["ok" if row["status"] == "ok" else "failed"] += 1
        perf = (
            f"{row['pct_peak_median']:.1f}% of peak"
            if row["status"] == "ok" and row["pct_peak_median"]
            else ""
        )
        elapsed = time.monotonic() - start
        eta = elapsed / n * (total - n)
        s.say(
            f"[{exp.name}] {n}/{total} ok={counts['ok']} failed={counts['failed']} "
            f"elapsed {elapsed:.0f}s ETA {eta:.0f}s | {cand.label()}: {row['status']} {perf}"
        )
    return rows


def _stored_rows(exp: Experiment, m: machine_mod.Machine) -> pd.DataFrame:
    """This experiment's stored rows of this workload, machine, timing mode and seed."""
    frame = store.load(exp.results_dir, exp.name)
    if frame.empty:
        return frame
    return frame[
        (frame["workload"] == exp.workload.name)
        & (frame["machine_fingerprint"] == m.fingerprint)
        & (frame["timing_mode"] == exp.timing.mode)
        & (frame["seed"] == exp.seed)
    ]


#: Confirmations of a search at most: a confirmed candidate whose rounds ran slower than its first timing
#: can fall below a draw timed once, and the best found must not be a draw timed once.
CONFIRM_PASSES = 3


def _confirmed(
    s: Session,
) -> tuple[list[Candidate], list[tuple[Candidate, dict[str, Any]]], list[dict[str, Any]]]:
    """What a search's timing rounds re-time: the ``search.confirm`` best candidates found (every run of
    the search so far, by median % of peak) and the ``confirm`` best of this run's first N proposals for
    each N of ``search.confirm_within``, best first, each with its stored row, and, beside them, the
    baselines, so the search's winner and the libraries are compared in the same minutes rather than hours
    apart. Also the leaders: the stored row of the best found and of each prefix's best, which must end
    with every round."""
    exp = s.exp
    assert exp.search is not None
    mine = _stored_rows(exp, s.machine)
    if mine.empty:
        return [], [], []
    ok = mine[(mine["status"] == "ok") & mine["pct_peak_median"].notna()]
    libs = ok[ok["candidate_kind"] == "baseline"]
    schemes = ok[ok["candidate_kind"] != "baseline"]
    index = pd.to_numeric(schemes["search_index"], errors="coerce")
    mine_run = schemes[(schemes["search_seed"] == exp.search.seed) & index.notna()]
    tops = [schemes.nlargest(exp.search.confirm, "pct_peak_median")]
    tops += [mine_run[index[mine_run.index] < n].nlargest(exp.search.confirm, "pct_peak_median")
             for n in exp.search.confirm_within]  # fmt: skip
    leaders = [t.iloc[0].to_dict() for t in tops if len(t)]
    found = pd.concat(tops).drop_duplicates("candidate_key").sort_values("pct_peak_median", ascending=False)
    return [c for c, _ in _candidates_of(libs, s)], _candidates_of(found, s), leaders


def _candidates_of(rows: pd.DataFrame, s: Session) -> list[tuple[Candidate, dict[str, Any]]]:
    """The candidates of stored ``rows``, each with its row, in the rows' order."""
    out = []
    for r in rows.to_dict("records"):
        opts = json.loads(r["candidate_options"] or "{}")
        cand = Candidate(str(r["candidate_kind"]), str(r["candidate_text"]), tuple(opts.items()))
        if cand.key == r["candidate_key"]:
            out.append((cand, r))
        else:  # a row stored by an older candidate encoding: its key cannot be rebuilt from the row
            s.say(f"[{s.exp.name}] {cand.label()}: stored under another key, not re-timed")
    return out


def _stored_perf(mine: pd.DataFrame) -> dict[str, float | None]:
    """% of peak of the stored candidates ``mine`` (:func:`_stored_rows`), by candidate key, as the search
    was told when it measured them: their first round. Confirmation rounds pool later rounds into
    ``pct_peak_median``; an adaptive strategy (refine, optuna, tree) told those on a resume would rank its
    parents differently and propose other candidates than the run it resumes."""
    if mine.empty:
        return {}
    out: dict[str, float | None] = {}
    for r in mine.to_dict("records"):
        ns = _first_round_ns(r)
        ok = r["status"] == "ok" and ns is not None and r.get("peak_gflops")
        out[str(r["candidate_key"])] = 100.0 * (r["flops"] / ns) / r["peak_gflops"] if ok else None
    return out


def _first_round_ns(row: dict[str, Any]) -> float | None:
    """The median time of a stored row's first timing round (None without times)."""
    return next(iter(store.round_medians(row)), None)


def _broadcast(exp: Experiment) -> str | None:
    b = exp.base_options.get("broadcast")
    return None if b is None else str(b)


def _selected_microkernels(exp: Experiment, m: machine_mod.Machine) -> list[dict[str, int]] | None:
    """The microkernels ``harness microkernels`` selected on this machine (None: not measured here)."""
    from harness.selection import load_selected

    try:
        # measured under the code generation the search will run with (codegen.broadcast: other tiles fit)
        mks = load_selected(
            exp.target, "conv2d", exp.cache_dir, machine=m, missing_ok=True, broadcast=_broadcast(exp)
        )
    except (OSError, ValueError):
        return None
    return [dict(mk.size) for mk in mks] or None


def _falls_back(exp: Experiment, m: machine_mod.Machine) -> bool:
    """A conv space asking for this machine's selected microkernels, of which none is stored."""
    conv = exp.space.get("conv") or {}
    return (
        bool(conv)
        and conv.get("microkernels", "selected") == "selected"
        and not _selected_microkernels(exp, m)
    )


def _make_search(exp: Experiment, m: machine_mod.Machine) -> Strategy:
    """The experiment's strategy on its problem (this machine's caches and selected microkernels)."""
    assert exp.search is not None
    caches = tuple(c for c in (m.cache_bytes(lv) for lv in (1, 2, 3)) if c)
    problem = Problem(exp.workload, exp.space, exp.target, exp.base_options, list(exp.candidates),
                      _selected_microkernels(exp, m), caches or Problem.caches,
                      _transferred(exp, m))  # fmt: skip
    return make_strategy(problem, exp.search)


def _transferred(exp: Experiment, m: machine_mod.Machine) -> list[str]:
    """``space.transfer_from``: the other workloads' best schemes a refined search starts from."""
    spec = exp.space.get("transfer_from")
    if not spec:
        return []
    assert exp.search is not None
    if exp.search.strategy != "refine":
        raise SearchError(
            f"space.transfer_from is read by search=refine only (it maps the schemes onto this workload), "
            f"not by search={exp.search.strategy}"
        )
    from harness.winners import NoWinners, best_of_others

    try:
        return best_of_others(spec, exp.results_dir, exp.workload, m.fingerprint)
    except NoWinners as exc:
        raise SearchError(str(exc)) from exc


def _run_search(s: Session, todo: list[tuple[Candidate, str]], strategy: Strategy) -> list[dict[str, Any]]:
    """Ask the strategy for candidates within the budget; stored ones are told their stored performance
    (a resumed search continues where it stopped), new ones are measured in batches and told."""
    exp = s.exp
    assert exp.search is not None
    cfg = exp.search
    mine = _stored_rows(exp, s.machine)
    stored = _stored_perf(mine)
    selection = selection_digest(strategy.problem.selected)
    search_cols = {"search_strategy": cfg.strategy, "search_budget": cfg.budget, "search_seed": cfg.seed,
                   "search_selection": selection}  # fmt: skip
    drawn = _stored_draws(mine, cfg)
    start = time.monotonic()
    counts = {"ok": 0, "failed": 0}
    rows: list[dict[str, Any]] = []
    # the space's library baselines (e.g. onednn): measured once, outside the budget
    libs = [c for c, _ in todo if c.kind == "baseline"]
    # ... and the space's libraries that need no validation against the BLAS table (conv libraries such as
    # onednn are reported unsupported until their renderer exists)
    for name in exp.space.get("library_baselines") or []:
        lib = versioned(Candidate("baseline", str(name)))
        if lib.key not in stored and lib not in libs:
            libs.append(lib)
    budget = cfg.budget if cfg.budget is not None else 10**9
    total = budget if cfg.budget is not None else 0
    race = None
    if exp.timing.race is not None:
        race = Race(exp.timing.race)
        for r in mine.to_dict("records"):  # a resumed search races its stored best, as it first saw it
            race.seen({**r, "median_ns": _first_round_ns(r)})
    if libs:
        extra = [{**search_cols, "search_index": None} for _ in libs]
        rows += _measure_batch(s, libs, start, extra, (0, len(libs), counts))
    proposed, resumed = 0, 0
    batch = 1 if strategy.adaptive else cfg.batch
    while proposed < budget:
        cands = strategy.ask(min(batch, budget - proposed))
        if not cands:
            break
        new, extra = [], []
        for c in cands:
            # a stored draw at this index must come again; an adaptive strategy told a new measurement (a
            # set-aside row measured again; rows past the baselines') may legitimately go another way after it
            keys = drawn.get(proposed)
            if keys and c.key not in keys and not (strategy.adaptive and len(rows) > len(libs)):
                raise SearchError(_diverged(exp, proposed, c, mine, keys, selection))
            if c.key in stored:
                strategy.tell(c, stored[c.key])
                resumed += 1
            else:
                new.append(c)
                extra.append({**search_cols, "search_index": proposed})
            proposed += 1
        if new:
            done = len(rows) - len(libs)
            shown_total = max(total - resumed, done + len(new))
            got = _measure_batch(s, new, start, extra, (done, shown_total, counts), race)
            for c, r in zip(new, got, strict=True):
                strategy.tell(c, r["pct_peak_median"] if r["status"] == "ok" else None)
            rows += got
    if resumed:
        s.say(f"[{exp.name}] {resumed} candidate(s) of the {cfg.strategy} search already measured, skipped")
    s.say(f"[{exp.name}] {cfg.strategy} search: {proposed} candidate(s) proposed (budget {cfg.budget})")
    return rows


def _stored_draws(mine: pd.DataFrame, cfg: SearchConfig) -> dict[int, set[str]]:
    """The candidate keys stored at each draw index of this strategy and seed (a set: a run stopped and
    resumed by an older harness may hold two draws at one index)."""
    if mine.empty:
        return {}
    index = pd.to_numeric(mine["search_index"], errors="coerce")
    same = mine[(mine["search_strategy"] == cfg.strategy) & (mine["search_seed"] == cfg.seed) & index.notna()]
    out: dict[int, set[str]] = {}
    for i, key in zip(index[same.index].astype(int), same["candidate_key"], strict=True):
        out.setdefault(int(i), set()).add(str(key))
    return out


def _diverged(
    exp: Experiment, i: int, cand: Candidate, mine: pd.DataFrame, keys: set[str], selection: str | None
) -> str:
    """Why a resumed search stops: it proposes another candidate at a draw index than the stored run did,
    so its space is not the stored run's, and going on would mix two searches under one seed."""
    assert exp.search is not None
    old = mine[mine["candidate_key"].isin(keys)]["candidate_text"].iloc[0]
    before = {str(v) for v in mine["search_selection"].dropna()}
    if before and selection not in before:
        why = (
            f"the stored draws came from microkernel selection {', '.join(sorted(before))} and this "
            f"machine's is {selection} (measured again by `harness microkernels`?); `harness archive "
            f"unpack` of their archive restores the selection they came from into {exp.cache_dir} when "
            "none is there"
        )
    else:
        why = (
            "the space they were drawn from differs from today's: a microkernel selection measured again "
            f"(in {exp.cache_dir}), another space configuration, a changed sampler or candidate encoding "
            "(rows of an older harness)"
        )
    return (
        f"[{exp.name}] {exp.workload.name}: draw {i} of the stored {exp.search.strategy} search "
        f"(seed {exp.search.seed}) is {old}, this run proposes {cand.text}: {why}. Resuming would mix two "
        f"searches under one seed; restore what the stored rows were drawn from, or search into another "
        f"results_dir (or experiment name)"
    )


def _measure(
    s: Session, src: KernelSource, built: BuildResult, row: dict[str, Any], give_up_ns: float | None = None
) -> None:
    """Fill ``row`` with the built kernel's check and timing, or why it has none."""
    exp, m = s.exp, s.machine
    row.update(
        source_hash=src.source_hash, compiler_version=built.cc_version, cflags=built.flags,
        peak_gflops=peak_for(s.peaks, src.target, m), workspace_bytes=src.workspace_bytes,
    )  # fmt: skip
    if not built.ok or built.so_path is None:
        row["status"], row["reason"] = "compile_error", built.error
        return
    if src.target not in ("any", *m.isas):
        row["status"] = "unsupported"
        row["reason"] = f"this CPU ({m.model_name}) cannot execute {src.target}; compiled only"
        return
    res, failure, other_pct = _run_checked(s, src, built, row, give_up_ns)
    row.update(
        counter_backend=res.counter_backend,
        counters_unavailable=json.dumps(res.counters_unavailable),
        threads=res.threads,
        cpus=json.dumps(res.cpus),
        # what the library chose, as it says while running (oneDNN's kernel), else its code path on this CPU
        impl=res.impl or (library_info(row["candidate_text"]).impl if row.get("library") else ""),
    )
    if exp.timing.mode != "hot":
        row["cold_method"] = res.cold_method
    if res.contention != "none":
        row.update(contention_bytes=res.contention_bytes, contention_gbps=res.contention_gbps)
    if failure is not None:
        row["status"], row["reason"] = failure
        return
    row["status"] = "ok"
    row["counters"] = json.dumps(res.counters)
    if "cachegrind" in exp.counters and res.counter_backend == "none":  # no PMU read: simulate the caches
        _simulated_counters(exp, src, built, s.tensors, row)
    row.update(store.perf_fields([float(t) for t in res.times_ns], exp.workload.flops, row["peak_gflops"]))
    flags = row_flags(exp.sanity, row["cov"], other_pct, row["pct_peak_median"], res.threads or 1)
    if res.raced:
        flags.append(f"raced: slower than {give_up_ns:.4g} ns after {res.n_reps} calls, timing stopped")
    row["flags"] = json.dumps(flags)


def _simulated_counters(
    exp: Experiment, src: KernelSource, built: BuildResult, tensors: Sequence[Any], row: dict[str, Any]
) -> None:
    """Per-call counts of the kernel under cachegrind (harness/cachegrind.py) in the row's counters, or
    why there are none in its ``counters_unavailable``."""
    assert built.so_path is not None
    unavailable = json.loads(row["counters_unavailable"] or "{}")
    try:
        counts, first = cachegrind.count(src, built.so_path, list(tensors), exp.cache_dir)
    except cachegrind.CachegrindError as exc:
        unavailable["cachegrind"] = str(exc)
        row["counters_unavailable"] = json.dumps(unavailable)
        return
    if not check_output(exp.workload, list(tensors), first, exp.check, exp.seed).passed:
        unavailable["cachegrind"] = "the kernel's output under valgrind differs from the reference"
        row["counters_unavailable"] = json.dumps(unavailable)
        return
    row["counters"] = json.dumps({event: [n] for event, n in counts.items()})  # one hot call
    row["counter_backend"] = cachegrind.BACKEND


def _run_checked(
    s: Session, src: KernelSource, built: BuildResult, row: dict[str, Any], give_up_ns: float | None = None
) -> tuple[RunResult, tuple[str, str] | None, float]:
    """Time the built kernel on its pinned CPUs and check its output: (run result, (status, reason) if
    it failed or computed a wrong result, % of the pinned CPUs other processes used meanwhile).
    The check columns of ``row`` are filled whenever an output came back."""
    assert built.so_path is not None
    exp, tensors = s.exp, s.tensors
    with CoreWatch(cpus_for(exp.timing)) as watch:
        res = run_kernel(
            built.so_path, tensors, src.workspace_bytes, exp.timing, exp.counters, exp.limits, exp.cache_dir,
            give_up_ns=give_up_ns,
        )  # fmt: skip
    if res.status != "ok" or res.output is None:
        return res, (res.status, res.reason), watch.other_pct
    chk = check_output(exp.workload, list(tensors), res.output, exp.check, exp.seed)
    row.update(
        check_mode=chk.mode, check_points=chk.points, check_max_err=chk.max_err, check_passed=chk.passed,
    )  # fmt: skip
    if not chk.passed:
        why = f"{chk.n_bad}/{chk.points} points off (max rel. err {chk.max_err:.3g}, first at "
        why += f"{chk.first_bad})"
        return res, ("wrong", why), watch.other_pct
    return res, None, watch.other_pct


def _rounds_of(row: dict[str, Any]) -> int:
    return len(store.round_medians(row))


def _interleaved_rounds(
    s: Session, fresh: list[dict[str, Any]], cands: Sequence[Candidate], beside: Sequence[Candidate] = ()
) -> list[dict[str, Any]]:
    """Rounds 2..``timing.rounds``: every ok candidate of ``cands`` is timed (and checked) once more
    per round, the order rotated from round to round, and its row rewritten with the pooled times. Rows
    just measured and stored ones with fewer rounds (an interrupted or shorter earlier run) are topped
    up; a row whose generated source has changed since is left as it is. Whenever any of them is due,
    the candidates of ``beside`` (a search's baselines) are timed in every round as well, whatever they
    already have, so each confirmation of a growing search has them in the same minutes
    (:func:`harness.analysis.round_ratio` pairs rounds by time). Returns the rows rewritten or written."""
    exp, watch, say = s.exp, s.watch, s.say
    want = exp.timing.rounds
    by_key = {r["candidate_key"]: r for r in fresh}
    extra = {c.key for c in beside}
    units: list[tuple[Candidate, dict[str, Any], int]] = []  # candidate, row, rounds to add
    for cand in dict.fromkeys([*cands, *beside]):
        row = by_key.get(cand.key)
        if row is None:
            row = store.read_row(exp.results_dir, exp.name, _row_id(exp, cand, s.machine))
        if row is not None and row["status"] == "ok":
            units.append((cand, row, want - _rounds_of(row)))
    if not any(add > 0 for c, _, add in units if c.key not in extra):
        units = [u for u in units if u[2] > 0]  # a plain top-up: nothing to time beside
    else:
        units = [(c, r, want - 1 if c.key in extra else add) for c, r, add in units]
        units = [u for u in units if u[2] > 0]
    if not units:
        return fresh
    sources = [render(c, exp.workload) for c, _, _ in units]
    builds = build_many(sources, exp.compiler, exp.cache_dir / "so")
    work = []
    for (cand, row, add), src, built in zip(units, sources, builds, strict=True):
        if src.source_hash != row["source_hash"]:
            say(f"[{exp.name}] {cand.label()}: generated source changed since it was measured, not re-timed")
        elif not built.ok:
            first = next(iter(built.error.strip().splitlines()), "")
            say(f"[{exp.name}] {cand.label()}: no longer compiles, not re-timed: {first}")
        else:
            work.append((cand, row, src, built, add))
    total = sum(add for *_, add in work)
    start, n = time.monotonic(), 0
    for p in range(want - 1):
        # a row missing k rounds joins the last k passes
        due = [u for u in work if p >= want - 1 - u[4] and u[1]["status"] == "ok"]
        shift = (p + 1) * len(due) // want  # each pass starts elsewhere in the list
        slow = []  # (unit, row before this round, slowdown of the first try)
        for unit in due[shift:] + due[:shift]:
            cand, row, src, built, _ = unit
            before = dict(row)
            watch.tick()
            _one_more_round(s, src, built, row)
            ratio, mark = _slowdown(row, before), ""
            drifted = watch.drifted_down() and row["status"] == "ok"
            if exp.timing.retime is not None and (ratio > exp.timing.retime or drifted):
                slow.append((unit, before, ratio))
                why = f"x{ratio:.2f} its earlier rounds" if ratio > exp.timing.retime else "sentinel down"
                mark = f" ({why}: timed again at the end of the pass)"
            else:
                watch.mark(row)
                store.write_row(exp.results_dir, row)
            n += 1
            elapsed = time.monotonic() - start
            say(
                f"[{exp.name}] round {p + 2}/{want} {n}/{total} elapsed {elapsed:.0f}s "
                f"ETA {elapsed / n * (total - n):.0f}s | {cand.label()}: {row['status']}{mark}"
            )
        _retime(s, p + 2, slow)
    rewritten = {r["candidate_key"]: r for _, r, *_ in work}
    return [rewritten.pop(r["candidate_key"], r) for r in fresh] + list(rewritten.values())


#: How often a slow round is timed again (``timing.retime``; the wait before each try: ``timing.retime_wait``)
RETIME_TRIES = 2


def _slowdown(row: dict[str, Any], before: dict[str, Any]) -> float:
    """How much slower the round just added to ``row`` ran than the median of its earlier rounds (0.0 when
    the round failed: a failure is a result, not a slow round)."""
    if row["status"] != "ok" or before["status"] != "ok":
        return 0.0
    earlier = store.round_medians(before)
    return store.round_medians(row)[-1] / float(np.median(earlier)) if earlier else 0.0


def _retime(s: Session, k: int, slow: list[tuple[tuple[Any, ...], dict[str, Any], float]]) -> None:
    """Time round ``k`` of the ``slow`` units again, after a pause, up to :data:`RETIME_TRIES` times; the last
    try is kept whatever it gives (keeping the fastest of several would bias the row fast), and the row's
    flags say what happened."""
    exp, watch, say = s.exp, s.watch, s.say
    for attempt in range(1, RETIME_TRIES + 1):
        if not slow:
            return
        say(
            f"[{exp.name}] round {k}: {len(slow)} row(s) ran over x{exp.timing.retime} slower than their "
            f"earlier rounds (a disturbed host?); waiting {exp.timing.retime_wait:.0f}s, then timing them "
            f"again ({attempt}/{RETIME_TRIES})"
        )
        time.sleep(exp.timing.retime_wait)
        still = []
        for unit, before, first in slow:
            cand, row, src, built, _ = unit
            row.clear()
            row.update(before)
            watch.tick()
            _one_more_round(s, src, built, row)
            ratio = _slowdown(row, before)
            assert exp.timing.retime is not None
            watch.mark(row)
            if ratio > exp.timing.retime and attempt < RETIME_TRIES:
                still.append((unit, before, first))
                continue
            what = "still" if ratio > exp.timing.retime else "then"
            note = f"retimed: round {k} first ran x{first:.2f} its earlier rounds, {what} x{ratio:.2f} "
            note += f"after {attempt} retime(s)"
            row["flags"] = json.dumps([*json.loads(row["flags"]), note])
            store.write_row(exp.results_dir, row)
            say(f"[{exp.name}] {cand.label()}: {note}")
        slow = still


def _one_more_round(s: Session, src: KernelSource, built: BuildResult, row: dict[str, Any]) -> None:
    """Time ``row``'s kernel once more and pool the times; a failure or wrong result in any round makes
    the row fail (a kernel that is only sometimes right, e.g. a data race, is wrong)."""
    exp = s.exp
    k = _rounds_of(row) + 1
    res, failure, other_pct = _run_checked(s, src, built, row)
    if failure is not None:
        row.update(dict.fromkeys(store.PERF_COLUMNS))
        row["status"], row["reason"] = failure[0], f"timing round {k}: {failure[1]}"
        return
    new = [float(t) for t in res.times_ns]
    medians = [*store.round_medians(row), float(np.median(new))]
    when = store.round_times(row)
    row.update(
        store.perf_fields([*row["times_ns"], *new], exp.workload.flops, row["peak_gflops"], None, medians)
    )
    row["round_times"] = [*when, _now()] if when is not None else None
    if res.contention != "none":  # the weakest push of the rounds: the neighbour pushed at least this hard
        row["contention_gbps"] = min(res.contention_gbps, row.get("contention_gbps") or math.inf)
    if res.counters:  # (simulated counts, one per call, are the kernel's whatever the round)
        old = json.loads(row["counters"] or "{}")
        row["counters"] = json.dumps({e: [*old.get(e, []), *v] for e, v in res.counters.items()})
    kept = [f for f in json.loads(row["flags"]) if not f.startswith("noisy:")]  # the CoV is recomputed
    kept = [f for f in kept if not f.startswith("above peak:")]  # recomputed from the pooled median
    pooled = row_flags(exp.sanity, row["cov"], other_pct, row["pct_peak_median"], row.get("threads") or 1)
    row["flags"] = json.dumps(list(dict.fromkeys(kept + pooled)))
