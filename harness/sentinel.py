"""The drift sentinel (issue 37): two reference probes, re-timed during a sweep, so a row says how fast
the core and its shared cache ran when it was timed, against the start of the same run.

The probe at an experiment's start only compares the core with its calibration; a sweep of an hour can
see the host change under it (here: a best scheme 2.4x slower from one day to the next, the clock ~10%
higher within an hour). Every ``sanity.sentinel_s`` seconds (before the next candidate or round) both run
again (tens of ms each):

- the FMA peak probe (harness/driver/peak.c): the core's clock and its vector units;
- the cache probe, a fixed reference kernel reading a buffer four times the size of L2
  (harness/driver/stream.c): the shared last-level cache, which a neighbour streaming on the other core
  takes away while the FMA peak holds.

Each row carries ``sentinel_ratio`` (peak) and ``sentinel_cache_ratio`` (cache), the last reading over the
first, the farthest from 1 over its rounds, and a flag when either is more than ``sanity.max_peak_drift``
away from 1. Confirmation rounds use them: a round timed while either is that much below its start is
timed again (``timing.retime``), as a round that ran slow is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FLAG = "sentinel:"


@dataclass
class Probe:
    """One reference measurement: what it is (for the flag), the row column of its ratio, its first and
    latest readings."""

    name: str
    column: str
    run: Callable[[], float] | None
    first: float | None = None
    last: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.last = self.first

    def read(self) -> None:
        assert self.run is not None
        self.last = float(self.run())
        if self.first is None:
            self.first = self.last

    @property
    def ratio(self) -> float | None:
        return None if self.first is None or self.last is None else self.last / self.first


class Sentinel:
    """The probes' first readings, their latest, and when they are due again."""

    def __init__(
        self,
        probe: Callable[[], float] | None,
        every_s: float | None,
        max_drift: float,
        flags: list[str],
        first: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        cache: Callable[[], float] | None = None,
    ):
        self.every_s, self.max_drift, self.flags = every_s, max_drift, flags
        self.probes = [Probe("the peak probe", "sentinel_ratio", probe, first)]
        if cache is not None:
            self.probes.append(Probe("the cache probe", "sentinel_cache_ratio", cache))
        self.clock = clock
        self.at = clock()

    def tick(self) -> None:
        """Probe again if the interval has passed (never without an interval; a probe without a function
        keeps the reading it was given)."""
        if self.every_s is None:
            return
        passed = self.clock() - self.at >= self.every_s
        due = [p for p in self.probes if p.run is not None and (p.first is None or passed)]
        for p in due:
            p.read()
        if due:
            self.at = self.clock()

    @property
    def ratio(self) -> float | None:
        """The peak probe's ratio (the first probe)."""
        return self.probes[0].ratio

    def drifted_down(self) -> bool:
        """The core or its cache runs slower than at the run's start by more than the drift allowed."""
        return any(p.ratio is not None and p.ratio < 1 - self.max_drift for p in self.probes)

    def mark(self, row: dict[str, Any]) -> None:
        """Set ``row``'s ratios (keeping the farthest from 1 of its rounds) and their flags."""
        for p in self.probes:
            r = p.ratio
            if r is None:
                continue
            old = row.get(p.column)
            if old is not None and old == old and abs(old - 1) > abs(r - 1):
                r = float(old)
            row[p.column] = r
            if abs(r - 1) > self.max_drift:
                mine = f"{FLAG} {p.name}"
                flags = [f for f in json.loads(row.get("flags") or "[]") if not f.startswith(mine)]
                note = (
                    f"{mine} ran at x{r:.2f} of its first timing in this run "
                    f"({100 * abs(r - 1):.0f}% > {100 * self.max_drift:g}%)"
                )
                row["flags"] = json.dumps([*flags, note])
