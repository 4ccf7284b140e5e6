"""The drift sentinel (issue 37): the FMA peak probe, re-timed during a sweep, so a row says how fast the
core ran when it was timed, against the start of the same run.

The probe at an experiment's start only compares the core with its calibration; a sweep of an hour can
see the host change under it (here: a best scheme 2.4x slower from one day to the next, the clock ~10%
higher within an hour). Every ``sanity.sentinel_s`` seconds (before the next candidate or round) the probe
runs again (tens of ms); each row carries ``sentinel_ratio``, the last probe over the first, the farthest
from 1 over its rounds, and a flag when that is more than ``sanity.max_peak_drift`` away from 1.
Confirmation rounds use it: a round timed while the sentinel is that much below its start is timed again
(``timing.retime``), as a round that ran slow is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FLAG = "sentinel:"


class Sentinel:
    """The probe's first reading, its latest, and when it is due again."""

    def __init__(
        self,
        probe: Callable[[], float] | None,
        every_s: float | None,
        max_drift: float,
        flags: list[str],
        first: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.probe, self.every_s, self.max_drift, self.flags = probe, every_s, max_drift, flags
        self.first = self.last = first
        self.clock = clock
        self.at = clock()
        self.readings: list[float] = [] if first is None else [first]

    def tick(self) -> None:
        """Probe again if the interval has passed (never without a probe or an interval)."""
        if self.probe is None or self.every_s is None:
            return
        if self.first is not None and self.clock() - self.at < self.every_s:
            return
        self.last = float(self.probe())
        self.at = self.clock()
        self.readings.append(self.last)
        if self.first is None:
            self.first = self.last

    @property
    def ratio(self) -> float | None:
        return None if self.first is None or self.last is None else self.last / self.first

    def drifted_down(self) -> bool:
        """The core runs slower than at the run's start by more than the drift allowed."""
        r = self.ratio
        return r is not None and r < 1 - self.max_drift

    def mark(self, row: dict[str, Any]) -> None:
        """Set ``row``'s ratio (keeping the farthest from 1 of its rounds) and its flag."""
        r = self.ratio
        if r is None:
            return
        old = row.get("sentinel_ratio")
        if old is not None and old == old and abs(old - 1) > abs(r - 1):
            r = float(old)
        row["sentinel_ratio"] = r
        if abs(r - 1) > self.max_drift:
            import json

            flags = [f for f in json.loads(row.get("flags") or "[]") if not f.startswith(FLAG)]
            note = (
                f"{FLAG} the peak probe ran at x{r:.2f} of its first timing in this run "
                f"({100 * abs(r - 1):.0f}% > {100 * self.max_drift:g}%)"
            )
            row["flags"] = json.dumps([*flags, note])
