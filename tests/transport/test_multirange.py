"""HTTP multi-range GETs (``ofindex.transport.store``, ``.http``): the pure planner and parser,
and the storage on real servers — nginx answers ``multipart/byteranges``; servers that answer the
whole file, only the first range, or one coalesced range, and a server whose parts are
malformed, are all read correctly, one range per request from then on."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import itertools
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex.errors import RangeReadError
from ofindex.storage import storage_for
from ofindex.transport import store
from ofindex.transport.http import ByteRangesParser, HttpClient, range_header
from ofindex.transport.store import plan_groups, split_requests
from tests.kit import servers

DATA = bytes(np.random.default_rng(7).integers(0, 256, 300_000, dtype=np.uint8))


def body_of(spans, boundary="XyZ", padding=""):
    """A multipart/byteranges body for ``spans`` of DATA, written by hand as RFC 7233's
    example shows it."""
    out = b""
    for a, b in spans:
        out += (f"\r\n--{boundary}{padding}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Range: bytes {a}-{b - 1}/{len(DATA)}\r\n\r\n").encode() + DATA[a:b]
    return out + f"\r\n--{boundary}--\r\n".encode()


def parse_byteranges(body, content_type, url):
    """The parts of a whole ``multipart/byteranges`` body, in the order sent."""
    parser = ByteRangesParser(body, content_type, url)
    parts = parser.feed(len(body))
    parser.finish()
    return parts


class Canned(HttpClient):
    """Answers every GET with ``body`` (``multipart/byteranges; boundary=XyZ``), arriving in
    pieces of the sizes ``chunks`` (cycled)."""

    def __init__(self, body, chunks=(1 << 20,)):
        super().__init__({})
        self.body, self.chunks = body, chunks

    @contextlib.asynccontextmanager
    async def get(self, url, spec):
        body, chunks = self.body, self.chunks

        class Answer:
            status = 206

            def __init__(self):
                self.headers = {"Content-Length": str(len(body)),
                                "Content-Type": "multipart/byteranges; boundary=XyZ"}
                self.content = self

            async def iter_any(self):
                at = 0
                for n in itertools.cycle(chunks):
                    if at >= len(body):
                        return
                    yield body[at : at + n]
                    at += n

        answer = Answer()
        yield answer


def delivered(client, spans):
    """What ``client.get_spans`` hands out for ``spans``: span number -> bytes."""
    got = {}

    def deliver(j, data):
        assert j not in got  # each span once
        got[j] = bytes(data)

    asyncio.run(client.get_spans("u", spans, deliver))
    return got


# -- the planner ----------------------------------------------------------------------------
def test_range_header_merges_touching_and_overlapping_spans():
    assert range_header([(10, 20), (0, 5)]) == "bytes=0-4,10-19"
    assert range_header([(0, 5), (5, 9), (7, 12), (20, 21)]) == "bytes=0-11,20-20"


def test_plan_splits_by_bytes_and_header_length():
    starts = list(range(0, 100_000, 100))
    ends = [s + 10 for s in starts]
    groups = plan_groups(starts, ends, max_header=500, group_bytes=1 << 30, min_groups=1)
    assert sorted(k for g in groups for k in g) == list(range(len(starts)))
    for g in groups:
        assert len(range_header([(starts[k], ends[k]) for k in g])) <= 500 + len("bytes=")
        assert [starts[k] for k in g] == sorted(starts[k] for k in g)
    assert len(groups) > 10
    # by bytes: about group_bytes each, and at least min_groups
    groups = plan_groups([0, 1000, 2000, 3000], [900, 1900, 2900, 3900], group_bytes=1800,
                         min_groups=1)
    assert groups == [[0, 1], [2, 3]]
    assert len(plan_groups([0, 1000, 2000, 3000], [10, 1010, 2010, 3010], min_groups=4)) == 4
    assert plan_groups([5], [6]) == [[0]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 500)), min_size=1,
                max_size=80),
       st.integers(1, 5000), st.integers(30, 400), st.integers(1, 6))
def test_plan_covers_every_range_once(spans, group_bytes, max_header, min_groups):
    starts = [a for a, _ in spans]
    ends = [a + n for a, n in spans]
    groups = plan_groups(starts, ends, group_bytes=group_bytes, max_header=max_header,
                         min_groups=min_groups)
    assert sorted(k for g in groups for k in g) == list(range(len(spans)))
    assert all(g for g in groups)
    for g in groups:
        if len(g) > 1:  # a lone range may be longer than the limit; more never are
            assert sum(len(f"{starts[k]}-{ends[k] - 1},") for k in g) <= max_header


def test_split_requests_spreads_the_requests_over_the_files(fresh_support):
    urls = {p: f"http://h{p[0]}/{p}" for p in ("a1", "b2", "a3")}
    fresh_support["http://hb"] = False  # host b answers one range per request
    paths = ["a1"] * 8 + ["b2"] * 3 + ["a3"] * 8 + ["a1"]
    starts = [100 * k for k in range(len(paths))]
    ends = [s + 10 for s in starts]
    ends[0] = starts[0]  # empty: fetched alone (no request at all)
    groups, singles = split_requests(paths, starts, ends, urls.__getitem__)
    assert sorted([k for g in groups for k in g] + singles) == list(range(len(paths)))
    assert sorted(singles) == [0, 8, 9, 10]
    assert all(len({paths[k] for k in g}) == 1 and len(g) > 1 for g in groups)
    # two files that take multi-range requests: two requests each make the four
    assert sorted(len(g) for g in groups) == [4, 4, 4, 4]
    many = [f"f{k}" for k in range(16) for _ in range(10)]
    groups, singles = split_requests(many, list(range(160)), list(range(1, 161)),
                                     lambda p: "http://one")
    assert not singles and len(groups) == 16  # 16 files: one request each


# -- the parser -----------------------------------------------------------------------------
def test_parse_and_cut_nginx_style_body():
    spans = [(0, 4), (10, 13), (100_000, 100_011)]
    parts = parse_byteranges(body_of(spans), "multipart/byteranges; boundary=XyZ", "u")
    assert [(p.start, p.end, bytes(p.data)) for p in parts] == [
        (a, b, DATA[a:b]) for a, b in spans]
    got = delivered(Canned(body_of(spans)), [(10, 12), (0, 4), (100_005, 100_011), (3, 11)])
    assert got == {0: DATA[10:12], 1: DATA[0:4], 2: DATA[100_005:100_011]}  # 3: in no part


def test_parse_accepts_padding_quotes_and_a_preamble():
    body = b"preamble to ignore" + body_of([(5, 9), (20, 30)], boundary="b 1", padding=" \t")
    parts = parse_byteranges(body, 'multipart/byteranges; boundary="b 1"', "u")
    assert [bytes(p.data) for p in parts] == [DATA[5:9], DATA[20:30]]


@pytest.mark.parametrize("mangle, why", [
    (lambda b: b.replace(b"Content-Range", b"Content-Rang"), "no Content-Range"),
    (lambda b: b[:-15], "cut short"),
    (lambda b: b.replace(b"bytes 20-29", b"bytes 20-39"), "cut short"),
    (lambda b: b.replace(b"bytes 20-29", b"bytes 20-25"), "cut short|boundary"),
    (lambda b: b.replace(b"--XyZ--", b"--XyQ--"), "boundary"),
    (lambda b: b.replace(b"--XyZ\r\nContent", b"--XyZ!Content", 1), "line break"),
    (lambda b: b.replace(b"\r\n\r\n", b"\r\n", 1), "cut short|do not end|Content-Range"),
])
def test_malformed_bodies_are_errors(mangle, why):
    body = mangle(body_of([(5, 9), (20, 30)]))
    with pytest.raises(RangeReadError, match=f"http://h/f: .*malformed.*({why})"):
        parse_byteranges(body, "multipart/byteranges; boundary=XyZ", "http://h/f")
    with pytest.raises(RangeReadError, match="names no boundary"):
        parse_byteranges(body_of([(5, 9)]), "multipart/byteranges", "http://h/f")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=12),
       st.lists(st.integers(1, 5000), min_size=1, max_size=200))
def test_parts_come_out_as_the_body_arrives(sizes, chunks):
    """Fed a body in any pieces, the parser hands out each part once its data and the next
    boundary are in, never a part before it is whole, and all of them by the end."""
    spans, at = [], 0
    for n in sizes:
        spans.append((at, at + n))
        at += n + 7
    body = body_of([(a, min(b, len(DATA))) for a, b in spans if a < len(DATA)])
    buf = bytearray(len(body))
    parser = ByteRangesParser(buf, "multipart/byteranges; boundary=XyZ", "u")
    got, filled = [], 0
    for n in itertools.cycle(chunks):
        step = min(n, len(body) - filled)
        buf[filled : filled + step] = body[filled : filled + step]
        filled += step
        for part in parser.feed(filled):
            end_of_part = body.index(DATA[part.start:part.end]) + (part.end - part.start)
            assert end_of_part + 2 <= filled  # whole, and its line break seen
            got.append((part.start, part.end, bytes(part.data)))
        if filled == len(body):
            break
    parser.finish()
    assert got == [(a, b, DATA[a:b]) for a, b in (
        (a, min(b, len(DATA))) for a, b in spans if a < len(DATA))]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(1, 3000)), min_size=1,
                max_size=40), st.data())
def test_any_parts_give_back_the_asked_bytes(spans, data):
    """The answer to the merged ranges of a Range header, arriving in any pieces, hands out
    every span asked for once, with its bytes."""
    spans = [(a, min(a + n, len(DATA))) for a, n in spans]
    merged = [(int(m.group(1)), int(m.group(2)) + 1)
              for m in re.finditer(r"(\d+)-(\d+)", range_header(spans))]
    order = data.draw(st.permutations(range(len(spans))))
    asked = [spans[k] for k in order]
    chunks = data.draw(st.lists(st.integers(1, 5000), min_size=1, max_size=20))
    got = delivered(Canned(body_of(merged), chunks), asked)
    assert got == {j: DATA[a:b] for j, (a, b) in enumerate(asked)}


# -- real servers ---------------------------------------------------------------------------
@pytest.fixture
def fresh_support():
    saved = dict(store.SUPPORT)
    store.SUPPORT.clear()
    yield store.SUPPORT
    store.SUPPORT.clear()
    store.SUPPORT.update(saved)


def random_spans(n, size, seed):
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(len(DATA) - size, n, replace=False))
    return [int(s) for s in starts], [int(s) + int(rng.integers(1, size)) for s in starts]


def test_nginx_serves_many_ranges_in_a_few_requests(nginx_server, fresh_support):
    with open(os.path.join(nginx_server.root, "mr.bin"), "wb") as f:
        f.write(DATA)
    storage, path = storage_for(f"{nginx_server.url}/mr.bin")
    starts, ends = random_spans(300, 400, seed=1)
    before = storage.requests
    got = storage.read_ranges([path] * 300, starts, ends)
    assert got == [DATA[a:b] for a, b in zip(starts, ends, strict=True)]
    assert all(isinstance(g, bytes) for g in got)
    assert storage.requests - before == store.MIN_GROUPS  # not 300
    assert fresh_support == {store.host_of(nginx_server.url): True}
    assert storage.preferred_gap(path) == store.MULTI_RANGE_GAP
    # unordered, overlapping and repeated ranges, and the concatenating form
    s2, e2 = [*starts[::-1], starts[0]], [*ends[::-1], ends[0] + 50]
    assert storage.read_ranges_concat([path] * len(s2), s2, e2) == b"".join(
        DATA[a:b] for a, b in zip(s2, e2, strict=True))


class _Odd(http.server.BaseHTTPRequestHandler):
    """Answers a multi-range GET as ``server.mode`` says: ``whole`` (200 and the file),
    ``first`` (206 and the first range only, as some object stores do), ``coalesce`` (206
    and one range from the first start to the last end), ``garbled`` (multipart with a part
    shorter than its Content-Range); single ranges are answered correctly."""

    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms stall)

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        spec = self.headers.get("Range", "")
        ranges = [(int(a), int(b) + 1) for a, b in re.findall(r"(\d+)-(\d+)", spec)]
        with srv.lock:
            srv.seen.append(len(ranges))
        mode = srv.mode if len(ranges) > 1 else "single"
        if mode == "whole" or not ranges:
            return self._send(200, DATA, {})
        if mode == "garbled":
            body = body_of(ranges, boundary="B").replace(DATA[ranges[0][0]:ranges[0][1]], b"",
                                                         1)  # the first part's bytes left out
            return self._send(206, body, {"Content-Type": "multipart/byteranges; boundary=B"})
        a, b = {"single": ranges[0], "first": ranges[0],
                "coalesce": (ranges[0][0], ranges[-1][1])}[mode]
        self._send(206, DATA[a:b], {"Content-Range": f"bytes {a}-{b - 1}/{len(DATA)}"})

    def _send(self, status, body, headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


def odd_server(mode):
    return servers.serve_http(_Odd, mode=mode, seen=[])


@pytest.mark.parametrize("mode", ["whole", "first", "garbled"])
def test_servers_without_multi_range_are_read_one_range_per_request(mode, fresh_support):
    with odd_server(mode) as (url, srv):
        storage, path = storage_for(f"{url}/f.bin")
        starts, ends = random_spans(40, 300, seed=2)
        for _ in range(2):
            got = storage.read_ranges([path] * 40, starts, ends)
            assert got == [DATA[a:b] for a, b in zip(starts, ends, strict=True)]
        assert fresh_support == {store.host_of(url): False}
        assert storage.preferred_gap(path) == storage.default_max_gap
        # the first batch tried a few multi-range requests; the second asked one by one
        tried = [n for n in srv.seen if n > 1]
        assert len(tried) == store.MIN_GROUPS and sum(tried) == 40
        assert srv.seen[-40:] == [1] * 40


def test_a_coalesced_answer_is_cut_into_the_ranges(fresh_support):
    with odd_server("coalesce") as (url, srv):
        storage, path = storage_for(f"{url}/f.bin")
        starts = [1000, 1100, 1200, 1300, 5000, 5100, 5200, 5300]
        ends = [s + 50 for s in starts]
        got = storage.read_ranges([path] * 8, starts, ends)
        assert got == [DATA[a:b] for a, b in zip(starts, ends, strict=True)]
        assert srv.seen == [2] * 4
        assert fresh_support[store.host_of(url)] is True
        # a coalesced range far larger than the ranges asked for is not downloaded
        client = storage.client
        handed = []
        got = client.run(client.http_client.get_spans(path, [(0, 10), (290_000, 290_010)],
                                                      lambda j, data: handed.append(j)))
        assert got is None and not handed
        assert srv.seen[4:] == [2]


def test_a_dataset_reads_through_smaller_gaps_once_multi_range_works(nginx_server,
                                                                     fresh_support):
    from ofindex.cli.synthetic import write_dataset

    d = os.path.join(nginx_server.root, f"gaps-{os.getpid()}")
    write_dataset(d, 400, 2, kind="random", record_size=30_000, index=False, seed=4)
    ofindex.build_index(d)
    local = ofindex.open(d)
    ds = ofindex.open(f"{nginx_server.url}/gaps-{os.getpid()}")
    # a web server not tried yet is taken to answer multi-range requests, as nginx does
    assert ds.max_gap == store.MULTI_RANGE_GAP
    idx = np.random.default_rng(5).choice(400, 40, replace=False).tolist()
    assert ds.__getitems__(idx) == local.__getitems__(idx)  # ranges > 256 KiB apart
    assert fresh_support == {store.host_of(nginx_server.url): True}
    assert ds.max_gap == store.MULTI_RANGE_GAP
    ds.max_gap = 123
    assert ds.max_gap == 123
    ds.max_gap = None
    assert ds.max_gap == store.MULTI_RANGE_GAP
    assert ds.__getitems__(idx[::-1]) == local.__getitems__(idx[::-1])
    local.close()


def test_compressed_batches_over_nginx_use_multi_range(nginx_server, fresh_support, tmp_path):
    import gzip

    from ofindex.formats.framing import RecordFormat, encode_record

    rng = np.random.default_rng(5)
    records = [rng.integers(0, 256, 200, dtype=np.uint8).tobytes() + bytes(300)
               for _ in range(40_000)]  # ~8 MB compressed, with windows at most points
    name = f"mr-{os.getpid()}.tfrecord.gz"
    with gzip.open(os.path.join(nginx_server.root, name), "wb") as f:
        for r in records:
            f.write(encode_record(r, RecordFormat.TFRECORD))
    # a file at the web root: its index goes to the root's own index directory, .ofindex/
    ofindex.build_index(os.path.join(nginx_server.root, name), seek_spacing=16 << 10,
                        index_dir=os.path.join(nginx_server.root, ".ofindex"))
    ds = ofindex.open(f"{nginx_server.url}/{name}")
    for seed in range(2):
        idx = np.random.default_rng(seed).choice(len(records), 64, replace=False).tolist()
        assert ds.__getitems__(idx) == [records[i] for i in idx]
    assert fresh_support == {store.host_of(nginx_server.url): True}
