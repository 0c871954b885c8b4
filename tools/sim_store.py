"""A deterministic synthetic object store for scale simulations: ``simstore://``.

An fsspec filesystem whose files are computed, not stored: a dataset of any size (1e10
records in 1e5 shards) exists as a formula. ``simstore://ds-<records>-<shards>-<mean>/``
holds ``part-00000`` … (TFRecord shards), their sidecars ``part-00000.ofidx`` (version 2,
exactly what ``ofindex build`` writes for them), ``ofindex-manifest.json`` and the compact
``ofindex-manifest.bin`` (which ``ofindex.open`` reads first), and the key index of a
column ``id`` whose value is the record's number, ``ofindex-keys.id.ofkey``
(:class:`SimKeys`). Any byte range of any file is generated on demand in time proportional
to the range (a sidecar page in O(page), never the whole sidecar).

Record ``i`` (global number) has a payload of ``SIZES[i % PERIOD]`` bytes, a fixed
pseudo-random pattern of period 251 around ``mean``: prefix sums, hence every record's
offset, are closed-form. Its payload bytes repeat ``i`` as a little-endian uint64.

Every request is counted (:data:`STATS`: requests, bytes, by kind of file); an optional
``latency`` (seconds, a real ``asyncio.sleep`` per request) lets a run feel the round trips.
An optional ``throttle`` (``SimStore.throttle = StoreThrottle.named("s3")``, from
``tools/sim_limits.py``) gives the store S3's or GCS's request-rate limit: a request over it
is answered ``503 SlowDown`` / ``429`` as the real client library raises them.
The store is read-only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import mmap
import os
import re
import struct
from typing import Any

import crc32c
import fsspec
import numpy as np
from fsspec.asyn import AsyncFileSystem
from sim_limits import StoreThrottle  # tools/ is on sys.path wherever this module is imported

from ofindex.columns.key_file import FANOUT, LEAF_ENTRIES, POINTER, key_file_name
from ofindex.formats.compact_manifest import COMPACT_NAME
from ofindex.formats.crc import mask_crc
from ofindex.formats.framing import RecordFormat
from ofindex.formats.manifest import MANIFEST_NAME, encode_manifest
from ofindex.formats.manifest_binary import decode_head, head_size
from ofindex.formats.sidecar_header import HEADER_SIZE, SidecarHeader, encode_header
from ofindex.storage import FileStamp
from ofindex.storage.stamp import content_digest, content_regions

PROTOCOL = "simstore"
PERIOD = 251
OVERHEAD = 16  # TFRecord framing bytes per record
_NAME = re.compile(r"ds-(\d+)-(\d+)-(\d+)$")
_SHARD = re.compile(r"part-(\d+)(\.ofidx)?$")


@dataclasses.dataclass
class Stats:
    """Requests and bytes served, by kind of file (``data``, ``sidecar``, ``manifest``)."""

    requests: dict[str, int] = dataclasses.field(default_factory=dict)
    bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    infos: int = 0

    def count(self, kind: str, nbytes: int) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + nbytes

    def snapshot(self) -> tuple[int, int, int]:
        """``(requests, bytes, infos)`` so far."""
        return sum(self.requests.values()), sum(self.bytes.values()), self.infos

    def reset(self) -> None:
        self.requests.clear()
        self.bytes.clear()
        self.infos = 0


STATS = Stats()


class SimDataset:
    """The formulas of one synthetic dataset: ``records`` records in ``shards`` shards."""

    def __init__(self, records: int, shards: int, mean: int) -> None:
        self.records, self.shards, self.mean = records, shards, mean
        rng = np.random.default_rng(mean)
        self.sizes = rng.integers(mean // 2, mean + mean // 2 + 1, PERIOD).astype(np.int64)
        self.cum = np.concatenate([[0], np.cumsum(self.sizes + OVERHEAD)])  # framed bytes
        self.period_bytes = int(self.cum[-1])

    @property
    def name(self) -> str:
        return f"ds-{self.records}-{self.shards}-{self.mean}"

    def first(self, shard: int) -> int:
        """Global number of the shard's first record."""
        return shard * self.records // self.shards

    def count(self, shard: int) -> int:
        return self.first(shard + 1) - self.first(shard)

    def framed_before(self, i: np.ndarray | int) -> np.ndarray | int:
        """Framed bytes of records ``0..i-1`` (vectorised)."""
        q, r = np.divmod(i, PERIOD)
        return q * self.period_bytes + self.cum[r]

    def offsets(self, shard: int, a: int, b: int) -> np.ndarray:
        """Offsets of the shard's records ``a..b-1`` in its file."""
        base = self.first(shard)
        idx = np.arange(base + a, base + b, dtype=np.int64)
        return np.asarray(self.framed_before(idx), dtype=np.int64) - int(
            self.framed_before(base))

    def shard_size(self, shard: int) -> int:
        return int(self.framed_before(self.first(shard + 1))) - int(
            self.framed_before(self.first(shard)))

    def stamp(self, shard: int) -> FileStamp:
        return FileStamp(self.shard_size(shard), f"etag:sim-{self.name}-{shard}")

    def identity(self, shard: int) -> FileStamp:
        """The shard's stamp with its content digest, as a build stores it in the sidecar
        (computed when a shard's header is first asked for: a million shards' would take
        minutes)."""
        size = self.shard_size(shard)
        parts = [self.data(shard, start, end) for start, end in content_regions(size)]
        return FileStamp(size, self.stamp(shard).fingerprint,
                         content=content_digest(size, parts))

    # -- file contents ------------------------------------------------------------------
    def data(self, shard: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a shard: the TFRecord framing of its records."""
        n = self.count(shard)
        if end <= start:
            return b""
        lo = self._record_at(shard, start, n)
        hi = self._record_at(shard, end - 1, n) + 1
        offs = self.offsets(shard, lo, hi)
        base = self.first(shard)
        parts = []
        for i in range(base + lo, base + hi):
            size = int(self.sizes[i % PERIOD])
            payload = (np.full((size + 7) // 8, i, dtype="<u8").tobytes())[:size]
            length = size.to_bytes(8, "little")
            parts += [length, mask_crc(crc32c.crc32c(length)).to_bytes(4, "little"), payload,
                      mask_crc(crc32c.crc32c(payload)).to_bytes(4, "little")]
        blob = b"".join(parts)
        s0 = int(offs[0])
        return blob[start - s0 : end - s0]

    def _record_at(self, shard: int, pos: int, n: int) -> int:
        """The record whose framing holds byte ``pos`` of the shard."""
        guess = min(max(pos // (self.mean + OVERHEAD), 0), n - 1)
        lo, hi = max(0, guess - 2 * PERIOD), min(n - 1, guess + 2 * PERIOD)
        while int(self.offsets(shard, lo, lo + 1)[0]) > pos:
            lo = max(0, lo - 4 * PERIOD)
        while hi < n - 1 and int(self.offsets(shard, hi, hi + 1)[0]) <= pos:
            hi = min(n - 1, hi + 4 * PERIOD)
        offs = self.offsets(shard, lo, hi + 1)
        return lo + int(np.searchsorted(offs, pos, side="right")) - 1

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (one store per process, bounded)
    def header(self, shard: int) -> bytes:
        n = self.count(shard)
        body = self.offsets(shard, 0, n).astype("<u8").tobytes()
        return encode_header(SidecarHeader(RecordFormat.TFRECORD, n, self.identity(shard),
                                           self.shard_size(shard),
                                           body_crc=crc32c.crc32c(body)))

    def sidecar_size(self, shard: int) -> int:
        return HEADER_SIZE + 8 * self.count(shard)

    def sidecar(self, shard: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a shard's sidecar, in O(end - start)."""
        out = b""
        if start < HEADER_SIZE:
            out = self.header(shard)[start : min(end, HEADER_SIZE)]
        if end > HEADER_SIZE:
            a = max(start - HEADER_SIZE, 0)
            b = end - HEADER_SIZE
            ra, rb = a // 8, (b + 7) // 8
            raw = self.offsets(shard, ra, rb).astype("<u8").tobytes()
            out += raw[a - 8 * ra : b - 8 * ra]
        return out

    @functools.cached_property
    def manifest(self) -> bytes:
        names = [f"part-{k:05d}" for k in range(self.shards)]
        firsts = np.arange(self.shards + 1, dtype=np.int64) * self.records // self.shards
        framed = np.asarray(self.framed_before(firsts), dtype=np.int64)
        return encode_manifest(
            RecordFormat.TFRECORD, f"{PROTOCOL}://{self.name}/{MANIFEST_NAME}",
            f"{PROTOCOL}://{self.name}", None, names, np.diff(firsts).tolist(),
            np.diff(framed).tolist(), [f"etag:sim-{self.name}-{k}" for k in range(self.shards)])


# -- the compact manifest (ofindex-manifest.bin) and a disk copy of each manifest ---------------
#: A directory holding each dataset's manifests once generated (``<name>.json`` /
#: ``<name>.bin``), served from a memory map: a benchmark generates them in another process,
#: so that the opening process's peak RSS counts what ofindex holds, not the generator's
#: lists. Unset: generated in this process when first asked for.
CACHE_ENV = "OFINDEX_SIM_MANIFESTS"


def compact_manifest(sim: SimDataset) -> bytes:
    """The compact manifest of a synthetic dataset, as ``ofindex build`` writes it for a
    dataset of that many shards."""
    from ofindex.formats import manifest_binary as binary

    firsts = np.arange(sim.shards + 1, dtype=np.int64) * sim.records // sim.shards
    framed = np.asarray(sim.framed_before(firsts), dtype=np.int64)
    writer = binary.CompactWriter(RecordFormat.TFRECORD, sim.shards, None, None, False)
    counts, sizes = np.diff(firsts), np.diff(framed)
    step, etag = 1 << 16, f"etag:sim-{sim.name}-"
    for lo in range(0, sim.shards, step):
        hi = min(lo + step, sim.shards)
        writer.add_rows(binary.Rows(
            [f"part-{k:05d}" for k in range(lo, hi)], counts[lo:hi], sizes[lo:hi],
            [etag + str(k) for k in range(lo, hi)], np.full(hi - lo, -1),
            np.zeros(hi - lo, dtype=np.uint8)))
    return b"".join(writer.finish())


def manifest_bytes(sim: SimDataset, kind: str) -> bytes | memoryview:
    """A manifest's bytes (``kind``: ``json`` or ``bin``): from the disk copy when
    :data:`CACHE_ENV` names a directory (written there first if missing), else generated."""
    directory = os.environ.get(CACHE_ENV)
    if not directory:
        return sim.manifest if kind == "json" else sim.compact
    path = os.path.join(directory, f"{sim.name}.{kind}")
    if kind not in ("json", "bin"):  # written by the benchmark
        with open(path, "rb") as f:
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        data = sim.manifest if kind == "json" else sim.compact
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    with open(path, "rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


#: Which manifest the store holds: ``bin`` (the compact one, what ``ofindex build`` writes for
#: this many shards; the default) or ``json`` (what earlier releases wrote).
KIND_ENV = "OFINDEX_SIM_MANIFEST"


#: The manifest files the store may hold: file name -> kind (as :data:`STATS` counts it) and
#: the suffix of its disk copy. Parquet copies (written by tools/bench_scale.py) are served
#: when the disk copy exists.
MANIFEST_FILES = {MANIFEST_NAME: ("manifest", "json"), COMPACT_NAME: ("compact", "bin"),
                  "ofindex-manifest.parquet-64k": ("parquet-64k", "parquet-64k"),
                  "ofindex-manifest.parquet-128": ("parquet-128", "parquet-128")}
SUFFIX_OF = dict(MANIFEST_FILES.values())


def held_suffix() -> str:
    """``json`` or ``bin``: the manifest the store holds (see :data:`KIND_ENV`)."""
    return os.environ.get(KIND_ENV, "bin")


def manifest_kind(ds: SimDataset, name: str) -> str | None:
    """The kind of a manifest file the store holds (the JSON or compact one as
    :data:`KIND_ENV` says, a Parquet one when its disk copy exists); ``None`` for a name that
    is not a manifest's.

    Raises:
        FileNotFoundError: A manifest the store does not hold.
    """
    if name not in MANIFEST_FILES:
        return None
    kind, suffix = MANIFEST_FILES[name]
    held = held_suffix()
    directory = os.environ.get(CACHE_ENV, "")
    if suffix == held or (suffix.startswith("parquet") and directory and os.path.exists(
            os.path.join(directory, f"{ds.name}.{suffix}"))):
        return kind
    raise FileNotFoundError(name)


SimDataset.compact = functools.cached_property(compact_manifest)  # type: ignore[attr-defined]
SimDataset.compact.__set_name__(SimDataset, "compact")  # type: ignore[attr-defined]
_SERVED: dict[tuple[str, str], bytes | memoryview] = {}


def served_manifest(sim: SimDataset, kind: str) -> bytes | memoryview:
    """The manifest bytes this process serves (read or generated once)."""
    key = (sim.name, kind)
    if key not in _SERVED:
        _SERVED[key] = manifest_bytes(sim, kind)
    return _SERVED[key]


@functools.lru_cache(maxsize=16)
def dataset_named(name: str) -> SimDataset:
    m = _NAME.fullmatch(name)
    if m is None:
        raise FileNotFoundError(f"{PROTOCOL}://{name}: not a synthetic dataset name "
                                "(ds-<records>-<shards>-<mean record bytes>)")
    return SimDataset(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def dataset_url(records: int, shards: int, mean: int = 200) -> str:
    """The URL of a synthetic dataset."""
    return f"{PROTOCOL}://ds-{records}-{shards}-{mean}"


class SimStore(AsyncFileSystem):
    """The ``simstore://`` filesystem (read-only; see the module docstring)."""

    protocol = PROTOCOL
    latency = 0.0  # seconds slept per request (class-wide)
    throttle: StoreThrottle | None = None  # a store's request-rate limit (class-wide)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("latency", None)
        super().__init__(*args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        path = path[len(PROTOCOL) + 3 :] if path.startswith(PROTOCOL + "://") else path
        return path.rstrip("/")

    def _resolve(self, path: str) -> tuple[SimDataset, str, int]:
        """``(dataset, kind, shard)`` of a path; kind is data, sidecar, a manifest's or dir.
        A path that is not there is a request too (a 404 a store answers and bills)."""
        try:
            return self._resolve_found(path)
        except FileNotFoundError:
            STATS.count("missing", 0)
            raise

    def _resolve_found(self, path: str) -> tuple[SimDataset, str, int]:
        path = self._strip_protocol(path)
        name, _, rest = path.partition("/")
        ds = dataset_named(name)
        if rest == "":
            return ds, "dir", -1
        kind = manifest_kind(ds, rest)
        if kind is not None:
            return ds, kind, -1
        if rest == KEY_NAME:
            return ds, "keys", -1
        m = _SHARD.fullmatch(rest)
        if m is None or int(m.group(1)) >= ds.shards:
            raise FileNotFoundError(path)
        return ds, ("sidecar" if m.group(2) else "data"), int(m.group(1))

    def _size(self, ds: SimDataset, kind: str, shard: int) -> int:
        if kind in SUFFIX_OF:
            return len(served_manifest(ds, SUFFIX_OF[kind]))
        if kind == "sidecar":
            return ds.sidecar_size(shard)
        if kind == "keys":
            return int(ds.keys.size)  # type: ignore[attr-defined]
        return ds.shard_size(shard)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        ds, kind, shard = self._resolve(path)
        if self.latency:
            await asyncio.sleep(self.latency)
        _over_limit(self, path)
        STATS.infos += 1
        if kind == "dir":
            return {"name": ds.name, "size": 0, "type": "directory"}
        info = {"name": self._strip_protocol(path), "size": self._size(ds, kind, shard),
                "type": "file"}
        if kind == "data":
            info["ETag"] = f'"sim-{ds.name}-{shard}"'
        return info

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        ds, kind, _ = self._resolve(path)
        if kind != "dir":
            return [await self._info(path)] if detail else [path]
        out = []
        for k in range(ds.shards):
            for name, kd in ((f"part-{k:05d}", "data"), (f"part-{k:05d}.ofidx", "sidecar")):
                out.append({"name": f"{ds.name}/{name}", "type": "file",
                            "size": self._size(ds, kd, k)})
        return out if detail else [e["name"] for e in out]

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None,
                        **kwargs: Any) -> bytes:
        ds, kind, shard = self._resolve(path)
        if kind == "dir":
            raise IsADirectoryError(path)
        size = self._size(ds, kind, shard)
        a = 0 if start is None else (start + size if start < 0 else start)
        b = size if end is None else min(end + size if end < 0 else end, size)
        if self.latency:
            await asyncio.sleep(self.latency)
        _over_limit(self, path)
        if kind in SUFFIX_OF:
            data = bytes(served_manifest(ds, SUFFIX_OF[kind])[a:b])
        elif kind == "sidecar":
            data = ds.sidecar(shard, a, b)
        elif kind == "keys":
            data = ds.keys.read(a, b)  # type: ignore[attr-defined]
        else:
            data = ds.data(shard, a, b)
        STATS.count(kind, len(data))
        return data


# -- a key index: column "id", record i's id is i (ofindex.columns.key_file) ----------------------
#: The column of the key index the store holds (``simstore://<ds>/ofindex-keys.id.ofkey``).
KEY_COLUMN = "id"
KEY_NAME = key_file_name(KEY_COLUMN)
_KEY_HEAD = struct.Struct("<8sHBBHHQQ8sQQIIII")  # docs/format.md, "Key index"


def _planes(values: np.ndarray) -> bytes:
    """int64 values as byte planes (the lowest byte of every value first)."""
    return np.ascontiguousarray(values.astype("<i8").view(np.uint8).reshape(-1, 8).T).tobytes()


class SimKeys:
    """The key index of column ``id`` of a synthetic dataset, record ``i``'s id being ``i``:
    its entries are ``(i, i)`` in order, so every page is a formula, generated on demand.

    Leaves and nodes are stored as they are (not deflated). A parent holds its children's
    CRC32Cs: a full leaf ``j`` is leaf 0 with the bits of ``j * 4096`` set in its key planes
    and its first record, and CRC32C is affine over XOR (``crc(x ^ m) = crc(x) ^ L(m)``,
    ``L`` linear), so every leaf's CRC comes from 64 basis values (one per bit of those
    bytes) without generating it: a node of 4,096 leaves costs 64 array XORs, not 256 MB.
    """

    def __init__(self, sim: SimDataset) -> None:
        self.sim, self.n = sim, sim.records
        self.entries, self.fanout = LEAF_ENTRIES, FANOUT
        assert self.entries == 4096  # the bit layout of the CRC basis below
        counts = [-(-self.n // self.entries)]
        while counts[-1] > self.fanout:
            counts.append(-(-counts[-1] // self.fanout))
        self.counts = counts  # pages per level, leaves first; the root points at the last
        self.levels = len(counts)
        self.bases = [0, 16 * self.n]  # where each level's pages start: leaves of 16 B an entry
        for level in range(1, self.levels):
            self.bases.append(self.bases[level] + 40 * (counts[level - 1]))
        self.pages_bytes = self.bases[self.levels]
        self._basis = self._crc_basis()

    # leaves
    def leaf_entries(self, j: np.ndarray) -> np.ndarray:
        return np.minimum(self.entries, self.n - j * self.entries)

    def leaf(self, j: int) -> bytes:
        k = int(self.leaf_entries(np.int64(j)))
        keys = np.arange(j * self.entries, j * self.entries + k, dtype=np.int64)
        deltas = np.ones(k, dtype=np.int64)
        deltas[0] = j * self.entries
        return _planes(keys) + _planes(deltas)

    def _crc_basis(self) -> np.ndarray:
        """``L`` of each bit ``bit`` of byte ``b`` of ``j * 4096``: set in every key of key
        plane ``b`` and in the first delta of delta plane ``b`` (64 values)."""
        size, e = 16 * self.entries, self.entries
        zero = crc32c.crc32c(bytes(size))
        out = np.zeros((8, 8), dtype=np.uint32)
        for b in range(8):
            for bit in range(8):
                pattern = bytearray(size)
                pattern[b * e:(b + 1) * e] = bytes([1 << bit]) * e
                pattern[8 * e + b * e] = 1 << bit
                out[b, bit] = crc32c.crc32c(bytes(pattern)) ^ zero
        return out

    def leaf_crcs(self, js: np.ndarray) -> np.ndarray:
        """The CRC32C of leaves ``js`` (the last one, if short, computed from its bytes)."""
        crcs = np.full(len(js), crc32c.crc32c(self.leaf(0)) if self.n >= self.entries else 0,
                       dtype=np.uint32)
        high = js.astype(np.uint64) << np.uint64(12)
        for b in range(8):
            plane = (high >> np.uint64(8 * b)) & np.uint64(255)
            for bit in range(8):
                crcs ^= np.where(plane & np.uint64(1 << bit) != 0, self._basis[b, bit], 0
                                 ).astype(np.uint32)
        short = self.leaf_entries(js) < self.entries
        for k in np.flatnonzero(short).tolist():
            crcs[k] = crc32c.crc32c(self.leaf(int(js[k])))
        return crcs

    # nodes
    def _children(self, level: int, g: int) -> np.ndarray:
        below = self.counts[level - 1]
        return np.arange(g * self.fanout, min((g + 1) * self.fanout, below), dtype=np.int64)

    def _pointers(self, level: int, kids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pointers to pages ``kids`` of level ``level - 1`` and their first keys."""
        pointers = np.zeros(len(kids), dtype=POINTER)
        if level == 1:
            entries = self.leaf_entries(kids)
            pointers["offset"] = kids * 16 * self.entries
            pointers["stored"] = pointers["raw"] = 16 * entries
            pointers["crc"] = self.leaf_crcs(kids)
            pointers["entries"] = entries
            return pointers, kids * self.entries
        sizes = [len(self._children(level - 1, int(g))) for g in kids]
        pointers["offset"] = self.bases[level - 1] + kids * 40 * self.fanout
        pointers["stored"] = pointers["raw"] = 40 * np.array(sizes)
        pointers["crc"] = [crc32c.crc32c(self.node(level - 1, int(g))) for g in kids]
        pointers["children"] = sizes
        span = self.entries * self.fanout ** (level - 1)
        pointers["entries"] = np.minimum(span, self.n - kids * span)
        return pointers, kids * span

    @functools.lru_cache(maxsize=256)  # noqa: B019  (one store per process, bounded)
    def node(self, level: int, g: int) -> bytes:
        pointers, firsts = self._pointers(level, self._children(level, g))
        return pointers.tobytes() + _planes(firsts)

    @functools.cached_property
    def head(self) -> bytes:
        """The header and the root."""
        top = self.counts[-1]
        pointers, firsts = self._pointers(self.levels, np.arange(top, dtype=np.int64))
        root = pointers.tobytes() + _planes(firsts)
        root += bytes(-len(root) % 8)
        name = KEY_COLUMN.encode()
        compact = bytes(served_manifest(self.sim, "bin"))
        identity = decode_head(compact[:head_size(compact, "sim")], "sim",
                               len(compact)).identity
        fields = [b"OFKEYIX\0", 1, 1, 0, len(name), self.levels, self.n, self.n,
                  bytes.fromhex(identity or "0" * 16), len(root), self.pages_bytes, top,
                  crc32c.crc32c(root), 0]
        head = _KEY_HEAD.pack(*fields, 0) + name + bytes(-len(name) % 8)
        return _KEY_HEAD.pack(*fields, crc32c.crc32c(head)) + head[_KEY_HEAD.size:] + root

    @property
    def size(self) -> int:
        return len(self.head) + self.pages_bytes

    def read(self, a: int, b: int) -> bytes:
        """Bytes ``[a, b)`` of the key index."""
        head = self.head
        out = head[a:min(b, len(head))] if a < len(head) else b""
        lo, hi = max(a - len(head), 0), b - len(head)
        at = lo
        while at < hi:
            start, page = self._page_at(at)
            out += page[at - start:hi - start]
            at = start + len(page)
        return out

    def _page_at(self, at: int) -> tuple[int, bytes]:
        """``(start, bytes)`` of the page holding byte ``at`` of the pages."""
        if at < self.bases[1]:
            j = at // (16 * self.entries)
            return j * 16 * self.entries, self.leaf(j)
        level = max(lv for lv in range(1, self.levels) if self.bases[lv] <= at)
        g = (at - self.bases[level]) // (40 * self.fanout)
        return self.bases[level] + g * 40 * self.fanout, self.node(level, g)


SimDataset.keys = functools.cached_property(SimKeys)  # type: ignore[attr-defined]
SimDataset.keys.__set_name__(SimDataset, "keys")  # type: ignore[attr-defined]


# -- request-rate limits (tools/sim_limits.py) -------------------------------------------------
def _over_limit(store: SimStore, path: str) -> None:
    """Raise the store's throttling answer when ``path``'s prefix is over its rate limit."""
    if store.throttle is not None:
        store.throttle.check(store._strip_protocol(path))


fsspec.register_implementation(PROTOCOL, SimStore, clobber=True)
