"""The split planner pruned by a column predicate (issue 50): given the records to keep (what
``ds.positions(**conditions)`` returns, or ``where=`` conditions), every split holds only kept
records and knows which (positions, runs), splits and partitions without one are dropped, and
partitions are balanced by kept records. Checked against a brute-force scan: of a mask over
synthetic layouts (hypothesis, derandomized), and of the decoded records of a real dataset
with columns, read back through the partitions."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex.decode import FixedLen, VarLen, decode_example
from ofindex.encode import encode_example
from ofindex.errors import ColumnNotFoundError
from ofindex.integrations._arrow_tables import PartitionRead
from ofindex.planning.splits import (
    FileLayout,
    FileOffsets,
    partition_dataset,
    partition_positions,
    plan_dataset,
    plan_splits,
)


def _layout(url: str, sizes: list[int], seek_every: int | None) -> FileLayout:
    """A file of records of ``sizes`` bytes (16 of framing each); with ``seek_every``, a
    compressed one with a seek point before every ``seek_every``-th record (its compressed
    offsets a third of the uncompressed)."""
    framed = np.array(sizes, dtype=np.int64) + 16
    starts = np.concatenate([[0], np.cumsum(framed)[:-1]]).astype(np.int64)
    end = int(framed.sum())
    if seek_every is None:
        offsets = FileOffsets(starts, end)
        return FileLayout(url, len(sizes), end, lambda: offsets, compressed=False)
    out = starts[::seek_every] if len(sizes) else np.zeros(1, np.int64)
    offsets = FileOffsets(starts, end, out, out // 3, out // 3 + 1)
    return FileLayout(url, len(sizes), end // 3 + 1, lambda: offsets, compressed=True)


@st.composite
def _files_and_mask(draw):
    files, mask = [], []
    for k in range(draw(st.integers(1, 5))):
        n = draw(st.integers(0, 60))
        sizes = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
        seek = draw(st.one_of(st.none(), st.integers(1, 12)))
        files.append(_layout(f"f{k}", sizes, seek))
        mask += draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return files, np.array(mask, dtype=bool)


def _kept(plan) -> list[int]:
    """Every record the plan's splits read, in order, with each split's own checks."""
    got = []
    for part in plan.partitions:
        assert part, "an empty partition was kept"
        for split in part:
            positions = split.global_positions()
            assert len(positions) == split.count >= 1
            assert positions[0] == split.start and positions[-1] == split.stop - 1  # tight
            runs = split.runs()
            assert np.concatenate([np.arange(a, b) for a, b in runs]).tolist() == (
                positions - split.start + split.first_record).tolist()
            got.extend(positions.tolist())
    return got


@settings(max_examples=150)
@given(_files_and_mask(), st.integers(1, 9), st.sampled_from(["records", "bytes"]),
       st.integers(1, 4))
def test_a_pruned_plan_reads_exactly_the_kept_records(drawn, count, balance, min_records):
    files, mask = drawn
    selected = np.flatnonzero(mask)
    plan = plan_splits(files, count, balance, min_records=min_records, selected=selected)
    assert _kept(plan) == selected.tolist()  # every kept record once, in order; no other
    assert plan.selected == plan.count == len(selected) and plan.records == len(mask)
    assert len(plan) <= count
    counts = [sum(s.count for s in part) for part in plan.partitions]
    assert all(c >= min_records for c in counts[:-1])
    first = np.concatenate([[0], np.cumsum([f.records for f in files])])
    for part in plan.partitions:
        for split in part:
            layout, offsets = files[split.file], files[split.file].load()
            assert split.start == first[split.file] + split.first_record
            a = int(offsets.starts[split.first_record])
            b = (int(offsets.starts[split.last_record + 1])
                 if split.last_record + 1 < layout.records else offsets.end)
            if not offsets.compressed:  # the bytes of its first to its last kept record
                assert split.byte_range == (a, b)
            else:  # from the seek point before the first to the one after the last
                assert split.byte_range[0] <= a // 3 and split.byte_range[1] >= b // 3
    # a compressed file is cut only at its seek points: between two partitions reading it,
    # a seek point lies after the one's last record and at or before the other's first
    for left, right in itertools.pairwise(plan.partitions):
        a, b = left[-1], right[0]
        offsets = files[b.file].load()
        if a.file == b.file and offsets.compressed:
            starts = offsets.starts
            assert any(int(starts[a.last_record]) < int(p) <= int(starts[b.first_record])
                       for p in offsets.seek_out)
    if balance == "records" and min_records == 1 and all(not f.load().compressed
                                                          for f in files):
        if len(selected) >= count:
            assert len(plan) == count
        assert not counts or max(counts) - min(counts) <= 1  # balanced by kept records


def test_a_selection_of_nothing_plans_nothing_and_bad_selections_are_refused():
    files = [_layout("a", [10] * 20, None), _layout("b", [10] * 20, 4)]
    empty = plan_splits(files, 4, selected=np.zeros(0, dtype=np.int64))
    assert len(empty) == 0 and empty.count == 0 and empty.divisions() == [40]
    for bad in ([3, 2], [1, 1], [-1], [40], [[1, 2]], [0.5]):
        with pytest.raises(ValueError, match="selected"):
            plan_splits(files, 2, selected=np.array(bad))


def test_splits_without_a_kept_record_are_dropped_and_spans_are_tight():
    files = [_layout(f"f{k}", [100] * 10, None) for k in range(4)]
    # kept: records 2, 3 and 7 of file 0, none of files 1 and 2, record 5 of file 3
    plan = plan_splits(files, 1, selected=np.array([2, 3, 7, 35]))
    (part,) = plan.partitions
    assert [(s.file, s.first_record, s.last_record) for s in part] == [(0, 2, 7), (3, 5, 5)]
    assert part[0].positions.tolist() == [2, 3, 7] and part[0].runs().tolist() == [[2, 4],
                                                                                 [7, 8]]
    assert part[1].positions is None  # every record of its span: a plain range
    assert part[0].byte_range == (2 * 116, 8 * 116)
    assert plan.divisions() == [2, 36]
    subset_positions = partition_positions(part)
    assert subset_positions.tolist() == [2, 3, 7, 35]  # numbered in files 0..3
    half = plan_splits(files, 2, selected=np.array([2, 3, 7, 35]))
    assert [sum(s.count for s in p) for p in half] == [2, 2]


NAMES = [b"cat", b"dog", b"eel", b"fox"]


def _features(i: int) -> dict:
    features = {"label": i % 7, "score": (i * 37 % 101) / 100, "name": NAMES[i % 4]}
    if i % 11 == 0:
        del features["score"]  # no value: null
    return features


@pytest.fixture(scope="module", params=[None, "gzip"])
def labelled(request, tmp_path_factory):
    """Four shards (300, 0, 5, 900 records) with columns label, score and name."""
    d = tmp_path_factory.mktemp("where")
    features, at = [], 0
    for k, n in enumerate((300, 0, 5, 900)):
        with ofindex.Writer(str(d / f"part-{k}.tfrecord"), compression=request.param,
                            seek_spacing=2048) as w:
            for i in range(at, at + n):
                features.append(_features(i))
                w.write(encode_example(features[-1]))
        at += n
    ofindex.build_index(str(d), columns=["label", "score", "name"], progress=False,
                        seek_spacing=2048)
    return str(d), features


def _meets(value, condition) -> bool:
    """Whether a record's value meets one condition, written out by hand."""
    if condition is None:
        return value is None
    if isinstance(condition, tuple):
        low, high = condition
        return value is not None and (low is None or value >= low) and (
            high is None or value < high)
    if isinstance(condition, list):
        return any(_meets(value, c) for c in condition)
    return value is not None and value == condition


_CONDITIONS = {
    "label": st.one_of(st.integers(-1, 7), st.lists(st.integers(0, 7), max_size=3),
                       st.tuples(st.one_of(st.none(), st.integers(0, 7)),
                                 st.one_of(st.none(), st.integers(0, 7)))),
    "score": st.one_of(st.none(), st.tuples(st.one_of(st.none(), st.floats(0, 1, width=32)),
                                            st.one_of(st.none(), st.floats(0, 1, width=32)))),
    "name": st.one_of(st.sampled_from([*NAMES, b"gnu"]),
                      st.lists(st.sampled_from(NAMES), max_size=2)),
}


@settings(max_examples=40)
@given(st.dictionaries(st.sampled_from(sorted(_CONDITIONS)), st.just(None), min_size=1)
       .flatmap(lambda keys: st.fixed_dictionaries({k: _CONDITIONS[k] for k in keys})),
       st.integers(1, 6), st.sampled_from(["records", "bytes"]))
def test_where_reads_the_records_a_scan_finds(labelled, conditions, count, balance):
    path, features = labelled
    expected = []
    for i, f in enumerate(features):
        values = {"label": f["label"], "name": f["name"],
                  "score": None if "score" not in f else float(np.float32(f["score"]))}
        if all(_meets(values[c], given) for c, given in conditions.items()):
            expected.append(i)
    with ofindex.open(path) as ds:
        plan = plan_dataset(ds, count, balance, where=conditions)
        assert _kept(plan) == expected
        got_numbers, got_labels = [], []
        for part in plan:
            read = PartitionRead(ds, part)
            assert len(read) == sum(s.count for s in part)
            for table in read.tables(None, with_index=True, rows=64):
                got_numbers += table.column("index").to_pylist()
                got_labels += [decode_example(r)["label"][0]
                               for r in table.column("bytes").to_pylist()]
            subset, lo, hi = partition_dataset(ds, part)  # its shards, skipped ones too
            assert hi - lo == part[-1].stop - part[0].start
            subset.close()
        assert got_numbers == expected
        assert got_labels == [features[i]["label"] for i in expected]


def test_where_on_a_column_not_built_names_the_build(labelled):
    path, _ = labelled
    with ofindex.open(path) as ds, pytest.raises(ColumnNotFoundError,
                                                 match=r"columns=\['width'"):
        plan_dataset(ds, 2, where={"width": 3})
    with ofindex.open(path) as ds:  # no conditions: every record
        assert plan_dataset(ds, 2, where={}).count == len(ds)


_TABLE_SPEC = {"label": FixedLen((), "int64"), "value": FixedLen((), "float32"),
               "payload": FixedLen((), "bytes"), "pair": FixedLen((2,), "bytes")}


_ENCODED_SPEC = {**_TABLE_SPEC, "tokens": VarLen("int64")}


def _table_features(i: int) -> dict:
    return {"label": i % 7, "value": i / 4, "payload": b"p" * (i % 50) + b"%d" % i,
            "pair": [b"a%d" % i, b""], "tokens": list(range(i % 3))}


@pytest.fixture(scope="module")
def table_source(tmp_path_factory):
    """A plain shard of 300 Examples and a GZIP one of 200 (seek points every 2 KiB),
    indexed with the column label."""
    d = tmp_path_factory.mktemp("tables") / "src"
    d.mkdir()
    records = [encode_example(_table_features(i), _ENCODED_SPEC) for i in range(500)]
    with ofindex.Writer(str(d / "part-00000")) as w:
        w.write_many(records[:300])
    with ofindex.Writer(str(d / "part-00001"), compression="gzip", seek_spacing=2048) as w:
        w.write_many(records[300:])
    ofindex.build_index(str(d), manifest=True, columns=["label"], progress=False)
    return str(d)


def _rows(read: PartitionRead, spec: dict, rows: int) -> list[tuple]:
    got = []
    for table in read.tables(spec, with_index=True, rows=rows):
        columns = [table.column(name).to_pylist() for name in ["index", *spec]]
        got += list(zip(*columns, strict=True))
    return got


def _expected(numbers, spec: dict) -> list[tuple]:
    rows = []
    for i in numbers:
        f = _table_features(i)
        rows.append((i, *(float(np.float32(f[n])) if n == "value" else f[n] for n in spec)))
    return rows


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "no-mmap"])
@pytest.mark.parametrize("where", [None, {"label": [1, 5]}], ids=["all", "pruned"])
@pytest.mark.parametrize("spec", [
    _TABLE_SPEC, {"payload": FixedLen((), "bytes"), "label": FixedLen((), "int64")},
    {"label": FixedLen((), "int64"), "tokens": VarLen("int64"), "payload": FixedLen((), "bytes")},
], ids=["shaped-bytes", "scalars", "varlen"])
def test_partition_tables_hold_every_value(table_source, mmap, where, spec):
    """Decoded tables (the Spark, Dask and Beam reads) of plain and GZIP shards, whole and
    pruned, memory-mapped or not: every value of every record read, in order, bytes
    features included (made from packed buffers when the records allow it)."""
    with ofindex.open(table_source, mmap=mmap) as ds:
        plan = plan_dataset(ds, 3, "records", where=where)
        got = [row for part in plan for row in _rows(PartitionRead(ds, part), spec, 64)]
    numbers = [i for i in range(500) if where is None or i % 7 in (1, 5)]
    assert got == _expected(numbers, spec)


def test_partition_tables_of_mapped_shards_decode_out_of_the_maps(table_source, monkeypatch):
    """Records of memory-mapped shards are decoded straight out of the maps: no payload is
    copied into a ``bytes`` object first (the reads that do so are not called)."""
    spec = {"label": FixedLen((), "int64"), "payload": FixedLen((), "bytes")}
    with ofindex.open(os.path.join(table_source, "part-00000")) as ds:
        plain = list(plan_dataset(ds, 3, "records"))

        def copied(*args, **kwargs):
            raise AssertionError("a payload was copied out of the map")

        for name in ("iter_batches", "payloads", "__getitems__", "iter_records"):
            monkeypatch.setattr(ofindex.Dataset, name, copied)
        got = [row for part in plain for row in _rows(PartitionRead(ds, part), spec, 50)]
    assert got == _expected(range(300), spec)


def test_the_plain_shards_of_a_mixed_dataset_decode_out_of_their_maps(table_source,
                                                                      monkeypatch):
    """A dataset of a plain shard and a GZIP one: the partitions of the plain shard read it as
    a plain file (decoded out of its map, nothing copied), those of the GZIP one inflate."""
    spec = {"label": FixedLen((), "int64"), "payload": FixedLen((), "bytes")}
    with ofindex.open(table_source) as ds:
        assert ds.compressed
        plan = list(plan_dataset(ds, 4, "records"))
        plain = [part for part in plan if part[-1].file == 0]
        assert plain and not partition_dataset(ds, plain[0])[0].compressed
        assert partition_dataset(ds, plan[-1])[0].compressed  # the GZIP shard's
        expected = [row for part in plan for row in _rows(PartitionRead(ds, part), spec, 50)]

        def copied(*args, **kwargs):
            raise AssertionError("a payload was copied out of the map")

        for name in ("iter_batches", "payloads", "__getitems__", "iter_records"):
            monkeypatch.setattr(ofindex.Dataset, name, copied)
        got = [row for part in plain for row in _rows(PartitionRead(ds, part), spec, 50)]
    assert got == expected[:len(got)] == _expected(range(len(got)), spec)
    assert len(got) == 300
