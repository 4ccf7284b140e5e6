"""The §4.3 compiler study: gcc/clang x -O2/-O3 x FMA emission x hoisting on the selected microkernels.

    harness compiler-study --quick            # the 3 best selected microkernels (quick profile)
    harness compiler-study                    # every selected microkernel of this machine
    harness compiler-study --compilers gcc --opts O2,O3 --n 5

The thesis (§4.3) reports two lessons: emitting ``fmadd`` directly put -O2 and -O3 "on an equal footing"
(mul + add was only fused at -O3), and hoisting the output accumulators in the generator took some
microkernels from 45% to 90% of peak (compilers did it "only in an unreliable manner"). Here every
configuration (compiler, level, ``codegen.fma``, ``codegen.hoist``) is applied to the microkernels that
``harness microkernels`` selected on this machine, each measured in isolation exactly as the selection
measured it (:mod:`harness.microbench`: hot, ``T_{512,c}``, full check, one pinned CPU).

Why a command and not a Hydra sweep: each microkernel runs on its own bench workload (its footprint times
the reduction tile), and the set comes from the stored selection of the machine; ``harness run`` composes
one workload per job. Rows go to one experiment per compiler and level, ``ttile_compiler-<cc>-<level>``
(the row key does not contain the compiler, the experiment does), with hoist/fma in the candidate options;
every row records the compiler, its version and the full flags. With ``codegen.fma`` off the generator
emits mul + add and asks for ``-ffp-contract=off``; the study puts the compiler's default contraction back
(gcc: fast, clang: on), because §4.3 is about whether the compiler fuses them at -O2 / -O3.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import machine as machine_mod
from harness import microbench as mb
from harness import selection
from harness.build import CompilerConfig, build
from kernels.candidate import KernelSource, render
from kernels.microkernels import Microkernel

EXPERIMENT_PREFIX = "ttile_compiler"
COMPILERS = ("gcc", "clang")
OPT_LEVELS = ("O2", "O3")
KNOWN_LEVELS = ("O0", "O1", "O2", "O3", "Os", "Ofast")
QUICK_N = 3  # microkernels in the quick study: 3 x 16 configurations, about a minute on a quiet core


class StudyError(ValueError):
    """Bad input to the study (unknown level, compiler not installed): one line, exit 2."""


@dataclass(frozen=True)
class Configuration:
    cc: str
    opt: str
    hoist: bool
    fma: bool

    @property
    def experiment(self) -> str:
        return experiment_name(self.cc, self.opt)

    @property
    def compiler(self) -> CompilerConfig:
        # codegen.fma=false adds -ffp-contract=off (kernels/codegen.py: "no FMA at all"); the thesis's
        # question is whether the *compiler* fuses the emitted mul + add, so its own default contraction
        # is restored after it (the last -ffp-contract wins; both are in the row's cflags).
        extra = () if self.fma else (f"-ffp-contract={default_contraction(self.cc)}",)
        return CompilerConfig(self.cc, (f"-{self.opt}",), extra)

    @property
    def label(self) -> str:
        return (
            f"{self.cc} -{self.opt}, fma {'on' if self.fma else 'off'}, hoist {'on' if self.hoist else 'off'}"
        )


def default_contraction(cc: str) -> str:
    """The compiler's default -ffp-contract in C: gcc (GNU C) fuses across statements, clang 14 within one."""
    return "on" if "clang" in Path(cc).name else "fast"


def experiment_name(cc: str, opt: str) -> str:
    return f"{EXPERIMENT_PREFIX}-{Path(cc).name}-{opt}"


def check_compilers(compilers: Sequence[str], levels: Sequence[str]) -> None:
    """A compiler that is not installed or an unknown level is bad input, not 16 compile errors later."""
    for level in levels:
        if level not in KNOWN_LEVELS:
            raise StudyError(f"unknown optimisation level {level!r}; allowed: {', '.join(KNOWN_LEVELS)}")
    missing = [cc for cc in compilers if shutil.which(cc) is None]
    if missing:
        found = [cc for cc in COMPILERS if shutil.which(cc)]
        raise StudyError(
            f"compiler {', '.join(map(repr, missing))} is not installed (not on PATH); "
            f"installed here: {', '.join(found) or 'none'}"
        )
    if not compilers or not levels:
        raise StudyError("the study needs at least one compiler and one optimisation level")


def configurations(
    compilers: Sequence[str] = COMPILERS, levels: Sequence[str] = OPT_LEVELS
) -> list[Configuration]:
    """Every (compiler, level, fma, hoist), the thesis's reference (fma and hoist on) first per level."""
    return [
        Configuration(cc, opt, hoist, fma)
        for cc in compilers
        for opt in levels
        for fma in (True, False)
        for hoist in (True, False)
    ]


def study_microkernels(
    isa: str,
    op: str,
    n: int | None,
    results_dir: Path,
    machine: machine_mod.Machine,
    say: Callable[[str], None] = print,
    quick: bool = False,
) -> list[Microkernel]:
    """The ``n`` best selected microkernels of this machine (all if ``n`` is None).

    No selection stored yet: run the selection first, as the catalogue's Fig 5.2 job of the same profile
    would (``harness microkernels [--quick]``, which stores its rows and wall time; that job then reuses
    the rows), so the study never measures microkernels nobody selected. An empty selection (none reached
    the threshold, e.g. on a busy machine): the best measured ones, said so.
    """
    cache = Path(results_dir) / "cache"
    record = selection.load_selection(isa, op, cache, machine)
    if record is None:
        how = "harness microkernels" + (" --quick" if quick else "")
        say(f"no microkernel selection stored for {op} on {isa} here: running `{how}` first")
        mb.command(isa, op, quick=quick, out=None, results_dir=Path(results_dir))
        record = selection.load_selection(isa, op, cache, machine)
    if record is None:  # the selection command always writes one; defensive
        raise StudyError(f"no microkernel selection for {op} on {isa} in {cache}")
    chosen = [Microkernel.from_dict(d) for d in record["selected"]]
    if not chosen:
        ok = [r for r in record.get("measured", []) if r.get("status") == "ok" and r.get("pct_peak_median")]
        ok.sort(key=lambda r: -float(r["pct_peak_median"]))
        chosen = [Microkernel.from_dict(r["microkernel"]) for r in ok]
        say(
            f"no microkernel reached {record.get('threshold_pct')}% of peak on this machine: "
            f"studying the best measured ones instead"
        )
    if not chosen:
        raise StudyError(f"no measured microkernel for {op} on {isa}: run `harness microkernels` first")
    return chosen[:n] if n else chosen


def precompile(
    microkernels: Sequence[Microkernel],
    configs: Sequence[Configuration],
    base: mb.BenchConfig,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Build every (configuration, microkernel) in parallel before any timed run (the content-addressed
    cache then hands them to the benchmark): no compiler runs beside a timed kernel, all CPUs compile."""
    jobs = []
    for conf in configs:
        for mk in microkernels:
            src = render(mb.bench_candidate(mk, conf.hoist, conf.fma), mb.bench_workload(mk))
            if isinstance(src, KernelSource):
                jobs.append((src, conf.compiler))
    if progress:
        progress(f"[compiler-study] compiling {len(jobs)} kernel(s) ...")
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda job: build(job[0], job[1], base.cache / "so"), jobs))


def run_study(
    microkernels: Sequence[Microkernel],
    configs: Sequence[Configuration],
    base: mb.BenchConfig | None = None,
    machine: machine_mod.Machine | None = None,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Measure every microkernel under every configuration (stored rows reused); one line each."""
    base = base or mb.BenchConfig()
    m = machine or machine_mod.detect()
    precompile(microkernels, configs, base, progress)
    frames = []
    for n, conf in enumerate(configs, start=1):
        if progress:
            progress(f"[compiler-study] configuration {n}/{len(configs)}: {conf.label}")
        cfg = dataclasses.replace(
            base, experiment=conf.experiment, compiler=conf.compiler, hoist=conf.hoist, fma=conf.fma
        )
        frame = mb.run_microbench(microkernels, cfg, progress=progress, machine=m)
        frames.append(frame.assign(cc=conf.cc, opt=conf.opt, configuration=conf.label))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: median, min and max over microkernels of their median % of peak."""
    ok = frame[frame["status"] == "ok"].assign(
        pct=lambda f: pd.to_numeric(f["pct_peak_median"]), flagged=lambda f: f["busy"] | f["drift"]
    )
    keys = ["cc", "opt", "fma", "hoist"]
    out = ok.groupby(keys, sort=False).agg(
        count=("pct", "count"), median=("pct", "median"), min=("pct", "min"), max=("pct", "max"),
        flagged=("flagged", "sum"),  # busy core / peak drift: numbers taken on a loaded machine
    ).reset_index()  # fmt: skip
    failed = frame[frame["status"] != "ok"].groupby(keys, sort=False).size().rename("failed")
    out = out.merge(failed.reset_index(), on=keys, how="outer").fillna(
        {"failed": 0, "count": 0, "flagged": 0}
    )
    out = out.astype({"failed": int, "flagged": int, "count": int})
    return out.sort_values(keys, ascending=[True, True, False, False]).reset_index(drop=True)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="harness compiler-study", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--isa", default="auto", help="auto (best ISA here), avx2 or avx512")
    parser.add_argument("--op", choices=("conv2d", "matmul"), default="conv2d")
    parser.add_argument("--quick", action="store_true", help=f"the {QUICK_N} best selected microkernels")
    parser.add_argument("--n", type=int, default=None, help="the N best selected microkernels (default all)")
    parser.add_argument("--compilers", default=",".join(COMPILERS), help="comma-separated (gcc,clang)")
    parser.add_argument("--opts", default=",".join(OPT_LEVELS), help="comma-separated levels (O2,O3)")
    parser.add_argument("--rerun", action="store_true", help="measure again even if stored")
    args = parser.parse_args(argv)

    def fail(msg: str) -> None:
        print(f"harness: error: {msg}", file=sys.stderr)
        sys.exit(2)

    compilers = [c for c in args.compilers.split(",") if c]
    levels = [o.lstrip("-") for o in args.opts.split(",") if o]
    if args.n is not None and args.n < 1:
        fail(f"--n must be at least 1, got {args.n}")
    try:
        check_compilers(compilers, levels)
        m = machine_mod.detect()
        isa = m.best_isa if args.isa == "auto" else args.isa
        if isa not in ("avx2", "avx512"):
            raise StudyError(f"--isa must be auto, avx2 or avx512 (this CPU: {', '.join(m.isas) or 'none'})")
        if isa not in m.isas:
            raise StudyError(f"this CPU ({m.model_name}) cannot execute {isa}: the study times kernels")
        n = args.n or (QUICK_N if args.quick else None)
        mks = study_microkernels(isa, args.op, n, args.results, m, quick=args.quick)
    except ValueError as exc:  # StudyError, and the microbench's own bad-input errors
        fail(str(exc))
        return
    configs = configurations(compilers, levels)
    print(
        f"{m.model_name} [{m.fingerprint}] {isa}: {len(mks)} microkernel(s) x {len(configs)} configurations: "
        + ", ".join(f"[{mk.suffix}]" for mk in mks)
    )
    frame = run_study(
        mks, configs, mb.BenchConfig(results_dir=args.results, rerun=args.rerun), m, progress=_say
    )
    with pd.option_context("display.width", 140, "display.max_columns", 20):
        print(table(frame).round(1).to_string(index=False))
    bad = frame[~frame["status"].isin(["ok"])]
    for r in bad.itertuples():
        print(f"  {r.configuration} [{r.suffix}]: {r.status} {str(r.reason)[:120]}")
    print(f"rows: {', '.join(sorted({c.experiment for c in configs}))} under {args.results / 'rows'}")
