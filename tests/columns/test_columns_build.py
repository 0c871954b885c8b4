"""Column sidecars (issue 48, step 1): ``build_index(columns=...)`` stores chosen scalar
features per record beside the sidecars, in the same scan as the offsets; each column file
decodes (by the format's own reader) to the values protobuf itself gives the records, under
the documented rule (no value: null; several values: refused), for Examples, SequenceExample
contexts and OFRecords, plain and gzip files, on threads, on an executor and remotely; adding
columns later leaves the sidecars untouched."""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil

import numpy as np
import pytest

import ofindex
from ofindex.columns.column_file import column_file_name, decode_column
from ofindex.columns.value_types import ValueType
from ofindex.errors import ColumnError, SidecarError
from ofindex.proto import example_pb2
from tests.kit.columns_data import NAMES, cut, records, write_dataset
from tests.kit.helpers import index_dir_of, read_bytes, sidecar_of


def _column_of(data_dir: str, shard: str, name: str):
    path = os.path.join(index_dir_of(data_dir), column_file_name(shard, name))
    return decode_column(read_bytes(path), path)


def _check(data_dir: str, names: list[str], sizes: list[int], truth: dict, suffix: str = ""):
    """Every column file of the dataset holds the true values, shard by shard."""
    parts = {name: cut(truth[name], sizes) for name in names}
    for k in range(len(sizes)):
        for name in names:
            meta, values, valid = _column_of(data_dir, f"part-{k:03d}{suffix}", name)
            expected = parts[name][k]
            assert meta.header.count == len(expected)
            assert valid.tolist() == [v is not None for v in expected], (name, k)
            if hasattr(values, "tolist") and not isinstance(values, np.ndarray):
                values = np.array([*values.tolist(), None], dtype=object)[:-1]  # packed bytes
            got = [v.item() if isinstance(v, np.generic) else v for v in values[valid]]
            assert got == [v for v in expected if v is not None], (name, k)
            assert meta.header.nulls == sum(v is None for v in expected)


@pytest.mark.parametrize("kind", ["example", "sequence", "ofrecord"])
@pytest.mark.parametrize("compressed", [False, True])
def test_built_columns_hold_what_protobuf_reads(tmp_path, kind, compressed, impl):
    payloads, truth = records(1, 900, kind)
    sizes = [400, 0, 499, 1]
    data = write_dataset(str(tmp_path / "data"), cut(payloads, sizes), kind=kind,
                         compressed=compressed)
    ofindex.build_index(data, columns=list(NAMES))
    _check(data, list(NAMES), sizes, truth, ".gz" if compressed else "")
    meta, _, _ = _column_of(data, "part-000" + (".gz" if compressed else ""), "label")
    assert meta.header.vtype is ValueType.INT64 and meta.header.dictionary  # 5 labels pay
    meta, _, _ = _column_of(data, "part-000" + (".gz" if compressed else ""), "score")
    assert meta.header.vtype is (ValueType.FLOAT64 if kind == "ofrecord" else ValueType.FLOAT32)
    meta, _, _ = _column_of(data, "part-001" + (".gz" if compressed else ""), "label")
    assert meta.header.vtype is ValueType.NONE and meta.header.count == 0


def test_large_records_stream_past_a_block_into_their_columns(tmp_path, monkeypatch):
    """A record larger than the scan's block is streamed (not held in a block): its columns
    come from its streamed payload."""
    from ofindex.index import scan

    def big(i):
        msg = example_pb2.Example()
        msg.features.feature["label"].int64_list.value.append(i)
        msg.features.feature["blob"].bytes_list.value.append(bytes(3000 * (i % 3 + 1)))
        return msg.SerializeToString()

    data = write_dataset(str(tmp_path / "data"), [[big(i) for i in range(9)]], compressed=True)
    original = scan.scan_file
    monkeypatch.setattr(scan, "scan_file", lambda *a, **k: original(*a, **k, block_size=4096))
    ofindex.build_index(data, columns=["label"])
    _, values, valid = _column_of(data, "part-000.gz", "label")
    assert valid.all() and values.tolist() == list(range(9))


def test_build_on_an_executor_writes_the_columns(tmp_path):
    payloads, truth = records(2, 300, "example")
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [100, 200]))
    with cf.ThreadPoolExecutor(2) as pool:
        ofindex.build_index(data, columns=["label", "image/id"], executor=pool)
    _check(data, ["label", "image/id"], [100, 200], truth)


def test_remote_build_takes_the_columns_in_its_scan(tmp_path, moto_server):
    import s3fs

    from tests.kit import servers

    payloads, truth = records(3, 500, "example")
    local = write_dataset(str(tmp_path / "data"), cut(payloads, [250, 250]))
    opts = servers.s3_options(moto_server.url)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    url = f"s3://ofindex-test/{tmp_path.name}-columns/data"
    for name in os.listdir(local):
        fs.pipe_file(f"{url}/{name}"[5:], read_bytes(os.path.join(local, name)))
    ofindex.build_index(url, columns=["label", "score"], storage_options=opts)
    index = str(tmp_path / "got.ofindex")
    os.makedirs(index)
    for k in range(2):
        for name in ("label", "score"):
            file = column_file_name(f"part-{k:03d}", name)
            with open(os.path.join(index, file), "wb") as f:
                f.write(fs.cat_file(f"{url}.ofindex/{file}"[5:]))
    _check(str(tmp_path / "got"), ["label", "score"], [250, 250], truth)


def test_several_values_are_refused_naming_the_record(tmp_path):
    def rec(values):
        msg = example_pb2.Example()
        msg.features.feature["label"].int64_list.value.extend(values)
        return msg.SerializeToString()

    data = write_dataset(str(tmp_path / "data"), [[rec([1]), rec([]), rec([2, 3])]])
    with pytest.raises(ColumnError) as caught:
        ofindex.build_index(data, columns=["label"])
    message = str(caught.value)
    assert "part-000" in message and "record 2" in message and "2 values" in message
    assert "columns=" in message and "--columns" in caught.value.cli_message()


@pytest.mark.parametrize("compressed", [False, True])
def test_columns_are_extracted_in_short_runs_naming_records_across_them(
        tmp_path, monkeypatch, compressed):
    """A shard's records are extracted in runs of at most RUN_CELLS records times columns
    (working memory reused, not a shard's worth taken fresh: 28 -> 13 ms for 125,000
    records), their values joined in order, and a refusal names the record by its number in
    the file, whatever run it is in."""
    from ofindex.columns import collect

    monkeypatch.setattr(collect, "RUN_CELLS", 14)  # runs of 7 records of two columns
    runs = []
    real = collect.extract
    monkeypatch.setattr(collect, "extract", lambda buffer, starts, *args, **kwargs: (
        runs.append(len(starts)) or real(buffer, starts, *args, **kwargs)))
    payloads, truth = records(3, 100)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [60, 40]),
                         compressed=compressed)
    ofindex.build_index(data, columns=["label", "image/id"])
    _check(data, ["label", "image/id"], [60, 40], truth, ".gz" if compressed else "")
    assert sum(runs) == 100 and max(runs) == 7

    def rec(values):
        msg = example_pb2.Example()
        msg.features.feature["label"].int64_list.value.extend(values)
        return msg.SerializeToString()

    bad = write_dataset(str(tmp_path / "bad"), [[rec([k]) for k in range(30)] + [rec([1, 2])]],
                        compressed=compressed)
    with pytest.raises(ColumnError, match="record 30: feature 'label' holds 2 values"):
        ofindex.build_index(bad, columns=["label", "image/id"])


def test_a_feature_of_two_types_is_refused(tmp_path):
    def rec(kind, value):
        msg = example_pb2.Example()
        getattr(msg.features.feature["label"], kind).value.append(value)
        return msg.SerializeToString()

    data = write_dataset(str(tmp_path / "data"),
                         [[rec("int64_list", 1), rec("bytes_list", b"x")]])
    with pytest.raises(ColumnError, match=r"record 1: feature 'label' is stored as bytes"):
        ofindex.build_index(data, columns=["label"])


def test_a_column_named_twice_is_refused(tmp_path):
    data = write_dataset(str(tmp_path / "data"), [records(4, 5)[0]])
    with pytest.raises(ColumnError, match="twice"):
        ofindex.build_index(data, columns=["label", "label"])


def test_adding_columns_leaves_the_sidecars_as_they_are(tmp_path):
    payloads, truth = records(5, 600, "example")
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [300, 300]))
    ofindex.build_index(data)
    sidecars = [sidecar_of(os.path.join(data, f"part-{k:03d}")) for k in range(2)]
    before = [(read_bytes(p), os.stat(p).st_mtime_ns) for p in sidecars]
    results = ofindex.build_index(data, columns=["label"])
    assert all(r.skipped for r in results)
    assert [(read_bytes(p), os.stat(p).st_mtime_ns) for p in sidecars] == before
    _check(data, ["label"], [300, 300], truth)
    first = os.path.join(index_dir_of(data), column_file_name("part-000", "label"))
    stamp = os.stat(first).st_mtime_ns
    ofindex.build_index(data, columns=["label", "score"])  # label fresh: kept, score added
    assert os.stat(first).st_mtime_ns == stamp
    _check(data, ["label", "score"], [300, 300], truth)


def test_a_column_of_another_sidecar_is_rebuilt(tmp_path):
    """A data file rewritten after its columns were built: the next build rebuilds its
    sidecar and its columns (the old column names the old sidecar's body CRC)."""
    payloads, _ = records(6, 200, "example")
    data = write_dataset(str(tmp_path / "data"), [payloads])
    ofindex.build_index(data, columns=["label"])
    other, other_truth = records(7, 150, "example")
    shutil.rmtree(data)
    write_dataset(data, [other])
    ofindex.build_index(data, columns=["label"])
    _check(data, ["label"], [150], other_truth)


def test_a_damaged_column_sidecar_is_refused(tmp_path):
    payloads, _ = records(8, 3000, "example")
    data = write_dataset(str(tmp_path / "data"), [payloads])
    ofindex.build_index(data, columns=["image/id"])
    path = os.path.join(index_dir_of(data), column_file_name("part-000", "image/id"))
    raw = read_bytes(path)
    decode_column(raw, path)
    for at in (3, 20, len(raw) // 2, len(raw) - 1):
        broken = bytearray(raw)
        broken[at] ^= 0x40
        with pytest.raises(SidecarError, match="column sidecar"):
            decode_column(bytes(broken), path)
    with pytest.raises(SidecarError):
        decode_column(raw[:-1], path)
