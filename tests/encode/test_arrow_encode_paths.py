"""The batch encoder's Arrow paths that take the Arrow buffers as they are: a dictionary
(categorical) column written once per batch and chosen per row (``GATHER``), a list of strings
or binaries cut from its buffers (``BYTES_LISTS``), and list<int64> varints written 8 bytes at
a time. Every record is parsed by protobuf and compared with the values Arrow's ``to_pylist``
gives (never with what our encoder writes), on slices of the table (Arrow offsets that do not
start at 0, a dictionary bigger than the batch), compiled and pure Python."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ofindex
from ofindex import EncodeError
from ofindex.decode import FixedLen
from ofindex.encode import encode_columns
from ofindex.encode.columns import plan_columns
from ofindex.encode.framed import BYTES_LISTS, GATHER, VARINT_SPANS
from ofindex.proto import example_pb2, ofrecord_pb2

#: Every varint length of int64, at both edges (the 8-byte stores hold up to 2^56 - 1, the
#: 3-group shortcut up to 2^21 - 1; negatives take ten bytes).
EDGES = [-(2**63), 2**63 - 1, -1, 0, 1, 127, 128, 2**14 - 1, 2**14, 2**21 - 1, 2**21,
         2**28 - 1, 2**28, 2**35, 2**42 - 1, 2**49, 2**56 - 1, 2**56, 2**62, -(2**56)]
ROWS = 60


def _table() -> pa.Table:
    """Dictionary columns with null indices, a null, an empty and an unused value in the
    dictionary; lists of int64 edges, of strings and binaries (empty strings, a 200-byte value,
    non-ASCII) and of lists, with empty and null lists."""
    city = pa.DictionaryArray.from_arrays(
        pa.array([None if k % 7 == 2 else [0, 1, 2, 3, 0][k % 5] for k in range(ROWS)],
                 pa.int8()),
        pa.array(["paris", None, "", "kyōto", "unused"]))
    code = pa.DictionaryArray.from_arrays(
        pa.array([None if k % 6 == 1 else k % 3 for k in range(ROWS)], pa.int32()),
        pa.array([-(2**63), 7, 2**63 - 1], pa.int64()))
    tokens = [None if k % 9 == 4 else [EDGES[(k + j) % len(EDGES)] for j in range(k % 7)]
              for k in range(ROWS)]
    words = ["", "é", "x" * 200, "tag"]
    tags = [None if k % 8 == 3 else [words[(k + j) % 4] for j in range(k % 4)]
            for k in range(ROWS)]
    blobs = [None if k % 10 == 9 else [bytes([k, j]) * j for j in range(k % 3)]
             for k in range(ROWS)]
    nested = [None if k % 11 == 6 else [[EDGES[(k + i) % len(EDGES)]] * i for i in range(k % 4)]
              for k in range(ROWS)]
    return pa.table({"city": city, "code": code,
                     "tokens": pa.array(tokens, pa.list_(pa.int64())),
                     "tags": pa.array(tags, pa.list_(pa.string())),
                     "blobs": pa.array(blobs, pa.large_list(pa.binary())),
                     "nested": pa.array(nested, pa.list_(pa.list_(pa.int64())))})


def _features(record: bytes, kind: str) -> dict[str, tuple[str, list]]:
    message = (example_pb2.Example.FromString(record).features if kind == "example"
               else ofrecord_pb2.OFRecord.FromString(record))
    out = {}
    for name, feature in message.feature.items():
        which = feature.WhichOneof("kind")
        out[name] = (which, list(getattr(feature, which).value))
    return out


def _expected(row: dict) -> dict[str, tuple[str, list]]:
    """The features protobuf must find for one row (by docs/writing.md's mapping)."""
    want: dict[str, tuple[str, list]] = {}
    if row["city"] is not None:
        want["city"] = ("bytes_list", [row["city"].encode()])
    if row["code"] is not None:
        want["code"] = ("int64_list", [row["code"]])
    for name, encode in (("tokens", None), ("tags", str.encode), ("blobs", bytes)):
        if row[name] is None:
            want[f"{name}/null"] = ("int64_list", [1])
        else:
            want[name] = ("int64_list" if encode is None else "bytes_list",
                          [v if encode is None else encode(v) for v in row[name]])
    if row["nested"] is None:
        want["nested/null"] = ("int64_list", [1])
    else:
        want["nested"] = ("int64_list", [v for inner in row["nested"] for v in inner])
        want["nested/lengths_1"] = ("int64_list", [len(inner) for inner in row["nested"]])
    return want


@pytest.mark.parametrize("kind", ["example", "ofrecord"])
def test_arrow_batches_parse_with_protobuf_into_their_values(impl, kind):
    """Whole and sliced (offsets not from 0; slices of 3 rows hold fewer rows than the
    dictionary has values, which are then decoded instead): every record protobuf parses
    holds the row's values, a null cell no feature (a null list its /null mark)."""
    table = _table()
    for start, stop in ((0, ROWS), (5, 45), (13, 16), (57, 60), (0, 1)):
        part = table.slice(start, stop - start)
        records = encode_columns(part, kind=kind)
        assert len(records) == stop - start
        for record, row in zip(records, part.to_pylist(), strict=True):
            assert _features(record, kind) == _expected(row)


def test_the_arrow_buffers_are_taken_as_they_are():
    """A dictionary column is laid out as its dictionary's entries chosen per row (it was
    decoded by a take of every row's value), a list of strings as its Arrow buffers (it was
    copied into each row's list content by numpy first), list<int64> as varint spans."""
    table = _table()
    plan = plan_columns(table)
    modes = {column.key: column.mode for column in plan.columns}
    assert modes[b"city"] == GATHER and modes[b"code"] == GATHER
    assert modes[b"tags"] == BYTES_LISTS and modes[b"blobs"] == BYTES_LISTS
    assert modes[b"tokens"] == VARINT_SPANS
    tags = next(c for c in plan.columns if c.key == b"tags")
    assert np.shares_memory(np.frombuffer(tags.data[2], np.uint8), np.frombuffer(
        table.column("tags").chunk(0).values.buffers()[2], np.uint8))


def test_a_dictionary_value_the_spec_refuses_names_the_row_holding_it(impl):
    """A null in the dictionary, used by row 2: the spec's FixedLen without a default refuses
    record first + 2 (not the dictionary's entry 1); unused, it refuses nothing."""
    spec = {"city": FixedLen((), "bytes")}
    used = pa.table({"city": pa.DictionaryArray.from_arrays(
        pa.array([0, 0, 1, 0], pa.int8()), pa.array(["a", None]))})
    with pytest.raises(EncodeError, match="feature 'city' of record 12"):
        encode_columns(used, spec, first_record=10)
    unused = pa.table({"city": pa.DictionaryArray.from_arrays(
        pa.array([0, 0, 0, 0], pa.int8()), pa.array(["a", None]))})
    records = encode_columns(unused, spec)
    assert [_features(r, "example") for r in records] == [{"city": ("bytes_list", [b"a"])}] * 4


@pytest.mark.parametrize("format", ["tfrecord", "ofrecord"])
def test_convert_of_parquet_with_dictionaries_and_lists(impl, tmp_path, format):
    """``ofindex.convert`` from Parquet (row groups of 16, batches of 7: dictionaries shared
    between batches, batches cut inside row groups) writes every row's values (Parquet
    holds no null inside a dictionary: the rows' nulls are null indices there)."""
    table = _table()
    table = table.set_column(0, "city", table.column("city").cast(pa.string())
                             .dictionary_encode())
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=16)
    ofindex.convert(str(tmp_path / "t.parquet"), tmp_path / "out", format=format,
                    batch_size=7, shard_records=25)
    kind = "ofrecord" if format == "ofrecord" else "example"
    with ofindex.open(str(tmp_path / "out")) as ds:
        records = [ds[k] for k in range(len(ds))]
    assert len(records) == ROWS
    for record, row in zip(records, table.to_pylist(), strict=True):
        assert _features(record, kind) == _expected(row)


def _chunked_table() -> pa.Table:
    """:func:`_table` as three record batches (every column of three chunks), its city
    column dictionary-encoded strings (as Parquet keeps them) and a float64 score with nulls."""
    table = _table()
    table = table.set_column(0, "city", table.column("city").cast(pa.string())
                             .dictionary_encode())
    score = pa.array([None if k % 5 == 3 else k / 7 for k in range(ROWS)], pa.float64())
    table = table.append_column("score", score)
    return pa.concat_tables([table.slice(0, 17), table.slice(17, 30), table.slice(47)])


@pytest.mark.parametrize("format", ["tfrecord", "ofrecord"])
def test_convert_in_batches_sized_by_bytes_writes_what_small_batches_write(impl, tmp_path,
                                                                          format):
    """Parquet and a Hugging Face dataset of chunked columns (lists, nulls, dictionaries,
    large_list, nested and empty lists) converted in the default batches (sized by bytes:
    the whole file at once) and in batches of 7 (dictionaries bigger than a batch decoded,
    batches cut inside row groups and chunks): the same records byte for byte, each holding
    its row's values as protobuf parses them."""
    import datasets

    table = _chunked_table()
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=16)
    sources = {"parquet": str(tmp_path / "t.parquet"), "hf": datasets.Dataset(table)}
    kind = "ofrecord" if format == "ofrecord" else "example"
    for name, source in sources.items():
        written = []
        for batch_size in (None, 7):
            out = tmp_path / f"{name}-{batch_size}"
            ofindex.convert(source, out, format=format, batch_size=batch_size,
                            shard_records=25)
            with ofindex.open(str(out)) as ds:
                written.append([ds[k] for k in range(len(ds))])
        assert written[0] == written[1], name
        assert len(written[0]) == ROWS
        for record, row in zip(written[0], table.to_pylist(), strict=True):
            features = _features(record, kind)
            score = features.pop("score", None)
            assert features == _expected(row), name
            if row["score"] is None:
                assert score is None
            elif kind == "example":  # float64 exact: the raw doubles in a bytes value
                assert score == ("bytes_list", [np.float64(row["score"]).tobytes()])
            else:
                assert score == ("double_list", [row["score"]])


def test_default_batches_of_parquet_hold_4_mib_of_columns(tmp_path):
    """Without batch_size, Parquet is read in batches of about 4 MiB of its uncompressed
    columns: 100,000 rows of one int64 (8 bytes a row) in batches of 65,536 (the most), rows
    of 4 KB in batches of 1,024; bigger rows in batches of about 16 MiB (rows of ~100 KB:
    167), at least 16 (rows of 4 MB); a batch_size given is kept."""
    from ofindex.convert.sources import batch_records, parquet_source

    pq.write_table(pa.table({"id": np.arange(100_000)}), tmp_path / "ids.parquet")
    sizes = [len(b) for b in parquet_source([str(tmp_path / "ids.parquet")], None).batches()]
    assert sizes == [65_536, 100_000 - 65_536]
    sizes = [len(b) for b in parquet_source([str(tmp_path / "ids.parquet")], 40_000).batches()]
    assert sizes == [40_000, 40_000, 20_000]
    assert batch_records(None, 4096) == 1024
    assert batch_records(None, 100_000) == (16 << 20) // 100_000 == 167
    assert batch_records(None, 4_000_000) == 16
    assert batch_records(None, 256) == 16 * 1024
    assert batch_records(None, 0) == 1024
    assert batch_records(5, 1024) == 5


def test_the_convert_command_leaves_the_batches_to_the_source_unless_told(tmp_path):
    """`ofindex convert` without --batch-size passes no batch size (Parquet in its 4 MiB
    batches, as in Python), with it the number given; the records are the same."""
    from ofindex.cli.parser import build_parser

    parser = build_parser()
    assert parser.parse_args(["convert", "in.parquet", "out"]).batch_size is None
    assert parser.parse_args(["convert", "in.parquet", "out", "--batch-size", "7"]
                             ).batch_size == 7
    pq.write_table(pa.table({"id": np.arange(3000)}), tmp_path / "ids.parquet")
    written = {}
    for name, extra in (("default", []), ("sevens", ["--batch-size", "7"])):
        done = subprocess.run([sys.executable, "-m", "ofindex", "convert",
                               str(tmp_path / "ids.parquet"), str(tmp_path / name), *extra],
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        with ofindex.open(str(tmp_path / name)) as ds:
            written[name] = ds[0:len(ds)]
    assert written["default"] == written["sevens"] and len(written["default"]) == 3000


def _spanning_nulls() -> pa.Table:
    """List columns whose null lists span values in their offsets (Arrow allows it; pyarrow's
    ``from_arrays`` with a mask keeps them), a nested list's among them: the values under a
    null list belong to no row."""
    offsets = pa.array([0, 2, 5, 5, 9, 10, 13], pa.int32())
    mask = pa.array([False, True, False, False, True, False])
    tokens = pa.ListArray.from_arrays(offsets, pa.array(
        [1, 2, 300, 2**21, -1, 7, 8, 9, 10, 2**56, 11, 12, 13], pa.int64()), mask=mask)
    tags = pa.ListArray.from_arrays(offsets, pa.array(
        ["a", "bb", "hidden", "x" * 20, "é", "c", "d", "e", "f", "gone", "g", "h", "i"]),
        mask=mask)
    inner = pa.ListArray.from_arrays(pa.array([0, 1, 3, 3, 6, 7, 8, 10, 10, 11, 12, 13, 13,
                                               13], pa.int32()),
                                     pa.array(range(13), pa.int64()))
    nested = pa.ListArray.from_arrays(offsets, inner, mask=mask)
    return pa.table({"tokens": tokens, "tags": tags, "nested": nested})


@pytest.mark.parametrize("kind", ["example", "ofrecord"])
def test_null_lists_whose_offsets_span_values_write_no_values(impl, kind):
    """A null list that spans values in its offsets (whole and sliced) writes its /null mark
    and none of those values; the rows after it keep their own values (protobuf's parse
    against Arrow's to_pylist)."""
    table = _spanning_nulls()
    assert table.column("tokens").chunk(0).flatten().to_pylist() == [
        1, 2, 7, 8, 9, 10, 11, 12, 13]  # the spans under the nulls are there, and skipped
    for start, stop in ((0, 6), (1, 5), (2, 6), (4, 5)):
        part = table.slice(start, stop - start)
        records = encode_columns(part, kind=kind)
        for record, row in zip(records, part.to_pylist(), strict=True):
            want = {}
            for name, encode in (("tokens", None), ("tags", str.encode)):
                if row[name] is None:
                    want[f"{name}/null"] = ("int64_list", [1])
                else:
                    want[name] = ("int64_list" if encode is None else "bytes_list",
                                  [v if encode is None else encode(v) for v in row[name]])
            got = _features(record, kind)
            assert {name: got[name] for name in want} == want
            if row["nested"] is None:
                assert got["nested/null"] == ("int64_list", [1])
            else:
                assert got.get("nested", ("int64_list", []))[1] == [
                    v for inner in row["nested"] for v in inner]
                assert got["nested/lengths_1"][1] == [len(inner) for inner in row["nested"]]
