"""ShardedWriter: shards of a target size, final names at close, sidecars made while writing
(no scan), the manifest, tf.data / protobuf reading what it writes, parallel streams, buckets,
and no half dataset after an error, Ctrl-C or a killed process."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ofindex
from ofindex.decode import BatchDecoder, FixedLen, decode_example
from ofindex.errors import DatasetExistsError, EncodeError, IncompleteDatasetError, OfindexError
from ofindex.proto import ofrecord_pb2
from ofindex.write import ShardedWriter
from tests.kit import paths
from tests.kit.helpers import manifest_of, need, sidecar_of, sigint_as_a_terminal

SPEC = {"image": FixedLen((4, 4), "float32"), "label": FixedLen((), "int64")}


def _columns(n, start=0):
    rng = np.random.default_rng(start)
    return {"image": rng.standard_normal((n, 4, 4)).astype(np.float32),
            "label": np.arange(start, start + n)}


def _visible(directory):
    return sorted(f for f in os.listdir(directory) if not f.startswith("."))


def test_shards_by_records_named_of_n_with_sidecars_and_manifest(tmp_path):
    out = tmp_path / "out"
    with ShardedWriter(out, shard_records=30, spec=SPEC) as w:
        w.write_columns(_columns(100))
    names = [f"part-{k:05d}-of-00004" for k in range(4)]
    assert w.summary.records == 100 and w.summary.shards == 4
    assert [os.path.basename(f) for f in w.summary.files] == names
    assert [n for n in _visible(out) if n.startswith("part-") and "." not in n] == names
    for name in names:
        assert os.path.exists(sidecar_of(out / name))
    assert os.path.exists(manifest_of(out))
    ds = ofindex.open(str(out))
    assert [s.records for s in ds.shards] == [30, 30, 30, 10]
    back = BatchDecoder(SPEC)(ds[:])
    np.testing.assert_array_equal(back["image"], _columns(100)["image"])
    assert back["label"].tolist() == list(range(100))
    assert "100 records in 4 shards" in str(w.summary)


def test_shards_by_bytes(tmp_path):
    records = [bytes([k % 256]) * 100 for k in range(50)]
    with ShardedWriter(tmp_path / "b", shard_bytes=1000) as w:   # 116 bytes framed each
        w.write_many(records)
    ds = ofindex.open(str(tmp_path / "b"))
    assert [s.records for s in ds.shards] == [8] * 6 + [2]
    assert all(s.bytes <= 1000 for s in ds.shards)
    assert ds[:] == records


def test_close_scans_nothing(tmp_path, monkeypatch):
    """The sidecars come from the writers' offsets: close reads no data file."""
    from ofindex.index import build_file

    def no_scan(*args, **kwargs):
        raise AssertionError("a data file was scanned")

    monkeypatch.setattr(build_file, "scan_file", no_scan)
    with ShardedWriter(tmp_path / "n", shard_records=10) as w:
        w.write_many(b"r%d" % i for i in range(35))
    assert len(ofindex.open(str(tmp_path / "n"))) == 35


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_tf_data_reads_every_shard(tmp_path, compression):
    tf = need("tensorflow")
    with ShardedWriter(tmp_path / "t", shard_records=25, compression=compression) as w:
        for k in range(60):
            w.write({"label": k, "name": f"n{k}"})
    files = w.summary.files
    assert len(files) == 3
    data = tf.data.TFRecordDataset(files, compression_type={None: "", "gzip": "GZIP",
                                                            "zlib": "ZLIB"}[compression])
    parsed = [tf.io.parse_single_example(r, {"label": tf.io.FixedLenFeature([], tf.int64),
                                             "name": tf.io.FixedLenFeature([], tf.string)})
              for r in data]
    assert [int(p["label"]) for p in parsed] == list(range(60))
    assert parsed[7]["name"].numpy() == b"n7"
    ds = ofindex.open(str(tmp_path / "t"))
    assert [decode_example(r)["label"].item() for r in ds[:]] == list(range(60))


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_tf_data_parses_columns_with_the_inferred_spec(tmp_path, compression):
    """Columns of every type written by the compiled batch encoder: tf.data reads every
    shard, and tf.io.parse_example with the feature_description inferred by ofindex.schema
    gives the columns back."""
    tf = need("tensorflow")
    from ofindex.schema import infer_spec, to_tf

    rng = np.random.default_rng(11)
    n = 90
    edges = np.array([0, 1, -1, 127, 128, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)], np.int64)
    columns = {"image": rng.standard_normal((n, 3, 2)).astype(np.float32),
               "double": rng.standard_normal((n, 2)),          # float64: float_list
               "ids": np.tile(edges, (n, 1)), "small": rng.integers(0, 9, (n, 3)).astype(
                   np.uint8), "flag": rng.integers(0, 2, n).astype(bool),
               "jpeg": [rng.bytes(int(k)) for k in rng.integers(0, 300, n)],
               "name": [f"ñame-{k}" for k in range(n)], "empty": np.zeros((n, 0), np.float32)}
    with ShardedWriter(tmp_path / "t", shard_records=40, compression=compression) as w:
        w.write_columns(columns)
    assert len(w.summary.files) == 3
    schema = infer_spec(ofindex.open(str(tmp_path / "t")), sample=n)
    description = to_tf(schema)
    data = tf.data.TFRecordDataset(w.summary.files, compression_type={
        None: "", "gzip": "GZIP", "zlib": "ZLIB"}[compression])
    parsed = tf.io.parse_example(tf.stack(list(data)), description)
    # a record holds values, not shapes: the inferred spec has 6 values where we wrote (3, 2)
    np.testing.assert_array_equal(parsed["image"].numpy(), columns["image"].reshape(n, 6))
    np.testing.assert_array_equal(parsed["double"].numpy(),
                                  columns["double"].astype(np.float32))
    assert parsed["ids"].numpy().tolist() == columns["ids"].tolist()
    assert parsed["small"].numpy().tolist() == columns["small"].tolist()
    assert parsed["flag"].numpy().tolist() == columns["flag"].astype(int).tolist()
    assert parsed["jpeg"].numpy().tolist() == columns["jpeg"]
    assert [v.decode() for v in parsed["name"].numpy().tolist()] == columns["name"]
    assert "empty" not in description or parsed["empty"].shape[-1] == 0


def test_ofrecord_shards_are_oneflow_framed_and_parse_with_protobuf(tmp_path):
    with ShardedWriter(tmp_path / "of", "ofrecord", shard_records=4) as w:
        for k in range(10):
            w.write({"label": np.array([k], np.int32), "x": np.array([0.5, k], np.float64)})
    got = []
    for f in w.summary.files:
        with open(f, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos < len(data):  # OneFlow's framing: int64 length, payload
            (n,) = struct.unpack_from("<q", data, pos)
            rec = ofrecord_pb2.OFRecord.FromString(data[pos + 8 : pos + 8 + n])
            got.append((list(rec.feature["label"].int32_list.value),
                        list(rec.feature["x"].double_list.value)))
            pos += 8 + n
    assert got == [([k], [0.5, float(k)]) for k in range(10)]


def _files_of(directory):
    """``{name: (data bytes, sidecar bytes after its header)}`` of a dataset's shards (the
    header holds the file's stamp: its time)."""
    from ofindex.formats.sidecar_header import HEADER_SIZE

    out = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), "rb") as f, \
                    open(sidecar_of(os.path.join(directory, name)), "rb") as g:
                out[name] = (f.read(), g.read()[HEADER_SIZE:])
    return out


@pytest.mark.parametrize("fmt,compression,sizes", [
    ("tfrecord", None, {"shard_bytes": 3000}), ("tfrecord", "gzip", {"shard_records": 70}),
    ("ofrecord", None, {"shard_records": 70, "shard_bytes": 2500}),
    ("ofrecord", "zlib", {"shard_bytes": 40_000})])
def test_columns_write_the_files_records_one_by_one_write(tmp_path, fmt, compression, sizes):
    """write_columns (records encoded and framed a block at a time, compiled) writes the
    same shards, sidecars (offsets, seek points, checksums) and manifest bytes as writing
    each row's features with write()."""
    rng = np.random.default_rng(5)
    n = 300
    columns = {"image": rng.random((n, 6), dtype=np.float32),
               "label": rng.integers(-2, 1000, n),
               "jpeg": [rng.bytes(int(k)) for k in rng.integers(0, 600, n)],
               "name": [f"r{k}" if k % 3 else None for k in range(n)]}
    kw = {"format": fmt, "compression": compression, **sizes}
    with ShardedWriter(tmp_path / "by-columns", **kw) as w:
        for start in range(0, n, 128):
            w.write_columns({k: v[start:start + 128] for k, v in columns.items()})
    with ShardedWriter(tmp_path / "one-by-one", **kw) as w:
        for k in range(n):
            w.write({name: column[k] for name, column in columns.items()})
    ours, theirs = _files_of(tmp_path / "by-columns"), _files_of(tmp_path / "one-by-one")
    assert len(ours) > 2 and ours == theirs
    a, b = ofindex.open(str(tmp_path / "by-columns")), ofindex.open(str(tmp_path / "one-by-one"))
    assert [s.records for s in a.shards] == [s.records for s in b.shards]
    assert a[:] == b[:]


def test_column_streams_on_threads_write_one_dataset(tmp_path):
    """Streams encoding columns on threads (the compiled encoder releases the GIL) make one
    dataset; every record is there once, in stream order."""
    with ShardedWriter(tmp_path / "p", shard_records=50, spec=SPEC) as w:
        streams = [w.stream() for _ in range(3)]

        def work(k):
            for part in range(4):
                streams[k].write_columns(_columns(40, start=1000 * k + 40 * part))
            streams[k].close()

        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    labels = BatchDecoder(SPEC)(ofindex.open(str(tmp_path / "p"))[:])["label"].tolist()
    assert labels == [1000 * k + i for k in range(3) for i in range(160)]


def test_parallel_streams_one_dataset(tmp_path):
    with ShardedWriter(tmp_path / "p", shard_records=7) as w:
        streams = [w.stream() for _ in range(4)]

        def work(k):
            streams[k].write_many(b"%d-%d" % (k, i) for i in range(20))
            streams[k].close()

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ds = ofindex.open(str(tmp_path / "p"))
    # stream 0 (the writer's own) wrote nothing; the others' shards follow in stream order
    assert ds[:] == [b"%d-%d" % (k, i) for k in range(4) for i in range(20)]
    assert len(ds.shards) == 4 * 3


def test_a_stream_that_failed_midway_publishes_nothing(tmp_path, monkeypatch):
    """A storage error in one stream's write (its thread's error swallowed by the caller)
    leaves that stream's records incomplete: close() refuses to publish and removes every
    stream's files."""
    from ofindex.write.writer import Writer

    real = Writer.write_framed
    calls = []

    def failing(self, *args):
        calls.append(threading.current_thread().name)
        if threading.current_thread().name == "second" and len(calls) > 2:
            raise OSError(28, "No space left on device")
        return real(self, *args)

    monkeypatch.setattr(Writer, "write_framed", failing)
    out = tmp_path / "f"
    with pytest.raises(OfindexError, match=r"stream 2 failed while writing.*No space left"), \
            ShardedWriter(out, shard_records=5, spec=SPEC) as w:
        streams = [w.stream(), w.stream()]

        def work(k):
            try:
                for part in range(4):
                    streams[k].write_columns(_columns(10, start=100 * k + 10 * part))
            except OSError:
                pass  # swallowed: the writer must still notice

        threads = [threading.Thread(target=work, args=(k,), name=name)
                   for k, name in enumerate(("first", "second"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert _left_behind(str(out)) == []


def test_empty_dataset_is_one_empty_shard(tmp_path):
    with ShardedWriter(tmp_path / "e"):
        pass
    ds = ofindex.open(str(tmp_path / "e"))
    assert len(ds) == 0 and len(ds.shards) == 1


def test_existing_dataset_is_never_written_over(tmp_path):
    with ShardedWriter(tmp_path / "x") as w:
        w.write(b"old")
    with pytest.raises(DatasetExistsError, match="already holds data files"):
        ShardedWriter(tmp_path / "x")
    assert ofindex.open(str(tmp_path / "x"))[:] == [b"old"]


def test_an_error_while_writing_leaves_nothing(tmp_path):
    out = tmp_path / "err"
    with (pytest.raises(EncodeError, match="feature 'label' of record 3"),
          ShardedWriter(out, shard_records=2, spec=SPEC) as w):
        w.write_columns(_columns(3))
        w.write({"image": np.zeros(16), "label": 1.5})
    assert os.listdir(out) == []
    with pytest.raises(OfindexError):
        ofindex.open(str(out))


def test_bad_arguments():
    with pytest.raises(ValueError, match="must name each shard differently"):
        ShardedWriter("/tmp/never-made", pattern="data")
    with pytest.raises(ValueError, match="shard_records must be at least 1"):
        ShardedWriter("/tmp/never-made", shard_records=0)


def test_bucket(bucket_backend):
    options = bucket_backend.storage_options
    url = bucket_backend.prefix()
    with ShardedWriter(url, shard_records=5, storage_options=options) as w:
        w.write_many(b"rec %d" % i for i in range(12))
    assert w.summary.files == [f"{url}/part-{k:05d}-of-00003" for k in range(3)]
    ds = ofindex.open(url, storage_options=options)
    assert ds[:] == [b"rec %d" % i for i in range(12)]
    assert ds[[11, 0]] == [b"rec 11", b"rec 0"]
    # columns: blocks encoded into one reused buffer, each handed to the bucket's file
    blobs = [bytes([k]) * (3 << 20) for k in range(4)]   # one 3 MiB record per block
    with ShardedWriter(url + "-columns", shard_records=3, storage_options=options) as w:
        w.write_columns({"blob": blobs, "k": np.arange(4)})
    got = ofindex.open(url + "-columns", storage_options=options)[:]
    assert [decode_example(r)["blob"][0] for r in got] == blobs


def _outcome(directory, records):
    """What a reader finds: ``None`` (nothing opens) or the full dataset's record count."""
    try:
        ds = ofindex.open(directory)
    except (OfindexError, FileNotFoundError):
        return None
    with ds:
        got = ds[:]
    assert [decode_example(r)["i"].item() for r in got] == list(range(records)), (
        "a dataset that opens is the whole dataset")
    return len(got)


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 2.0, 3.0])
def test_killed_writer_leaves_no_half_dataset(tmp_path, delay):
    """SIGKILL at points spread over a writer's life (seeded delays, writing and publishing
    2000 records in 200 shards): the directory opens as the whole dataset or not at all."""
    out = str(tmp_path / "k")
    with subprocess.Popen([sys.executable, os.path.join(paths.KIT, "write_worker.py"), out, "2000",
                           "10"], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": paths.pythonpath()}) as proc:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(delay)
        proc.kill()
        proc.wait()
    assert _outcome(out, 2000) in (None, 2000)


def _interrupted_write(directory: str) -> None:
    with pytest.raises(KeyboardInterrupt), ShardedWriter(directory, shard_records=10) as writer:
        for i in range(35):
            writer.write(f"record {i}".encode())


def _left_behind(directory: str) -> list[str]:
    index_dir = directory.rstrip("/") + ".ofindex"
    found = os.listdir(directory)
    if os.path.isdir(index_dir):
        found += [f"index: {name}" for name in os.listdir(index_dir)]
    return found


def test_ctrl_c_while_a_shard_file_is_being_created_leaves_nothing(tmp_path, monkeypatch):
    # the interrupt lands after a shard's temporary file exists and before its stream holds
    # the shard's writer (the window test_ctrl_c_removes_what_was_written hit 1 run in 6)
    from ofindex.storage.local import LocalStorage

    opened = []
    real_open = LocalStorage.open_write

    def open_then_interrupt(self, path):
        handle = real_open(self, path)
        opened.append(path)
        if len(opened) == 3:
            handle.close()
            raise KeyboardInterrupt
        return handle

    monkeypatch.setattr(LocalStorage, "open_write", open_then_interrupt)
    out = str(tmp_path / "c")
    _interrupted_write(out)
    assert os.path.exists(opened[-1]) is False and _left_behind(out) == []


def test_ctrl_c_while_a_shard_is_renamed_into_place_leaves_nothing(tmp_path, monkeypatch):
    # the interrupt lands inside Writer.close, before its temporary file is renamed
    real_replace = os.replace
    calls = []

    def interrupted_replace(src, dst, *args, **kwargs):
        if str(dst).endswith(".writing"):  # a shard's data file, not a sidecar
            calls.append(dst)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", interrupted_replace)
    out = str(tmp_path / "c")
    _interrupted_write(out)
    assert _left_behind(out) == []


@pytest.mark.parametrize("step", ["rename_data", "move_sidecar", "build_index"])
def test_ctrl_c_while_the_dataset_is_published_leaves_nothing(tmp_path, monkeypatch, step):
    """An interrupt after some shards got their final names (or their sidecars moved, or
    before the manifest) removes the renamed ones too: published whole or not at all."""
    from ofindex.write import sharded

    real = getattr(sharded, step)
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2 or step == "build_index":
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sharded, step, interrupted)
    out = str(tmp_path / "c")
    with pytest.raises(KeyboardInterrupt), ShardedWriter(out, shard_records=10) as writer:
        writer.write_many(f"record {i}".encode() for i in range(35))
    assert _left_behind(out) == []
    assert _outcome(out, 0) is None


def test_ctrl_c_inside_a_writers_close_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_replace = os.replace

    def interrupted_replace(src, dst, *args, **kwargs):
        if str(dst).endswith("part-0.tfrecord"):
            raise KeyboardInterrupt
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", interrupted_replace)
    (tmp_path / "d").mkdir()
    path = str(tmp_path / "d" / "part-0.tfrecord")
    with pytest.raises(KeyboardInterrupt), ofindex.Writer(path) as writer:
        writer.write(b"one")
    assert os.listdir(tmp_path / "d") == []


def test_an_aborted_writer_removes_only_its_own_files(tmp_path):
    out = tmp_path / "c"
    out.mkdir()
    (out / ".notes").write_text("someone else's")
    (out / ".ffffffff-0-00000.writing").write_text("another writer's token")
    with pytest.raises(KeyboardInterrupt), ShardedWriter(str(out), shard_records=10) as writer:
        writer.write(b"one")
        raise KeyboardInterrupt
    assert sorted(os.listdir(out)) == [".ffffffff-0-00000.writing", ".notes"]


def test_ctrl_c_removes_what_was_written(tmp_path):
    out = str(tmp_path / "c")
    # far more records than can be written before the signal: a fast machine wrote all of
    # 200,000 within the half second (exit 0, nothing interrupted) in one fresh-clone run
    with subprocess.Popen([sys.executable, os.path.join(paths.KIT, "write_worker.py"), out,
                           "1000000000", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHONPATH": paths.pythonpath()},
                          preexec_fn=sigint_as_a_terminal) as proc:
        try:
            assert proc.stdout.readline().strip() == "started"
            time.sleep(0.5)
            assert proc.poll() is None, "the writer must still be writing when interrupted"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:  # never leave a writer of a billion records behind
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert os.listdir(out) == []
    assert _outcome(out, 0) is None


# -- a publication that did not finish never opens as a dataset --------------------------------

def _run_writer(out, *extra, records=1000, per_shard=100):
    """Run write_worker.py to the end (or to the SIGKILL its STEP:N asks for); its exit code."""
    done = subprocess.run([sys.executable, os.path.join(paths.KIT, "write_worker.py"), out,
                           str(records), str(per_shard), *extra], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": paths.pythonpath()}, timeout=300)
    return done.returncode


def _cli(capsys, *argv):
    from ofindex.cli.main import main

    code = main(list(argv))
    return code, capsys.readouterr().err


def _tree(*directories):
    return {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in directories}


def _refused_everywhere(out, capsys):
    """Every way to open or build ``out`` refuses it, names the way out, and writes nothing."""
    index_dir = out + ".ofindex"
    before = _tree(out, index_dir)
    for call in (lambda: ofindex.open(out), lambda: ofindex.open(out, build_missing=True),
                 lambda: ofindex.open(out, rebuild_stale=True), lambda: ofindex.build_index(out),
                 lambda: ofindex.open(out, manifest=False, build_missing=True)):
        with pytest.raises(IncompleteDatasetError) as refused:
            call()
        message = str(refused.value)
        assert "did not finish" in message and "run the writer again" in message, message
        assert "allow_missing_shards=True" in message, message
    for command in ("build", "info", "head", "verify"):
        code, err = _cli(capsys, command, out)
        assert code == 1 and "did not finish" in err and "--allow-missing-shards" in err, err
        assert "Traceback" not in err
    assert _tree(out, index_dir) == before, "a refused open or build wrote nothing"


def _shard_of(record):
    return decode_example(record)["i"].item() // 100


@pytest.mark.parametrize("pattern", [None, "shard-{shard:03d}.tfrecord"])
@pytest.mark.parametrize("kill_at", ["rename_data:2", "rename_data:5", "rename_data:10",
                                     "move_sidecar:1", "move_sidecar:6", "release:1"])
def test_a_writer_killed_while_publishing_never_opens_as_a_dataset(tmp_path, capsys, kill_at,
                                                                   pattern):
    """SIGKILL at points of the publication (1,000 records in 10 shards): the directory is
    refused by open (with or without build_missing / rebuild_stale), build_index and the CLI,
    whatever the shards' names; allow_missing_shards reads what is there with a warning; a
    rerun of the writer is refused until the partial output is removed."""
    out = str(tmp_path / "k")
    assert _run_writer(out, kill_at, *([pattern] if pattern else [])) == -signal.SIGKILL
    _refused_everywhere(out, capsys)
    # accepted explicitly: what is there reads right, and says what is missing
    with pytest.warns(ofindex.MissingShardsWarning, match="did not finish"):
        ds = ofindex.open(out, build_missing=True, allow_missing_shards=True)
    with ds:
        assert all(_shard_of(r) == k for k, shard in enumerate(ds.shards)
                   for r in ds[sum(s.records for s in ds.shards[:k]):][:shard.records])
    assert not os.path.exists(manifest_of(out)), "a set lacking shards gets no manifest"
    # the writer's rerun is refused, and says what to remove
    with pytest.raises(DatasetExistsError, match="no longer running, remove"):
        ShardedWriter(out)
    import shutil

    shutil.rmtree(out)
    shutil.rmtree(out + ".ofindex", ignore_errors=True)
    assert _run_writer(out) == 0
    assert _outcome(out, 1000) == 1000


def test_a_writer_killed_after_its_last_rename_leaves_the_whole_dataset(tmp_path):
    # killed before the manifest, once every shard and sidecar is in place (the claim
    # dropped): the directory holds the whole dataset, which opens without its manifest
    out = str(tmp_path / "k")
    assert _run_writer(out, "build_index:1") == -signal.SIGKILL
    assert not os.path.exists(manifest_of(out))
    assert _outcome(out, 1000) == 1000


def test_a_writer_killed_before_renaming_leaves_a_directory_that_says_so(tmp_path, capsys):
    # the claim is taken, nothing renamed: only hidden files and the claim
    out = str(tmp_path / "k")
    assert _run_writer(out, "rename_data:1") == -signal.SIGKILL
    for call in (lambda: ofindex.open(out), lambda: ofindex.build_index(out)):
        with pytest.raises(IncompleteDatasetError, match="did not finish"):
            call()
    code, err = _cli(capsys, "build", out)
    assert code == 1 and "did not finish" in err


def _names_of_n(directory, present, count=10):
    os.makedirs(directory, exist_ok=True)
    for k in present:
        with ofindex.Writer(os.path.join(directory, f"part-{k:05d}-of-{count:05d}")) as w:
            w.write(b"shard %d" % k)


def test_names_that_say_of_n_with_shards_missing_are_refused(tmp_path, capsys):
    out = str(tmp_path / "copy")
    _names_of_n(out, [0, 1, 2, 5])
    for call in (lambda: ofindex.open(out), lambda: ofindex.open(out, build_missing=True),
                 lambda: ofindex.build_index(out), lambda: ofindex.open(out + "/part-*")):
        with pytest.raises(IncompleteDatasetError,
                           match=r"6 of the 10 shards .* are missing \(part-00003-of-00010, "
                                 r"part-00004-of-00010, part-00006-of-00010, "
                                 r"part-00007-of-00010, part-00008-of-00010 and 1 more\)"):
            call()
    code, err = _cli(capsys, "info", out)
    assert code == 1 and "--allow-missing-shards" in err
    # accepted explicitly: built (no manifest) and opened, with a warning each time
    with pytest.warns(ofindex.MissingShardsWarning, match="6 of the 10"):
        ofindex.build_index(out, allow_missing_shards=True)
    assert not os.path.exists(manifest_of(out))
    with pytest.warns(ofindex.MissingShardsWarning):
        assert ofindex.open(out, allow_missing_shards=True)[:] == [b"shard 0", b"shard 1",
                                                                    b"shard 2", b"shard 5"]
    code, err = _cli(capsys, "info", out, "--allow-missing-shards")
    assert code == 0 and "6 of the 10" in err
    # a file named on its own is the caller's choice
    assert ofindex.open(out + "/part-00005-of-00010")[:] == [b"shard 5"]


def test_a_manifest_of_a_set_lacking_shards_is_refused(tmp_path):
    # such a manifest (ofindex 0.2 built them over half-published directories) still lists
    # only what was there: its names are checked as a listing's are
    out = str(tmp_path / "old")
    _names_of_n(out, [0, 1, 3], count=4)
    ofindex.build_index([os.path.join(out, f"part-{k:05d}-of-00004") for k in (0, 1, 3)],
                        manifest=True)
    assert os.path.exists(manifest_of(out))
    with pytest.raises(IncompleteDatasetError, match="1 of the 4 shards"):
        ofindex.open(out)
    with pytest.warns(ofindex.MissingShardsWarning):
        assert len(ofindex.open(out, allow_missing_shards=True)) == 3


def test_whole_sets_of_n_open(tmp_path):
    _names_of_n(str(tmp_path / "zero"), range(3), count=3)
    one = tmp_path / "one"
    one.mkdir()
    for k in (1, 2):  # numbered from 1
        with ofindex.Writer(str(one / f"x-{k}-of-2.tfrecord")) as w:
            w.write(b"%d" % k)
    for directory in (tmp_path / "zero", one):
        ofindex.build_index(str(directory))
        assert len(ofindex.open(str(directory))) in (2, 3)


# -- every shard name is checked before anything is published ---------------------------------

def test_a_pattern_that_repeats_a_name_later_publishes_nothing(tmp_path):
    out = str(tmp_path / "p")
    # shards 0 and 1 differ; shard 10's name is shard 1's ("1" is "10" cut to one character)
    with (pytest.raises(ValueError, match=r"names shards 1 and 10 of 12 alike \('part-1'\)"),
          ShardedWriter(out, shard_records=1, pattern="part-{shard!s:.1}") as w):
        w.write_many(b"%d" % i for i in range(12))
    assert _left_behind(out) == []


# -- two writers publishing into one directory: exactly one wins ------------------------------

def test_two_writers_racing_into_one_directory_one_wins_whole(tmp_path):
    rounds = 30
    root = str(tmp_path)
    workers = [subprocess.Popen([sys.executable, os.path.join(paths.KIT, "race_worker.py"), root,
                                 str(rounds), who, other], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": paths.pythonpath()})
               for who, other in (("a", "b"), ("b", "a"))]
    outcomes = {}
    for who, proc in zip("ab", workers, strict=True):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outcomes[who] = dict(line.split() for line in out.splitlines())
    for r in range(rounds):
        winners = [who for who in "ab" if outcomes[who][str(r)] == "won"]
        assert len(winners) == 1, f"round {r}: {outcomes['a'][str(r)]}, {outcomes['b'][str(r)]}"
        directory = os.path.join(root, f"d{r}")
        assert ofindex.open(directory)[:] == [f"{winners[0]}-{i}".encode() for i in range(20)]
        assert sorted(os.listdir(directory)) == [f"part-{k:05d}-of-00004" for k in range(4)]
        assert sorted(os.listdir(directory + ".ofindex")) == sorted(
            [f"part-{k:05d}-of-00004.ofidx" for k in range(4)] + ["ofindex-manifest.json"])


def test_a_claimed_bucket_directory_is_refused_and_left_as_it_was(bucket_backend):
    # the claim is a conditional PUT (If-None-Match: * on S3, ifGenerationMatch=0 on GCS), read
    # back
    from ofindex.storage import Storages
    from ofindex.write.publish import claim, release

    options = bucket_backend.storage_options
    url = bucket_backend.prefix()
    storage, path = Storages(options).for_url(url)
    first = ShardedWriter(url, shard_records=5, storage_options=options)
    first.write_many(b"first %d" % i for i in range(12))
    held = claim(storage, path, "feedbeef")  # another writer is publishing meanwhile
    with pytest.raises(DatasetExistsError, match="another writer"):
        first.close()
    assert storage.expand(path + "/*") == [path + "/.ofindex-publishing"]
    with pytest.raises(IncompleteDatasetError, match="did not finish"):
        ofindex.open(url + "/", storage_options=options)
    release(storage, held)


_KILLED_WRITER = """
import sys
import ofindex
with ofindex.Writer(sys.argv[1]) as writer:
    writer.write(b"x" * 1000)
    print("started", flush=True)
    while True:
        writer.write(b"x" * 1000)
"""


def test_a_killed_writer_leaves_no_file_a_data_glob_lists(tmp_path):
    """A Writer killed outright leaves its temporary file, hidden and free of the data file's
    name: no glob for data files lists it (fsspec's and tf.io.gfile's globs match hidden
    names too), nor does ofindex's listing."""
    import fsspec

    data = tmp_path / "data"
    data.mkdir()
    target = data / "train-00000-of-00001.tfrecord"
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(target)],
                          stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": paths.pythonpath()}) as proc:
        assert proc.stdout.readline().strip() == "started"
        proc.kill()
        proc.wait()
    (left,) = os.listdir(data)  # what the killed writer left
    assert left.startswith(".") and "train" not in left and left.endswith(".tmp")
    local = fsspec.filesystem("file")
    for pattern in ("*.tfrecord*", "train*", "*-of-*", "*.tfrecord", "*00000*"):
        assert local.glob(str(data / pattern)) == [], pattern
    with pytest.raises(ofindex.DataFileNotFoundError):
        ofindex.open(str(data))


def test_each_shards_sidecar_is_flushed_to_the_disk_once(tmp_path, monkeypatch):
    """Publishing renames a local shard's sidecar beside it (it was flushed when the shard was
    finished; it was read and written again, with a second fsync a shard): 3 shards, 3
    sidecar fsyncs and the manifest's; the dataset opens with the sidecars as they are."""
    from ofindex.storage import local

    flushed = []
    real = os.fsync

    def counting(fd):
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(local.os, "fsync", counting)
    out = str(tmp_path / "out")
    with ShardedWriter(out, shard_records=10) as writer:
        writer.write_many(b"record %d" % i for i in range(30))
    assert len(flushed) == 4, flushed
    assert sum(".ofindex" in path and "manifest" not in path for path in flushed) == 3
    monkeypatch.undo()
    with ofindex.open(out) as ds:
        assert [ds[k] for k in range(30)] == [b"record %d" % i for i in range(30)]


def test_shards_finished_between_column_batches_close_on_a_helper_thread(tmp_path,
                                                                          monkeypatch):
    """write_columns finishes a full local shard (its sidecar written and flushed, its file
    renamed) on a helper thread while the next one is written; the last shard closes on the
    writing thread; the dataset holds every record in order."""
    from ofindex.write import writer as writer_module

    threads = []
    real = writer_module.Writer.close

    def noted(self):
        threads.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(writer_module.Writer, "close", noted)
    out = str(tmp_path / "out")
    with ShardedWriter(out, shard_records=100) as writer:
        for start in range(0, 450, 150):
            writer.write_columns({"i": np.arange(start, start + 150)})
    assert threads == ["ofindex-shard-close"] * 4 + [threading.current_thread().name]
    assert _outcome(out, 450) == 450


@pytest.mark.parametrize("interrupt", [OSError, KeyboardInterrupt])
def test_a_shard_that_fails_to_close_behind_publishes_nothing(tmp_path, monkeypatch,
                                                              interrupt):
    """The second shard's close fails on the helper thread (a full disk, an interrupt): the
    error is raised by the writer, and nothing is left: no shard, sidecar or temporary
    file."""
    from ofindex.write import writer as writer_module

    closed = []
    real = writer_module.Writer.close

    def failing(self):
        closed.append(self)
        if len(closed) == 2:
            raise interrupt("the second shard's close failed")
        return real(self)

    monkeypatch.setattr(writer_module.Writer, "close", failing)
    out = str(tmp_path / "out")
    with pytest.raises(interrupt, match="second shard"), \
            ShardedWriter(out, shard_records=100) as writer:
        for start in range(0, 450, 150):
            writer.write_columns({"i": np.arange(start, start + 150)})
    assert _left_behind(out) == []
    assert _outcome(out, 0) is None
