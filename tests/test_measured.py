"""The archived measurements of reports/measured/ stay readable by this checkout: every archive unpacks
into rows/, permutations/ and tvm/ only, every row passes today's schema, and the report's readers load them
(a schema change that orphaned them would fail here, not in a later session's report); and the report of
every archive builds (`make report-all`). The archive format itself: tests/test_archive.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness import archive, report, store
from studies.permutations import study as permstudy

# tens of seconds: out of `make test`, run by CI with `pytest -m heavy`
pytestmark = pytest.mark.heavy

ARCHIVES = sorted((Path(__file__).resolve().parent.parent / "reports" / "measured").glob("*.tar.xz"))


@pytest.mark.parametrize("archive_path", ARCHIVES, ids=[a.name for a in ARCHIVES])
def test_archive_unpacks_into_readable_rows_and_simulations(archive_path: Path, tmp_path: Path) -> None:
    n = archive.unpack(archive_path, tmp_path)  # validates every row as it writes it back
    df = store.load(tmp_path)
    assert len(df) == n
    assert df["machine_fingerprint"].notna().all()
    # every row that was generated names its source (a candidate not applicable here has none: YaConv on a
    # strided layer; nor has a scheme written by hand that failed the legality rules, an error row)
    illegal = (df["status"] == "error") & df["reason"].str.startswith("illegal scheme")
    assert df.loc[(df["status"] != "unsupported") & ~illegal, "source_hash"].notna().all()
    sim = permstudy.load_sim(tmp_path)
    assert n or len(sim), "an archive with neither rows nor simulations"
    if len(sim):
        assert sim.groupby(["experiment", "layer", "cache", "threads"]).size().eq(720).all()


def test_the_report_of_every_archive_has_a_verdict_per_figure_and_machine(tmp_path: Path) -> None:
    archive.unpack_all(ARCHIVES, tmp_path / "results", jobs=2)  # as `make report-all` does
    df = store.load(tmp_path / "results")
    index = report.build_report(tmp_path / "results", tmp_path / "report")
    html = index.read_text(encoding="utf-8")
    assert 'class="verdict-matrix"' in html
    matrix = pd.read_csv(tmp_path / "report" / "figures" / "verdict-matrix.csv")
    assert set(matrix["machine_fingerprint"]) <= set(df["machine_fingerprint"])
    verdicts = html.split('<section id="verdicts">')[1].split("</section>")[0]
    assert len(matrix) == verdicts.count("<tr>") - 1  # a line of the matrix per line of the verdict table
    for experiment in df["experiment"].unique():
        assert f'id="exp-{experiment}"' in html or f'id="exp-{experiment[:80]}"' in html
    assert index.stat().st_size < 20e6  # the long tables are in CSVs, not on the page
