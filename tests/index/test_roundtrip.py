"""Any records, either format: the writer's and the builder's indexes agree and read back."""

import os
import tempfile

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import (
    IMPLEMENTATIONS,
    implementation,
    ref_offsets,
    ref_ofrecord,
    ref_tfrecord,
    sidecar_of,
    split,
    write_raw,
)

records_st = st.lists(st.binary(max_size=200), max_size=40)
FORMATS = {"tfrecord": (ref_tfrecord, 16), "ofrecord": (ref_ofrecord, 8)}


@settings(max_examples=60, deadline=None)
@given(records=records_st, fmt=st.sampled_from(sorted(FORMATS)), verify=st.booleans())
def test_writer_and_builder_agree(records, fmt, verify):
    ref, overhead = FORMATS[fmt]
    with tempfile.TemporaryDirectory() as d:
        written = os.path.join(d, "w", "data")
        with ofindex.Writer(written, format=fmt) as w:
            for r in records:
                w.write(r)
        # the writer's bytes are exactly the reference framing
        with open(written, "rb") as f:
            assert f.read() == ref(records)
        by_writer = open_local_sidecar(sidecar_of(written)).offsets.tolist()
        scanned = write_raw(os.path.join(d, "b", "data"), ref(records))
        (result,) = ofindex.build_index(scanned, format=fmt if not records else "auto",
                                        verify=verify)
        assert result.records == len(records)
        by_builder = open_local_sidecar(sidecar_of(scanned)).offsets.tolist()
        assert by_writer == by_builder == ref_offsets(records, overhead)
        for path in (written, scanned):
            ds = ofindex.open(path, verify=True)
            assert len(ds) == len(records)
            assert [ds[i] for i in range(len(ds))] == records
            assert list(ds) == records
            assert ds.record_lengths(np.arange(len(ds))).tolist() == [len(r) for r in records]


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.binary(max_size=64), max_size=60),
    sizes=st.lists(st.integers(0, 12), max_size=6),
    fmt=st.sampled_from(sorted(FORMATS)),
    data=st.data(),
)
def test_many_shards_behave_like_a_list(records, sizes, fmt, data):
    shards = split(records, sizes)
    impl = data.draw(st.sampled_from(IMPLEMENTATIONS))
    with tempfile.TemporaryDirectory() as d, implementation(impl):
        for k, part in enumerate(shards):
            with ofindex.Writer(os.path.join(d, f"part-{k}"), format=fmt) as w:
                w.write_many(part)
        ds = ofindex.open(d, mmap=data.draw(st.booleans()))  # memory maps or pread
        n = len(records)
        assert len(ds) == n
        assert [len(p) for p in shards] == [s.records for s in ds.shards]
        if n:
            idx = data.draw(st.lists(st.integers(-n, n - 1), max_size=30))
            assert [ds[i] for i in idx] == [records[i] for i in idx]
            assert ds.__getitems__(idx) == [records[i] for i in idx]  # duplicates, unsorted
            assert ds[np.array(idx, dtype=np.int64)] == [records[i] for i in idx]
        sl = slice(data.draw(st.integers(-n - 3, n + 3)), data.draw(st.integers(-n - 3, n + 3)),
                   data.draw(st.sampled_from([1, 2, 3, -1, -2, 7])))
        assert ds[sl] == records[sl]
        assert list(ds) == records
        start = data.draw(st.integers(0, n))
        assert list(ds.iter_records(start, n, block_bytes=50)) == records[start:]
