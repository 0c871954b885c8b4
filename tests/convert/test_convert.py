"""ofindex.convert and the inspection commands: Parquet, HF datasets, image folders (JPEGs made
with Pillow), npz/npy and record datasets become sharded datasets whose records decode to the
source's values; a column that cannot be stored is refused before anything is written."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

import ofindex
from ofindex.cli.main import main
from ofindex.decode import BatchDecoder, FixedLen, VarLen, decode_example, decode_ofrecord
from ofindex.errors import EncodeError
from tests.kit import paths
from tests.kit.helpers import need, sigint_as_a_terminal


def _all(directory, spec, kind="example"):
    with ofindex.open(str(directory)) as ds:
        return BatchDecoder(spec, kind)(ds[:])


def test_parquet(tmp_path):
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    n = 500
    table = pa.table({"x": np.arange(n, dtype=np.float32), "id": np.arange(n),
                      "name": [f"r{i}" for i in range(n)],
                      "v": pa.array([[1.0] * (i % 3) for i in range(n)],
                                    pa.list_(pa.float32()))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=128)
    summary = ofindex.convert(str(tmp_path / "t.parquet"), tmp_path / "out", shard_records=200,
                              batch_size=100)
    assert summary.records == n and summary.shards == 3
    got = _all(tmp_path / "out", {"x": FixedLen(), "id": FixedLen((), "int64"),
                                  "name": FixedLen((), "bytes"), "v": VarLen()})
    np.testing.assert_array_equal(got["x"], np.arange(n, dtype=np.float32))
    assert got["id"].tolist() == list(range(n)) and got["name"][7] == b"r7"
    assert got["v"].row_lengths.tolist() == [i % 3 for i in range(n)]


def test_a_column_that_cannot_be_stored_is_refused_before_writing(tmp_path):
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    # every Arrow type Parquet holds is mapped (tests/encode/test_hf_lossless.py); two columns that
    # would write one feature cannot be stored
    clash = pa.table({"a": pa.array([{"b": 1}]), "a/b": [2]})
    pq.write_table(clash, tmp_path / "bad.parquet")
    with pytest.raises(EncodeError, match="columns 'a' and 'a/b' both give the feature"):
        ofindex.convert(str(tmp_path / "bad.parquet"), tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_hf_dataset_object_and_saved_directory(tmp_path):
    datasets = need("datasets")
    hf = datasets.Dataset.from_dict({"text": ["a", "bb", "ccc"], "label": [0, 1, 0],
                                     "emb": [[0.5, 1.5]] * 3})
    ofindex.convert(hf, tmp_path / "obj")
    hf.save_to_disk(str(tmp_path / "saved"))
    ofindex.convert(str(tmp_path / "saved"), tmp_path / "disk")
    # float64 values in an Example: each row's doubles, exact, in one bytes value
    spec = {"text": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
            "emb": FixedLen((), "bytes")}
    for out in ("obj", "disk"):
        got = _all(tmp_path / out, spec)
        assert got["text"].tolist() == [b"a", b"bb", b"ccc"] and got["label"].tolist() == [0, 1, 0]
        assert [np.frombuffer(v, "<f8").tolist() for v in got["emb"]] == [[0.5, 1.5]] * 3


def test_image_folder_with_jpegs(tmp_path):
    image = need("PIL.Image")
    root = tmp_path / "images"
    made = {}
    for cls in ("dog", "cat"):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            buf = io.BytesIO()
            image.new("RGB", (8 + k, 8), (k * 40, 0, 0)).save(buf, format="JPEG")
            (root / cls / f"{k}.jpg").write_bytes(buf.getvalue())
            made[(cls, f"{k}.jpg")] = buf.getvalue()
    (root / "cat" / "notes.txt").write_text("not an image")
    summary = ofindex.convert(str(root), tmp_path / "out", format="ofrecord")
    assert summary.records == 6
    with ofindex.open(str(tmp_path / "out")) as ds:
        rows = [decode_ofrecord(r) for r in ds[:]]
    got = {(r["class"][0].decode(), r["filename"][0].decode()): (r["image"][0], r["label"][0])
           for r in rows}
    assert {k: v[0] for k, v in got.items()} == made
    assert got[("cat", "0.jpg")][1] == 0 and got[("dog", "2.jpg")][1] == 1  # sorted classes
    decoded = image.open(io.BytesIO(got[("dog", "2.jpg")][0]))
    assert decoded.size == (10, 8)
    assert summary.image_formats == {"JPEG": 6}


def test_an_image_folder_of_pngs_and_jpegs_says_which_formats_it_wrote(tmp_path, capsys):
    """convert accepted PNGs into an image folder dataset and said nothing of them (the image
    stage then refused them as 'not a JPEG'): the summary counts each format written."""
    image = need("PIL.Image")
    root = tmp_path / "images"
    for cls, fmt, count in (("a", "PNG", 2), ("b", "JPEG", 3), ("c", "GIF", 1)):
        (root / cls).mkdir(parents=True)
        for k in range(count):
            image.new("RGB", (4, 4)).save(root / cls / f"{k}.{fmt.lower()}", format=fmt)
    summary = ofindex.convert(str(root), tmp_path / "out")
    assert summary.image_formats == {"PNG": 2, "JPEG": 3, "GIF": 1}
    assert str(summary).endswith("; images: 3 JPEG, 2 PNG, 1 GIF")
    assert main(["convert", str(root), str(tmp_path / "cli"), "--no-progress"]) == 0
    assert "images: 3 JPEG, 2 PNG, 1 GIF" in capsys.readouterr().out


def test_npz_and_npy(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.arange(30, dtype=np.float32).reshape(10, 3),
             y=np.arange(10))
    ofindex.convert(str(tmp_path / "a.npz"), tmp_path / "z", batch_size=4)
    got = _all(tmp_path / "z", {"x": FixedLen(3), "y": FixedLen((), "int64")})
    assert got["x"].tolist() == np.arange(30).reshape(10, 3).tolist()
    np.save(tmp_path / "feat.npy", np.ones((5, 2), np.int64))
    ofindex.convert(str(tmp_path / "feat.npy"), tmp_path / "n")
    assert _all(tmp_path / "n", {"feat": FixedLen(2, "int64")})["feat"].sum() == 10
    np.savez(tmp_path / "bad.npz", x=np.zeros(3), y=np.zeros(4))
    with pytest.raises(EncodeError, match="arrays of different lengths"):
        ofindex.convert(str(tmp_path / "bad.npz"), tmp_path / "never")


def test_record_datasets_reshard_recompress_and_change_framing(tmp_path):
    with ofindex.ShardedWriter(tmp_path / "src", shard_records=7) as w:
        for k in range(30):
            w.write({"k": k, "f": np.float32(k) / 2})
    ofindex.convert(str(tmp_path / "src"), tmp_path / "of", format="ofrecord",
                    shard_records=10, compression="gzip")
    with ofindex.open(str(tmp_path / "of")) as ds:
        assert len(ds.shards) == 3 and ds.format is ofindex.RecordFormat.OFRECORD
        assert [decode_ofrecord(r)["k"][0] for r in ds[:]] == list(range(30))
    ofindex.convert(str(tmp_path / "of"), tmp_path / "back")
    with ofindex.open(str(tmp_path / "back")) as ds:
        assert [decode_example(r)["f"][0] for r in ds[:]] == [k / 2 for k in range(30)]


def test_sequence_examples_with_feature_lists_are_not_cut_down_to_ofrecords(tmp_path, capsys):
    """An OFRecord has no feature lists: converting SequenceExamples that have some would drop
    them without a word (an Example's parser skips field 2), so it is refused, naming the
    record, and nothing is written; one with only a context converts whole."""
    from ofindex.encode import encode_sequence_example

    with ofindex.ShardedWriter(tmp_path / "seq", shard_records=4) as w:
        for k in range(6):
            lists = {"steps": [[k, k + 1]] * (k % 3 + 1)} if k >= 4 else {}
            w.write(encode_sequence_example({"id": k}, lists))
    with pytest.raises(EncodeError, match=r"record 4 of the source is a tf\.train\."
                       "SequenceExample with feature lists") as caught:
        ofindex.convert(str(tmp_path / "seq"), tmp_path / "of", format="ofrecord")
    assert "format='tfrecord'" in str(caught.value)
    assert not os.path.exists(tmp_path / "of")
    assert main(["convert", str(tmp_path / "seq"), str(tmp_path / "of"), "--to",
                 "ofrecord"]) == 1
    assert "keep TFRecord (--to tfrecord)" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "of")
    with ofindex.ShardedWriter(tmp_path / "ctx", shard_records=4) as w:
        for k in range(3):
            w.write(encode_sequence_example({"id": k}, {}))
    ofindex.convert(str(tmp_path / "ctx"), tmp_path / "ctx-of", format="ofrecord")
    with ofindex.open(str(tmp_path / "ctx-of")) as ds:
        assert [decode_ofrecord(r)["id"].tolist() for r in ds[:]] == [[0], [1], [2]]


def test_cli_schema_head_stats_convert(tmp_path, capsys):
    with ofindex.ShardedWriter(tmp_path / "d", shard_records=40) as w:
        for k in range(100):
            w.write({"x": np.full(3, k, np.float32), "label": k})
    d = str(tmp_path / "d")
    assert main(["schema", d, "--style", "python"]) == 0
    code = capsys.readouterr().out
    space: dict = {}
    exec(code, space)
    assert space["spec"] == {"x": FixedLen(3), "label": FixedLen((), "int64")}
    assert main(["schema", d, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "example"
    assert main(["info", d, "--json", "--schema", "64"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 100 and info["schema"]["kind"] == "example"
    assert info["schema"]["sampled"] == 64
    assert sorted(info["schema"]["features"]) == ["label", "x"]
    assert main(["info", d, "--json"]) == 0
    assert "schema" not in json.loads(capsys.readouterr().out)
    assert main(["info", d, "--schema"]) == 0
    text = capsys.readouterr().out
    assert "records: 100" in text and "schema (100 records sampled):" in text
    assert "'label': FixedLen((), 'int64')" in text and "'x': FixedLen((3,), 'float32')" in text
    assert main(["head", d, "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- record") == 2 and "label" in out
    assert main(["stats", d, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["records"] == 100 and stats["shards"] == 3
    assert stats["features"]["label"]["present"] == 1.0
    assert main(["convert", d, str(tmp_path / "c"), "--shard-records", "50",
                 "--no-progress"]) == 0
    assert "100 records in 2 shards" in capsys.readouterr().out
    assert main(["convert", d, str(tmp_path / "c")]) == 1   # never over a dataset
    assert "already holds data files" in capsys.readouterr().err
    assert os.path.exists(tmp_path / "c")


# --- an interrupted conversion leaves nothing that opens --------------------------------------

def _parquet_ids(path, n):
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    table = pa.table({"i": np.arange(n), "pad": pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(n * 32, np.float32)), 32)})
    pq.write_table(table, path, row_group_size=500)


def _what_opens(directory, n):
    """``None`` when nothing opens, else the record count of the whole dataset (a dataset
    that opens must hold every record, in order)."""
    from ofindex.errors import OfindexError

    try:
        ds = ofindex.open(str(directory))
    except (OfindexError, FileNotFoundError):
        return None
    with ds:
        ids = BatchDecoder({"i": FixedLen((), "int64")})(ds[:])["i"].tolist()
    assert ids == list(range(n)), "a dataset that opens is the whole conversion"
    return len(ids)


@pytest.mark.parametrize("seed,signal_name", [(0, "SIGKILL"), (1, "SIGKILL"), (2, "SIGKILL"),
                                              (3, "SIGKILL"), (4, "SIGKILL"), (5, "SIGINT"),
                                              (6, "SIGINT")])
def test_an_interrupted_conversion_leaves_nothing_that_opens(tmp_path, seed, signal_name):
    """``ofindex convert`` killed (SIGKILL) or interrupted (Ctrl-C) at a seeded random point
    after its first file appeared (writing 120 shards, publishing them): the destination
    opens as the whole dataset or not at all, and a conversion run again into it after a
    Ctrl-C, or a kill before publishing, gives the whole dataset."""
    import random
    import signal
    import subprocess
    import sys
    import time

    n = 12000
    src, dst = tmp_path / "src.parquet", tmp_path / "dst"
    _parquet_ids(src, n)
    delay = random.Random(seed).uniform(0.0, 1.5)
    env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
    with subprocess.Popen([sys.executable, "-m", "ofindex", "convert", str(src), str(dst),
                           "--shard-records", "100", "--batch-size", "200", "--no-progress"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          preexec_fn=sigint_as_a_terminal) as proc:
        while proc.poll() is None and not (dst.exists() and os.listdir(dst)):
            time.sleep(0.005)  # the delay counts from the first file written
        time.sleep(delay)
        proc.send_signal(getattr(signal, signal_name))
        _, err = proc.communicate(timeout=120)
    got = _what_opens(dst, n)
    assert got in (None, n)
    if got == n:  # finished before the signal (or was exiting when it came)
        return
    visible = [f for f in os.listdir(dst) if not f.startswith(".")] if dst.exists() else []
    if signal_name == "SIGINT":
        assert b"KeyboardInterrupt" in err or proc.returncode != 0
        assert visible == [], visible  # Ctrl-C removes what was written
    if not visible:  # nothing was published: converting again works (and names leftovers)
        import warnings

        from ofindex.errors import LeftoverFilesWarning

        hidden = dst.exists() and any(f.startswith(".") for f in os.listdir(dst))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ofindex.convert(str(src), dst, shard_records=100)
        assert any(issubclass(w.category, LeftoverFilesWarning) for w in caught) == hidden
        assert _what_opens(dst, n) == n


def test_prefetched_batches_keep_order_raise_errors_and_stop():
    import threading

    from ofindex.convert.prefetch import Prefetched

    closed = threading.Event()

    def source(n, fail_at=None):
        try:
            for k in range(n):
                if k == fail_at:
                    raise OSError(f"batch {k} unreadable")
                yield k
        finally:
            closed.set()

    with Prefetched(source(50)) as batches:
        assert list(batches) == list(range(50))
        assert next(batches, "end") == "end"
    assert closed.wait(5)
    closed.clear()
    with pytest.raises(OSError, match="batch 3 unreadable"), Prefetched(source(9, 3)) as b:
        list(b)
    assert closed.wait(5)
    closed.clear()
    before = threading.active_count()
    with Prefetched(source(10**9)) as batches:  # left early: the helper stops and closes
        assert next(batches) == 0
    assert closed.wait(5) and threading.active_count() == before


# --- a Hugging Face dataset converts to the rows it yields, not its whole table --------------

def _hf_views():
    """A dataset and what ``.filter``, ``.select``, ``.shuffle`` and ``train_test_split``
    make of it: each keeps the table and maps rows through indices."""
    datasets = need("datasets")
    base = datasets.Dataset.from_dict({"id": list(range(50)),
                                       "text": [f"t{k}" for k in range(50)],
                                       "emb": [[k, -k] for k in range(50)]})
    split = base.train_test_split(test_size=0.2, seed=3)
    return {"filter": base.filter(lambda row: row["id"] % 7 == 2),
            "select": base.select([41, 3, 3, 17, 0]),
            "shuffle": base.shuffle(seed=5),
            "split-test": split["test"], "split-train": split["train"]}


@pytest.mark.parametrize("view", ["filter", "select", "shuffle", "split-test", "split-train"])
def test_hf_dataset_converts_its_own_rows_after_filter_select_shuffle_split(tmp_path, view):
    hf = _hf_views()[view]
    expected = [hf[k] for k in range(len(hf))]   # the rows the dataset itself yields
    assert [row["id"] for row in expected] != list(range(len(expected)))  # a real mapping
    spec = {"id": FixedLen((), "int64"), "text": FixedLen((), "bytes"), "emb": FixedLen(2, "int64")}
    for out, batch_size in (("a", 1024), ("b", 3)):   # one batch, and batches across rows
        summary = ofindex.convert(hf, tmp_path / out, batch_size=batch_size)
        assert summary.records == len(expected)
        got = _all(tmp_path / out, spec)
        assert got["id"].tolist() == [row["id"] for row in expected]
        assert got["text"].tolist() == [row["text"].encode() for row in expected]
        assert got["emb"].tolist() == [row["emb"] for row in expected]
    from ofindex.encode import encode_columns, encode_example

    assert encode_columns(hf) == [encode_example(row) for row in expected]
    with ofindex.ShardedWriter(tmp_path / "w") as writer:
        writer.write_columns(hf)
    assert _all(tmp_path / "w", spec)["id"].tolist() == [row["id"] for row in expected]
    hf.save_to_disk(str(tmp_path / "saved"))   # and the saved copy, through the command line
    assert main(["convert", str(tmp_path / "saved"), str(tmp_path / "cli"),
                 "--no-progress"]) == 0
    assert _all(tmp_path / "cli", spec)["id"].tolist() == [row["id"] for row in expected]


# --- nulls: one policy, the same for Parquet, Hugging Face and the command line ---------------

def _table_with_nulls(pa, n=60):
    """Null elements inside lists at rows 37 (floats), 41 (bools), 44 (ints), 50 (strings);
    null cells (a row's whole value) everywhere else in between."""
    def column(row, value, arrow_type):
        cells = [None if k % 9 == 4 else [value, value] for k in range(n)]
        cells[row] = [value, None, value]
        return pa.array(cells, pa.list_(arrow_type))

    return pa.table({"id": pa.array([None if k % 7 == 3 else k for k in range(n)], pa.int64()),
                     "f": column(37, 1.5, pa.float32()), "b": column(41, True, pa.bool_()),
                     "i": column(44, 7, pa.int64()), "s": column(50, "x", pa.string())})


def _expected_rows(table, nulls):
    """Each row as a record holds it: null cells left out (a list's marked by
    ``<column>/null``), null elements as the policy says."""
    rows = []
    for row in table.to_pylist():
        record = {}
        for name, value in row.items():
            if value is None:
                if name != "id":
                    record[f"{name}/null"] = 1
                continue
            if isinstance(value, list):
                if nulls == "drop":
                    value = [v for v in value if v is not None]
                else:
                    value = [nulls[1][name] if v is None else v for v in value]
            record[name] = value
        rows.append(record)
    return rows


def _decoded_rows(directory):
    with ofindex.open(str(directory)) as ds:
        return [{name: v.tolist() for name, v in decode_example(r).items()} for r in ds[:]]


def _as_stored(record):
    """A row's values as decoding gives them back (bools as ints, str as bytes)."""
    return {name: [int(v) if isinstance(v, bool) else v.encode() if isinstance(v, str) else v
                   for v in (value if isinstance(value, list) else [value])]
            for name, value in record.items()}


@pytest.mark.parametrize("source", ["parquet", "hf"])
def test_null_elements_are_refused_dropped_or_filled_never_nan_or_false(tmp_path, source, capsys):
    """A null inside a list became NaN (floats), False (bools) or numpy's TypeError (ints);
    by default it is now refused naming the column and the row (counted across batches),
    nothing written; nulls='drop' / ('fill', v) and --nulls drop / fill:v write exactly
    those rows; a null cell leaves the feature out of its record under every policy."""
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    table = _table_with_nulls(pa)
    if source == "parquet":
        pq.write_table(table, tmp_path / "t.parquet", row_group_size=16)
        src = str(tmp_path / "t.parquet")
    else:
        datasets = need("datasets")
        src = datasets.Dataset(table)
    with pytest.raises(EncodeError, match="feature 'f' of record 37: element 1 of its list is "
                       "null") as refused:
        ofindex.convert(src, tmp_path / "never", batch_size=10)
    assert "nulls='drop'" in str(refused.value)
    assert not (tmp_path / "never").exists() or os.listdir(tmp_path / "never") == []
    fills = {"f": -1, "b": False, "i": 0, "s": ""}
    for out, nulls in (("drop", "drop"), ("fill", ("fill", fills))):
        ofindex.convert(src, tmp_path / out, batch_size=10, nulls=nulls)
        expected = [_as_stored(r) for r in _expected_rows(table, nulls)]
        assert _decoded_rows(tmp_path / out) == expected
    for fill, match in ((0.5, "the fill value 0.5 does not fit its bool values"),
                        (0, "feature 's' of record 50: the fill value 0 does not fit its Arrow "
                         "type string"),
                        ({"f": 0}, "feature 'b' of record 41: a null element and no fill "
                         "value for this feature")):
        with pytest.raises(EncodeError, match=match):
            ofindex.convert(src, tmp_path / "never-filled", batch_size=10, nulls=("fill", fill))
    if source == "hf":
        return
    assert main(["convert", src, str(tmp_path / "cli-never"), "--no-progress",
                 "--batch-size", "10"]) == 1
    err = capsys.readouterr().err
    assert "feature 'f' of record 37" in err and "(--nulls drop)" in err
    assert len(err.strip().splitlines()) == 1 and "Error" not in err.split(":", 2)[1]
    for flag, nulls in (("drop", "drop"), ("fill:" + json.dumps(fills), ("fill", fills))):
        out = tmp_path / f"cli-{flag.replace(':', '')}"
        assert main(["convert", src, str(out), "--no-progress", "--nulls", flag]) == 0
        assert _decoded_rows(out) == [_as_stored(r) for r in _expected_rows(table, nulls)]
    with pytest.raises(SystemExit) as bad:
        main(["convert", src, str(tmp_path / "x"), "--nulls", "zero"])
    assert bad.value.code == 2 and "use refuse, drop or fill:VALUE" in capsys.readouterr().err


def test_sources_of_no_rows_convert_to_no_records(tmp_path):
    """An empty Parquet file (a fixed-size list column among its columns), an npz of 0-row
    arrays and an empty Hugging Face dataset raised numpy's reshape ValueError; each is now
    a dataset of 0 records."""
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    datasets = need("datasets")
    pq.write_table(pa.table({"x": pa.array([], pa.float64()),
                             "v": pa.array([], pa.list_(pa.float32(), 3))}), tmp_path / "e.parquet")
    np.savez(tmp_path / "e.npz", x=np.zeros((0, 3)), y=np.zeros(0, np.int64))
    sources = [str(tmp_path / "e.parquet"), str(tmp_path / "e.npz"),
               datasets.Dataset.from_dict({"x": [[1.0, 2.0]]}).filter(lambda row: False)]
    for k, src in enumerate(sources):
        assert ofindex.convert(src, tmp_path / f"out{k}").records == 0
        with ofindex.open(str(tmp_path / f"out{k}")) as ds:
            assert len(ds) == 0


# --- image folders: only regular files are read, and errors name the entry -------------------

def _image_folder_with_special_entries(root):
    import socket

    image = need("PIL.Image")
    made = {}
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for k in range(2):
            buf = io.BytesIO()
            image.new("RGB", (4 + k, 4)).save(buf, format="PNG")
            (root / cls / f"{k}.png").write_bytes(buf.getvalue())
            made[(cls, f"{k}.png")] = buf.getvalue()
    os.mkfifo(root / "cat" / "pipe.jpg")                  # opening it would wait for a writer
    (root / "dog" / "folder.jpg").mkdir()                  # IsADirectoryError
    os.symlink(root / "nowhere.png", root / "dog" / "dangling.png")   # FileNotFoundError
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "dog" / "sock.png"))
    listener.close()
    return made


def test_image_folder_reads_regular_files_only_and_never_hangs_on_a_fifo(tmp_path):
    """An image folder holding a FIFO named like an image made `ofindex convert` hang (it
    opened the FIFO for reading), and a directory or dangling link named like one raised a
    raw IsADirectoryError / FileNotFoundError: they are skipped with one warning naming
    them, the regular files convert."""
    import subprocess
    import sys

    root = tmp_path / "images"
    made = _image_folder_with_special_entries(root)
    env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
    done = subprocess.run([sys.executable, "-m", "ofindex", "convert", str(root),
                           str(tmp_path / "out"), "--no-progress"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1 and "skipped 4 image-named entries that are not regular " \
        "files" in warning[0], done.stderr
    assert "cat/pipe.jpg, dog/dangling.png, dog/folder.jpg and 1 more" in warning[0]
    with ofindex.open(str(tmp_path / "out")) as ds:
        rows = [decode_example(r) for r in ds[:]]
    assert {(r["class"][0].decode(), r["filename"][0].decode()): r["image"][0]
            for r in rows} == made
    with pytest.warns(Warning, match="skipped 4 image-named entries"):
        assert ofindex.convert(str(root), tmp_path / "again").records == 4


def test_image_folder_entries_that_change_after_the_listing_are_named(tmp_path):
    """An entry removed, or replaced by a FIFO or a directory, between the listing and its
    read: an OfindexError naming it (never a hang, never a raw OSError)."""
    from ofindex.convert.sources import image_folder_source
    from ofindex.errors import OfindexError

    root = tmp_path / "images"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        (root / cls / "x.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    for change, match in ((lambda p: p.unlink(), "image folder .*: b/x.jpg is gone"),
                          (lambda p: (p.unlink(), os.mkfifo(p)), "b/x.jpg is no regular file"),
                          (lambda p: (p.unlink(), p.mkdir()), "b/x.jpg is no regular file")):
        source = image_folder_source(str(root), batch_size=8)
        change(root / "b" / "x.jpg")
        with pytest.raises(OfindexError, match=match) as caught:
            list(source.batches())
        assert isinstance(caught.value, OSError)
        target = root / "b" / "x.jpg"
        if target.is_dir():
            target.rmdir()
        elif target.exists():
            target.unlink()
        target.write_bytes(b"\xff\xd8 not really a jpeg")


def test_parquet_named_entries_that_are_not_regular_files_are_skipped(tmp_path):
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "d" / "a.parquet")
    os.mkfifo(tmp_path / "d" / "b.parquet")
    with pytest.warns(Warning, match="skipped 1 Parquet-named entry that is not a regular "
                      "file: .*b.parquet"):
        assert ofindex.convert(str(tmp_path / "d"), tmp_path / "out").records == 2


def test_convert_refuses_an_output_inside_its_source_and_the_other_way(tmp_path):
    from ofindex.errors import NestedPathsError, OfindexError

    with ofindex.ShardedWriter(tmp_path / "ds", shard_records=4) as w:
        for k in range(6):
            w.write({"k": k})
    for src, dst in ((tmp_path / "ds", tmp_path / "ds" / "sub"), (tmp_path / "ds", tmp_path),
                     (tmp_path / "ds", tmp_path / "ds")):
        with pytest.raises(NestedPathsError, match=f"{src}.*{dst}|{dst}.*{src}") as caught:
            ofindex.convert(str(src), dst)
        assert isinstance(caught.value, (OfindexError, ValueError))
    assert sorted(os.listdir(tmp_path / "ds")) == [f"part-0000{k}-of-00002" for k in range(2)]
    assert ofindex.convert(str(tmp_path / "ds"), tmp_path / "ds2").records == 6


def test_what_a_killed_conversion_left_is_named_by_info_and_by_a_rerun(tmp_path, capsys):
    """`ofindex convert` killed with SIGKILL leaves its hidden shards and sidecars (tens of MB)
    and nothing mentioned them: `ofindex info` on the output and a rerun of the conversion now
    say how many files, how big, and the command that removes them, which removes those files
    and nothing else; nothing is deleted by ofindex itself."""
    import signal
    import subprocess
    import sys
    import time

    from ofindex.errors import LeftoverFilesWarning

    n = 60_000
    src, dst = tmp_path / "src.parquet", tmp_path / "dst"
    _parquet_ids(src, n)
    env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
    with subprocess.Popen([sys.executable, "-m", "ofindex", "convert", str(src), str(dst),
                           "--shard-records", "5000", "--batch-size", "500", "--no-progress"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        while proc.poll() is None and not (dst.exists() and os.listdir(dst)):
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    left = sorted(os.listdir(dst))
    assert left and all(name.startswith(".") and ".writing" in name for name in left)
    mine = {dst / ".keep", tmp_path / "dst.ofindex" / "notes.txt"}   # not a writer's
    for path in mine:
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
    assert main(["info", str(dst)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"WARNING: {dst} holds ") and "left by a writer that did not " \
        "finish" in err[0] and "nothing reads them" in err[0], err
    assert err[1].startswith("ofindex: error:") and len(err) == 2
    with pytest.warns(LeftoverFilesWarning, match=r"hidden file\(s\), .* MB, left by a writer"):
        assert ofindex.convert(str(src), dst, shard_records=30_000).records == n
    assert _what_opens(dst, n) == n
    assert main(["info", str(dst)]) == 0
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("WARNING:") and "rm -f " in warning
    subprocess.run(warning.split("remove them: ", 1)[1], shell=True, check=True, cwd=tmp_path)
    assert all(path.read_text() == "mine" for path in mine)   # only the writer's files went
    assert [f for f in os.listdir(dst) if f.startswith(".")] == [".keep"]
    assert not [f for f in os.listdir(tmp_path / "dst.ofindex") if ".writing" in f]
    assert main(["info", str(dst)]) == 0 and "WARNING" not in capsys.readouterr().err
    assert _what_opens(dst, n) == n
