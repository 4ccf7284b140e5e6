"""The ``harness`` command: ``run`` and ``show`` compose an experiment with Hydra; ``calibrate``, ``report``.

    harness run workload=conv_small space=quick_conv timing=cold
    harness run -m codegen.hoist=true,false scheme='[R_j, R_i, T_{192,k}, U_{6,i}, U_{2,j}, V_j]'
    harness show scheme='[R_i, R_k, R_j, V_j]'
    harness calibrate [--force]
    harness report [--results results] [--out results/report] [--pdf]
    harness export --pyperf results/timings.json --csv results/csv
    harness microkernels [--quick]

Studies add their own commands as plug-ins: a module ``studies/<study>/commands/<name>.py`` (or, for a
study not yet in studies/, ``harness/commands/<name>.py``) with ``main(argv: list[str]) -> None`` is
``harness <name> ...`` (it takes ``--results DIR`` like the others).

Bad input (unknown workload or operator, malformed scheme, impossible sizes) exits with status 2 and one
line naming what is wrong.
"""

from __future__ import annotations

import argparse
import errno
import shutil
import sys
import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import allocation
from harness.config import CONF_DIR, ROOT, register_resolvers, target_isa

SWEEPS_DIR = ROOT / "sweeps"  # multirun presets: `harness run -m +sweeps=NAME` (conf/sweeps links here)
COMMANDS = ("run", "show", "calibrate", "report", "export", "microkernels")


class UsageError(Exception):
    """A user mistake: reported on one line, exit status 2."""


def _fail(message: str) -> None:
    print(f"harness: error: {message}", file=sys.stderr)
    sys.exit(2)


CHOICES: dict[str, tuple[object, ...]] = {
    "timing.mode": ("hot", "cold", "fresh"),
    "timing.cold_method": ("clflushopt", "sweep"),
    "check.init": ("integers", "uniform"),
    "codegen.hoist": (True, False),
    "codegen.fma": (True, False),
    "codegen.partial": ("none", "masked", "padded"),
    "codegen.broadcast": (None, "embedded"),
    "compiler.opt": ("O0", "O1", "O2", "O3", "Os", "Ofast"),
}


def _check_choices(c: dict[str, Any]) -> None:
    """Values with a closed set of choices, and tools that must exist, named by their config key."""
    from kernels.baselines import BASELINE_NAMES

    for key, allowed in CHOICES.items():
        section, name = key.split(".")
        value = c[section][name]
        if value not in allowed:
            raise UsageError(f"{key}={value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")
    for backend in c["counters"]["backends"]:
        if backend not in ("papi", "perf_event", "cachegrind"):
            raise UsageError(
                f"counters.backends: unknown backend {backend!r}; allowed: papi, perf_event, cachegrind"
            )
    for entry in (c["baselines"] if c.get("baselines") is not None else c["space"].get("baselines")) or []:
        name = entry.get("name") if isinstance(entry, Mapping) else entry  # {name: onednn, threads: 2}
        if name not in BASELINE_NAMES:
            raise UsageError(f"baselines: unknown library {name!r}; allowed: {', '.join(BASELINE_NAMES)}")
    if c.get("search"):  # the search group (harness/search): strategy, budget, seed, batch
        from harness.search import SearchConfig, SearchError

        try:
            SearchConfig.from_config(c["search"])
        except SearchError as exc:
            raise UsageError(str(exc)) from exc
    cc = c["compiler"]["cc"]
    if shutil.which(cc) is None:
        raise UsageError(f"compiler.cc={cc!r} is not installed (not on PATH); e.g. compiler=gcc")


def _timing(t: dict[str, Any]) -> Any:
    """The timing config, its CPU set checked now (``timing.threads`` larger than the CPUs is bad input)."""
    from harness.run import TimingConfig, corunner_cpu, cpus_for

    try:
        timing = TimingConfig(**t)
        cpus = cpus_for(timing)
        if timing.contention != "none":
            corunner_cpu(timing, cpus)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return timing


def workload_of(c: dict[str, Any]) -> Any:
    """The Workload of a composed, resolved config (its ``workload`` and ``op`` groups)."""
    from kernels.candidate import Workload

    op = dict(c["op"])
    op_name = op.pop("name")
    return Workload.make(c["workload"]["name"], op_name, c["workload"]["sizes"], **op)


def build_experiment(cfg: Any) -> Any:
    """Experiment from a composed Hydra config (also used by tests and Snakemake rules)."""
    from omegaconf import OmegaConf

    from harness import machine as machine_mod
    from harness.build import CompilerConfig
    from harness.check import CheckConfig
    from harness.experiment import Experiment
    from harness.run import RunLimits
    from harness.sanity import SanityConfig
    from harness.search import SearchConfig
    from kernels.space import space_candidates

    register_resolvers()
    c = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(c, dict)
    workload = workload_of(c)
    m = machine_mod.detect()
    target = target_isa(c["target"])
    if target not in ("avx2", "avx512"):
        raise UsageError(f"target must be auto, avx2 or avx512, got {target!r}")
    _check_choices(c)
    # an option left at null (codegen.prefetch) is no option: the candidate keys stay those of before it
    options = {"target": target, **{k: v for k, v in c["codegen"].items() if v is not None}}
    candidates = space_candidates(c["space"], workload, target, options, c.get("scheme"), c.get("baselines"))
    if spec := c["space"].get("best_of"):  # another experiment's winners, timed again (issue 32)
        from harness.winners import NoRowsYet, NoWinners, best_of

        try:
            found = best_of(spec, Path(c["results_dir"]), workload, m.fingerprint)
        except NoRowsYet as exc:
            # a long multirun over workloads goes on past one without winners, its baselines still timed
            # (best_of raises NoRowsYet only for a spec it has read: missing is error or skip)
            if spec.get("missing") != "skip" or not candidates:
                raise UsageError(str(exc)) from exc
            print(f"{exc}\n(space.best_of.missing=skip: timing {workload.name}'s other candidates only)",
                  file=sys.stderr)  # fmt: skip
            found = []
        except NoWinners as exc:
            raise UsageError(str(exc)) from exc
        candidates = list({x.key: x for x in [*found, *candidates]}.values())
    t = c["timing"]
    limits = c["limits"]
    mem = limits.get("memory_gib")
    _guard(limits, workload, candidates, int(mem * 2**30) if mem else int(0.8 * m.memory_bytes))
    return Experiment(
        name=str(c["experiment"]),
        workload=workload,
        candidates=candidates,
        timing=_timing(t),
        counters=tuple(c["counters"]["backends"]),
        check=CheckConfig(**c["check"]),
        compiler=CompilerConfig(
            c["compiler"]["cc"], tuple(c["compiler"]["opt_flags"]), tuple(c["compiler"]["extra_flags"])
        ),
        limits=RunLimits(float(limits["timeout_s"]), int(mem * 2**30) if mem else None),
        seed=int(c["seed"]),
        sanity=SanityConfig(**c["sanity"]),
        results_dir=Path(c["results_dir"]),
        search=SearchConfig.from_config(c.get("search")),  # None: the space's candidates as they are
        space=dict(c["space"]),
        target=target,
        base_options=options,
    )


def _guard(limits: dict[str, Any], workload: Any, candidates: list[Any], memory_bytes: int) -> None:
    """The size guards (kernels/guards.py) on the workload and every scheme, before anything is built."""
    from kernels.guards import SizeLimits, SizeRefused, check_candidate, check_memory

    unrolled, acc = limits.get("unrolled"), limits.get("accumulators")
    if unrolled is not None and (isinstance(unrolled, bool) or not isinstance(unrolled, int) or unrolled < 1):
        raise UsageError(f"limits.unrolled must be a positive integer or null, got {unrolled!r}")
    if acc is not None and (isinstance(acc, bool) or not isinstance(acc, int | float) or acc <= 0):
        raise UsageError(f"limits.accumulators must be a positive number or null, got {acc!r}")
    guard = SizeLimits(unrolled, acc, memory_bytes)
    try:
        check_memory(workload, guard)
        for cand in candidates:
            check_candidate(cand, workload, guard)
    except SizeRefused as exc:
        raise UsageError(str(exc)) from None


def _show(exp: Any) -> None:
    from kernels.candidate import render

    for cand in exp.candidates:
        print(f"/* ===== {cand.label()}  [key {cand.key}] ===== */")
        print(render(cand, exp.workload).code)


def _hydra_main(command: str) -> None:
    import hydra
    from omegaconf import DictConfig

    from harness.interrupt import Interrupted, stop_on_signals
    from kernels.baselines import BaselineUnavailable
    from kernels.operators import OperatorError
    from kernels.scheme import SchemeError
    from kernels.space import SpaceError

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def task(cfg: DictConfig) -> None:
        from harness.experiment import run_experiment

        stop_on_signals()  # here too: under submitit this function runs in a SLURM job, not under main()
        try:
            exp = build_experiment(cfg)
            if command == "show":
                _show(exp)
                return
            if cfg.get("scheme"):  # a single scheme given by hand: an illegal one is a usage error
                from kernels.candidate import render

                for cand in exp.candidates:
                    render(cand, exp.workload)
            rows = run_experiment(exp)
        except (
            SchemeError,
            OperatorError,
            UsageError,
            BaselineUnavailable,
            SpaceError,
            ValueError,
            KeyError,
        ) as exc:
            _fail(str(exc).strip("'\""))
            return
        except Interrupted as exc:
            _fail(str(exc))
            return
        except OSError as exc:
            if exc.errno not in STORAGE_ERRORS:
                traceback.print_exc()
                sys.exit(3)
            _fail(storage_message(exc, Path(str(cfg.results_dir))))
            return
        except Exception:  # a bug of ours, not the user's: keep the traceback, distinct exit status
            traceback.print_exc()
            sys.exit(3)
        for r in rows:
            perf = (
                f"{r['gflops_median']:.1f} GFLOP/s, {r['pct_peak_median']:.1f}% of peak"
                if r["status"] == "ok"
                else r["reason"][:160]
            )
            print(f"{r['status']:>13}  {r['label']}: {perf}")
        print(f"results: {exp.results_dir / 'rows' / exp.name}")

    task()


def quote_schemes(args: list[str]) -> list[str]:
    """Let ``scheme=[R_i, T_{4,k}, V_j]`` through Hydra's override grammar (braces, commas) as one string."""
    out = []
    for a in args:
        key, sep, value = a.partition("=")
        if sep and key.lstrip("+~") == "scheme" and value.startswith("["):
            value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        out.append(f"{key}{sep}{value}" if sep else a)
    return out


def check_group_choices(args: list[str]) -> None:
    """``workload=nope`` -> one line naming the group and its allowed values (before Hydra composes)."""
    for a in args:
        key, sep, value = a.partition("=")
        group = key.lstrip("+~")
        folder = SWEEPS_DIR if group == "sweeps" else CONF_DIR / group
        if not sep or "." in group or not folder.is_dir() or value.startswith(("'", '"')):
            continue
        allowed = sorted(p.stem for p in folder.glob("*.yaml"))
        for choice in value.split(","):  # a multirun sweeps several choices
            if choice not in allowed:
                _fail(f"unknown {group} {choice!r}; allowed: {', '.join(allowed)}")


def check_overrides(args: list[str]) -> None:
    """Compose the config once (first value of each sweep) so a bad key or value is one line, exit 2,
    before Hydra would print its multi-line error."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in args if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # Hydra's grammar errors have no common base class worth naming
        _fail(f"cannot read the overrides: {str(exc).splitlines()[0]}")
    first = []
    for o in parsed:
        if o.is_hydra_override():
            continue
        if o.is_sweep_override():
            value = next(iter(o.sweep_string_iterator()))
            first.append(f"{o.get_key_element()}={value}")
        else:
            first.append(o.input_line)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        try:
            compose("config", overrides=first)
        except Exception as exc:
            internal = ("full_key", "object_type", "reference_type")
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            why = "; ".join(ln for ln in lines if not ln.startswith(internal))
            _fail(why or type(exc).__name__)


def plugin_modules() -> dict[str, str]:
    """Plug-in command name -> module: harness/commands/*.py, then each study's commands/*.py."""
    import pkgutil

    from harness import commands, studies

    found = {
        info.name.replace("_", "-"): f"harness.commands.{info.name}"
        for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name)
    }
    for name, module in studies.commands().items():
        if name in found:
            raise SystemExit(f"harness: command {name!r} is defined twice ({found[name]}, {module})")
        found[name] = module
    return found


def plugin_commands() -> dict[str, str]:
    """The plug-in commands and the first line of their docstrings, read from their source: importing
    every command (numpy, pandas, matplotlib...) made ``harness --help`` take 5.8 s."""
    import ast
    import importlib.util

    out = {}
    for name, module in plugin_modules().items():
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin).read_text() if spec and spec.origin else ""
        doc = (ast.get_docstring(ast.parse(source)) if source else None) or ""
        out[name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


STORAGE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}  # the disk, not the run: no traceback


def storage_message(exc: OSError, results_dir: Path) -> str:
    """One line for a results directory that filled up or became read-only mid-run."""
    where = f" ({exc.filename})" if exc.filename else ""
    return (
        f"cannot write under {results_dir}: {exc.strerror or exc}{where}; every row stored before is kept "
        "(each is written whole or not at all): free space and run the same command again, stored "
        "candidates are not measured again"
    )


def writable_results(path: Path) -> None:
    """Refuse a results directory the run could not write (a missing parent, a file, a read-only file
    system) in one line, before Hydra, calibration or any measurement touches it."""
    where = f"results directory {str(path)!r}"
    if not path.parent.is_dir():
        raise UsageError(f"{where}: its parent {str(path.parent)!r} does not exist (create it first)")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{where} is a file, not a directory")
    try:
        path.mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"{where} cannot be written: {exc.strerror or exc}") from None


def _results_override(args: list[str]) -> Path:
    """The ``results_dir=`` of a run's overrides (the config's default otherwise)."""
    found = [a.split("=", 1)[1] for a in args if a.lstrip("+~").startswith("results_dir=")]
    return Path(found[-1].strip("'\"") if found else "results")


#: Hydra launchers that submit to SLURM (conf/hydra/launcher/cluster.yaml and the one it extends)
SLURM_LAUNCHERS = ("cluster", "submitit_slurm")


def _slurm_launcher(args: list[str]) -> bool:
    """Whether a run's overrides send its jobs to SLURM (``hydra/launcher=cluster``)."""
    return any(a.lstrip("+~") in {f"hydra/launcher={n}" for n in SLURM_LAUNCHERS} for a in args)


def main(argv: list[str] | None = None) -> None:
    from harness.interrupt import Interrupted, stop_on_signals

    stop_on_signals()
    try:
        _main(argv)
    except Interrupted as exc:
        _fail(str(exc))


def _main(argv: list[str] | None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = plugin_modules()
    if argv and argv[0] in modules:
        import importlib

        importlib.import_module(modules[argv[0]]).main(argv[1:])
        return
    if not argv or argv[0] not in COMMANDS:
        plugins = plugin_commands()
        print(__doc__)
        for name, line in plugins.items():
            print(f"    harness {name:<14} {line}")
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    command, rest = argv[0], argv[1:]
    if command in ("run", "show"):
        check_group_choices(rest)
        check_overrides(quote_schemes(rest))
        try:
            writable_results(_results_override(rest))
        except UsageError as exc:
            _fail(str(exc))
        if _slurm_launcher(rest) and (problem := allocation.scheduler_problem()):
            _fail(problem)
        sys.argv = [f"harness {command}", *quote_schemes(rest)]
        try:
            _hydra_main(command)
        except SystemExit as exc:
            # Hydra exits 1 after printing a config/override error: that is bad input, status 2
            sys.exit(2 if exc.code == 1 else exc.code)
        return
    parser = argparse.ArgumentParser(prog=f"harness {command}")
    parser.add_argument("--results", type=Path, default=Path("results"))
    if command == "calibrate":
        parser.add_argument("--force", action="store_true", help="measure again even if cached")
        args = parser.parse_args(rest)
        try:
            writable_results(args.results)
        except UsageError as exc:
            _fail(str(exc))
        from harness.calibrate import calibrate
        from harness.machine import detect

        m = detect()
        peaks = calibrate(m, force=args.force, cache_dir=args.results / "cache")
        print(f"{m.model_name} [{m.fingerprint}]")
        for isa, p in peaks.items():
            print(f"  {isa}: {p['gflops']:.1f} GFLOP/s (best of {len(p['trials'])}, cv {p['cv']:.3f})")
        return
    if command == "microkernels":  # seed 000 §5.2: enumerate, benchmark in isolation, select, Fig 5.2
        parser.add_argument("--isa", default="auto", help="auto (best ISA here), avx2 or avx512")
        parser.add_argument("--op", choices=("conv2d", "matmul"), default="conv2d")
        parser.add_argument("--quick", action="store_true", help="a small subset (CI / quick profile)")
        parser.add_argument("--all", action="store_true", help="every microkernel of the reading (long)")
        parser.add_argument("--reading", default=None, help="conv enumeration reading (kernels/isa/*.yaml)")
        parser.add_argument("--threshold", type=float, default=85.0, help="%% of peak to be selected")
        parser.add_argument("--rerun", action="store_true", help="measure again even if stored")
        parser.add_argument(
            "--broadcast", choices=("embedded",), default=None,
            help="measure and select with codegen.broadcast=embedded (AVX-512; a selection of its own)",
        )  # fmt: skip
        parser.add_argument("--out", type=Path, help="Fig 5.2 (default RESULTS/figures/ttile_fig5_2.png)")
        args = parser.parse_args(rest)
        try:
            writable_results(args.results)
        except UsageError as exc:
            _fail(str(exc))
        from harness.microbench import command as microkernels

        try:
            fig = f"ttile_fig5_2{f'-{args.broadcast}' if args.broadcast else ''}.png"
            out = args.out or args.results / "figures" / fig  # beside the selection it plots
            microkernels(args.isa, args.op, args.quick, args.all, args.reading, args.threshold, out,
                         args.results, args.rerun, broadcast=args.broadcast)  # fmt: skip
        except ValueError as exc:
            _fail(str(exc))
        return
    if command == "export":
        parser.add_argument("--pyperf", type=Path, help="pyperf JSON of every timing series")
        parser.add_argument("--csv", type=Path, help="directory for one summary CSV per experiment")
        parser.add_argument("--experiment", default=None, help="only this experiment")
        args = parser.parse_args(rest)
        from harness.export import export_csv, export_pyperf

        if not (args.pyperf or args.csv):
            _fail("export needs --pyperf FILE and/or --csv DIR")
        try:
            if args.pyperf:
                print(export_pyperf(args.results, args.pyperf, args.experiment))
            if args.csv:
                for path in export_csv(args.results, args.csv):
                    print(path)
        except ValueError as exc:
            _fail(str(exc))
        return
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--experiment", action="append", default=None, help="only these experiments")
    parser.add_argument("--pdf", action="store_true", help="also print the report to report.pdf")
    args = parser.parse_args(rest)
    from harness.report import build_pdf, build_report

    out = build_report(args.results, args.out or args.results / "report", args.experiment)
    print(out)
    if args.pdf:
        print(build_pdf(out))


if __name__ == "__main__":  # python -m harness.cli
    main()
