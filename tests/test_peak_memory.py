"""The memory sampler of long commands (harness/peak_memory.py): the summed PSS of a process tree counts
its forked children, the exit code passes through, a run is appended to the TSV."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from harness import peak_memory

# a parent and a forked child, each writing 150 MB of its own for a second: together 300 MB beyond Python
TWO_PROCESSES = """
import os, time
block = bytearray(150 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
if os.fork() == 0:
    mine = bytearray(150 * 2**20)
    for i in range(0, len(mine), 4096):
        mine[i] = 1
    time.sleep(1.0)
    os._exit(0)
os.wait()
raise SystemExit(3)
"""


def test_the_peak_sums_the_forked_child_and_the_exit_code_passes(tmp_path: Path) -> None:
    out = tmp_path / "peaks.tsv"
    code = peak_memory.main(["--out", str(out), "--label", "two", "--", sys.executable, "-c", TWO_PROCESSES])
    assert code == 3
    with out.open() as fh:
        (line,) = list(csv.DictReader(fh, delimiter="\t"))
    assert line["label"] == "two" and line["returncode"] == "3"
    assert int(line["processes_at_peak"]) == 2
    # the child's resident set holds the parent's block too (shared after the fork) and its own: 300 MB
    assert int(line["peak_rss_bytes"]) > 280 * 2**20
    # summed PSS counts the shared block once (summed RSS would say 450 MB)
    assert 280 * 2**20 < int(line["peak_pss_bytes"]) < 400 * 2**20


def test_a_small_command_peaks_small() -> None:
    peak = peak_memory.measure([sys.executable, "-c", "import time; time.sleep(0.6)"])
    assert peak.returncode == 0
    assert 0 < peak.peak_pss_bytes < 100 * 2**20


def test_no_command_is_an_error() -> None:
    with pytest.raises(SystemExit):
        peak_memory.main(["--"])
