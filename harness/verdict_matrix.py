"""The verdict matrix: every paper figure against every machine it ran on, so a reader sees at a glance
which claims hold on which CPU (a report of every archive has 40+ figures on 5 machines; the verdict table
lists them one per line)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness import drawing
from reports.figures import PaperFigure

#: verdict -> (cell value, colour, mark)
VERDICTS = {
    "reproduced": (3, "#4c9a2a", "✓"),
    "partial": (2, "#e3b23c", "~"),
    "differs": (1, "#c8553d", "✗"),
}
ABSENT = "#eeeeee"


def machine_label(cpu_model: str, fingerprint: str, microarchitecture: str | None = None) -> str:
    """A column heading: the microarchitecture where known, else the CPU's name without its boilerplate,
    and the fingerprint that tells two machines of one name apart."""
    name = str(cpu_model or "unknown CPU")
    for noise in ("(R)", "(TM)", " Processor", " CPU", " 64-Core", " 32-Core", " 16-Core"):
        name = name.replace(noise, "")
    name = " ".join(name.split())
    if microarchitecture:
        name = f"{microarchitecture} ({name})"
    return f"{name}\n{fingerprint[:8]}"


def _paper_tag(paper: str) -> str:
    """The paper's seed number ("000") where its name gives one: 40 lines of full titles hide the figures."""
    found = re.search(r"seed (\d{3})", str(paper))
    return found.group(1) if found else str(paper)


def table(figures: Sequence[PaperFigure]) -> pd.DataFrame:
    """One line per figure and machine: paper, figure, machine, CPU, verdict, our number and the paper's."""
    return pd.DataFrame(
        [
            {
                "paper": f.paper,
                "figure": f.name,
                "machine_fingerprint": f.machine,
                "cpu_model": f.cpu_model,
                "verdict": f.verdict,
                "ours": f.ours,
                "paper_value": f.paper_value,
                "unit": f.unit,
            }
            for f in figures
        ],
        columns=[
            "paper",
            "figure",
            "machine_fingerprint",
            "cpu_model",
            "verdict",
            "ours",
            "paper_value",
            "unit",
        ],
    )


def plot(
    figures: Sequence[PaperFigure], fig_dir: Path, microarchitectures: Mapping[str, str | None] | None = None
) -> dict[str, str] | None:
    """Draw the matrix (PNG) and write its lines (CSV) into ``fig_dir``; None without figures.
    ``microarchitectures`` (fingerprint -> name) names the columns where a CPU's name does not."""
    lines = table(figures)
    if lines.empty:
        return None
    fig_dir.mkdir(parents=True, exist_ok=True)
    uarch = microarchitectures or {}
    lines["line"] = lines["paper"].map(_paper_tag) + " · " + lines["figure"].astype(str)
    lines["machine"] = [
        machine_label(c, m, uarch.get(m))
        for c, m in zip(lines["cpu_model"], lines["machine_fingerprint"], strict=True)
    ]
    value = lines["verdict"].map(lambda v: VERDICTS.get(v, (0, ABSENT, "?"))[0])
    # a figure built twice on one machine (two experiments of one claim) shows its worst verdict
    grid = lines.assign(value=value).pivot_table(
        index="line", columns="machine", values="value", aggfunc="min"
    )
    grid = grid.sort_index().reindex(columns=sorted(grid.columns))
    colours = ListedColormap([ABSENT] + [colour for _, colour, _ in sorted(VERDICTS.values())])  # by value
    marks = {VERDICTS[v][0]: VERDICTS[v][2] for v in VERDICTS}
    n_rows, n_cols = grid.shape
    with matplotlib.rc_context({"text.parse_math": False}):
        fig = Figure(figsize=(3.2 + 1.45 * n_cols + 3.0, 0.27 * n_rows + 1.9), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        cells = grid.fillna(0).astype(int).to_numpy()
        ax.imshow(cells, cmap=colours, vmin=-0.5, vmax=3.5, aspect="auto")
        for i in range(n_rows):
            for j in range(n_cols):
                ax.text(j, i, marks.get(cells[i, j], ""), ha="center", va="center", fontsize=9, color="white")
        ax.set_xticks(range(n_cols), grid.columns, fontsize=8)
        ax.xaxis.tick_top()
        ax.set_yticks(range(n_rows), grid.index, fontsize=8)
        ax.set_xticks([x - 0.5 for x in range(1, n_cols)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, n_rows)], minor=True)
        ax.grid(which="minor", color="white", linewidth=1.5)
        ax.tick_params(which="both", length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        legend = [Patch(color=VERDICTS[v][1], label=f"{VERDICTS[v][2]} {v}") for v in VERDICTS]
        legend.append(Patch(color=ABSENT, label="not run on this machine"))
        fig.legend(handles=legend, loc="outside lower center", ncols=4, fontsize=8, frameon=False)
        counts = lines["verdict"].value_counts()
        fig.suptitle(
            f"Verdict per paper figure and machine: {counts.get('reproduced', 0)} reproduced, "
            f"{counts.get('partial', 0)} partial, {counts.get('differs', 0)} differ",
            fontsize=10,
        )
        png = fig_dir / "verdict-matrix.png"
        fig.savefig(png, dpi=110, pil_kwargs=drawing.PNG)
    csv = fig_dir / "verdict-matrix.csv"
    lines.assign(machine=lines["machine"].str.replace("\n", " ")).to_csv(csv, index=False)
    return {"png": f"{fig_dir.name}/{png.name}", "csv": f"{fig_dir.name}/{csv.name}"}
