"""An experiment's figure and tables stay readable at any size: the baselines and the best candidates by
name, the rest as a distribution, every unit in the CSV; and the verdict matrix of figure x machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness import analysis, experiment_figure, report, verdict_matrix
from reports.figures import PaperFigure
from tests.test_report import frame, make_row


def _rows(n_candidates: int, n_workloads: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for w in range(n_workloads):
        for c in range(n_candidates):
            t = 40_000.0 + 1_000.0 * c
            rows.append(make_row(candidate=f"k{c}", label=f"scheme {c}", workload=f"layer{w:02d}",
                                 times=list(rng.normal(t, 100, 5)), experiment="big"))  # fmt: skip
        rows.append(make_row(candidate="lib", label="onednn 3.2.0", kind="baseline", workload=f"layer{w:02d}",
                             times=list(rng.normal(90_000, 100, 5)), experiment="big"))  # fmt: skip
    return rows


def _units(rows: list[dict]) -> pd.DataFrame:
    summary = analysis.summarize(frame(rows))
    return summary.assign(display=summary["label"])


def test_a_facet_names_the_baselines_and_the_best_candidates() -> None:
    marked = experiment_figure.mark_shown(_units(_rows(30, 2)), shown=5)
    for _, facet in marked.groupby("workload"):
        named = set(facet.loc[facet["shown"], "display"])
        # the fastest five (the smallest times) and the baseline, slower than all of them
        assert named == {"onednn 3.2.0", *(f"scheme {c}" for c in range(5))}


def test_a_big_experiment_draws_a_line_per_workload_and_keeps_every_unit_in_the_csv(tmp_path: Path) -> None:
    rows = _rows(30, experiment_figure.MANY_WORKLOADS + 1)
    df = frame(rows)
    units = _units(rows)
    reps = analysis.repetitions(df).assign(display=lambda r: r["label"])
    out = experiment_figure.plot(reps, units, tmp_path, "big-fig", "big", "fp-zen3")
    assert out["view"] == "per workload" and out["n_units"] == str(len(units))
    assert (tmp_path / Path(out["png"]).name).read_bytes()[:4] == b"\x89PNG"
    csv = pd.read_csv(tmp_path / Path(out["csv"]).name)
    assert len(csv) == len(units) and csv["shown"].sum() == 7 * (experiment_figure.SHOWN + 1)
    small = experiment_figure.plot(reps[reps["workload"] == "layer00"], units[units["workload"] == "layer00"],
                                   tmp_path, "small-fig", "small", "fp-zen3")  # fmt: skip
    assert small["view"] == "per candidate"


def test_the_report_lists_the_named_units_and_links_all_of_them(tmp_path: Path) -> None:
    rows = _rows(40, 1) + [make_row(candidate="bad", label="bad one", status="wrong", reason="err",
                                    experiment="big", workload="layer00")]  # fmt: skip
    html = report.render_report(frame(rows), tmp_path / "report").read_text(encoding="utf-8")
    big = html.split('id="exp-big"')[1]
    assert f"{experiment_figure.SHOWN + 2} of 42 units listed" in big  # the named ones and the failed one
    assert "scheme 39" not in big.split("<h3>Failed")[0]  # the slowest is in the box, not named
    summary_csv = big.split("summary (CSV)")[0].rsplit('href="', 1)[1].split('"')[0]
    assert len(pd.read_csv(tmp_path / "report" / summary_csv)) == 42


def _figure(name: str, machine: str, verdict: str) -> PaperFigure:
    return PaperFigure(name, machine, f"CPU {machine}", "000", "Fig 1", "claim", "measured", verdict, "rule")


def test_the_verdict_matrix_has_a_cell_per_figure_and_machine(tmp_path: Path) -> None:
    figures = [_figure("fig_a", "m1", "reproduced"), _figure("fig_a", "m2", "differs"),
               _figure("fig_b", "m1", "partial")]  # fmt: skip
    out = verdict_matrix.plot(figures, tmp_path)
    assert out is not None and (tmp_path / "verdict-matrix.png").read_bytes()[:4] == b"\x89PNG"
    lines = pd.read_csv(tmp_path / "verdict-matrix.csv")
    assert sorted(zip(lines["figure"], lines["machine_fingerprint"], lines["verdict"], strict=True)) == [
        ("fig_a", "m1", "reproduced"), ("fig_a", "m2", "differs"), ("fig_b", "m1", "partial")]  # fmt: skip
    assert verdict_matrix.plot([], tmp_path / "none") is None
    # the columns name the microarchitecture where the CPU's name hides it; the lines, the paper's seed
    paper = "Tollenaere, TTiLE thesis (seed 000)"
    one = PaperFigure("fig_a", "m1", "AMD EPYC", paper, "Fig 1", "c", "m", "reproduced", "rule")
    verdict_matrix.plot([one], tmp_path / "uarch", {"m1": "Zen 3"})
    lines = pd.read_csv(tmp_path / "uarch" / "verdict-matrix.csv")
    assert list(lines["machine"]) == ["Zen 3 (AMD EPYC) m1"] and list(lines["line"]) == ["000 · fig_a"]
    assert (
        verdict_matrix.machine_label("Intel(R) Xeon(R) Processor", "8dabd3baf38c") == "Intel Xeon\n8dabd3ba"
    )


def test_the_label_width_estimate_covers_the_drawn_text() -> None:
    """Axes are placed after their tick labels' estimated width (no layout search): the estimate must not
    fall short of what Matplotlib draws, or labels would be cut, nor waste much room."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer = RendererAgg(100, 100, 72)  # 72 dpi: widths in points
    scheme = "[R_j, λ_seq_i.[(16,6),(12,8)], T_{192,k}, U_{2,j}, V_j] (hoist=False)"
    for text in ["WWWWWWWW", "iiiiiiii", scheme, "18 other candidates (their medians)", "mkl 2026.2"]:
        drawn = renderer.get_text_width_height_descent(text, FontProperties(size=8), ismath=False)[0] / 72
        assert drawn <= experiment_figure._text_inches(text, 8) <= 1.15 * drawn + 0.05, text


def test_the_legend_stays_inside_a_narrow_figure() -> None:
    """A figure as narrow as its short tick labels and one facet still holds its legend: in one line of
    five entries it ran off both edges (a per-candidate figure with four kinds of candidates)."""
    kinds = ["scheme", "baseline", "conv_algo", "loop_string"]
    rows = [
        make_row(candidate=f"k{i}", label=f"c{i}", kind=kind, workload="w", experiment="narrow",
                 times=[40_000.0 + 1000 * i] * 5)
        for i, kind in enumerate(kinds)
    ]  # fmt: skip
    units = experiment_figure.mark_shown(_units(rows))
    reps = analysis.repetitions(frame(rows)).assign(display=lambda r: r["label"])
    fig = experiment_figure._per_candidate(reps, units)
    fig.canvas.draw()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(), fig.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y0 >= page.y0
    assert legend._ncols < len(kinds) + 1  # it had to wrap
    axes_bottom = min(ax.get_window_extent().y0 for ax in fig.axes)
    assert box.y1 < axes_bottom  # below the x axis, not over it
