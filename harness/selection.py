"""The stored microkernel selection of a machine (seed 000 §5.2): which microkernels reach the threshold,
with every measurement behind it, one JSON file per (machine, ISA, operator) in the cache directory.

Apart from :mod:`harness.microbench` (which measures and selects) so that the pipeline
(:mod:`harness.experiment`, reading a selection for a conv space) does not import the benchmark that
imports it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from harness import machine as machine_mod
from kernels import microkernels as mkmod
from kernels.microkernels import Microkernel

DEFAULT_THRESHOLD = 85.0  # % of the calibrated peak (thesis §5.2)


def select(frame: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> pd.DataFrame:
    """Rows that ran, passed their check and reach ``threshold`` % of peak (median time), best first."""
    if frame.empty:
        return frame.copy()
    pct = pd.to_numeric(frame["pct_peak_median"], errors="coerce")
    keep = (frame["status"] == "ok") & pct.notna() & (pct >= threshold)
    return frame[keep].sort_values("pct_peak_median", ascending=False).reset_index(drop=True)


def selection_digest(selected: list[dict[str, int]] | None) -> str | None:
    """A short hash of the selected microkernels' sizes, in any order (None: no selection, the fallback set).
    The selection is measured, so measuring it again can change it, and the same seed then draws other
    schemes: search rows carry it (``search_selection``), so a resumed search and an unpacked archive can
    tell."""
    if not selected:
        return None
    text = json.dumps(sorted(sorted(m.items()) for m in selected))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def selection_path(
    cache_dir: Path, fingerprint: str, isa: str, op: str = "conv2d", broadcast: str | None = None
) -> Path:
    """One file per machine, ISA and operator, and per code generation a search can ask for: with
    ``codegen.broadcast=embedded`` other register tiles fit (issue 32), so they are measured and selected
    apart (``-embedded``)."""
    variant = f"-{broadcast}" if broadcast else ""
    return Path(cache_dir) / f"microkernels-{fingerprint}-{isa}-{op}{variant}.json"


_RECORD_KEYS = (
    "name", "suffix", "status", "reason", "pct_peak_median", "pct_peak_min", "gflops_median",
    "peak_gflops", "median_ns", "n_reps", "cov", "flags", "busy", "drift", "check_mode", "check_passed",
    "workload", "scheme", "timestamp",
)  # fmt: skip


def jsonable(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and v != v:
        return None
    if hasattr(v, "item"):  # numpy scalar
        return v.item()
    return v


def save_selection(
    frame: pd.DataFrame,
    isa: str,
    op: str = "conv2d",
    threshold: float = DEFAULT_THRESHOLD,
    cache_dir: Path = Path("results/cache"),
    machine: machine_mod.Machine | None = None,
    extra: dict[str, Any] | None = None,
    broadcast: str | None = None,
) -> Path:
    """Merge ``frame`` into the stored measurements of (machine, isa, op) and store the selection.

    Measurements accumulate (a quick run does not forget a full one); the selection is recomputed over all
    of them with ``threshold``. Written atomically.
    """
    m = machine or machine_mod.detect()
    path = selection_path(cache_dir, m.fingerprint, isa, op, broadcast)
    previous = json.loads(path.read_text()) if path.is_file() else {}
    measured: dict[str, dict[str, Any]] = {r["name"]: r for r in previous.get("measured", [])}
    mine = frame[(frame["op"] == op) & (frame["isa"] == isa)] if not frame.empty else frame
    for rec in mine.to_dict("records"):
        mk = microkernel_of(rec)
        entry = {k: jsonable(rec.get(k)) for k in _RECORD_KEYS}
        entry["flags"] = list(rec.get("flags") or [])
        measured[mk.name] = {**entry, "microkernel": mk.to_dict()}
    allf = pd.DataFrame(list(measured.values()))
    sel = select(allf, threshold) if not allf.empty else allf
    record = {
        "fingerprint": m.fingerprint,
        "model_name": m.model_name,
        "isa": isa,
        "op": op,
        **({"broadcast": broadcast} if broadcast else {}),
        "threshold_pct": threshold,
        "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **(extra or {}),
        "n_measured": len(measured),
        "n_selected": len(sel),
        "selected": [
            {**r["microkernel"], "pct_peak_median": r["pct_peak_median"], "busy": r["busy"]}
            for r in sel.to_dict("records")
        ],
        "measured": sorted(measured.values(), key=lambda r: r["name"]),
        "wall_time": previous.get("wall_time", []),  # record_wall_time: cost of each selection run
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return path


def microkernel_of(rec: dict[str, Any]) -> Microkernel:
    if "microkernel" in rec and isinstance(rec["microkernel"], dict):
        return Microkernel.from_dict(rec["microkernel"])
    sizes = {k[2:]: int(v) for k, v in rec.items() if k.startswith("u_") and v == v and v is not None}
    maker = mkmod.make_conv if rec["op"] == "conv2d" else mkmod.make_matmul
    return maker(rec["isa"], **sizes)


def load_selection(
    isa: str | None = None,
    op: str = "conv2d",
    cache_dir: Path = Path("results/cache"),
    machine: machine_mod.Machine | None = None,
    broadcast: str | None = None,
) -> dict[str, Any] | None:
    """The stored record (threshold, measured set, selection) for this machine, or None."""
    m = machine or machine_mod.detect()
    isa = isa or m.best_isa or "avx2"
    path = selection_path(cache_dir, m.fingerprint, isa, op, broadcast)
    return json.loads(path.read_text()) if path.is_file() else None


def load_selected(
    isa: str | None = None,
    op: str = "conv2d",
    cache_dir: Path = Path("results/cache"),
    machine: machine_mod.Machine | None = None,
    missing_ok: bool = False,
    broadcast: str | None = None,
) -> list[Microkernel]:
    """The selected microkernels of this machine and ISA, best first (stored by ``harness microkernels``)."""
    rec = load_selection(isa, op, cache_dir, machine, broadcast)
    if rec is None:
        if missing_ok:
            return []
        m = machine or machine_mod.detect()
        flag = f" --broadcast {broadcast}" if broadcast else ""
        raise FileNotFoundError(
            f"no microkernel selection for {op} on {isa or m.best_isa}{flag} on this machine "
            f"({m.fingerprint}) in {cache_dir}: run `harness microkernels --isa {isa or 'auto'}{flag}` first"
        )
    return [Microkernel.from_dict(d) for d in rec["selected"]]
