"""Paper figures, the framework: for each reproduced figure, our plot, the statistic compared with the
paper's claim, and an automatic verdict.

Figures are plug-ins of the studies: each ``studies/<name>/figures.py`` defines ``FIGURES``, a list of
builders ``(ctx: FigureContext) -> list[PaperFigure]``, and its claims (text and numbers, data) in
``studies/<name>/claims.yaml`` (docs/report.md shows a builder). A figure is built per machine (reports
never mix machines in one ratio: :meth:`FigureContext.per_machine`) from the summary of the result store
(``harness.analysis.summarize``); a figure whose experiment has no rows is simply absent.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from harness import drawing, store, studies  # noqa: E402


def _load_claims() -> dict[str, Any]:
    claims: dict[str, Any] = {}
    for path in studies.files("claims.yaml"):
        part = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if clash := set(part) & set(claims):
            raise ValueError(
                f"{path.parent.name}/{path.name}: claims {sorted(clash)} are already defined in another file"
            )
        claims.update(part)
    return claims


CLAIMS = _load_claims()


@dataclass
class PaperFigure:
    """One reproduced figure on one machine: the paper's side (from the claims) beside ours.

    The fields after ``table`` are optional so plug-ins written before them keep working; the report
    fills ``experiments`` (from the claims), ``timing_mode`` and the candidate counts when a builder leaves
    them empty, and shows ``ratio`` wherever both ``ours`` and ``paper_value`` are numbers.
    """

    name: str
    machine: str  # fingerprint
    cpu_model: str
    paper: str
    where: str
    claim: str
    measured: str  # our result, in words, with its numbers
    verdict: str  # reproduced | partial | differs
    statistic: str  # how the verdict was decided
    image: str | None = None  # relative to the report directory
    csv: str | None = None
    table: list[dict[str, Any]] = field(default_factory=list)
    ours: float | None = None  # our headline number (the one compared with the paper's)
    ours_ci: tuple[float, float] | None = None  # its 95% confidence interval
    paper_value: float | None = None  # the paper's number in the same unit, when it gave one
    unit: str = ""  # unit of ours / paper_value, e.g. "% of peak" or "x speed-up"
    paper_text: str = ""  # the paper's number in words (e.g. "45% -> 90%"); defaults to the claims'
    experiments: list[str] = field(default_factory=list)  # experiments the figure reads
    timing_mode: str = ""  # hot | cold | "hot, cold"
    counts: dict[str, int] = field(default_factory=dict)  # units: total, ok, wrong, unavailable, failed

    @property
    def ratio(self) -> float | None:
        """ours / paper_value, when both are numbers (None otherwise)."""
        if self.ours is None or not self.paper_value or _nan(self.ours):
            return None
        return float(self.ours) / float(self.paper_value)

    @property
    def ratio_ci(self) -> tuple[float, float] | None:
        """The CI of ours divided by the paper's number (the paper's is taken as exact)."""
        if self.ratio is None or self.ours_ci is None or any(_nan(v) for v in self.ours_ci):
            return None
        lo, hi = self.ours_ci
        return float(lo) / float(self.paper_value), float(hi) / float(self.paper_value)  # type: ignore[arg-type]


def _nan(value: object) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def paper_figure(name: str, fp: object, part: pd.DataFrame, **measured: Any) -> PaperFigure:
    """A figure of ``name`` on machine ``fp``: the paper's side from the claims, ours from ``measured``.

    Claims may carry ``paper_text`` (the paper's number in words) and ``experiment``; both become
    defaults of the figure. ``timing_mode`` defaults to the modes present in ``part``.
    """
    meta = CLAIMS[name]
    cpu = str(part["cpu_model"].iloc[0])
    measured.setdefault("paper_text", str(meta.get("paper_text", "")))
    if "experiment" in meta:
        measured.setdefault("experiments", [meta["experiment"]])
    if "timing_mode" in part:
        measured.setdefault("timing_mode", ", ".join(sorted(map(str, part["timing_mode"].dropna().unique()))))
    return PaperFigure(name, str(fp), cpu, meta["paper"], meta["where"], meta["claim"], **measured)


def mean_ci(values: Any, level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of a mean (NaN, NaN below two values): summaries over sizes are means of medians."""
    import numpy as np
    from scipy import stats

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return float("nan"), float("nan")
    if np.all(v == v[0]):
        return float(v[0]), float(v[0])
    lo, hi = stats.t.interval(level, v.size - 1, loc=v.mean(), scale=stats.sem(v))
    return float(lo), float(hi)


def machine_part(summary: pd.DataFrame, fp: object) -> pd.DataFrame:
    """Machine ``fp``'s rows of ``summary`` in the columns :func:`paper_figure` reads (CPU model, timing
    modes): a copy of the machine's whole share of the summary took 100-200 MB of a report worker."""
    columns = [c for c in ("cpu_model", "timing_mode") if c in summary]
    return summary.loc[summary["machine_fingerprint"] == fp, columns]


def ok_rows(summary: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return summary[(summary["experiment"] == experiment) & (summary["status"] == "ok")].copy()


def save_figure(
    fig: plt.Figure, data: pd.DataFrame, out_dir: Path, stem: str, tight: bool = True
) -> tuple[str, str]:
    """The figure's PNG and its data's CSV. ``tight``: crop the PNG to what is drawn (an extra measuring
    pass over every artist, half a grid figure's time); False for a figure whose margins are set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    bbox = "tight" if tight else None
    fig.savefig(out_dir / f"{stem}.png", dpi=110, bbox_inches=bbox, pil_kwargs=drawing.PNG)
    plt.close(fig)
    store.write_csv(data, out_dir / f"{stem}.csv")
    return f"figures/{stem}.png", f"figures/{stem}.csv"


@dataclass(frozen=True)
class FigureContext:
    """What a builder builds from: the store's summary (one row per candidate, workload, machine...), the
    directory its PNGs and CSVs go to, and the results directory the report reads (for builders that read
    more than the summary: cachegrind rows, simulations, selection files; by default the one the figure
    directory sits in, ``<results>/report/figures``)."""

    summary: pd.DataFrame
    out_dir: Path
    results_dir: Path = None  # type: ignore[assignment]  # set in __post_init__

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        given = self.results_dir
        results = Path(given).resolve() if given is not None else self.out_dir.resolve().parent.parent
        object.__setattr__(self, "results_dir", results)

    def ok(self, experiment: str) -> pd.DataFrame:
        """The experiment's rows whose status is ok."""
        return ok_rows(self.summary, experiment)

    def save(self, fig: plt.Figure, data: pd.DataFrame, stem: str, tight: bool = True) -> tuple[str, str]:
        """Write the figure's PNG and its data's CSV; their paths relative to the report (``tight``: as
        :func:`save_figure`)."""
        return save_figure(fig, data, self.out_dir, stem, tight)

    @staticmethod
    def machines(
        rows: pd.DataFrame, by: tuple[str, ...] = (), machine: str = "machine_fingerprint"
    ) -> Iterator[tuple[Any, pd.DataFrame]]:
        """``rows`` machine by machine (and by the columns ``by`` first, when given): (fingerprint, part),
        or ((*values of by, fingerprint), part), in sorted order. ``machine``: the column holding the
        fingerprint, where a study's table names it otherwise."""
        if rows.empty:
            return
        yield from rows.groupby([*by, machine] if by else machine)

    def per_machine(
        self,
        rows: pd.DataFrame,
        one: Callable[[Any, pd.DataFrame], PaperFigure | list[PaperFigure] | None],
        by: tuple[str, ...] = (),
        machine: str = "machine_fingerprint",
    ) -> list[PaperFigure]:
        """The figures of ``one(key, part)`` for each machine of ``rows`` (keys and ``machine`` as
        :meth:`machines`): a figure, a list of them, or None where that machine's rows show nothing."""
        figures: list[PaperFigure] = []
        for key, part in self.machines(rows, by, machine):
            built = one(key, part)
            if isinstance(built, PaperFigure):
                figures.append(built)
            elif built:
                figures += built
        return figures


Builder = Callable[[FigureContext], list[PaperFigure]]


def all_builders(errors: list[tuple[str, str]] | None = None) -> list[Builder]:
    """Every study's builders (``studies/<name>/figures.py``, :mod:`harness.studies`), in study order.

    With ``errors`` (a list), a plug-in that cannot be imported is recorded there and skipped.
    """
    builders: list[Builder] = []
    for name in studies.modules("figures"):
        try:
            builders += importlib.import_module(name).FIGURES
        except Exception as exc:
            if errors is None:
                raise
            errors.append((name, f"{type(exc).__name__}: {exc}"))
    return builders


def paper_figures(
    summary: pd.DataFrame,
    out_dir: Path,
    errors: list[tuple[str, str]] | None = None,
    results_dir: Path | None = None,
    workers: int = 1,
) -> list[PaperFigure]:
    """Every paper figure the results allow, one per figure and machine.

    With ``errors`` (a list), a builder that raises is recorded there as (builder, error) and the others
    still run, so one broken plug-in cannot hide every other figure of the report; without it, it raises.
    ``results_dir`` is the builders' :attr:`FigureContext.results_dir`. ``workers`` > 1 runs the builders
    in that many forked processes (:func:`harness.drawing.run`), and returns the figures in the builders'
    order all the same.
    """
    calls = paper_figure_calls(summary, out_dir, errors, results_dir)
    return collect_paper_figures(drawing.run(calls, workers), errors)


def paper_figure_calls(
    summary: pd.DataFrame,
    out_dir: Path,
    errors: list[tuple[str, str]] | None = None,
    results_dir: Path | None = None,
) -> list[drawing.Call]:
    """One :func:`harness.drawing.run` call per builder (arguments as :func:`paper_figures`); their
    results make figures with :func:`collect_paper_figures`. A report runs them beside its own drawing."""
    if summary.empty and results_dir is None:  # no rows, and no directory where simulations could be
        return []
    builders = all_builders() if errors is None else all_builders(errors)
    ctx = FigureContext(summary, Path(out_dir), results_dir)
    return [(_build_one, (build, ctx, errors is None)) for build in builders]


def collect_paper_figures(
    outcomes: list[tuple[str, list[PaperFigure], str | None]], errors: list[tuple[str, str]] | None = None
) -> list[PaperFigure]:
    """The figures of :func:`paper_figure_calls`' results, in the builders' order (errors as there)."""
    figures: list[PaperFigure] = []
    for name, built, error in outcomes:
        if error is None:
            figures += built
        elif errors is None:
            raise RuntimeError(f"figure builder {name} failed: {error}")
        else:
            errors.append((name, error))
    return figures


def _build_one(
    build: Builder, ctx: FigureContext, reraise: bool = False
) -> tuple[str, list[PaperFigure], str | None]:
    """Run one builder: (its name, its figures, None), or (its name, [], the error) unless ``reraise``."""
    name = f"{build.__module__}.{build.__qualname__}"
    try:
        return name, build(ctx), None
    except Exception as exc:
        plt.close("all")
        if reraise:
            raise
        return name, [], f"{type(exc).__name__}: {exc}"
