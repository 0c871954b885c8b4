"""Lossless in and out: every Hugging Face feature type and every Arrow type of Parquet goes
through ``ofindex.convert`` and back through ``to_hf_dataset`` equal (features, Arrow types,
column order, values, nulls, empty lists, extreme values), as Examples and as OFRecords, by
one mapping (ofindex.encode.arrow_map) whose metadata (ofindex-columns.json) is written
beside the manifest. HF ``Image()`` columns were refused, ``to_hf_dataset`` gave back
``List(binary)`` for strings, float32 for float64, no ClassLabel names and sorted columns."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import os

import numpy as np
import pytest

from tests.kit.helpers import need

datasets = need("datasets")
pa = need("pyarrow")
pq = need("pyarrow.parquet")
Image = need("PIL.Image")

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, decode_example  # noqa: E402
from ofindex.encode import encode_columns  # noqa: E402
from ofindex.encode.arrow_back import arrow_table, decode_spec  # noqa: E402
from ofindex.encode.arrow_map import plan_schema, schema_of  # noqa: E402
from ofindex.errors import EncodeError, ManifestError  # noqa: E402
from ofindex.formats.column_map import COLUMN_MAP_NAME  # noqa: E402
from ofindex.integrations.hf import to_hf_dataset  # noqa: E402

V = datasets.Value
N = 7  # rows; row 1 holds the nulls, row 2 the empty lists, row 6 the extreme values
INTS = {"int8": (-128, 127), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
        "int64": (-(2**63), 2**63 - 1), "uint8": (0, 255), "uint16": (0, 2**16 - 1),
        "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}


def _image(seed: int, fmt: str) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (9 + seed, 7, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def _column(kind: str, values: list) -> list:
    """``values`` for rows 0, 3, 4, 5, 6; row 1 null, row 2 ``kind``'s empty value."""
    out = [*values[:1], None, {"list": [], "str": ""}.get(kind), *values[1:]]
    assert len(out) == N
    return out


def _every_hf_type() -> tuple[datasets.Features, dict]:
    """Features of every type and rows that hold nulls, empty values and extreme values."""
    features, rows = {}, {}
    for dtype, (low, high) in INTS.items():
        features[dtype] = V(dtype)
        rows[dtype] = _column("", [low, 0, 1, low, high])
    features["bool"] = V("bool")
    rows["bool"] = _column("", [True, False, True, False, True])
    features["float16"] = V("float16")
    rows["float16"] = _column("", [0.5, -0.0, 1.5, -65504.0, 65504.0])
    features["float32"] = V("float32")
    rows["float32"] = _column("", [0.1, np.float32(1e-45), float("inf"), -3.4e38, 3.4e38])
    features["float64"] = V("float64")   # exact: 0.1 is no float32, 1e300 beyond it
    rows["float64"] = _column("", [0.1, 5e-324, float("-inf"), float("nan"), 1e300])
    features["string"] = V("string")
    rows["string"] = _column("str", ["a", "é ✓", "x" * 10, "\x00", "long" * 100_000])
    features["large_string"] = V("large_string")
    rows["large_string"] = _column("str", ["b", "", "c", "d", "e"])
    features["binary"] = V("binary")
    rows["binary"] = _column("", [b"\x00\xff", b"", b"z", b"\x01", bytes(300_000)])
    features["large_binary"] = V("large_binary")
    rows["large_binary"] = _column("", [b"q", b"", b"r", b"s", b"t"])
    for unit in ("s", "ms", "us", "ns"):
        features[f"timestamp_{unit}"] = V(f"timestamp[{unit}, tz=Europe/Paris]")
        rows[f"timestamp_{unit}"] = _column("", [datetime.datetime(2024, 2, 29, 12, 30)] * 4
                                            + [datetime.datetime(1900, 1, 1)])
    features["timestamp_naive"] = V("timestamp[us]")
    rows["timestamp_naive"] = _column("", [datetime.datetime(1970, 1, 1)] * 5)
    features["date32"] = V("date32")
    rows["date32"] = _column("", [datetime.date(2000, 1, 1), datetime.date(1969, 12, 31),
                                  datetime.date(1, 1, 1), datetime.date(9999, 12, 31),
                                  datetime.date(2024, 2, 29)])
    features["date64"] = V("date64")
    rows["date64"] = _column("", [datetime.date(2000, 1, 1)] * 5)
    features["time32"] = V("time32[ms]")
    rows["time32"] = _column("", [datetime.time(23, 59, 59, 999000)] * 5)
    features["time64"] = V("time64[ns]")
    rows["time64"] = _column("", [datetime.time(0, 0, 0, 1)] * 5)
    features["duration"] = V("duration[us]")
    rows["duration"] = _column("", [datetime.timedelta(days=-3), datetime.timedelta(0),
                                    datetime.timedelta(microseconds=1),
                                    datetime.timedelta(days=99999),
                                    datetime.timedelta(seconds=1)])
    features["decimal"] = V("decimal128(38, 10)")
    rows["decimal"] = _column("", [decimal.Decimal("-1.5"), decimal.Decimal("0E-10"),
                                   decimal.Decimal("3.1415926535"),
                                   decimal.Decimal("9" * 28 + ".9999999999"),
                                   decimal.Decimal("-0.0000000001")])
    features["label"] = datasets.ClassLabel(names=["cat", "dog", "bird"])
    rows["label"] = _column("", [0, 2, 1, 0, 2])
    features["image"] = datasets.Image()
    rows["image"] = _column("", [{"bytes": _image(0, "JPEG"), "path": "a/0.jpg"},
                                 {"bytes": _image(1, "PNG"), "path": None},
                                 {"bytes": _image(2, "PNG"), "path": "2.png"},
                                 {"bytes": _image(3, "JPEG"), "path": None},
                                 {"bytes": _image(4, "JPEG"), "path": "4.jpg"}])
    features["list"] = datasets.List(V("int64"))
    rows["list"] = _column("list", [[1, 2], [0], [2**63 - 1, -(2**63)], [7] * 1000, [3]])
    features["nested"] = datasets.List(datasets.List(datasets.List(V("string"))))
    rows["nested"] = _column("list", [[[["a"], []], [["b", "c"]]], [[]], [[[]]],
                                      [[["x"] * 3] * 2] * 2, [[["é"]]]])
    features["fixed"] = datasets.List(V("float64"), length=3)
    rows["fixed"] = _column("", [[0.1, 0.2, 0.3]] * 4 + [[1e308, -1e308, 5e-324]])
    features["large_list"] = datasets.LargeList(V("float32"))
    rows["large_list"] = _column("list", [[1.5], [], [2.5, 3.5], [0.0], [-1.0]])
    features["sequence_of_dict"] = datasets.Sequence({"text": V("string"),
                                                      "start": V("int32")})
    rows["sequence_of_dict"] = _column("", [{"text": ["a", "b"], "start": [0, 5]},
                                            {"text": [], "start": []},
                                            {"text": ["c"], "start": [1]},
                                            {"text": ["d"], "start": [2]},
                                            {"text": [], "start": []}])
    features["list_of_dict"] = datasets.List({"x": V("int64"), "y": datasets.List(V("bool"))})
    rows["list_of_dict"] = _column("list", [[{"x": 1, "y": [True]}], [{"x": 2, "y": []}],
                                            [{"x": 3, "y": [False, True]}] * 2, [], []])
    features["array2d"] = datasets.Array2D((None, 3), "float32")
    rows["array2d"] = _column("", [np.ones((2, 3)), np.zeros((0, 3)), np.full((1, 3), 2.0),
                                   np.arange(12.0).reshape(4, 3), np.ones((1, 3))])
    features["array3d"] = datasets.Array3D((2, 2, 2), "uint8")
    rows["array3d"] = _column("", [np.full((2, 2, 2), k, np.uint8) for k in (0, 1, 2, 3, 255)])
    features["array4d"] = datasets.Array4D((1, 2, 1, 2), "int64")
    rows["array4d"] = _column("", [np.full((1, 2, 1, 2), k) for k in (0, -1, 2, 3, 2**62)])
    features["array5d"] = datasets.Array5D((1, 1, 1, 1, 2), "float64")
    rows["array5d"] = _column("", [np.full((1, 1, 1, 1, 2), k) for k in (0.1, 1, 2, 3, 1e300)])
    features["translation"] = datasets.Translation(languages=["de", "en"])
    rows["translation"] = _column("", [{"de": "hallo", "en": "hello"}, {"de": "", "en": "x"},
                                       {"de": "ja", "en": None}, {"de": None, "en": None},
                                       {"de": "a", "en": "b"}])
    features["translations"] = datasets.TranslationVariableLanguages(languages=["de", "en"])
    rows["translations"] = _column("", [{"de": ["a", "b"], "en": "c"}, {"en": "d"},
                                        {"de": "e"}, {"en": "f"}, {"de": "g", "en": "h"}])
    features["nothing"] = V("null")
    rows["nothing"] = [None] * N
    return datasets.Features(features), rows


@pytest.fixture(scope="module")
def every_type():
    features, rows = _every_hf_type()
    # columns made from their Arrow storage: HF's row encoding of an Audio() needs torchcodec,
    # and its type inference refuses 2**64 - 1 before the uint64 feature is applied
    rows["audio"] = _column("", [{"bytes": b"RIFF" + bytes([k]) * 40, "path": f"{k}.wav"}
                                 for k in range(5)])
    features = datasets.Features({**features, "audio": datasets.Audio(sampling_rate=16_000)})
    by_arrow = ("uint64", "audio")
    made = datasets.Dataset.from_dict({k: v for k, v in rows.items() if k not in by_arrow},
                                      features=datasets.Features(
                                          {k: f for k, f in features.items()
                                           if k not in by_arrow}))
    table = made.data.table
    for name in by_arrow:
        table = table.append_column(name, pa.array(rows[name],
                                                   features.arrow_schema.field(name).type))
    table = table.select(list(features))
    return datasets.Dataset(table.replace_schema_metadata(None),
                            info=datasets.DatasetInfo(features=features))


def _assert_equal_tables(got, want):
    """Equal Arrow tables, column by column (NaN equal to NaN, which Arrow's equals is not)."""
    assert got.column_names == want.column_names
    for name in want.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        if pa.types.is_floating(b.type):
            assert a.type == b.type and a.is_null().equals(b.is_null()), name
            np.testing.assert_array_equal(a.fill_null(0).to_numpy(), b.fill_null(0).to_numpy())
        else:
            assert a.equals(b), name


@pytest.mark.parametrize("format", ["tfrecord", "ofrecord"])
@pytest.mark.parametrize("via", ["object", "save_to_disk"])
def test_every_hf_feature_type_comes_back_equal(tmp_path, every_type, format, via, impl):
    """Features (ClassLabel names, Image, Audio, Array2D-5D, Translation …), Arrow types,
    column order and every value (nulls, empty lists, extreme values) after convert and
    to_hf_dataset, over several batches and shards, compiled encoder and pure Python."""
    source = every_type
    if via == "save_to_disk":
        # (datasets' save_to_disk fails on Translation columns: its embedding walks them as
        # dicts, AttributeError 'Translation' object has no attribute 'items')
        every_type = every_type.remove_columns(["translation", "translations"])
        every_type.save_to_disk(str(tmp_path / "saved"))
        source = str(tmp_path / "saved")
        every_type = datasets.load_from_disk(source)   # its image paths cut to base names
    summary = ofindex.convert(source, tmp_path / "out", format=format, batch_size=3,
                              shard_records=4)
    assert summary.records == N and summary.shards == 2
    assert summary.image_formats == {"JPEG": 3, "PNG": 2}
    with ofindex.open(str(tmp_path / "out")) as ds:
        back = to_hf_dataset(ds, batch_size=2)
        picked = to_hf_dataset(ds, indices=[6, 0]).data.table
    _assert_equal_tables(picked, every_type.select([6, 0]).flatten_indices().data.table)
    assert back.features == every_type.features
    assert back.column_names == every_type.column_names
    _assert_equal_tables(back.data.table, every_type.data.table)
    assert back.data.table.schema.equals(every_type.data.table.schema)
    row = back.select_columns(["image", "label", "float64"])   # (Audio decoding: torchcodec)
    assert row[6]["image"].size == (7, 13)   # decoded by HF from the bytes kept as they are
    assert row[6]["label"] == 2 and back.features["label"].int2str(2) == "bird"
    assert np.isnan(row[5]["float64"]) and row[1]["float64"] is None


def test_the_records_follow_the_documented_table(tmp_path, every_type):
    """What a TensorFlow reader sees: float64 as raw doubles (Example) or a double_list
    (OFRecord), strings as UTF-8 bytes, a ClassLabel as its int64 index, an image's bytes as
    written (not re-encoded), nested lists flat with their row lengths, a null list marked,
    uint64 as the int64 of its bits, dates as days, timestamps as counts of their unit."""
    ofindex.convert(every_type, tmp_path / "tf")
    ofindex.convert(every_type, tmp_path / "of", format="ofrecord")
    with ofindex.open(str(tmp_path / "tf")) as ds:
        rows = [decode_example(r) for r in ds[:]]
    assert np.frombuffer(rows[0]["float64"][0], "<f8").tolist() == [0.1]
    assert rows[0]["string"].tolist() == [b"a"] and rows[3]["string"].tolist() == ["é ✓".encode()]
    assert rows[2]["string"].tolist() == [b""] and "string" not in rows[1]
    assert rows[3]["label"].tolist() == [2] and "label" not in rows[1]
    assert rows[0]["image/bytes"][0] == every_type.data.table["image"][0]["bytes"].as_py()
    assert rows[0]["image/path"].tolist() == [b"a/0.jpg"] and "image/path" not in rows[3]
    assert rows[0]["nested"].tolist() == [b"a", b"b", b"c"]
    assert rows[0]["nested/lengths_1"].tolist() == [2, 1]       # lists in each row's list
    assert rows[0]["nested/lengths_2"].tolist() == [1, 0, 2]    # strings in each of those
    assert rows[1]["nested/null"].tolist() == [1] and "nested/null" not in rows[2]
    assert rows[6]["uint64"].tolist() == [-1] and rows[6]["date32"].tolist() == [19782]
    assert rows[0]["timestamp_ms"].tolist() == [1709209800000]  # ms since 1970, UTC (a naive
    # datetime given to a timestamp with a time zone is taken as UTC by Arrow)
    assert rows[0]["sequence_of_dict/text"].tolist() == [b"a", b"b"]
    assert rows[0]["array3d"].dtype == np.int64 and len(rows[0]["array3d"]) == 8
    assert not any(name.startswith("nothing") for row in rows for name in row)
    with ofindex.open(str(tmp_path / "of")) as ds:
        first = ofindex.decode.decode_ofrecord(ds[0])
    assert first["float64"].dtype == np.float64 and first["float64"].tolist() == [0.1]
    assert first["int8"].dtype == np.int32 and first["float32"].dtype == np.float32


def _parquet_table() -> pa.Table:
    """What Parquet files hold: categorical (dictionary) columns, nested lists, structs, maps,
    timestamps, dates, decimals, fixed-size binary, with nulls and empty lists."""
    n = 50
    cats = pa.array([["red", "green", None, "blue"][k % 4] for k in range(n)]).dictionary_encode()
    return pa.table({
        "category": cats,
        "tags": pa.array([None if k % 11 == 5 else [f"t{j}" for j in range(k % 4)]
                          for k in range(n)], pa.list_(pa.string())),
        "matrix": pa.array([[[k, j] for j in range(k % 3)] if k % 13 else None
                            for k in range(n)], pa.list_(pa.list_(pa.int16()))),
        "point": pa.array([{"x": float(k), "y": None if k % 5 == 0 else -k} for k in range(n)],
                          pa.struct([("x", pa.float64()), ("y", pa.int32())])),
        "when": pa.array([None if k == 3 else k * 86_400_000_000 for k in range(n)],
                         pa.timestamp("us", tz="UTC")),
        "day": pa.array([datetime.date(2020, 1, 1) + datetime.timedelta(days=k)
                         for k in range(n)]),
        "price": pa.array([decimal.Decimal(k) / 4 for k in range(n)], pa.decimal128(9, 2)),
        "digest": pa.array([bytes([k]) * 4 for k in range(n)], pa.binary(4)),
        "counts": pa.array([[k] * (k % 3) for k in range(n)], pa.large_list(pa.uint64())),
        "attributes": pa.array([None if k % 17 == 3 else [(f"k{j}", j * k) for j in range(k % 3)]
                                for k in range(n)], pa.map_(pa.string(), pa.int64())),
    })


@pytest.mark.parametrize("format", ["tfrecord", "ofrecord"])
def test_parquet_types_come_back_equal(tmp_path, format):
    """A categorical column was refused ('dictionary<values=string…> cannot be represented'),
    a list of lists and a map too: they convert now, and come back as Parquet holds them."""
    table = _parquet_table()
    kind = "ofrecord" if format == "ofrecord" else "example"
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=16)
    ofindex.convert(str(tmp_path / "t.parquet"), tmp_path / "out", format=format,
                    batch_size=7)
    read = pq.read_table(tmp_path / "t.parquet")
    with ofindex.open(str(tmp_path / "out")) as ds:
        schema = schema_of(ds.column_map()["arrow_schema"])
        nodes = plan_schema(schema, kind)
        decoded = BatchDecoder(decode_spec(nodes), kind)(ds[:])
        with pytest.raises(ValueError, match="column 'attributes' is a map, which a Hugging "
                           "Face dataset cannot hold"):
            to_hf_dataset(ds)
    # the Arrow columns exactly as Parquet holds them (dictionary, map, field names, types)
    assert pa.Table.from_batches([arrow_table(schema, nodes, decoded, len(table))]).equals(read)
    assert schema.equals(read.schema)
    # the Dataset Hugging Face makes of the file (no dictionary type there: strings; no map)
    pq.write_table(table.drop_columns(["attributes"]), tmp_path / "hf.parquet")
    ofindex.convert(str(tmp_path / "hf.parquet"), tmp_path / "hf", format=format)
    want = datasets.Dataset(pq.read_table(tmp_path / "hf.parquet"))
    with ofindex.open(str(tmp_path / "hf")) as ds:
        back = to_hf_dataset(ds)
    assert back.data.table.equals(want.data.table) and back.features == want.features
    assert back.column_names == want.column_names


def test_null_elements_inside_nested_lists_follow_the_policy(tmp_path):
    """A null inside a list of lists or of structs: refused naming the column, the record
    and the element; dropped; filled (values only: a null list or struct is never filled);
    one field of a struct element is never dropped alone."""
    nested = pa.table({"n": pa.array([[[1]], [[2, None]], [None, [3]]],
                                     pa.list_(pa.list_(pa.int64())))})
    with pytest.raises(EncodeError, match="feature 'n' of record 2: element 0 of its list is "
                       "a null list"):
        encode_columns(nested)
    with pytest.raises(EncodeError, match=r"feature 'n' of record 1: element 1 of its list is "
                       r"null, .*nulls='drop'"):
        encode_columns(nested.slice(0, 2))
    dropped = [decode_example(r) for r in encode_columns(nested, nulls="drop")]
    assert [r["n/lengths_1"].tolist() for r in dropped] == [[1], [1], [1]]
    assert [r["n"].tolist() for r in dropped] == [[1], [2], [3]]
    with pytest.raises(EncodeError, match=r"record 2: element 0 of its list is a null list.*"
                       r"fill value replaces null values only"):
        encode_columns(nested, nulls=("fill", 0))
    structs = pa.table({"s": pa.array([[{"a": 1}], [{"a": None}]],
                                      pa.list_(pa.struct([("a", pa.int64())])))})
    with pytest.raises(EncodeError, match=r"record 1.*cannot be left out alone"):
        encode_columns(structs, nulls="drop")
    filled = [decode_example(r) for r in encode_columns(structs, nulls=("fill", -1))]
    assert [r["s/a"].tolist() for r in filled] == [[1], [-1]]


def test_float64_as_float32_is_tensorflows_float_list_when_asked(tmp_path):
    """float64='float32' (--float64 float32) writes TensorFlow's float_list, rounded, and the
    column map says so: to_hf_dataset gives float64 values of the float32 stored."""
    hf = datasets.Dataset.from_dict({"x": [0.1, None, 2.5]})
    ofindex.convert(hf, tmp_path / "out", float64="float32")
    with ofindex.open(str(tmp_path / "out")) as ds:
        assert decode_example(ds[0])["x"].dtype == np.float32
        back = to_hf_dataset(ds)
    assert back.features == hf.features
    assert back["x"] == [float(np.float32(0.1)), None, 2.5]
    with pytest.raises(EncodeError, match="beyond the float32 range"):
        ofindex.convert(datasets.Dataset.from_dict({"x": [1e300]}), tmp_path / "never",
                        float64="float32")
    from ofindex.cli.main import main

    pq.write_table(pa.table({"x": [0.1, 2.5]}), tmp_path / "t.parquet")
    for flag, dtype in (("float32", np.float32), ("exact", object)):
        out = tmp_path / f"cli-{flag}"
        assert main(["convert", str(tmp_path / "t.parquet"), str(out), "--no-progress",
                     "--float64", flag]) == 0
        with ofindex.open(str(out)) as ds:
            assert decode_example(ds[0])["x"].dtype == dtype
            assert to_hf_dataset(ds)["x"] == ([float(np.float32(0.1)), 2.5]
                                              if flag == "float32" else [0.1, 2.5])


def test_the_column_map_is_checked_and_never_describes_another_dataset(tmp_path):
    """A column map changed by hand is refused; a dataset written without Arrow data into a
    directory that held one gets none (the old one would describe other columns);
    to_hf_dataset without a decoder names what to do when there is none."""
    ofindex.convert(datasets.Dataset.from_dict({"a": [1, 2]}), tmp_path / "d")
    path = tmp_path / "d.ofindex" / COLUMN_MAP_NAME
    doc = json.loads(path.read_bytes())
    assert doc["columns"] == [{"name": "a", "kind": "value", "arrow": "int64", "feature": "a",
                               "list": "int64", "encoding": "plain"}]
    path.write_bytes(path.read_bytes().replace(b'"int64"', b'"int32"', 1))
    with ofindex.open(str(tmp_path / "d")) as ds, pytest.raises(ManifestError,
                                                                match="checksum"):
        to_hf_dataset(ds)
    for name in os.listdir(tmp_path / "d"):
        os.remove(tmp_path / "d" / name)
    with ofindex.ShardedWriter(tmp_path / "d") as writer:
        writer.write_columns({"b": np.arange(3)})
    assert not path.exists()
    with ofindex.open(str(tmp_path / "d")) as ds, pytest.raises(ValueError,
                                                                match="no column map"):
        to_hf_dataset(ds)


def test_columns_giving_one_feature_name_are_refused_before_writing(tmp_path):
    table = pa.table({"a": pa.array([{"b": 1}]), "a/b": [2]})
    with pytest.raises(EncodeError, match="columns 'a' and 'a/b' both give the feature 'a/b'"):
        ofindex.convert(datasets.Dataset(table), tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_path_only_image_is_read_into_the_record(tmp_path):
    """An Image() column that names its files by path (bytes null) is embedded as
    save_to_disk does: the records hold the file's bytes, unchanged."""
    data = _image(5, "PNG")
    (tmp_path / "pic.png").write_bytes(data)
    hf = datasets.Dataset.from_dict({"image": [str(tmp_path / "pic.png")]}).cast_column(
        "image", datasets.Image())
    summary = ofindex.convert(hf, tmp_path / "out")
    assert "images: 1 PNG" in str(summary)
    with ofindex.open(str(tmp_path / "out")) as ds:
        assert decode_example(ds[0])["image/bytes"][0] == data
        assert to_hf_dataset(ds)[0]["image"].size == (7, 14)


def test_the_list_modes_of_the_compiled_encoder_equal_its_twin_and_protobuf():
    """Lists of numbers, of strings and of varints are encoded from one buffer a column
    (csrc/encode.c's PACKED_SPANS, LIST_SPANS, VARINT_SPANS): the compiled encoder and its
    pure-Python twin give the same bytes, which protobuf parses to the values; bounds that
    leave the buffer are refused by both."""
    from ofindex.encode.framed import (
        LIST_SPANS,
        NO_FRAMING,
        VARINT_SPANS,
        BatchPlan,
        PlannedColumn,
        encode_block,
    )
    from ofindex.proto import example_pb2
    from tests.kit.helpers import implementation

    rng = np.random.default_rng(3)
    rows = 300
    table = pa.table({
        "ints": pa.array([rng.integers(-(2**63), 2**63 - 1, k % 7).tolist() if k % 11 else
                          None for k in range(rows)], pa.list_(pa.int64())),
        "floats": pa.array([rng.random(k % 5).astype(np.float32).tolist() for k in
                            range(rows)], pa.list_(pa.float32())),
        "words": pa.array([["x" * (k % 200)] * (k % 3) for k in range(rows)],
                          pa.list_(pa.string())),
    })
    got = {}
    for which in ("compiled", "pure-python"):
        with implementation(which):
            got[which] = encode_columns(table)
    assert got["compiled"] == got["pure-python"]
    for row, record in zip(table.to_pylist(), got["compiled"], strict=True):
        message = example_pb2.Example.FromString(record).features.feature
        if row["ints"] is not None:
            assert list(message["ints"].int64_list.value) == row["ints"]
        assert list(message["floats"].float_list.value) == pytest.approx(row["floats"])
        assert [v.decode() for v in message["words"].bytes_list.value] == row["words"]
    for mode, data in ((VARINT_SPANS, (np.array([0, 3], np.int64), np.zeros(2, np.int64))),
                       (LIST_SPANS, (np.array([0, 9], np.int64), b"\n\x01a"))):
        plan = BatchPlan((PlannedColumn(b"k", 3, mode, data),), 1, wrap=True)
        for which in ("compiled", "pure-python"):
            with implementation(which), pytest.raises(ValueError, match=r"outside|bound"):
                encode_block(plan, 0, 1, NO_FRAMING, 1 << 20, bytearray(1 << 20),
                             np.zeros(1, np.int64))


def test_the_column_map_goes_with_a_dataset_in_a_bucket(moto_server, every_type):
    """convert into S3 writes the column map beside the manifest there, and to_hf_dataset of
    the bucket's dataset gives the columns back."""
    from tests.kit import servers

    options = servers.s3_options(moto_server.url)
    url = "s3://ofindex-test/lossless"
    part = every_type.select_columns(["label", "image", "nested", "float64", "decimal"])
    ofindex.convert(part, url, storage_options=options, shard_records=3)
    with ofindex.open(url, storage_options=options) as ds:
        assert ds.column_map()["columns"][0]["name"] == "label"
        back = to_hf_dataset(ds)
    assert back.features == part.features
    _assert_equal_tables(back.data.table, part.flatten_indices().data.table)
