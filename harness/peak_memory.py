"""Run a command and report its wall time and the peak memory of its process tree, summed PSS.

``python -m harness.peak_memory [--out FILE.tsv] [--label L] -- COMMAND...``: the command's own exit code
is returned. PSS (proportional set size) splits each page shared by forked workers between them, so the
sum over the tree is what the processes take together, where summed RSS would count the parent's pages
once per worker. Sampled every 0.25 s: a spike shorter than that can be missed. This is how issue 35's
bound on the report of every archive (2 GB, summed PSS) is measured (``make report-all`` runs under it).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

INTERVAL_S = 0.25


@dataclass(frozen=True)
class Peak:
    """What :func:`measure` saw: the command's exit code and wall time, and the largest summed PSS with
    when (seconds from the start) and over how many processes; the largest single resident set."""

    returncode: int
    wall_s: float
    peak_pss_bytes: int
    peak_at_s: float
    processes_at_peak: int
    peak_rss_bytes: int


def _tree_memory(root: psutil.Process) -> tuple[int, int, int]:
    """(summed PSS, process count, largest RSS) of ``root`` and its descendants now."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0
    total = n = largest = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total, n, largest = total + getattr(info, "pss", info.rss), n + 1, max(largest, info.rss)
    return total, n, largest


def measure(command: list[str], interval_s: float = INTERVAL_S) -> Peak:
    """Run ``command`` to its end, sampling its process tree's memory every ``interval_s``."""
    if not command:
        raise ValueError("no command to measure")
    start = time.monotonic()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peak = peak_at = peak_n = peak_rss = 0
    while child.poll() is None:
        total, n, largest = _tree_memory(root)
        if total > peak:
            peak, peak_at, peak_n = total, time.monotonic() - start, n
        peak_rss = max(peak_rss, largest)
        time.sleep(interval_s)
    return Peak(child.returncode, time.monotonic() - start, peak, peak_at, peak_n, peak_rss)


def _append(out: Path, label: str, command: list[str], peak: Peak) -> None:
    """One line of ``out`` (a TSV, its header written first) for this run."""
    from harness import machine

    line = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine_fingerprint": machine.detect().fingerprint,
            "label": label, "command": " ".join(command), **asdict(peak)}  # fmt: skip
    new = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(line), delimiter="\t")
        if new:
            writer.writeheader()
        writer.writerow(line)


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m harness.peak_memory", description=doc)
    parser.add_argument("--out", type=Path, help="append the run's line to this TSV")
    parser.add_argument("--label", default="", help="what the run was (a column of --out)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    peak = measure(command)
    gib = 2**30
    print(
        f"{' '.join(command)}: exit {peak.returncode}, wall {peak.wall_s:.1f} s, peak summed PSS "
        f"{peak.peak_pss_bytes / gib:.2f} GiB at {peak.peak_at_s:.0f} s over {peak.processes_at_peak} "
        f"processes, largest process {peak.peak_rss_bytes / gib:.2f} GiB resident",
        file=sys.stderr,
    )
    if args.out is not None:
        _append(args.out, args.label, command, peak)
    return peak.returncode


if __name__ == "__main__":
    sys.exit(main())
