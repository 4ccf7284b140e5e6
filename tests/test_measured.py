"""The archived measurements of reports/measured/ stay readable by this checkout: every archive unpacks
into rows/ and permutations/sim/ only, every row passes today's schema, and the report's readers load them
(a schema change that orphaned them would fail here, not in a later session's report)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from harness import permstudy, store

ARCHIVES = sorted((Path(__file__).resolve().parent.parent / "reports" / "measured").glob("*.tar.xz"))


@pytest.mark.parametrize("archive", ARCHIVES, ids=[a.name for a in ARCHIVES])
def test_archive_unpacks_into_readable_rows_and_simulations(archive: Path, tmp_path: Path) -> None:
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert names and all(n.split("/")[0] in ("rows", "permutations") for n in names), names[:5]
        tar.extractall(tmp_path, filter="data")
    rows = store.row_files(tmp_path)
    for path in rows:
        (row,) = store.pq.read_table(path).to_pylist()
        store.validate_row(row)
    df = store.load(tmp_path)
    assert len(df) == len(rows)
    assert df["machine_fingerprint"].notna().all() and df["source_hash"].notna().all()
    sim = permstudy.load_sim(tmp_path)
    assert len(rows) or len(sim), "an archive with neither rows nor simulations"
    if len(sim):
        assert sim.groupby(["experiment", "layer", "cache", "threads"]).size().eq(720).all()
