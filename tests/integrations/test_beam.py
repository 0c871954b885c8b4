"""Apache Beam reads and writes ofindex datasets (issue 50) on the DirectRunner: a splittable
read over the split planner's partitions (a GZIP file cut inside, at seek points; a runner's
split of a partition's rest), and a write transform that publishes shards, sidecars and the
manifest when the last bundle is done (GZIP included), on two worker processes; a failed
pipeline publishes nothing."""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

import ofindex
from ofindex.decode import FixedLen, VarLen
from ofindex.encode import encode_example
from ofindex.integrations.beam import ReadFromOfindex, WriteToOfindex, _ReadPartition

SPEC = {"label": FixedLen((), "int64"), "tokens": VarLen("int64"),
        "name": FixedLen((), "bytes")}


def _features(i: int) -> dict:
    return {"label": i % 3, "tokens": list(range(i % 4)), "name": b"r%d" % i}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A GZIP shard of 900 Examples with seek points every 4 KiB and a plain one of 100."""
    d = tmp_path_factory.mktemp("beam") / "src"
    d.mkdir()
    records = [encode_example(_features(i), SPEC) for i in range(1000)]
    with ofindex.Writer(str(d / "part-00000"), compression="gzip", seek_spacing=4096) as w:
        w.write_many(records[:900])
    with ofindex.Writer(str(d / "part-00001")) as w:
        w.write_many(records[900:])
    return str(d), records


def _options(mode: str) -> PipelineOptions:
    return PipelineOptions(direct_num_workers=2, direct_running_mode=mode)


def test_read_and_write_on_two_worker_processes(source, tmp_path):
    directory, records = source
    out = str(tmp_path / "out")
    read = ReadFromOfindex(directory, partitions=6)
    assert sum(p[0].file == 0 for p in read.plan) >= 3  # the GZIP shard is cut inside
    decoded = ReadFromOfindex(directory, SPEC, partitions=3)
    with beam.Pipeline(options=_options("multi_processing")) as p:
        raw = p | "Raw" >> read
        assert_that(raw, equal_to(records), label="AllRecords")
        (raw | beam.Map(lambda r: r[::-1])
             | WriteToOfindex(out, compression="gzip", shard_records=300))
        labels = (p | "Decoded" >> decoded
                  | beam.Map(lambda row: (row["label"], len(row["tokens"]), row["name"])))
        assert_that(labels, equal_to([(i % 3, i % 4, b"r%d" % i) for i in range(1000)]),
                    label="Decoded rows")
    with ofindex.open(out) as ds:  # published with its manifest: no build step
        assert sorted(bytes(r)[::-1] for r in ds) == sorted(records)
        assert {c.name for c in ds.compressions} == {"GZIP"}
        assert all(s.records <= 300 for s in ds.shards)
    assert not [n for n in os.listdir(out) if n.startswith(".")]


def test_a_split_partition_reads_each_record_once(source):
    """A runner splits the rest of a partition while it is read (dynamic work rebalancing):
    the primary stops at the split, inside a batch of records (the batch is cut there), the
    residual starts there (inside a GZIP shard)."""
    directory, records = source
    read = ReadFromOfindex(directory, partitions=2)
    element = read._reads[0]
    fn = _ReadPartition(None, None, rows=7)
    tracker = OffsetRestrictionTracker(OffsetRange(element.lo, element.hi))
    got = []
    for batch in fn.process(element, tracker):
        got.extend(batch)
        if len(got) == 14:
            primary, residual = tracker.try_split(0.5)
    assert (primary.stop - element.lo) % 7  # the split falls inside a batch
    assert len(got) == primary.stop - element.lo
    tracker.check_done()
    rest = [r for batch in fn.process(element, OffsetRestrictionTracker(residual))
            for r in batch]
    first = read.plan.partitions[0][0].start
    assert got + rest == records[first:first + len(element)]


class _CountingTracker(OffsetRestrictionTracker):  # type: ignore[misc]
    def __init__(self, restriction: OffsetRange) -> None:
        super().__init__(restriction)
        self.claims = 0

    def try_claim(self, position: int) -> bool:
        self.claims += 1
        return bool(super().try_claim(position))


@pytest.mark.parametrize("spec", [None, SPEC], ids=["raw", "decoded"])
def test_a_partition_is_claimed_a_batch_at_a_time(source, spec):
    """Each claim (and each output of the splittable read, whose costs Beam pays per output)
    covers a batch of records, not one record."""
    directory, records = source
    read = ReadFromOfindex(directory, partitions=1)
    (element,) = read._reads
    tracker = _CountingTracker(OffsetRange(element.lo, element.hi))
    batches = list(_ReadPartition(spec, None, rows=100).process(element, tracker))
    assert [len(b) for b in batches] == [100] * 10
    assert tracker.claims == 11  # each batch's last record, then the range's end
    got = [r for b in batches for r in b]
    if spec is None:
        assert got == records
    else:
        assert [(r["label"], r["tokens"], r["name"]) for r in got] == [
            (i % 3, list(range(i % 4)), b"r%d" % i) for i in range(1000)]


def test_written_features_and_what_a_failed_pipeline_leaves(tmp_path):
    out = str(tmp_path / "features")
    with beam.Pipeline(options=_options("multi_threading")) as p:
        (p | beam.Create([_features(i) for i in range(50)])
           | WriteToOfindex(out, spec=SPEC, shard_records=20))
    with ofindex.open(out) as ds:
        rows = ofindex.decode.decode_batch(list(ds), SPEC)
    assert sorted(rows["label"].tolist()) == sorted(i % 3 for i in range(50))
    with pytest.raises(ofindex.DatasetExistsError):
        WriteToOfindex(out)

    failed = str(tmp_path / "failed")

    def explode(i: int) -> bytes:
        if i == 40:
            raise RuntimeError("boom")
        return b"%d" % i

    with pytest.raises(Exception, match="boom"), \
            beam.Pipeline(options=_options("multi_threading")) as p:
        p | beam.Create(range(50)) | beam.Map(explode) | WriteToOfindex(failed)
    visible = [n for n in os.listdir(failed) if not n.startswith(".")] if os.path.isdir(
        failed) else []
    assert visible == []  # no shard, no manifest: nothing opens
    with pytest.raises(ofindex.OfindexError):
        ofindex.open(failed)


def test_records_are_numbers_in_order_within_a_partition(source):
    directory, _ = source
    read = ReadFromOfindex(directory, partitions=4, balance="records")
    starts = [p[0].start for p in read.plan]
    assert starts == sorted(starts) and starts[0] == 0
    sizes = np.diff([*starts, 1000])
    assert sizes.max() - sizes.min() <= 120  # records balance, cut at the GZIP's seek points


@pytest.fixture(scope="module")
def with_columns(source, tmp_path_factory):
    """The source's shards, indexed with the columns label and name."""
    _, records = source
    d = tmp_path_factory.mktemp("beam-columns") / "src"
    d.mkdir()
    with ofindex.Writer(str(d / "part-00000"), compression="gzip", seek_spacing=4096) as w:
        w.write_many(records[:900])
    with ofindex.Writer(str(d / "part-00001")) as w:
        w.write_many(records[900:])
    ofindex.build_index(str(d), manifest=True, columns=["label", "name"], progress=False)
    return str(d), records


def test_where_reads_only_the_matching_records(with_columns):
    directory, records = with_columns
    read = ReadFromOfindex(directory, SPEC, partitions=3, where={"label": [0, 1]})
    assert sum(s.count for p in read.plan for s in p) == 667
    raw = ReadFromOfindex(directory, partitions=2, where={"name": b"r950"})
    assert len(raw.plan) == 1
    with beam.Pipeline(options=_options("multi_threading")) as p:
        labels = p | "Decoded" >> read | beam.Map(lambda row: (row["label"], row["name"]))
        assert_that(labels, equal_to([(i % 3, b"r%d" % i) for i in range(1000) if i % 3 < 2]),
                    label="Decoded rows")
        one = p | "Raw" >> raw
        assert_that(one, equal_to([records[950]]), label="One record")
    with pytest.raises(ofindex.ColumnNotFoundError, match=r"columns=\['tokens'"):
        ReadFromOfindex(directory, where={"tokens": 1})


def test_a_split_pruned_partition_reads_each_matching_record_once(with_columns):
    directory, records = with_columns
    read = ReadFromOfindex(directory, partitions=1, where={"label": 2})
    (element,) = read._reads
    fn = _ReadPartition(None, None, rows=3)
    tracker = OffsetRestrictionTracker(OffsetRange(element.lo, element.hi))
    got = []
    for batch in fn.process(element, tracker):
        got.extend(batch)
        if len(got) == 9:
            _, residual = tracker.try_split(0.5)
    tracker.check_done()  # the primary's range was claimed to its end
    rest_tracker = OffsetRestrictionTracker(residual)
    rest = [r for batch in fn.process(element, rest_tracker) for r in batch]
    rest_tracker.check_done()
    assert got + rest == records[2::3]
    assert 9 <= len(got) < 333
