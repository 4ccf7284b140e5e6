"""The archived measurements of reports/measured/ stay readable by this checkout: every archive unpacks
into rows/, permutations/ and tvm/ only, every row passes today's schema, and the report's readers load them
(a schema change that orphaned them would fail here, not in a later session's report). And the archive
format itself: packed rows come back as the same rows, in the store's compacted tables."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from harness import archive, permstudy, store
from tests.test_store import make_row

# tens of seconds: out of `make test`, run by CI with `pytest -m heavy`
pytestmark = pytest.mark.heavy

ARCHIVES = sorted((Path(__file__).resolve().parent.parent / "reports" / "measured").glob("*.tar.xz"))


@pytest.mark.parametrize("archive_path", ARCHIVES, ids=[a.name for a in ARCHIVES])
def test_archive_unpacks_into_readable_rows_and_simulations(archive_path: Path, tmp_path: Path) -> None:
    n = archive.unpack(archive_path, tmp_path)  # validates every row as it writes it back
    df = store.load(tmp_path)
    assert len(df) == n
    assert df["machine_fingerprint"].notna().all() and df["source_hash"].notna().all()
    sim = permstudy.load_sim(tmp_path)
    assert n or len(sim), "an archive with neither rows nor simulations"
    if len(sim):
        assert sim.groupby(["experiment", "layer", "cache", "threads"]).size().eq(720).all()


def test_pack_then_unpack_gives_the_same_rows_in_the_store(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    # a TVM module measured by exp_a: its tuning record travels with exp_a's rows, not the module itself;
    # the record of a module no packed row measured stays behind
    tvm = json.dumps({"module": str(src / "tvm" / "m.so")})
    written = [store.write_row(src, make_row(experiment=e, candidate_key=f"k{i}",
                                             **({"candidate_options": tvm} if i == 2 else {})))
               for e in ("exp_a", "exp_b") for i in range(3)]  # fmt: skip
    (src / "permutations" / "sim").mkdir(parents=True)
    (src / "permutations" / "sim" / "x.parquet").write_bytes(b"not read here")
    (src / "tvm" / "m.tuning").mkdir(parents=True)
    for f, data in (("m.json", b'{"trials": 2}'), ("m.so", b"ELF"), ("m.tuning/db.json", b"[]"),
                    ("other.json", b"{}")):  # fmt: skip
        (src / "tvm" / f).write_bytes(data)
    out = tmp_path / "a.tar.xz"
    assert archive.pack(src, out, ["exp_a"]) == 3
    with tarfile.open(out) as tar:  # one table per experiment, not a file per row
        assert sorted(tar.getnames()) == ["permutations", "permutations/sim", "permutations/sim/x.parquet",
                                          "rows", "rows/exp_a.parquet", "tvm/m.json"]  # fmt: skip
    store.write_row(dst, make_row(experiment="exp_a", candidate_key="k0", times_ns=[9e9]))  # to be replaced
    assert archive.unpack(out, dst) == 3
    assert store.row_files(dst) == []  # all three in exp_a's compacted table, the older k0 file replaced
    for path in written[:3]:
        assert store.has_row(dst, "exp_a", path.stem)
        assert store.read_row(dst, "exp_a", path.stem) == store.read_row(src, "exp_a", path.stem)
    a, b = store.load(src, "exp_a"), store.load(dst, "exp_a")
    key = "candidate_key"
    assert (
        a.sort_values(key)
        .drop(columns="times_ns")
        .reset_index(drop=True)
        .equals(b.sort_values(key).drop(columns="times_ns").reset_index(drop=True))
    )
    assert (dst / "permutations" / "sim" / "x.parquet").read_bytes() == b"not read here"
    assert [p.name for p in (dst / "tvm").iterdir()] == ["m.json"]
    assert (dst / "tvm" / "m.json").read_bytes() == b'{"trials": 2}'


def test_unpack_refuses_strays_and_rows_that_fail_the_schema(tmp_path: Path) -> None:
    stray = tmp_path / "stray.tar.xz"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("x")
    with tarfile.open(stray, "w:xz") as tar:
        tar.add(tmp_path / "etc", arcname="etc")
    with pytest.raises(archive.ArchiveError, match="outside rows/permutations"):
        archive.unpack(stray, tmp_path / "out")
    src = tmp_path / "src"
    store.write_row(src, make_row())
    out = tmp_path / "a.tar.xz"
    archive.pack(src, out)
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (table_path,) = (tmp_path / "x" / "rows").glob("*.parquet")
    table = pq.read_table(table_path)
    bad = table.set_column(table.schema.get_field_index("status"), "status", pa.array(["exploded"]))
    pq.write_table(bad, table_path)
    with tarfile.open(out, "w:xz") as tar:
        tar.add(tmp_path / "x" / "rows", arcname="rows")
    with pytest.raises(archive.ArchiveError, match="row 0"):
        archive.unpack(out, tmp_path / "out2")
    with pytest.raises(archive.ArchiveError, match="no rows of experiment"):
        archive.pack(src, tmp_path / "b.tar.xz", ["nope"])
