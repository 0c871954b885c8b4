"""Request rounds of remote batches over HTTP (nginx on loopback), counted from the storage's
calls and nginx's access log: the first batch after opening through the manifest is two
rounds (the pages of every sidecar it touches in one multi-range request each, then the data,
one request per shard), with no ``HEAD``: each data file's stamp is checked on its first
response (its ``ETag`` and the size its ``Content-Range`` gives); a warm batch is one round.
Then the checks that ride on reads: a data file changed since it was indexed, or since it was
first read, is refused before any of its bytes is handed out, through single and multi-range
answers, and a server that does not give the size in its answers is asked with a ``HEAD``.

The datasets served here are stamped as indexed through the server (its ETags: the fast path
of a data file's identity); one indexed locally and served as it was copied is checked by its
content instead, in the same index round (:mod:`ofindex.storage.identity`)."""

from __future__ import annotations

import http.server
import os
import pickle
import re
import uuid

import numpy as np
import pytest

import ofindex
from ofindex.read.remote import pages
from ofindex.storage import FileStamp
from ofindex.storage.fsspec_storage import FsspecStorage
from ofindex.storage.stamp import ExpectedFiles, ExpectedUnion
from ofindex.transport import store
from ofindex.transport.policy import RequestPolicy, retry_settings
from tests.kit import servers
from tests.kit.datasets import random_dataset
from tests.kit.helpers import copy_dataset, sidecar_of, stamp_as_served
from tests.kit.old_sidecars import rewrite_as_version_1
from tests.kit.rounds import Rounds
from tests.kit.servers import log_lines

SHARDS = 4
PER_SHARD = 1500
RECORD = 2000  # pages of 256 records: 6 pages a shard, read by pages (not whole)
#: no hedged requests: every request counted is one the round structure asked for
NO_HEDGE = RequestPolicy(hedge_factor=0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_dataset(tmp_path_factory, "rounds-ds", SHARDS * PER_SHARD, SHARDS,
                          record_size=RECORD, seed=5)


@pytest.fixture
def served(nginx_server, dataset):
    """The dataset under nginx, its host not known to answer multi-range requests yet (as in
    a new process): ``(url, directory served, expected records, access log)``."""
    d, expected = dataset
    name = uuid.uuid4().hex[:8]
    root = os.path.join(nginx_server.root, name)
    copy_dataset(d, root)
    stamp_as_served(root, f"{nginx_server.url}/{name}")
    saved = dict(store.SUPPORT)
    store.SUPPORT.pop(store.host_of(nginx_server.url), None)
    yield f"{nginx_server.url}/{name}", root, expected, nginx_server.log
    store.SUPPORT.clear()
    store.SUPPORT.update(saved)


class Log:
    """nginx's requests since the last :meth:`take`: ``(method, path, status, bytes sent)``."""

    LINE = re.compile(r'"(GET|HEAD) (\S+) [^"]*" (\d{3}) (\d+)')

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen = len(log_lines(path))

    def take(self) -> list[tuple[str, str, int, int]]:
        lines = log_lines(self.path)
        new, self.seen = lines[self.seen:], len(lines)
        return [(m[1], m[2], int(m[3]), int(m[4])) for m in map(self.LINE.search, new) if m]


def test_first_batch_after_open_is_two_rounds_and_no_head(served):
    url, _, expected, access = served
    with retry_settings(policy=NO_HEDGE):
        ds = ofindex.open(url)
    rounds, log = Rounds(ds._table.storage), Log(access)
    idx = np.random.default_rng(1).choice(len(expected), 128, replace=False)
    assert ds[idx] == [expected[i] for i in idx]
    assert rounds.calls == ["fetch_round", "read_ranges_concat"]  # index pages, then data
    sent = log.take()
    index = [r for r in sent if r[1].endswith(".ofidx")]
    data = [r for r in sent if not r[1].endswith(".ofidx")]
    assert not [r for r in sent if r[0] == "HEAD"]  # the stamps rode on the data's answers
    assert len(index) == SHARDS and len(data) == SHARDS  # one request per shard per round
    assert all(status == 206 for _, _, status, _ in sent)
    # the index round learnt that nginx answers multi-range requests, so the data round read
    # through small gaps only (not through the 256 KiB gaps of a single-range store)
    used = sum(len(expected[i]) for i in idx)
    assert sum(n for *_, n in data) < 2 * used
    # warm: the same records again, every page cached: one round, one request per shard
    rounds.clear()
    assert ds[idx[::-1]] == [expected[i] for i in idx[::-1]]
    assert rounds.calls == ["read_ranges_concat"]
    assert [r[0] for r in log.take()] == ["GET"] * SHARDS


def test_a_copied_dataset_is_checked_by_content_in_the_index_round(nginx_server, dataset):
    """Indexed on local disk and served as copied (its sidecars name the files' mtimes, the
    server gives ETags): still two rounds and no HEAD; each data file's content regions come
    in one multi-range request per shard in the index round, 12 KiB each, and their answers
    give its stamp."""
    d, expected = dataset
    name = uuid.uuid4().hex[:8]
    copy_dataset(d, os.path.join(nginx_server.root, name))
    saved = dict(store.SUPPORT)
    store.SUPPORT.clear()
    try:
        with retry_settings(policy=NO_HEDGE):
            ds = ofindex.open(f"{nginx_server.url}/{name}")
        rounds, log = Rounds(ds._table.storage), Log(nginx_server.log)
        idx = np.random.default_rng(1).choice(len(expected), 128, replace=False)
        assert ds[idx] == [expected[i] for i in idx]
        assert rounds.calls == ["fetch_round", "read_ranges_concat"]
        sent = log.take()
        data = [r for r in sent if not r[1].endswith(".ofidx")]
        assert not [r for r in sent if r[0] == "HEAD"]
        assert len(data) == 2 * SHARDS  # the content check and the data, per shard
        assert sum(1 for r in data if 3 * 4096 <= r[3] < 3 * 4096 + 1024) >= SHARDS
        rounds.clear()
        assert ds[idx[::-1]] == [expected[i] for i in idx[::-1]]  # checked once: one round
        assert rounds.calls == ["read_ranges_concat"]
        assert len(log.take()) == SHARDS
    finally:
        store.SUPPORT.clear()
        store.SUPPORT.update(saved)


def test_a_data_file_changed_since_indexing_is_refused_on_its_first_read(served):
    url, root, expected, access = served
    ds = ofindex.open(url)
    assert ds[[5, PER_SHARD + 5]] == [expected[5], expected[PER_SHARD + 5]]
    with open(os.path.join(root, "part-00002"), "ab") as f:
        f.write(b"grown")  # its index (and the manifest) describe the old size
    log = Log(access)
    first = 2 * PER_SHARD
    with pytest.raises(ofindex.StaleIndexError, match=r"index is stale for .*part-00002: its "
                       r"size changed.*ofindex.build_index"):
        ds[[first + 3, first + 900, 7]]  # a multi-range answer
    with pytest.raises(ofindex.StaleIndexError, match="index is stale"):
        ds[first + 10]  # a single range
    assert not [r for r in log.take() if r[0] == "HEAD"]
    assert ds[[6, PER_SHARD + 6]] == [expected[6], expected[PER_SHARD + 6]]  # others read on


def test_a_data_file_replaced_after_its_first_read_is_refused(served):
    url, root, expected, _ = served
    ds = ofindex.open(url)
    assert ds[[3, 400]] == [expected[3], expected[400]]
    path = os.path.join(root, "part-00000")
    with open(path, "rb") as f:
        data = f.read()
    with open(path + ".new", "wb") as f:  # same size, other bytes: only the ETag tells
        f.write(data[:100] + bytes(255 - b for b in data[100:200]) + data[200:])
    os.utime(path + ".new", ns=(1, os.stat(path).st_mtime_ns + 10**9))
    os.replace(path + ".new", path)
    with pytest.raises(ofindex.StaleIndexError, match=r"part-00000: its etag changed .* since "
                       r"the dataset was opened"):
        ds[[3, 400]]
    with pytest.raises(ofindex.StaleIndexError, match="since the dataset was opened"):
        ds[4]



def test_a_response_repeating_the_stamp_judged_is_not_judged_again(served, monkeypatch):
    """Once a data file's stamp was judged against its index, a response that says the same
    (size, ETag, Last-Modified) is that version again: compared, not judged anew (a warm batch
    makes no stamp); one that says otherwise is judged (the test above)."""
    url, _, expected, _ = served
    ds = ofindex.open(url)
    assert ds[[3, 400]] == [expected[3], expected[400]]
    judged = []
    observe = ExpectedFiles.observe

    def judging(self, path, current, url):
        judged.append(path)
        return observe(self, path, current, url)

    monkeypatch.setattr(ExpectedFiles, "observe", judging)
    assert ds[[3, 400, 5]] == [expected[3], expected[400], expected[5]]  # multi-range
    assert ds[7] == expected[7]  # a single range
    assert judged == []

@pytest.mark.parametrize("ranges", [1, 5])
def test_stamp_checks_ride_on_single_and_multi_range_answers(nginx_server, ranges):
    name = f"{uuid.uuid4().hex[:8]}.bin"
    path = os.path.join(nginx_server.root, name)
    with open(path, "wb") as f:
        f.write(os.urandom(100_000))
    url = f"{nginx_server.url}/{name}"
    storage = FsspecStorage("http")
    assert storage.checks_stamp_on_read
    stamp = storage.stamp(url)  # what a sidecar built over HTTP holds: the ETag
    assert stamp.fingerprint.startswith("etag:")
    starts = [k * 10_000 for k in range(ranges)]
    ends = [s + 100 for s in starts]
    wrong = FileStamp(stamp.size, "etag:not-this-one")
    storage.expect_indexed(url, wrong, "idx://part.ofidx")
    log = Log(nginx_server.log)
    with pytest.raises(ofindex.StaleIndexError, match=r"idx://part\.ofidx: index is stale for "
                       r".*: its etag changed from not-this-one to"):
        storage.read_ranges([url] * ranges, starts, ends)
    storage.expect_indexed(url, stamp, "idx://part.ofidx")
    with open(path, "rb") as f:
        local = f.read()
    assert storage.read_ranges([url] * ranges, starts, ends) == [local[s:e] for s, e in
                                                                  zip(starts, ends, strict=True)]
    assert {r[0] for r in log.take()} == {"GET"}  # no HEAD: the answers told
    assert not storage.expected.owes(url) and storage.expected.watches(url)
    os.utime(path, ns=(1, os.stat(path).st_mtime_ns + 10**9))  # a new version (new ETag)
    with pytest.raises(ofindex.StaleIndexError, match="since the dataset was opened"):
        storage.read_ranges([url] * ranges, starts, ends)


class _NoSize(http.server.BaseHTTPRequestHandler):
    """Answers single ranges with ``Content-Range: bytes a-b/*`` (no size), and ``HEAD``."""

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        with self.server.lock:
            self.server.heads += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.send_header("ETag", '"v1"')
        self.end_headers()

    def do_GET(self):
        a, b = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers["Range"]).groups())
        body = self.server.body[a : b + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/*")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        self.wfile.write(body)


def test_an_answer_without_the_size_is_checked_with_a_head():
    body = os.urandom(5000)
    with servers.serve_http(_NoSize, body=body, heads=0) as (url, srv):
        storage = FsspecStorage("http")
        storage.expect_indexed(f"{url}/f", FileStamp(len(body) + 1, "etag:v1"), "f.ofidx")
        with pytest.raises(ofindex.StaleIndexError, match="size changed"):
            storage.read(f"{url}/f", 10, 20)
        assert srv.heads == 1
        storage.expect_indexed(f"{url}/f", FileStamp(len(body), "etag:v1"), "f.ofidx")
        assert storage.read(f"{url}/f", 10, 20) == body[10:20]
        assert storage.read(f"{url}/f", 30, 40) == body[30:40]  # checked: a HEAD each time
        assert srv.heads == 3


def test_a_server_without_multi_range_reads_through_wide_gaps_again(dataset, tmp_path):
    """A web server not tried yet is taken to answer multi-range requests (ranges planned
    through small gaps); one that answers with the whole file has its ranges read again as a
    single-range store's are, through wide gaps: a few requests per shard, not one a record."""
    d, expected = dataset
    root = str(tmp_path / "www")
    copy_dataset(d, os.path.join(root, "ds"))
    with servers.python_http_server(root, honour_range=True) as (url, srv):
        stamp_as_served(os.path.join(root, "ds"), f"{url}/ds")
        saved = dict(store.SUPPORT)
        try:
            ds = ofindex.open(f"{url}/ds")
            before = srv.gets
            idx = np.random.default_rng(2).choice(len(expected), 128, replace=False)
            assert ds[idx] == [expected[i] for i in idx]
            assert store.SUPPORT[store.host_of(url)] is False
            # per shard: its sidecar's pages, the multi-range request tried, and a few reads
            # (split where two records lie more than 256 KiB apart), not one per record
            assert srv.gets - before <= 5 * SHARDS < len(idx) // 4
            before = srv.gets
            assert ds[idx[::-1]] == [expected[i] for i in idx[::-1]]
            assert srv.gets - before <= 3 * SHARDS  # the same reads, planned as such
        finally:
            store.SUPPORT.clear()
            store.SUPPORT.update(saved)


def test_version_1_sidecars_over_http_fall_back_to_whole_fetches(served):
    url, root, expected, access = served
    rewrite_as_version_1(root, SHARDS)
    ds = ofindex.open(url)
    idx = np.random.default_rng(3).integers(0, len(expected), 100)
    log = Log(access)
    assert ds[idx] == [expected[i] for i in idx]
    assert all(s.loaded for s in ds._table.shards)
    assert not [r for r in log.take() if r[0] == "HEAD"]


def test_a_missing_sidecar_is_named_after_a_multi_range_round(served):
    url, root, expected, _ = served
    ds = ofindex.open(url)
    os.remove(sidecar_of(os.path.join(root, "part-00001")))
    with pytest.raises(ofindex.IndexNotFoundError, match="part-00001"):
        ds[[PER_SHARD + 1, PER_SHARD + 700, 2]]
    assert ds[[2, 3]] == [expected[2], expected[3]]


def test_the_first_batch_reads_by_pages_at_this_size():
    """The sizes above keep the shards read by pages (else the tests would prove nothing)."""
    p = pages.page_records_for(PER_SHARD, PER_SHARD * (RECORD + 16))
    assert pages.WHOLE_BELOW_PAGES * p < PER_SHARD


def test_owed_checks_are_settled_once_and_not_pickled():
    files = ExpectedFiles()
    files.expect_indexed("a", FileStamp(10, "etag:x"), "a.ofidx")
    assert files.owes("a") and files.watches("a") and not files.watches("b")
    with pytest.raises(ofindex.StaleIndexError, match=r"a\.ofidx: index is stale for A: its "
                       r"size changed from 10 to 11"):
        files.observe("a", FileStamp(11, "etag:x"), "A")
    assert files.owes("a")  # still owed: a refused read settles nothing
    files.observe("a", FileStamp(10, "etag:x"), "A")
    assert not files.owes("a") and files.watches("a")
    with pytest.raises(ofindex.StaleIndexError, match="since the dataset was opened"):
        files.observe("a", FileStamp(10, "etag:y"), "A")
    files.expect_indexed("b", FileStamp(5), "b.ofidx")
    again = pickle.loads(pickle.dumps(files))  # the new process's first batch owes it again
    assert again.watches("a") and not again.owes("b")
    union = ExpectedUnion([files, again])
    union.expect_indexed("c", FileStamp(3), "c.ofidx")
    assert union.owes("c") and files.owes("c")
    with pytest.raises(ofindex.StaleIndexError, match=r"c\.ofidx: index is stale"):
        union.observe("c", FileStamp(4), "C")
    union.observe("c", FileStamp(3), "C")
    assert not union.owes("c")
