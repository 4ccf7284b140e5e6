"""The best stored schemes of an experiment, as candidates to time again (``space.best_of``), or as what a
refined search on another workload starts from (``space.transfer_from``).

Issue 32 re-times each layer's winner of the random search beside oneDNN under other conditions (a
co-runner on the other core): ``space.best_of: {experiment: ttile_conv_random, n: 1}`` makes the ``n``
fastest ok schemes of that experiment, on this workload and machine, the space's candidates. With
``variants`` (a list of code-generation options, ``{}`` for the winner as measured), each winner is timed
once per variant, its options updated by it: a lever applied to the winners of a search, in the same
rounds (``ttile_conv_prefetch``). With ``machine`` (a fingerprint) the winners are another machine's, as
found in the results directory (an archive of a CPU of the same ISA unpacked into it): a search tuned on
one CPU ported to this one, timed here, or the seeds a refinement here starts from.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness import analysis, store
from kernels.candidate import Candidate, Workload


class NoWinners(ValueError):
    """A spec that cannot be read, or an experiment with no ok scheme for this workload on this machine
    (names the command to run)."""


class NoRowsYet(NoWinners):
    """The spec is sound but its experiments have no ok scheme for this workload on that machine yet: a
    multirun with ``missing: skip`` times the workload's other candidates (its baselines) and goes on."""


#: what ``space.best_of.missing`` may say when a workload has no winners yet: stop the run (``error``, the
#: default, first: a typo in an experiment's name must not pass as "nothing to do"), or time the others
#: (``skip``)
MISSING = ("error", "skip")


def best_of(
    spec: Mapping[str, Any], results_dir: Path, workload: Workload, fingerprint: str
) -> list[Candidate]:
    """The ``spec['n']`` (default 1) fastest ok schemes of experiment ``spec['experiment']`` (or of a list
    of experiments, pooled: the best of several searches) on ``workload`` and this machine, by median time
    in hot mode without a co-runner (pooled, by that time over the fastest baseline of the scheme's own
    experiment, when each has one); their code-generation options are the ones they were measured with,
    updated by each of ``spec['variants']`` when given (one candidate per winner and variant). With
    ``spec['each']`` the ``n`` best of *each* experiment of the list instead of the pool's (a head-to-head of
    two searches' winners in shared rounds), a scheme two of them found timed once."""
    names, n, where = _pool(spec, results_dir)
    fingerprint, on = _machine(spec, fingerprint)
    each, when_missing = spec.get("each", False), spec.get("missing", MISSING[0])
    if not names or not _count(n) or not isinstance(each, bool) or when_missing not in MISSING:
        raise NoWinners(
            f"space.best_of needs an experiment (or a list), n >= 1, each true or false and missing one of "
            f"{', '.join(MISSING)}, got {dict(spec)}"
        )
    rows = plain_rows(names, where, fingerprint)
    mine = rows[rows["workload"] == workload.name]
    if each:
        if missing := [str(e) for e in names if not (mine["experiment"] == e).any()]:
            raise NoRowsYet(
                f"space.best_of.each: experiment {', '.join(missing)} has no row for {workload.name} on "
                f"{on} in {where}: run it first, e.g. `harness run -m "
                f"+sweeps={missing[0]} workload={workload.name} results_dir={where}`"
            )
        tops = [ranked(mine[mine["experiment"] == e], [e]).head(n) for e in names]
        best = pd.concat(tops, ignore_index=True).drop_duplicates(["candidate_text", "candidate_options"])
    else:
        best = ranked(mine, names).head(n)
    if best.empty:
        raise NoRowsYet(
            f"space.best_of: experiment {', '.join(map(str, names))} has no ok scheme for {workload.name} on "
            f"{on} in {where}: run it first, e.g. `harness run -m +sweeps={names[0]} "
            f"workload={workload.name} results_dir={where}`"
        )
    variants = spec.get("variants") or [{}]
    if not all(isinstance(v, Mapping) for v in variants):
        raise NoWinners(
            f"space.best_of.variants is a list of option mappings ({{}}: as measured), got {variants}"
        )
    return [
        Candidate(
            "scheme", str(r.candidate_text), tuple(sorted({**json.loads(r.candidate_options), **v}.items()))
        )
        for r in best.itertuples()
        for v in variants
    ]


def best_of_others(
    spec: Mapping[str, Any], results_dir: Path, workload: Workload, fingerprint: str
) -> list[str]:
    """``space.transfer_from``: the ``spec['n']`` (default 1) fastest ok schemes of experiment
    ``spec['experiment']`` (or a list, ranked as :func:`best_of` ranks them) on each *other* workload of
    the same operator on this machine, as scheme texts (written for their own sizes: search=refine maps
    them onto this workload). With ``spec['nearest']`` (default 0: workloads in name order) the workloads
    nearest in shape (:func:`shape_distance`) come first and the ``nearest`` nearest give their
    ``spec['n_nearest']`` (default ``n``) fastest. The
    workload's own rows are left out, so what a search starts from is what the other layers' searches
    found, not this layer's answer."""
    names, n, where = _pool(spec, results_dir)
    fingerprint, on = _machine(spec, fingerprint)
    if not names or not _count(n):
        raise NoWinners(f"space.transfer_from needs an experiment (or a list) and n >= 1, got {dict(spec)}")
    near, n_near = spec.get("nearest", 0), spec.get("n_nearest", n)
    if not isinstance(near, int) or near < 0 or not _count(n_near):
        raise NoWinners(f"space.transfer_from: nearest >= 0 and n_nearest >= 1, got {dict(spec)}")
    rows = plain_rows(names, where, fingerprint)
    rows = rows[(rows["workload"] != workload.name) & (rows["op"] == workload.op.name)]
    groups = dict(list(rows.groupby("workload")))
    order = list(groups)  # by name, as before `nearest` existed: a transfer search's seeds stay reproducible
    if near:  # the nearest layers first: their schemes are the likeliest to fit
        sizes = {w: json.loads(g["sizes"].iloc[0]) for w, g in groups.items()}
        order.sort(key=lambda w: (shape_distance(workload.size, sizes[w]), w))
    texts = [
        str(t)
        for i, w in enumerate(order)
        for t in ranked(groups[w], names).head(n_near if i < near else n)["candidate_text"]
    ]
    if not texts:
        raise NoWinners(
            f"space.transfer_from: experiment {', '.join(map(str, names))} has no ok {workload.op.name} "
            f"scheme on a workload other than {workload.name} on {on} in {where}: "
            f"run it first on other layers, e.g. `harness run -m +sweeps={names[0]} results_dir={where}`"
        )
    return list(dict.fromkeys(texts))


def shape_distance(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """How far apart two workloads' sizes are: the sum over their shared dimensions of |log2(a/b)| (a layer
    with twice the channels and half the rows is 2 away; a 3 x 3 filter is 3.2 from a 1 x 1)."""
    return sum(abs(math.log2(a[d] / b[d])) for d in a.keys() & b.keys() if a[d] > 0 and b[d] > 0)


def _pool(spec: Mapping[str, Any], results_dir: Path) -> tuple[list[Any], Any, Path]:
    """A spec's experiments (one name or a list), its ``n`` (default 1) and where their rows are."""
    experiment = spec.get("experiment")
    names = [experiment] if isinstance(experiment, str) else list(experiment or [])
    return names, spec.get("n", 1), Path(spec.get("results_dir") or results_dir)


def _machine(spec: Mapping[str, Any], fingerprint: str) -> tuple[str, str]:
    """The machine whose rows a spec reads (its ``machine``, a fingerprint, if given, else this one) and
    how a message names it."""
    machine = spec.get("machine")
    if machine is None or machine == fingerprint:
        return fingerprint, f"this machine ({fingerprint})"
    if not isinstance(machine, str) or not re.fullmatch(r"[0-9a-f]{12}", machine):
        raise NoWinners(
            f"machine is a 12-hex-digit fingerprint (`harness calibrate` prints it), got {machine!r}"
        )
    return machine, (
        f"machine {machine} (not this one, {fingerprint}; its rows come from its archive: `harness archive "
        f"unpack reports/measured/<date>-{machine}-<experiment>.tar.xz --results DIR`)"
    )


def _count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def plain_rows(names: list[Any], where: Path, fingerprint: str | None) -> pd.DataFrame:
    """The experiments' rows on this machine (every machine's with ``None``), timed hot without a
    co-runner."""
    rows = pd.concat([store.load(where, str(e)) for e in names], ignore_index=True)
    plain = rows["contention"].isna() & (rows["timing_mode"] == "hot")
    return rows[plain & ((rows["machine_fingerprint"] == fingerprint) if fingerprint else True)]


def ranked(rows: pd.DataFrame, names: list[Any]) -> pd.DataFrame:
    """One workload's ok schemes, fastest first. Searches of other days ran on another host's mood (the
    same scheme 2.4x slower from one day to the next): when every experiment pooled timed a baseline
    beside its schemes, a scheme is ranked by its time over the fastest baseline of its own experiment,
    not by its raw time."""
    summary = analysis.summarize(rows)
    ok = summary[summary["status"] == "ok"]
    libs, ok = ok[ok["candidate_kind"] == "baseline"], ok[ok["candidate_kind"] == "scheme"]
    own = libs.groupby("experiment")["median_ns"].min()
    if len(names) > 1 and set(ok["experiment"]) <= set(own.index):
        ok = ok.assign(rank=ok["median_ns"] / ok["experiment"].map(own))
    else:
        ok = ok.assign(rank=ok["median_ns"])
    return ok.sort_values("rank")
