"""Where the studies are: one folder per paper, ``studies/<name>/``, found by convention (as benchopt
finds a benchmark's solvers), so the core never names a study.

A study folder may hold, each optional:

- ``figures.py`` with ``FIGURES`` (paper-figure builders, :mod:`reports.figures`);
- ``claims.yaml`` (what the paper claimed, per figure);
- ``catalogue.yaml`` (its Snakemake figures, papers and jobs per profile; the Snakefile merges them);
- ``commands/<command>.py`` with ``main(argv)`` (``harness <command>``; underscores read as dashes);
- in its ``__init__.py``, ``RENDERERS``: the candidate kinds it renders (kind -> ``"module:function"``,
  read by :func:`kernels.candidate.render`), so a study with a kernel family of its own needs no line in
  the core; and ``EXPANDERS``: space entries it expands into schemes (read by
  :func:`kernels.space.expanders`);
- anything else it needs (its kernels, models, simulators), imported by those modules only.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDIES_DIR = ROOT / "studies"
PACKAGE = "studies"


def names() -> list[str]:
    """The study folders (packages with an ``__init__.py``), sorted."""
    if not STUDIES_DIR.is_dir():
        return []
    return sorted(p.name for p in STUDIES_DIR.iterdir() if (p / "__init__.py").is_file())


def files(name: str) -> list[Path]:
    """Each study's file ``name`` (e.g. ``claims.yaml``), where it has one, in study order."""
    return [STUDIES_DIR / s / name for s in names() if (STUDIES_DIR / s / name).is_file()]


def modules(module: str) -> list[str]:
    """Dotted names of each study's module ``module`` (e.g. ``figures``), where it has one."""
    return [f"{PACKAGE}.{s}.{module}" for s in names() if (STUDIES_DIR / s / f"{module}.py").is_file()]


def declared(attribute: str) -> dict[str, str]:
    """Every study's ``attribute`` (a dict in its ``__init__.py``, e.g. ``RENDERERS``), merged; a key two
    studies declare is an error naming both."""
    import importlib

    merged: dict[str, str] = {}
    owner: dict[str, str] = {}
    for s in names():
        for key, value in dict(getattr(importlib.import_module(f"{PACKAGE}.{s}"), attribute, {})).items():
            if key in merged:
                raise ValueError(f"{attribute} {key!r} is declared by both studies {owner[key]!r} and {s!r}")
            merged[key], owner[key] = value, s
    return merged


def commands() -> dict[str, str]:
    """``harness`` command name -> dotted module, for every study's ``commands/<command>.py``."""
    out = {}
    for s in names():
        for path in sorted((STUDIES_DIR / s / "commands").glob("[a-z]*.py")):
            out[path.stem.replace("_", "-")] = f"{PACKAGE}.{s}.commands.{path.stem}"
    return out
