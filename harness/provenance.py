"""What the provenance page of the report shows: the software environment, the harness's git commit, the
compilers and flags the rows used, the calibration of each ISA, and the counter backends with what they
could not measure.

Why two sources: the rows carry what was true when each kernel ran (compiler, flags, backend, calibrated
peak, harness version); the environment (Python, packages, OS, git commit) is read when the report is
built, and the page says so, so a reader never mistakes one for the other.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

#: Distributions whose version can change a number or a figure of the report.
PACKAGES: tuple[str, ...] = (
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",
    "matplotlib",
    "seaborn",
    "jinja2",
    "weasyprint",
    "hydra-core",
    "omegaconf",
    "snakemake",
    "pyperf",
    "psutil",
    "optuna",
    "pycachesim",
    "hypothesis",
)

COMPILERS: tuple[str, ...] = ("gcc", "clang")


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(root: Path = ROOT) -> dict[str, Any]:
    """HEAD of the harness checkout and whether the tree had uncommitted changes (None outside git)."""
    head = _run(["git", "rev-parse", "HEAD"], root)
    if head is None:
        return {"commit": None, "dirty": None, "describe": "not a git checkout (or git missing)"}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], root)
    dirty = bool(status)
    subject = _run(["git", "log", "-1", "--format=%cI %s"], root) or ""
    return {"commit": head, "dirty": dirty, "describe": subject}


def package_versions(names: tuple[str, ...] = PACKAGES) -> list[tuple[str, str]]:
    out = []
    for name in names:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, "not installed"))
    return out


def compiler_versions(names: tuple[str, ...] = COMPILERS) -> list[tuple[str, str]]:
    """First line of ``--version`` of each compiler found on PATH."""
    out = []
    for cc in names:
        path = shutil.which(cc)
        text = _run([path, "--version"]) if path else None
        out.append((cc, text.splitlines()[0] if text else "not found"))
    return out


def environment(root: Path = ROOT) -> dict[str, Any]:
    """The environment of this report build (not necessarily that of every row: see the rows' tables)."""
    return {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "os": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "git": git_commit(root),
        "packages": package_versions(),
        "compilers": compiler_versions(),
    }


def calibrations(results_dir: Path | None) -> list[dict[str, Any]]:
    """Cached calibrations (``results/cache/calibration-<fingerprint>.json``), one line per machine x ISA."""
    out: list[dict[str, Any]] = []
    if results_dir is None:
        return out
    for path in sorted((Path(results_dir) / "cache").glob("calibration-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            out.append({"fingerprint": path.stem, "isa": "?", "error": f"unreadable: {exc}"})
            continue
        for isa, peak in sorted((record.get("peaks") or {}).items()):
            peak = peak if isinstance(peak, dict) else {"gflops": peak}
            trials = peak.get("trials") or []
            out.append(
                {
                    "fingerprint": record.get("fingerprint", path.stem.removeprefix("calibration-")),
                    "model_name": record.get("model_name", ""),
                    "cc_version": record.get("cc_version", ""),
                    "isa": isa,
                    "gflops": peak.get("gflops"),
                    "trials": ", ".join(f"{t:.1f}" for t in trials if isinstance(t, int | float)),
                    "cv": peak.get("cv"),
                    "iters": peak.get("iters"),
                    "other_busy_pct": peak.get("other_busy_pct"),
                    "under_load": bool(peak.get("under_load", False)),
                    "error": "",
                }
            )
    return out


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    frame = frame.astype("object").where(frame.notna(), None)
    return frame.to_dict("records")


#: the row columns this module's functions of the rows read
ROW_COLUMNS: tuple[str, ...] = (
    *("machine_fingerprint", "cpu_model", "target", "peak_gflops", "compiler", "compiler_version", "cflags"),
    *("experiment", "candidate_kind", "library", "library_version", "library_source", "candidate_text"),
    *("impl", "counter_backend", "counters_unavailable", "counters", "harness_version"),
)


def row_peaks(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The peak each row was divided by, per machine and ISA (library calls use the best ISA's)."""
    if df.empty:
        return []
    columns = ["machine_fingerprint", "cpu_model", "target", "peak_gflops"]
    rows = df.loc[df["target"] != "any", columns].dropna(subset=["peak_gflops"])  # not a copy of every column
    grouped = rows.groupby(["machine_fingerprint", "cpu_model", "target"], dropna=False)["peak_gflops"]
    table = grouped.agg(["min", "max", "count"]).reset_index()
    return _records(table.rename(columns={"count": "n_rows"}))


def compilers_used(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Distinct compiler, version and flags of the rows, with the experiments and row counts using them."""
    if df.empty:
        return []
    cols = ["compiler", "compiler_version", "cflags"]
    part = df[[*cols, "experiment"]].astype("object").fillna("")
    grouped = part.groupby(cols, sort=True)
    table = grouped.agg(
        experiments=("experiment", lambda s: ", ".join(sorted(set(s)))), n_rows=("experiment", "size")
    ).reset_index()
    return _records(table)


def libraries_used(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Every baseline library of the rows: name, exact version, source, the code paths it took per machine
    (oneDNN's kernels, OpenBLAS's core, MKL's instruction set), experiments and row counts."""
    if df.empty or "library" not in df:
        return []
    cols = ["library", "library_version", "library_source", "candidate_text", "cpu_model"]
    part = df[df["candidate_kind"] == "baseline"][[*cols, "impl", "experiment"]].astype("object").fillna("")
    if part.empty:
        return []
    table = part.groupby(cols, sort=True).agg(
        impl=("impl", lambda s: "; ".join(sorted({str(v).split(" (+")[0] for v in s if v}))[:300]),
        experiments=("experiment", lambda s: ", ".join(sorted(set(s)))),
        n_rows=("experiment", "size"),
    )
    return _records(table.reset_index())


def _reasons(value: Any) -> list[tuple[str, str]]:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value == "":
        return []
    try:
        parsed = json.loads(value)
    except (TypeError, json.JSONDecodeError):
        return [("", str(value))]
    if isinstance(parsed, dict):
        return [(str(k), str(v)) for k, v in parsed.items()]
    return [("", json.dumps(parsed))]


def counter_backends(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per machine: the backend the rows used, and each backend that failed with its reason."""
    if df.empty:
        return []
    out = []
    for (fp, backend), rows in df.groupby(
        ["machine_fingerprint", "counter_backend"], dropna=False, sort=True
    ):
        # each distinct text parsed once: a few texts over 260 000 rows (every archive)
        reasons: dict[tuple[str, str], None] = {}
        for value in rows["counters_unavailable"].drop_duplicates():
            for item in _reasons(value):
                reasons[item] = None
        texts = rows["counters"].dropna().unique()
        measured = sorted({k for text in texts for k in (json.loads(text) if text else {}) or {}})
        cpu = rows["cpu_model"].dropna()
        out.append(
            {
                "machine_fingerprint": fp,
                "cpu_model": cpu.iloc[0] if len(cpu) else "",
                "backend": backend if isinstance(backend, str) else "none",
                "measured": ", ".join(measured) or "time only",
                "unavailable": list(reasons),
                "n_rows": len(rows),
            }
        )
    return out


def harness_versions(df: pd.DataFrame) -> list[tuple[str, int]]:
    if df.empty:
        return []
    counts = df["harness_version"].fillna("unknown").value_counts().sort_index()
    return [(str(k), int(v)) for k, v in counts.items()]
