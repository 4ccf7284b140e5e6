"""Archives of measurements (reports/measured/*.tar.xz): what is packed comes back, in either layout."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import archive, store
from tests.test_store import make_row


def _stored(results: Path, n: int, experiment: str = "exp1") -> None:
    for i in range(n):
        store.write_row(results, make_row(candidate_key=f"k{i}", experiment=experiment), sync=False)


def test_an_archive_of_single_row_files_restores(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _stored(src, 3)
    old = tmp_path / "old.tar.xz"
    with tarfile.open(old, "w:xz") as tar:  # the older layout: rows/<experiment>/<row id>.parquet
        tar.add(src / "rows", arcname="rows")
    assert archive.unpack(old, tmp_path / "dst") == 3
    assert sorted(store.load(tmp_path / "dst")["candidate_key"]) == ["k0", "k1", "k2"]


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
    (src / "parlooper" / "model").mkdir(parents=True)  # the loop-string model's predictions
    (src / "parlooper" / "model" / "p.parquet").write_bytes(b"predicted")
    (src / "tvm" / "m.tuning").mkdir(parents=True)
    for f, data in (("m.json", b'{"trials": 2}'), ("m.so", b"ELF"), ("m.tuning/db.json", b"[]"),
                    ("other.json", b"{}")):  # fmt: skip
        (src / "tvm" / f).write_bytes(data)
    out = tmp_path / "a.tar.xz"
    assert archive.pack(src, out, ["exp_a"]) == 3
    with tarfile.open(out) as tar:  # one table per experiment, not a file per row
        assert sorted(tar.getnames()) == ["parlooper", "parlooper/model", "parlooper/model/p.parquet",
                                          "permutations", "permutations/sim", "permutations/sim/x.parquet",
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
    assert (dst / "parlooper" / "model" / "p.parquet").read_bytes() == b"predicted"
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


@pytest.mark.parametrize("jobs", [1, 2])
def test_archives_unpacked_together_store_as_one_after_the_other(tmp_path: Path, jobs: int) -> None:
    paths = []
    for i, times in enumerate(([9.0, 9.5], [1.0, 2.0])):  # the same row, measured twice
        src = tmp_path / f"src{i}"
        store.write_row(src, make_row(candidate_key="k0", times_ns=times))
        (src / "permutations").mkdir()
        (src / "permutations" / "sim.txt").write_text(f"archive {i}")
        archive.pack(src, tmp_path / f"a{i}.tar.xz")
        paths.append(tmp_path / f"a{i}.tar.xz")
    seen: list[tuple[str, int]] = []
    counts = archive.unpack_all(
        paths, tmp_path / "dst", jobs=jobs, done=lambda p, n: seen.append((p.name, n))
    )
    assert counts == [1, 1] and seen == [("a0.tar.xz", 1), ("a1.tar.xz", 1)]
    df = store.load(tmp_path / "dst")
    assert len(df) == 1 and df["min_ns"].iloc[0] == 1.0  # the later archive's copy
    assert (tmp_path / "dst" / "permutations" / "sim.txt").read_text() == "archive 1"
    stray = tmp_path / "stray.tar.xz"
    with tarfile.open(stray, "w:xz") as tar:
        tar.add(paths[0], arcname="elsewhere.tar.xz")
    with pytest.raises(archive.ArchiveError, match="stray.tar.xz: members outside"):
        archive.unpack_all([paths[0], stray], tmp_path / "dst2", jobs=jobs)
    assert not (tmp_path / "dst2").exists()  # nothing stored from a batch with a bad archive


def _selection(path: Path, sizes: list[dict[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"selected": [{"sizes": s, "pct_peak_median": 90.0} for s in sizes]}))


def test_the_microkernel_selection_travels_with_the_rows_of_its_machine(tmp_path: Path) -> None:
    """A search's space draws from the machine's measured microkernel selection, which a new VM measures
    again (and, on a noisy host, selects otherwise): the archive keeps the selection of each machine whose
    rows it packs, and unpacking restores it where the directory has none, keeping one it has (the
    machine's own measurements) and saying when they differ."""
    src = tmp_path / "src"
    store.write_row(src, make_row())  # machine fpA
    mine, other = [{"w": 4, "k": 3}, {"w": 3, "k": 3}], [{"w": 7, "k": 3}]
    _selection(src / "cache" / "microkernels-fpA-avx2-conv2d.json", mine)
    _selection(src / "cache" / "microkernels-fpB-avx2-conv2d.json", other)  # no packed row measured on fpB
    out = tmp_path / "a.tar.xz"
    archive.pack(src, out)
    with tarfile.open(out) as tar:
        assert [n for n in tar.getnames() if n.startswith("microkernels/")] == [
            "microkernels/microkernels-fpA-avx2-conv2d.json"
        ]
    notes: list[str] = []
    archive.unpack_all([out], tmp_path / "new", say=notes.append)
    restored = tmp_path / "new" / "cache" / "microkernels-fpA-avx2-conv2d.json"
    assert restored.read_bytes() == (src / "cache" / restored.name).read_bytes() and notes == []
    kept = tmp_path / "old" / "cache" / restored.name
    _selection(kept, other)
    archive.unpack_all([out], tmp_path / "old", say=notes.append)
    assert json.loads(kept.read_text())["selected"][0]["sizes"] == {"w": 7, "k": 3}
    assert len(notes) == 1 and "selects other microkernels" in notes[0] and str(kept) in notes[0]
    _selection(kept, mine[::-1])  # the same selection in another order: nothing to say
    archive.unpack_all([out], tmp_path / "old", say=notes.append)
    assert len(notes) == 1


def test_pack_of_one_machine_leaves_another_machines_unpacked_rows_out(tmp_path: Path) -> None:
    # a ported sweep needs the other machine's archive unpacked beside this one's rows
    src = tmp_path / "src"
    for fp in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        for i in range(2):
            store.write_row(src, make_row(experiment="exp", candidate_key=f"{fp}{i}", machine_fingerprint=fp))
    out = tmp_path / "a.tar.xz"
    assert archive.pack(src, out, ["exp"], machine="bbbbbbbbbbbb") == 2
    assert archive.unpack(out, tmp_path / "dst") == 2
    assert set(store.load(tmp_path / "dst")["machine_fingerprint"]) == {"bbbbbbbbbbbb"}
    with pytest.raises(archive.ArchiveError, match="on machine cccccccccccc"):
        archive.pack(src, tmp_path / "b.tar.xz", ["exp"], machine="cccccccccccc")
