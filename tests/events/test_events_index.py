"""The events index of a TensorBoard log directory (issue 49, item 4): built in one scan with
the sidecars, kept up as the event files grow (only their new bytes read), beside the log
directory, over local and remote storage; the ``ofindex events`` command."""

import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import ofindex
from ofindex.events.index_file import SUFFIX
from ofindex.formats.framing import RecordFormat, encode_record
from ofindex.proto import event_pb2
from ofindex.storage.local import LocalStorage
from tests.kit.helpers import read_bytes, write_raw


def _event(step, **values):
    """An event holding scalar summaries (simple_value), as PyTorch writes them."""
    event = event_pb2.Event(step=step, wall_time=1000.0 + step)
    for tag, value in values.items():
        event.summary.value.add(tag=tag, simple_value=value)
    return event.SerializeToString()


def _version():
    return event_pb2.Event(wall_time=999.0, file_version="brain.Event:2").SerializeToString()


def _write(path, payloads, mode="ab"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        for p in payloads:
            f.write(encode_record(p, RecordFormat.TFRECORD))


def _logdir(tmp_path, steps=100):
    logdir = str(tmp_path / "logs")
    for run in ("train", "eval"):
        _write(os.path.join(logdir, run, "events.out.tfevents.1.host"),
               [_version()] + [_event(s, loss=1.0 / (s + 1), acc=s / 100) for s in range(steps)])
    return logdir


def test_indexes_go_beside_the_log_directory(tmp_path):
    logdir = _logdir(tmp_path)
    with ofindex.events(logdir) as log:
        assert log.runs == ["eval", "train"]
        assert len(log.scalars("loss")) == 200
    index = logdir + ".ofindex"
    assert sorted(os.listdir(os.path.join(index, "train"))) == [
        "events.out.tfevents.1.host" + SUFFIX, "events.out.tfevents.1.host.ofidx"]
    # nothing of ofindex's in the log directory, where TensorBoard looks for event files
    found = [f for _, _, files in os.walk(logdir) for f in files]
    assert found == ["events.out.tfevents.1.host"] * 2


def _counting(monkeypatch):
    """Bytes read from event files through the storage."""
    seen = {"bytes": 0}
    for name in ("read", "read_into", "read_block"):
        original = getattr(LocalStorage, name)

        def wrapped(storage, path, start, arg, _original=original, _name=name):
            got = _original(storage, path, start, arg)
            if "tfevents" in path and not path.endswith((".ofidx", SUFFIX)):
                seen["bytes"] += (len(got) if _name != "read_into" else got)
            return got

        monkeypatch.setattr(LocalStorage, name, wrapped)
    return seen


def test_one_scan_builds_both_indexes_and_later_opens_read_no_event(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path, steps=3000)
    size = sum(os.path.getsize(os.path.join(logdir, run, "events.out.tfevents.1.host"))
               for run in ("train", "eval"))
    seen = _counting(monkeypatch)
    with ofindex.events(logdir) as log:
        assert len(log.scalars("acc")) == 6000
    # each file read once (and its first 16 KiB, which the build looks at first)
    assert size <= seen["bytes"] <= size + 2 * 16384
    seen["bytes"] = 0
    with ofindex.events(logdir) as log:  # indexed: the scalars come from the index
        frame = log.scalars("loss", runs="train")
        assert frame.value.tolist() == [np.float32(1.0 / (s + 1)) for s in range(3000)]
    assert seen["bytes"] == 0


def test_growing_logs_are_kept_up(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path, steps=2000)
    log = ofindex.events(logdir)
    train = os.path.join(logdir, "train", "events.out.tfevents.1.host")
    old = os.path.getsize(train)
    last = encode_record(_event(2001, loss=0.5), RecordFormat.TFRECORD)
    _write(train, [_event(2000, loss=0.25)])
    with open(train, "ab") as f:
        f.write(last[:10])  # a record still being written
    seen = _counting(monkeypatch)
    assert log.refresh() == 1
    # only the new bytes (a record cut short is looked at again) and the regions of two content
    # digests (4 KiB each) were read
    assert seen["bytes"] <= 2 * (os.path.getsize(train) - old) + 6 * 4096
    assert log.scalars("loss", runs="train").step.tolist()[-2:] == [1999, 2000]
    with open(train, "ab") as f:
        f.write(last[10:])
    assert log.refresh() == 1
    assert log.scalars("loss", runs="train", steps=2001).value.tolist() == [0.5]
    # a new file and a new run
    _write(os.path.join(logdir, "train", "events.out.tfevents.2.host"), [_event(2002, loss=0.1)])
    _write(os.path.join(logdir, "test", "events.out.tfevents.1.host"), [_event(0, loss=9.0)])
    assert log.refresh() == 2
    assert log.runs == ["eval", "test", "train"]
    assert log.scalars("loss", runs="train").step.tolist()[-3:] == [2000, 2001, 2002]
    again = ofindex.events(logdir)  # the grown indexes, from disk
    assert again.scalars("loss").equals(log.scalars("loss"))
    log.close()
    again.close()


def test_a_replaced_event_file_is_indexed_again(tmp_path):
    logdir = _logdir(tmp_path)
    with ofindex.events(logdir) as log:
        assert len(log.scalars("loss", runs="eval")) == 100
    path = os.path.join(logdir, "eval", "events.out.tfevents.1.host")
    _write(path, [_event(s, other=1.0) for s in range(150)], mode="wb")
    with ofindex.events(logdir) as log:
        assert len(log.scalars("loss", runs="eval")) == 0
        assert len(log.scalars("other", runs="eval")) == 150


def test_a_damaged_events_index_is_made_again(tmp_path):
    logdir = _logdir(tmp_path)
    ofindex.events(logdir).close()
    index = os.path.join(logdir + ".ofindex", "train", "events.out.tfevents.1.host" + SUFFIX)
    raw = bytearray(read_bytes(index))
    raw[-20] ^= 0xFF
    write_raw(index, bytes(raw))
    with ofindex.events(logdir) as log:
        assert log.scalars("acc", runs="train").value.tolist()[:2] == [0.0, np.float32(0.01)]
    os.remove(index)
    with ofindex.events(logdir) as log:
        assert len(log.scalars("acc", runs="train")) == 100


def test_values_of_other_kinds_are_read_from_their_records(tmp_path):
    logdir = str(tmp_path / "logs")
    event = event_pb2.Event(step=7, wall_time=5.0)
    value = event.summary.value.add(tag="h")
    value.histo.min, value.histo.max, value.histo.num = -1.0, 1.0, 3.0
    value.histo.bucket_limit.extend([0.0, 1.0])
    value.histo.bucket.extend([1.0, 2.0])
    image = event.summary.value.add(tag="img")
    import io

    from PIL import Image

    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    image.image.encoded_image_string = buffer.getvalue()
    _write(os.path.join(logdir, "events.out.tfevents.1.x"), [_version(), event.SerializeToString()])
    with ofindex.events(logdir) as log:
        assert log.runs == ["."]
        h = log.histograms("h").iloc[0]
        assert (h.step, h["min"], h["max"], h.num) == (7, -1.0, 1.0, 3.0)
        assert h.limits.tolist() == [0.0, 1.0] and h.counts.tolist() == [1.0, 2.0]
        assert np.array_equal(log.images("img").value[0], pixels)
        assert log.images("img", decode=False).value[0] == buffer.getvalue()
        assert len(log.images("img", steps=8)) == 0
        with pytest.raises(KeyError, match="no run 'nope'"):
            log.scalars("h", runs="nope")


def test_remote_logs(remote_backend, tmp_path):
    local = _logdir(tmp_path)
    url = remote_backend.prefix() + "/logs"
    opts = remote_backend.storage_options
    for run in ("train", "eval"):
        remote_backend.upload(os.path.join(local, run), f"{url}/{run}")
    index_dir = None if remote_backend.writable else str(tmp_path / "idx")
    with ofindex.events(url + "/", storage_options=opts, index_dir=index_dir) as log:
        assert log.runs == ["eval", "train"]
        assert log.scalars("loss", runs="eval").step.tolist() == list(range(100))
        path = os.path.join(local, "eval", "events.out.tfevents.1.host")
        _write(path, [_event(100, loss=0.0)])
        remote_backend.put_bytes(f"{url}/eval/events.out.tfevents.1.host", read_bytes(path))
        assert log.refresh() == 1
        assert log.scalars("loss", runs="eval").step.tolist()[-1] == 100


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ofindex", *args], capture_output=True,
                          text=True, cwd=cwd, env=dict(os.environ, PYTHONPATH=os.getcwd()))


def test_the_events_command(tmp_path):
    logdir = _logdir(tmp_path)
    run = _cli("events", logdir, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].endswith("2 runs, 4 tags")
    assert any(line.split()[:5] == ["train", "loss", "scalars", "100", "0..99"]
               for line in lines)
    run = _cli("events", logdir, "--plot", "loss", "-o", str(tmp_path / "loss.png"),
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert read_bytes(tmp_path / "loss.png")[:8] == b"\x89PNG\r\n\x1a\n"
    run = _cli("events", logdir, "--plot", "nope", "-o", str(tmp_path / "x.png"), cwd=tmp_path)
    assert run.returncode == 2 and "scalar tags: acc, loss" in run.stderr
    run = _cli("events", logdir, "--plot", "loss", cwd=tmp_path)
    assert run.returncode == 2 and "-o FILE.png" in run.stderr
    run = _cli("events", logdir, "--json", "--run", "eval", cwd=tmp_path)
    import json

    doc = json.loads(run.stdout)
    assert {t["tag"] for t in doc["tags"]} == {"loss", "acc"} and doc["runs"] == ["eval", "train"]


def test_a_missing_extra_is_named(tmp_path):
    logdir = _logdir(tmp_path)
    script = ("import sys; sys.modules['matplotlib'] = None; sys.modules['pandas'] = None\n"
              "from ofindex.cli import main\n"
              f"raise SystemExit(main(['events', {logdir!r}, '--plot', 'loss', '-o', 'x.png']))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 1
    assert "pip install 'ofindex[events]'" in run.stderr


def _mixed_events(rng):
    """Events of every shape: the one-scalar shapes the bulk decoder takes (steps and wall
    times present or not, negative steps, TensorFlow 2's tensors with and without metadata,
    long tags) and others (several values, histograms, a tensor of two numbers, fields in
    another order, no summary, bytes that are no event)."""
    out = []
    for k in range(600):
        kind = rng.randrange(10)
        event = event_pb2.Event(step=rng.choice([0, 1, -5, 2**40, rng.randrange(10**6)]),
                                wall_time=rng.choice([0.0, 1.5, 1.7e9 + k]))
        tag = rng.choice(["loss", "a/b", "é/ünïcode", "x" * 200, f"t{k % 7}"])
        if kind <= 3:
            event.summary.value.add(tag=tag, simple_value=rng.random())
        elif kind <= 5:
            value = event.summary.value.add(tag=tag)
            value.tensor.dtype = event_pb2.DT_FLOAT
            value.tensor.tensor_content = struct.pack("<f", rng.random())
            if kind == 5:
                value.metadata.plugin_data.plugin_name = rng.choice(["scalars", "custom"])
        elif kind == 6:
            event.summary.value.add(tag=tag, simple_value=1.0)
            event.summary.value.add(tag=tag + "2", simple_value=2.0)
        elif kind == 7:
            event.summary.value.add(tag=tag).histo.bucket.extend([1.0, 2.0])
        elif kind == 8:
            value = event.summary.value.add(tag=tag)
            value.tensor.dtype = event_pb2.DT_FLOAT
            value.tensor.tensor_shape.dim.add(size=2)
            value.tensor.float_val.extend([1.0, 2.0])
        else:
            event.file_version = "brain.Event:2"
        payload = event.SerializeToString()
        if k % 97 == 0:
            payload = payload[:-1]  # cut: no event (protobuf refuses it)
        if k % 89 == 0:
            payload = payload + b"\x52\x00"  # source_metadata after the summary
        out.append(payload)
    return out


def test_bulk_decoding_gives_what_protobuf_gives(monkeypatch):
    """The one-scalar events decoded from their bytes in bulk (ofindex.events.scalar_wire):
    the same entries, and tags, as every event parsed by protobuf."""
    import random

    from ofindex.events import decoding
    from ofindex.events.decoding import EventSink, Tags

    payloads = _mixed_events(random.Random(4904))
    block = bytearray(b"".join(encode_record(p, RecordFormat.TFRECORD) for p in payloads))
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    at = np.concatenate([[0], np.cumsum(lengths + 16)[:-1]])

    def decode(bulk):
        if not bulk:
            monkeypatch.setattr(decoding, "find_scalars",
                                lambda *a: (_ for _ in ()).throw(ValueError("off")))
        sink = EventSink(Tags([]))
        sink.records(memoryview(block), at, lengths, 100)
        entries = sink.finish(100 + len(payloads))
        monkeypatch.undo()
        names = [sink.tags.names[t] for t in entries["tag"]]
        plugins = [sink.tags.plugins[t] for t in entries["tag"]]
        rest = [entries[f].tolist() for f in ("record", "step", "wall_time", "slot", "case")]
        return names, plugins, rest, entries["value"]

    from ofindex.events.scalar_wire import find_scalars

    found = find_scalars(memoryview(block), at + 12, at + 12 + lengths)
    assert 200 < len(found.which) < len(payloads)  # in bulk: the one-scalar shapes only
    bulk, one_by_one = decode(True), decode(False)
    assert bulk[:3] == one_by_one[:3]
    assert np.array_equal(bulk[3], one_by_one[3], equal_nan=True)
    assert len(bulk[0]) > 500 and "é/ünïcode" in bulk[0]
