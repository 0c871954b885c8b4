"""A dataset written by many tasks and published once (ofindex.write.jobs, issue 50): the
engines' write transforms stage shards with sidecars in their tasks and publish them, with
the manifest, at the end; a failed or repeated attempt's files are not published and are
removed; an aborted job leaves nothing."""

from __future__ import annotations

import os
import pickle

import pytest

import ofindex
from ofindex.decode import FixedLen
from ofindex.write.jobs import WriteJob


def _names(d: str) -> list[str]:
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_tasks_publish_in_task_order_and_failed_attempts_go(tmp_path, compression):
    d = str(tmp_path / "out")
    job = pickle.loads(pickle.dumps(WriteJob(d, shard_records=3, compression=compression)))
    second = job.task(1)
    second.write_many([b"b%d" % i for i in range(4)])  # two shards: 3 + 1
    failed = job.task(0)  # an attempt that died: its shard is left hidden
    failed.write_many([b"lost"] * 5)
    failed._stream._finish_shard()
    first = job.task(0)
    first.write_many([b"a0", b"a1"])
    assert not any(n.startswith("part-") for n in _names(d))  # nothing visible yet
    summary = job.commit([second.close(), first.close()])
    assert summary.records == 6 and summary.shards == 3
    assert [n for n in _names(d) if not n.startswith(".")] == [
        "part-00000-of-00003", "part-00001-of-00003", "part-00002-of-00003"]
    assert not [n for n in _names(d) if n.startswith(".")]  # the failed attempt's are gone
    with ofindex.open(d) as ds:  # manifest and sidecars: opens as a whole dataset
        assert [bytes(r) for r in ds] == [b"a0", b"a1", b"b0", b"b1", b"b2", b"b3"]
        assert ds.compressions[0].name == ("GZIP" if compression else "NONE")


def test_abort_leaves_nothing_and_a_dataset_is_not_written_over(tmp_path):
    d = str(tmp_path / "out")
    os.makedirs(d)
    job = WriteJob(d, spec={"x": FixedLen((), "int64")})
    task = job.task(0)
    task.write_columns({"x": [1, 2, 3]})
    task.close()
    job.abort()
    assert _names(d) == [] and not any(n.startswith(".") for n in _names(str(tmp_path)))
    empty = WriteJob(d)
    empty.commit([])  # no records: one empty shard, a dataset of 0 records
    with ofindex.open(d) as ds:
        assert len(ds) == 0
    with pytest.raises(ofindex.DatasetExistsError):
        WriteJob(d)


def test_ofrecord_features_from_columns(tmp_path):
    d = str(tmp_path / "of")
    spec = {"x": FixedLen((), "int64")}
    job = WriteJob(d, "ofrecord", spec=spec, shard_records=2)
    task = job.task(0)
    task.write_columns({"x": [5, 6, 7]})
    assert job.commit([task.close()]).shards == 2
    with ofindex.open(d) as ds:
        assert ds.format.name == "OFRECORD"
        assert ofindex.decode.decode_batch(list(ds), spec, kind="ofrecord")["x"].tolist() == [
            5, 6, 7]


def test_a_report_counted_twice_is_refused(tmp_path):
    d = str(tmp_path / "out")
    job = WriteJob(d)
    task = job.task(0)
    task.write(b"x")
    report = task.close()
    with pytest.raises(ValueError, match="reported twice"):
        job.commit([report, report])
