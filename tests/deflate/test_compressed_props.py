"""Property tests of compressed files: any records, any seek-point spacing, both compressions,
both framings; the writer's and the builder's sidecars agree and give the records back, and
inflating from any seek point gives what zlib gives from the start."""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ofindex
from ofindex.deflate import fast_inflate
from ofindex.deflate.inflate import inflate_span
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import (
    IMPLEMENTATIONS,
    implementation,
    ref_ofrecord,
    ref_tfrecord,
    sidecar_of,
    write_raw,
    zlib_pack,
)

COMPRESSIONS = ["gzip", "zlib"]
FORMATS = ["tfrecord", "ofrecord"]

records_strategy = st.lists(
    st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=3000),
              st.just(b""), st.just(b"abc" * 400)),
    max_size=50,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, spacing=st.integers(1, 1 << 15),
       compression=st.sampled_from(COMPRESSIONS), fmt=st.sampled_from(FORMATS),
       impl=st.sampled_from(IMPLEMENTATIONS))
def test_writer_and_builder_agree(records, spacing, compression, fmt, impl):
    with tempfile.TemporaryDirectory() as d, implementation(impl):
        path = os.path.join(d, "data")
        with ofindex.Writer(path, fmt, compression=compression, seek_spacing=spacing) as w:
            w.write_many(records)
        raw = (ref_tfrecord if fmt == "tfrecord" else ref_ofrecord)(records)
        with open(path, "rb") as f:
            packed = f.read()
        assert (gzip.decompress(packed) if compression == "gzip"
                else zlib.decompress(packed)) == raw
        written = open_local_sidecar(sidecar_of(path))
        ds = ofindex.open(path)
        assert ds[:] == records and list(ds) == records
        order = np.random.default_rng(len(records)).permutation(len(records))
        assert ds[order] == [records[i] for i in order]
        os.remove(sidecar_of(path))
        (res,) = ofindex.build_index(path, format=fmt, seek_spacing=spacing)
        built = open_local_sidecar(sidecar_of(path))
        assert np.array_equal(built.offsets, written.offsets)
        assert built.header.indexed_end == written.header.indexed_end == len(raw)
        assert built.header.uncompressed_size == written.header.uncompressed_size == len(raw)
        assert built.compression is written.compression
        assert res.records == len(records)
        ds = ofindex.open(path)
        assert [ds[int(i)] for i in order] == [records[i] for i in order]
        assert list(ds) == records


def _big_records(seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    vocab = [rng.bytes(int(k)) for k in rng.integers(1, 12, size=500)]
    return [b"".join(vocab[j] for j in rng.integers(0, 500, size=int(rng.integers(0, 60))))
            for _ in range(3000)]


def _mixed_records(seed: int) -> list[bytes]:
    """Incompressible blobs (as JPEG images are) among text: the windows of the points in
    stored blocks can be cut short."""
    rng = np.random.default_rng(seed)
    text = _big_records(seed)
    return [rng.bytes(int(rng.integers(5000, 40000))) if i % 3 else text[i] for i in range(120)]


RAWS = {"text": ref_tfrecord(_big_records(7)), "mixed": ref_tfrecord(_mixed_records(8))}


@settings(max_examples=30, deadline=None)
@given(data=st.data(), compression=st.sampled_from(COMPRESSIONS),
       impl=st.sampled_from(IMPLEMENTATIONS), level=st.sampled_from([1, 6, 9]),
       kind=st.sampled_from(sorted(RAWS)), members=st.sampled_from([1, 3]),
       isal=st.booleans())
def test_any_seek_point_inflates_what_zlib_gives(data, compression, impl, level, kind,
                                                 members, isal):
    """A file compressed by zlib (not by ofindex), one stream or several, indexed at a small
    spacing: from every seek point (with its window cut to what follows it), inflating any
    length gives the bytes of a full decompression."""
    raw = RAWS[kind]
    packed = zlib_pack(raw, compression, level, members)
    with tempfile.TemporaryDirectory() as d:
        path = write_raw(os.path.join(d, "f"), packed)
        with implementation("compiled"):
            ofindex.build_index(path, seek_spacing=4096)
        sc = open_local_sidecar(sidecar_of(path))
        seeks = sc.seeks
        if kind == "mixed":  # stored blocks need no window
            assert min(len(seeks.window(k)) for k in range(1, len(seeks))) < 32768
        k = data.draw(st.integers(0, len(seeks) - 1))
        out = int(seeks.out[k])
        want = data.draw(st.integers(0, len(raw) - out))
        saved = fast_inflate.ISAL
        assert saved is not None, "pip install isal (in the test extra)"
        fast_inflate.ISAL = saved if isal else None  # ISA-L, else zlib (compiled or Python's)
        try:
            with implementation(impl):
                got = _inflate_from(packed, seeks, k, sc.compression, want)
        finally:
            fast_inflate.ISAL = saved
        assert bytes(got) == raw[out : out + want]


def _inflate_from(packed, seeks, k, compression, want):
    a = seeks.compressed_start(k)
    return inflate_span(packed[a:], a, int(seeks.kind[k]), int(seeks.bits[k]), seeks.window(k),
                        compression, want)


def test_records_larger_than_a_block_in_multi_member_gzip(tmp_path):
    """Records larger than the scanner's 1 MiB block (streamed through), a gzip header with
    a file name (as gzip(1) writes), and a second member."""
    import io

    rng = np.random.default_rng(0)
    records = [rng.bytes(2_500_000), b"", b"x" * 1_500_000, rng.bytes(10)]
    for fmt, frame in (("tfrecord", ref_tfrecord), ("ofrecord", ref_ofrecord)):
        raw = frame(records)
        buf = io.BytesIO()
        with gzip.GzipFile(filename="data.tfrecord", mode="wb", fileobj=buf, mtime=0) as g:
            g.write(raw)
        path = write_raw(str(tmp_path / f"{fmt}.gz"), buf.getvalue() + gzip.compress(raw))
        for impl in IMPLEMENTATIONS:
            for verify in (False, True):
                with implementation(impl):
                    (res,) = ofindex.build_index(path, verify=verify, seek_spacing=512 << 10)
                    ds = ofindex.open(path)
                    assert res.records == 8 and res.format.name.lower() == fmt
                    assert [ds[i] for i in (5, 0, 7, 2)] == [records[i % 4] for i in (5, 0, 7, 2)]
                    assert list(ds) == records * 2
