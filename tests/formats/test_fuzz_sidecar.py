"""Fuzzing sidecars: every read path over mutated sidecars of intact data files.

Each example writes a small dataset (TFRecord or OFRecord, with or without payload
checksums, one or two shards), mutates one shard's sidecar (bits flipped anywhere, offsets set
to edge values — 2**63, 2**64-1, past the file —, offsets swapped, header fields set to edge
values with the header CRC recomputed, truncation, extension) and reads it every way: ``ds[i]``
(compiled and pure Python, memory-mapped and ``pread``), batches, slices, iteration,
``record_lengths``, and remote planned reads (``memory://``). Compressed files' sidecars
(version 3: the offsets packed in a zlib stream) get the same edits plus re-packed offsets
(a valid stream of other offsets, CRCs forged), read locally and remotely.

The data files are intact, so the property is strict: a read returns the records as written,
or raises an OfindexError; never another exception or an allocation beyond the files' size.
One exception is stated, not hidden: without a checksum (OFRecord without sidecar checksums,
or ``verify=False``) a corrupt offset that lands on bytes which happen to frame a record (a
run of zeros frames an empty OFRecord) reads back those framed bytes — they are counted as
"framed other bytes" and checked to be framed in the file, never bytes from outside it.

Every target has a default-tier test (a fixed set of inputs, tests/kit/fuzzkit.py) and a fuzz-tier
twin (``test_explore_*``: fresh inputs, ``bash tools/run-fuzz.sh``). An input is one
dataclass (``LocalInput`` …) whose repr is the ``@example`` that pins it: edits name places in
the sidecar by numbers taken modulo its size when applied, so an input stands on its own.
"""

from __future__ import annotations

import gzip
import os
import struct
import uuid
import zlib
from dataclasses import dataclass, field

import crc32c
import fsspec
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import ofindex
from ofindex.formats.sidecar_header import HEADER_SIZE
from ofindex.index.build_file import STREAM_CHUNK
from tests.kit.fuzzkit import Tally, budget, explore, guarded
from tests.kit.helpers import implementation, read_bytes, sidecar_of

EDGES = [0, 1, 8, 15, 16, 2**31, 2**32 - 1, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
#: (offset, struct format) of the header fields a mutation may set (CRC recomputed after).
FIELDS = [(8, "<H"), (10, "<B"), (11, "<B"), (12, "<I"), (16, "<Q"), (24, "<Q"), (32, "<Q"),
          (48, "<B"), (50, "<H"), (56, "<Q"), (64, "<Q"), (72, "<Q"), (80, "<Q"), (88, "<Q")]
#: (a forged header may say the index is partial: ofindex warns, as it should, on opening)
pytestmark = pytest.mark.filterwarnings("ignore:.*PARTIAL index:UserWarning")
TALLY_LOCAL = Tally("sidecar mutations, local read paths")
TALLY_REMOTE = Tally("sidecar mutations, remote planned reads (memory://)")
TALLY_PACKED = Tally("sidecar mutations, compressed files (packed offsets), local and remote")

records_st = st.lists(st.binary(max_size=40), min_size=1, max_size=8)


KINDS = ["flip", "offset", "offset", "swap", "field", "truncate", "extend", "checksum"]


#: A place in a sidecar: taken modulo the sidecar's size (in bits or bytes) when applied.
PLACE = st.integers(0, 2**20)


@st.composite
def mutations(draw, count: int, kinds: list[str] = KINDS, forge: float = 0.5):
    """1-3 edits of a sidecar for ``count`` records, then with probability ``forge`` both
    CRCs recomputed over them."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(kinds))
        if kind == "flip":  # mostly in the body (the header's CRC catches the rest)
            edits.append(("flip", "body" if draw(st.integers(0, 2)) else "any", draw(PLACE)))
        elif kind == "offset":
            value = draw(st.one_of(st.sampled_from(EDGES), st.integers(0, 2**64 - 1),
                                   st.integers(0, 2000)))
            edits.append(("offset", draw(st.integers(0, count - 1)), value))
        elif kind == "swap":
            edits.append(("swap", draw(st.integers(0, count - 1)), draw(st.integers(0, count - 1))))
        elif kind == "field":
            at, fmt = draw(st.sampled_from(FIELDS))
            bits = struct.calcsize(fmt) * 8
            value = draw(st.one_of(st.sampled_from([v for v in EDGES if v < 2**bits]),
                                   st.integers(0, 2**bits - 1)))
            edits.append(("field", at, fmt, value))
        elif kind == "truncate":
            edits.append(("truncate", draw(PLACE)))
        elif kind == "extend":
            edits.append(("extend", draw(st.binary(min_size=1, max_size=16))))
        else:
            edits.append(("checksum", draw(st.integers(0, count - 1)),
                          draw(st.integers(0, 2**32 - 1))))
    if draw(st.floats(0, 1)) < forge:  # a forged sidecar: both CRCs made to match the edits
        edits.append(("forge",))
    return edits


def mutate(raw: bytes, edits: list, count: int, has_sums: bool) -> bytes:
    buf = bytearray(raw)
    for edit in edits:
        kind = edit[0]
        if kind == "flip" and buf:
            low = HEADER_SIZE * 8 if edit[1] == "body" and len(buf) > HEADER_SIZE else 0
            bit = low + edit[2] % (len(buf) * 8 - low)
            buf[bit // 8] ^= 1 << (bit % 8)
        elif kind == "offset" and HEADER_SIZE + 8 * count <= len(buf):
            struct.pack_into("<Q", buf, HEADER_SIZE + 8 * edit[1], edit[2])
        elif kind == "swap" and HEADER_SIZE + 8 * count <= len(buf):
            a, b = HEADER_SIZE + 8 * edit[1], HEADER_SIZE + 8 * edit[2]
            buf[a : a + 8], buf[b : b + 8] = buf[b : b + 8], buf[a : a + 8]
        elif kind == "field" and len(buf) >= HEADER_SIZE:
            struct.pack_into(edit[2], buf, edit[1], edit[3])
            struct.pack_into("<I", buf, 44, 0)
            struct.pack_into("<I", buf, 44, crc32c.crc32c(bytes(buf[:HEADER_SIZE])))
        elif kind == "truncate" and buf:
            del buf[edit[1] % len(buf) :]
        elif kind == "extend":
            buf += edit[1]
        elif kind == "checksum" and has_sums and HEADER_SIZE + 12 * count <= len(buf):
            struct.pack_into("<I", buf, HEADER_SIZE + 8 * count + 4 * edit[1], edit[2])
        elif kind == "forge" and len(buf) >= HEADER_SIZE:
            struct.pack_into("<I", buf, 40, crc32c.crc32c(bytes(buf[HEADER_SIZE:])))
            struct.pack_into("<I", buf, 44, 0)
            struct.pack_into("<I", buf, 44, crc32c.crc32c(bytes(buf[:HEADER_SIZE])))
    return bytes(buf)


def framed_in(data: bytes, payload: bytes, tf: bool) -> bool:
    """Whether ``payload`` appears in ``data`` right after a header giving its length."""
    head = struct.pack("<Q" if tf else "<q", len(payload))
    at = data.find(head)
    while at >= 0:
        p = at + (12 if tf else 8)
        if data[p : p + len(payload)] == payload:
            return True
        at = data.find(head, at + 1)
    return False


class Case:
    """One written dataset and what reading it may give."""

    def __init__(self, shards: list[list[bytes]], tf: bool, sums: bool, verify: bool,
                 data: list[bytes]) -> None:
        self.records = [r for s in shards for r in s]
        self.tf, self.data = tf, data
        # a checksum of some kind covers every payload: reads must give exactly the records
        self.strict = verify and (tf or sums)

    def check(self, got, wanted: list[int], tally: Tally, name: str) -> None:
        for k, payload in zip(wanted, got, strict=True):
            payload = bytes(payload)
            if payload == self.records[k]:
                continue
            assert not self.strict, f"{name}: record {k} read back wrong with a checksum"
            assert any(framed_in(d, payload, self.tf) for d in self.data), \
                f"{name}: record {k} read bytes that are not framed in the data file"
            tally.add(f"{name}: framed other bytes (no checksum)")


def write(root: str, shards: list[list[bytes]], tf: bool, sums: bool) -> list[str]:
    paths = []
    for k, recs in enumerate(shards):
        p = os.path.join(root, f"part-{k}")
        with ofindex.Writer(p, format="tfrecord" if tf else "ofrecord", checksums=sums) as w:
            w.write_many(recs)
        paths.append(p)
    return paths


def read_everything(ds, case: Case, limit: int, tally: Tally, *, stat_checked: bool = True) -> None:
    """Every read path over ``ds``. ``stat_checked``: the data files' sizes were checked against
    the index at open (``check_stale=True``); without that, ``record_lengths`` (which reads no
    data) reports the index as it is, forged sizes included, while reads still refuse spans past
    a file's end."""
    n = len(ds)
    if n != len(case.records):
        return  # a count changed with a valid header CRC: the sidecar was refused or stale
    reads = {
        "ds[i]": lambda: [ds[i] for i in range(n)],
        "ds[-1]": lambda: [ds[-1]],
        "batch": lambda: ds.__getitems__(list(range(n - 1, -1, -1))),
        "slice": lambda: ds[0:n],
        "iteration": lambda: list(ds),
    }
    wanted = {"ds[i]": list(range(n)), "ds[-1]": [n - 1],
              "batch": list(range(n - 1, -1, -1)), "slice": list(range(n)),
              "iteration": list(range(n))}
    for name, fn in reads.items():
        outcome, value = guarded(fn, limit, tally, name)
        if outcome == "ok":
            case.check(value, wanted[name], tally, name)
    outcome, lengths = guarded(lambda: ds.record_lengths(list(range(n))), limit, tally,
                               "record_lengths")
    if outcome == "ok" and stat_checked:
        assert all(0 <= v <= limit for v in lengths.tolist()), lengths


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A directory for the examples, after one pass of every read path over intact sidecars:
    what is allocated once per process (imports, caches) is not charged to an example."""
    root = str(tmp_path_factory.mktemp("fuzz-sidecars"))
    warm = Tally("warm-up")
    for tf in (True, False):
        paths = write(os.path.join(root, f"warm-{tf}"), [[b"ab", b""], [b"c" * 9]], tf, True)
        files = [read_bytes(p) for p in paths]
        case = Case([[b"ab", b""], [b"c" * 9]], tf, True, True, files)
        for impl in ("compiled", "pure-python"):
            for mmap in (True, False):
                with implementation(impl), ofindex.open(paths, mmap=mmap) as ds:
                    read_everything(ds, case, 1 << 30, warm)
    del Tally.registry["warm-up"]
    return root


@dataclass
class LocalInput:
    """A dataset written locally (``shards``), the edits of shard ``victim``'s sidecar and
    how the dataset is opened."""

    shards: list[list[bytes]]
    victim: int
    edits: list[tuple]
    tf: bool = True
    sums: bool = True
    verify: bool = True
    mmap: bool = True
    impl: str = "compiled"
    check_stale: bool = True


@st.composite
def local_inputs(draw) -> LocalInput:
    shards = draw(st.lists(records_st, min_size=1, max_size=2))
    victim = draw(st.integers(0, len(shards) - 1))
    return LocalInput(shards, victim, draw(mutations(len(shards[victim]))), tf=draw(st.booleans()),
                      sums=draw(st.booleans()), verify=draw(st.booleans()),
                      mmap=draw(st.booleans()),
                      impl=draw(st.sampled_from(["compiled", "pure-python"])),
                      check_stale=draw(st.booleans()))


def check_local_read_paths(root: str, drawn: LocalInput) -> None:
    TALLY_LOCAL.input()
    d = os.path.join(root, uuid.uuid4().hex[:12])
    paths = write(d, drawn.shards, drawn.tf, drawn.sums)
    victim = paths[drawn.victim]
    raw = read_bytes(sidecar_of(victim))
    with open(sidecar_of(victim), "wb") as f:
        f.write(mutate(raw, drawn.edits, len(drawn.shards[drawn.victim]), drawn.sums))
    files = [read_bytes(p) for p in paths]
    limit = 4 * sum(len(b) for b in files)
    case = Case(drawn.shards, drawn.tf, drawn.sums, drawn.verify, files)
    with implementation(drawn.impl):
        outcome, ds = guarded(lambda: ofindex.open(paths, verify=drawn.verify, mmap=drawn.mmap,
                                                   check_stale=drawn.check_stale, manifest=False),
                              limit, TALLY_LOCAL, "open")
        if outcome == "ok":
            with ds:
                read_everything(ds, case, limit, TALLY_LOCAL, stat_checked=drawn.check_stale)


#: Found by the fuzz tier: with check_stale=False, a header whose indexed end, data file size
#: and stream size are forged alike (header CRC recomputed) sized reads under 64 MiB (ds[i]
#: allocated 1 MiB for a 16-byte file). Fixed: a local read past the size the file had at open
#: looks at its size again before allocating.
SIZES = [("field", 32, "<Q", 1 << 20), ("field", 24, "<Q", 1 << 20), ("field", 80, "<Q", 1 << 20)]


@budget(600)
@example(LocalInput([[b""]], 0, SIZES, check_stale=False))
@example(LocalInput([[b""]], 0, [(*edit[:3], 1 << 30) for edit in SIZES], tf=False, mmap=False,
                    impl="pure-python", check_stale=False))
# issue 26 item 7, found by the fuzz tier too: an offset of 2**64-1 whose body CRC is forged
# made iteration raise struct.error (unframe given a 1-byte buffer)
@example(LocalInput([[b""]], 0, [("offset", 0, 2**64 - 1), ("forge",)], tf=True, sums=False,
                    verify=False, check_stale=False))
@example(LocalInput([[b""]], 0, [("offset", 0, 2**64 - 1), ("forge",)], tf=False, sums=False,
                    verify=False, check_stale=False))
@given(local_inputs())
def test_local_read_paths_over_mutated_sidecars(root, drawn):
    check_local_read_paths(root, drawn)


@explore(6000)
@given(local_inputs())
def test_explore_local_read_paths_over_mutated_sidecars(root, drawn):
    check_local_read_paths(root, drawn)


@dataclass
class RemoteInput:
    """One shard in ``memory://``, the edits of its sidecar and how it is read."""

    records: list[bytes]
    edits: list[tuple]
    tf: bool = True
    sums: bool = True
    check_stale: bool = True
    max_gap: int = 0  # one range per record (0), or merged (1 MiB)


@st.composite
def remote_inputs(draw) -> RemoteInput:
    records = draw(records_st)
    # fetched sidecars are checked whole (body CRC): mostly forged edits of the body get past
    edits = draw(mutations(len(records), ["flip", "offset", "swap", "checksum"], forge=0.8))
    return RemoteInput(records, edits, tf=draw(st.booleans()), sums=draw(st.booleans()),
                       check_stale=draw(st.booleans()),
                       max_gap=draw(st.sampled_from([0, 1 << 20])))


def check_remote_read_paths(root: str, drawn: RemoteInput) -> None:
    TALLY_REMOTE.input()
    d = os.path.join(root, uuid.uuid4().hex[:12])
    (path,) = write(d, [drawn.records], drawn.tf, drawn.sums)
    fs = fsspec.filesystem("memory")
    url = f"memory://fuzz/{uuid.uuid4().hex[:12]}/part-0"
    body = read_bytes(path)
    fs.pipe_file(url, body)
    fs.pipe_file(url + ".ofidx", mutate(read_bytes(sidecar_of(path)), drawn.edits,
                                        len(drawn.records), drawn.sums))
    limit = 4 * len(body)
    case = Case([drawn.records], drawn.tf, drawn.sums, True, [body])
    outcome, ds = guarded(lambda: ofindex.open(url, check_stale=drawn.check_stale), limit,
                          TALLY_REMOTE, "open")
    if outcome == "ok":
        ds.max_gap = drawn.max_gap
        read_everything(ds, case, limit, TALLY_REMOTE)


@budget(200)
@given(remote_inputs())
def test_remote_read_paths_over_mutated_sidecars(root, drawn):
    check_remote_read_paths(root, drawn)


@explore(2000)
@given(remote_inputs())
def test_explore_remote_read_paths_over_mutated_sidecars(root, drawn):
    check_remote_read_paths(root, drawn)


# -- compressed files: version 3 sidecars, their offsets packed ---------------------------------

def repack(raw: bytes, count: int, changes: list[tuple[int, int]]) -> bytes:
    """A version 3 sidecar with other offsets (``(record, value)`` changes) packed in a valid
    zlib stream, its length in the header and both CRCs recomputed: written from the format's
    description, not with ofindex's packer."""
    q = struct.unpack_from("<Q", raw, 88)[0]
    end = HEADER_SIZE + (q + 7) // 8 * 8
    planes = np.frombuffer(zlib.decompress(raw[HEADER_SIZE : HEADER_SIZE + q]), np.uint8)
    offsets = np.cumsum(planes.reshape(8, count).T.copy().view("<u8").reshape(count))
    for k, value in changes:
        offsets[k] = value
    deltas = np.diff(offsets, prepend=np.uint64(0)).astype("<u8")  # may wrap: so be it
    blob = zlib.compress(np.ascontiguousarray(deltas.view(np.uint8).reshape(-1, 8).T).tobytes())
    out = bytearray(raw[:HEADER_SIZE] + blob + bytes(-len(blob) % 8) + raw[end:])
    struct.pack_into("<Q", out, 88, len(blob))
    struct.pack_into("<I", out, 40, crc32c.crc32c(bytes(out[HEADER_SIZE:])))
    struct.pack_into("<I", out, 44, 0)
    struct.pack_into("<I", out, 44, crc32c.crc32c(bytes(out[:HEADER_SIZE])))
    return bytes(out)


def write_compressed(d: str, records: list[bytes], tf: bool, compression: str,
                     spacing: int) -> tuple[str, bytes]:
    """A compressed shard and its uncompressed stream."""
    p = os.path.join(d, "part-0")
    with ofindex.Writer(p, format="tfrecord" if tf else "ofrecord", compression=compression,
                        seek_spacing=spacing) as w:
        w.write_many(records)
    packed = read_bytes(p)
    return p, gzip.decompress(packed) if compression == "gzip" else zlib.decompress(packed)


@pytest.fixture(scope="module")
def packed_root(root):
    """``root``, after one pass of every read path over intact compressed shards."""
    warm = Tally("warm-up")
    for tf in (True, False):
        for compression in ("gzip", "zlib"):
            d = os.path.join(root, f"warm-{tf}-{compression}")
            p, stream = write_compressed(d, [b"ab", b"", b"c" * 9], tf, compression, 1)
            case = Case([[b"ab", b"", b"c" * 9]], tf, False, True, [stream])
            for impl in ("compiled", "pure-python"):
                with implementation(impl), ofindex.open(p) as ds:
                    read_everything(ds, case, 1 << 30, warm)
    del Tally.registry["warm-up"]
    return root


@dataclass
class PackedInput:
    """A compressed shard, its sidecar re-packed with other offsets (``changes``: (record,
    offset) pairs, CRCs forged; none: as written) and then edited (``edits``), and how it is
    read."""

    records: list[bytes]
    changes: list[tuple[int, int]] = field(default_factory=list)
    edits: list[tuple] = field(default_factory=list)
    tf: bool = True
    compression: str = "gzip"
    spacing: int = 1
    verify: bool = True
    where: str = "local"
    impl: str = "compiled"
    check_stale: bool = True


@st.composite
def packed_inputs(draw) -> PackedInput:
    records, tf = draw(records_st), draw(st.booleans())
    count, framed = len(records), sum(len(r) + (16 if tf else 8) for r in records)
    mode = draw(st.sampled_from(["repack", "repack+edits", "edits", "edits"]))
    changes, edits = [], []
    if mode.startswith("repack"):  # a valid stream of wrong offsets, CRCs forged
        value = st.one_of(st.sampled_from(EDGES), st.integers(0, framed + 20))
        changes = draw(st.lists(st.tuples(st.integers(0, count - 1), value), min_size=1,
                                max_size=3))
    if mode.endswith("edits"):
        edits = draw(mutations(count, ["flip", "field", "truncate", "extend"]))
    return PackedInput(records, changes, edits, tf=tf,
                       compression=draw(st.sampled_from(["gzip", "zlib"])),
                       spacing=draw(st.sampled_from([1, 64, 1 << 18])), verify=draw(st.booleans()),
                       where=draw(st.sampled_from(["local", "remote"])),
                       impl=draw(st.sampled_from(["compiled", "pure-python"])),
                       check_stale=draw(st.booleans()))


def check_packed_sidecar(root: str, drawn: PackedInput) -> None:
    TALLY_PACKED.input()
    d = os.path.join(root, uuid.uuid4().hex[:12])
    path, stream = write_compressed(d, drawn.records, drawn.tf, drawn.compression, drawn.spacing)
    raw = read_bytes(sidecar_of(path))
    assert struct.unpack_from("<H", raw, 8)[0] == 3
    count = len(drawn.records)
    if drawn.changes:
        raw = repack(raw, count, drawn.changes)
    bad = mutate(raw, drawn.edits, count, False)
    # a pass over a compressed shard fills blocks of 8 MiB (stream_compressed's block_bytes)
    # from reads of STREAM_CHUNK: a fixed cost, whatever the sidecar says
    limit = 4 * (len(stream) + len(read_bytes(path))) + (8 << 20) + STREAM_CHUNK
    case = Case([drawn.records], drawn.tf, False, drawn.verify, [stream])
    verify, check_stale = drawn.verify, drawn.check_stale
    with implementation(drawn.impl):
        if drawn.where == "local":
            with open(sidecar_of(path), "wb") as f:
                f.write(bad)
            opened = lambda: ofindex.open(path, verify=verify, check_stale=check_stale,  # noqa: E731
                                          manifest=False)
        else:
            fs = fsspec.filesystem("memory")
            url = f"memory://fuzz/{uuid.uuid4().hex[:12]}/part-0"
            fs.pipe_file(url, read_bytes(path))
            fs.pipe_file(url + ".ofidx", bad)
            opened = lambda: ofindex.open(url, verify=verify, check_stale=check_stale)  # noqa: E731
        outcome, ds = guarded(opened, limit, TALLY_PACKED, "open")
        if outcome == "ok":
            read_everything(ds, case, limit, TALLY_PACKED, stat_checked=check_stale)


#: Found by the fuzz tier: a compressed file's sidecar whose indexed end (and uncompressed
#: size) is forged, CRCs recomputed, sized the buffer a read inflates into (ds[i], batches and
#: iteration). Fixed: a header whose stream is larger than deflate can make of the file is
#: refused, and no read inflates more than its compressed range can produce.


@budget(300)
@example(PackedInput([b""], edits=[("field", 32, "<Q", 64 << 20), ("field", 80, "<Q", 2**41),
                                   ("forge",)], tf=False, verify=False, check_stale=False))
@example(PackedInput([b"x" * 30, b""], edits=[("field", 32, "<Q", 64 << 20),
                                              ("field", 80, "<Q", 2**41), ("forge",)],
                     compression="zlib", where="remote", impl="pure-python"))
@given(packed_inputs())
def test_packed_sidecars_over_mutations(packed_root, drawn):
    check_packed_sidecar(packed_root, drawn)


@explore(3000)
@given(packed_inputs())
def test_explore_packed_sidecars_over_mutations(packed_root, drawn):
    check_packed_sidecar(packed_root, drawn)
