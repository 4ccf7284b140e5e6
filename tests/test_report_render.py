"""The report as a reader gets it: built from a small fixture result set (two machines, paper figures,
failed and unavailable candidates), every section present, the HTML rendered by headless Chromium (not
blank, no console error), and the PDF rasterised by pdftoppm with the page count WeasyPrint laid out.

Chromium and poppler are system packages: without them the tests skip and say which one is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness import report, store
from tests.test_paper_figures import hoist_rows, ns_for
from tests.test_report import MACHINES, make_row

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PDFTOPPM = shutil.which("pdftoppm")


def fixture_rows() -> list[dict]:
    """Paper figures on two machines, an experiment with a wrong, an unsupported and a crashed unit."""
    rows = hoist_rows(90.0, 40.0, "fp-zen3") + hoist_rows(70.0, 65.0, "fp-emr")
    peak = MACHINES["fp-zen3"][2]
    for i in (8, 20, 50):
        for label, kind, pct in (
            ("[R_j, λ_seq_i.[(1,4),(1,6)], T_{128,k}, Uλ_i, U_{2,j}, V_j]", "scheme", 88.0),
            ("[R_j, R_i, T_{128,k}, U_{6,i}, U_{2,j}, V_j] (partial=masked)", "scheme", 70.0 + i / 5),
            ("blis", "baseline", 60.0 + i / 2),
        ):
            times = [ns_for(pct, peak) * f for f in (1.0, 1.01, 0.99, 1.02, 1.0)]
            rows.append(
                make_row(
                    candidate=f"{label}-{i}",
                    label=label,
                    kind=kind,
                    experiment="ttile_fig5_6",
                    workload=f"small_matmul_i{i}",
                    times=times,
                )
            )
    rows.append(
        make_row(
            candidate="mkl-8",
            label="mkl",
            kind="baseline",
            experiment="ttile_fig5_6",
            workload="small_matmul_i8",
            status="unsupported",
            reason="MKL is not installed",
        )
    )
    rng = np.random.default_rng(3)
    rows += [
        make_row("fp-zen3", "k0", "[U_{4,i}, V_j]", list(rng.normal(60_000, 2_000, 8)), experiment="extra"),
        make_row(
            "fp-zen3", "kbad", "wrong-one", status="wrong", reason="max rel err 0.25", experiment="extra"
        ),
        make_row("fp-emr", "kc", "crasher", status="crash", reason="SIGSEGV", experiment="extra"),
    ]
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("report")
    results = base / "results"
    for row in fixture_rows():
        store.write_row(results, row)
    return report.build_report(results, base / "report")


def sections(html: str) -> list[str]:
    return re.findall(r'<section class="figure-section[^"]*" id="([^"]+)"', html)


def section(html: str, name: str, cpu: str) -> str:
    """The one figure section of ``name`` on ``cpu``."""
    found = [
        part.split("</section>")[0]
        for part in html.split('<section class="figure-section')[1:]
        if f"<code>{name}</code> on {cpu}" in part.split("</h2>")[0]
    ]
    assert len(found) == 1, (name, cpu, len(found))
    return found[0]


def test_every_section_is_there(built: Path) -> None:
    html = built.read_text(encoding="utf-8")
    # the verdict table first, one line per figure and machine, each linking to its section
    verdicts = html.split('<section id="verdicts">')[1].split("</section>")[0]
    figs = sections(html)
    assert len(figs) >= 3  # hoisting on two machines, Fig 5.6 on one (other plug-ins may add theirs)
    for anchor in figs:
        assert f'href="#{anchor}"' in verdicts
    assert verdicts.count("<tr>") == 1 + len(figs)
    assert html.index('id="verdicts"') < html.index(f'id="{figs[0]}"') < html.index('id="machines"')
    # the paper's number, ours with its CI, the ratio where both are numbers, the verdict and its rule
    zen = section(html, "ttile_s4_3_hoisting", "AMD EPYC 7B13")
    assert "45% -&gt; 90% of peak" in zen and "Ratio ours / paper" in zen and "95% CI" in zen
    assert "reproduced" in zen and "Timing mode</dt><dd>hot" in zen
    assert "2 measured units" in zen and "0 failed the semantic check" in zen
    emr = section(html, "ttile_s4_3_hoisting", "Intel Xeon Platinum 8581C")
    assert "differs" in emr and "fp-emr" in emr
    fig56 = section(html, "ttile_fig5_6", "AMD EPYC 7B13")
    assert "10 measured units" in fig56 and "1 unavailable here" in fig56
    assert "Ratio ours / paper" not in fig56  # the paper gave no number: no ratio is made up
    # the experiments, with counts of wrong / unavailable / failed units
    for exp in ("extra", "quick_matmul", "ttile_fig5_6"):
        assert f'id="exp-{exp}"' in html
    extra = html.split('id="exp-extra"')[1].split("</section>")[0]
    assert "1 wrong (failed the semantic check)" in extra and "1 failed" in extra
    # the provenance page and its sections
    prov = built.with_name("provenance.html").read_text(encoding="utf-8")
    for part in ("environment", "compilers", "calibration", "counters", "prov-machines", "settings"):
        assert f'<section id="{part}">' in prov
    assert "Harness git commit" in prov and "no PMU in VM" in prov and "174.0" in prov
    assert 'id="prov-exp-extra"' in prov


#: Lists the elements sticking out of the window, into <pre id="overflow"> (read with --dump-dom).
OVERFLOW_PROBE = """<script>
var out = [], w = document.documentElement.clientWidth;
document.querySelectorAll("body *").forEach(function (e) {
  var r = e.getBoundingClientRect();
  if (r.right > w + 1) out.push(e.tagName + "." + e.className + " right=" + Math.round(r.right));
});
var pre = document.createElement("pre"); pre.id = "overflow"; pre.textContent = out.join("\\n");
document.body.appendChild(pre);
</script>"""


def _chromium(
    url: str, png: Path, profile: Path, height: int, dump_dom: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={profile}",
            "--dump-dom" if dump_dom else f"--screenshot={png}",
            f"--window-size=1280,{height}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _not_blank(png: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))[..., :3].mean(axis=2)
    assert pixels.std() > 0.05, f"{png} looks blank (pixel std {pixels.std():.4f})"
    assert (pixels < 0.9).mean() > 0.01, f"{png}: almost no ink"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("page", ["index.html", "provenance.html"])
def test_html_renders_in_headless_chromium(built: Path, tmp_path: Path, page: str) -> None:
    png = tmp_path / "shot.png"
    out = _chromium(built.with_name(page).as_uri(), png, tmp_path / "profile", 2000)
    assert out.returncode == 0, out.stderr[-2000:]
    console = [line for line in out.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _not_blank(png)
    # nothing is wider than a 1280 px window: the reader never scrolls sideways
    probe = built.with_name(f"probe-{page}")
    probe.write_text(
        built.with_name(page).read_text(encoding="utf-8").replace("</body>", OVERFLOW_PROBE + "</body>")
    )
    dom = _chromium(probe.as_uri(), tmp_path / "probe.png", tmp_path / "profile", 1000, dump_dom=True)
    assert dom.returncode == 0, dom.stderr[-2000:]
    wide = re.search(r'<pre id="overflow">(.*?)</pre>', dom.stdout, re.S)
    assert wide is not None and wide.group(1).strip() == "", wide and wide.group(1)[:2000]
    # every image of the page exists (Chromium does not log a missing <img>)
    html = built.with_name(page).read_text(encoding="utf-8")
    for src in re.findall(r'src="([^"]+)"', html):
        assert (built.parent / src).is_file(), src


@pytest.mark.skipif(PDFTOPPM is None, reason="pdftoppm is not installed (apt-get install poppler-utils)")
def test_pdf_renders_with_the_expected_page_count(built: Path, tmp_path: Path) -> None:
    pdf = report.build_pdf(built)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    expected = sum(len(doc.pages) for doc in report.pdf_documents(built))
    html = built.read_text(encoding="utf-8")
    n_sections = len(sections(html)) + html.count('class="experiment"') + 1  # + the verdicts/machines
    assert expected >= n_sections  # every figure section and experiment starts its own page
    out = subprocess.run(
        [str(PDFTOPPM), "-r", "30", "-png", str(pdf), str(tmp_path / "page")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    pages = sorted(tmp_path.glob("page-*.png"))
    assert len(pages) == expected
    _not_blank(pages[0])


def test_a_broken_figure_builder_is_reported_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reports.figures as figures

    def broken(ctx: object) -> list:
        raise KeyError("column_that_does_not_exist")

    builders = figures.all_builders()
    monkeypatch.setattr(figures, "all_builders", lambda errors=None: [broken, *builders])
    results = tmp_path / "results"
    for row in hoist_rows(90.0, 40.0):
        store.write_row(results, row)
    html = report.build_report(results, tmp_path / "report").read_text(encoding="utf-8")
    assert "1 figure builder failed" in html and "column_that_does_not_exist" in html
    section(html, "ttile_s4_3_hoisting", "AMD EPYC 7B13")  # the other figures are still there


def test_a_plugin_that_cannot_be_imported_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated (never a folder in studies/: the tree is shared with running builds)."""
    import importlib

    import reports.figures as figures
    from harness import studies
    from studies.ttile_microkernels import figures as microkernels

    fake = "studies.zz_cannot_import.figures"
    real_modules, real_import = studies.modules, importlib.import_module

    def import_module(name: str, *args: object) -> object:
        if name == fake:
            raise ImportError("No module named 'module_that_does_not_exist_anywhere'")
        return real_import(name, *args)

    monkeypatch.setattr(studies, "modules", lambda module: [*real_modules(module), fake])
    monkeypatch.setattr(importlib, "import_module", import_module)
    errors: list[tuple[str, str]] = []
    builders = figures.all_builders(errors)
    assert errors == [(fake, "ImportError: No module named 'module_that_does_not_exist_anywhere'")]
    assert microkernels.hoisting in builders  # the others still load
    with pytest.raises(ImportError):
        figures.all_builders()


def test_long_scheme_labels_get_the_width_they_need(tmp_path: Path) -> None:
    """A conv scheme label runs to 150+ characters; at a fixed width constrained layout gave up ("axes
    sizes collapsed to zero") and the labels were cut off at the figure's left edge."""
    import warnings

    label = "[" + ", ".join(f"T_{{{n},{d}}}" for n in (2, 3, 4, 7) for d in "khwcrs") + ", U_{2,k}, V_k]"
    assert len(label) > 150
    rows = [
        make_row(candidate=f"k{i}", label=f"{label} #{i}", experiment="long_labels", times=[1e5, 1.1e5])
        for i in range(8)
    ]
    for row in rows:
        store.write_row(tmp_path / "results", row, sync=False)
    df = store.load(tmp_path / "results")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report.render_report(df, tmp_path / "report")
    assert not [w for w in caught if "constrained_layout not applied" in str(w.message)]
