"""Using indexes: the dataset, its shards and their sidecars, and every way records are read.

The package by wing: the dataset's core here (the dataset and its views, opening, the shards
and the shard table, the checks of every record); :mod:`ofindex.read.access`, how each shard
is read; :mod:`ofindex.read.remote`, the rounds of requests a remote dataset needs beyond its
shards' accesses; :mod:`ofindex.read.sequential`, the sequential read paths the accesses hand
shards to. The remote and sequential wings know nothing of each other or of the accesses
(tests/project/test_architecture.py).

How a read travels, for a reader of this code. ``ofindex.open(paths, storage_options=...)``
(:mod:`ofindex.opening`) makes one :class:`~ofindex.storage.Storages` with the call's
settings: ``storage_options``, memory maps, concurrency and retries go into the storage
objects when they are made, one per protocol. :func:`ofindex.formats.location.resolve` uses
it to read the manifest (one round; a compact one, three) or list the files, and to place
the sidecars; :func:`~ofindex.read.open.open_location` makes a
:class:`~ofindex.read.shards.Shard` per file (the same storage objects), checks their headers
(or the manifest's stamps) and returns a :class:`~ofindex.read.dataset.Dataset` over a
:class:`~ofindex.read.table.ShardTable`. Through a compact manifest no shard is made at open:
:class:`~ofindex.read.manifest_shards.ManifestShards` makes each when first read, and its
stamp comes from the manifest's page in the index round that fetches its sidecar's pages.
Without a manifest, remote sidecars are opened by their 512-byte headers, with the data
files' stats, in one round (:mod:`ofindex.read.remote.header_round`), not fetched whole.

**Every shard's access.** Each shard carries the storage of its data file; when it is
bound, :func:`ofindex.read.access.choose_access` picks once the access that reads it
(:mod:`ofindex.read.access`: mapped, descriptors, ranged, cached or inflating), and every
read of its records (one, a batch, a run) asks that access.

**Local files.** ``ds[i]``: once a record of its shard has been read in this process, one
compiled call (:mod:`ofindex.read.record_reader`) locates the record through the cumulative
counts, reads it from the data file's memory map (or with one ``preadv`` when
``mmap=False``) and checks it; anything it cannot serve whole goes the ordinary way, which
raises the precise error: the table maps ``i`` to a shard and a record inside it
(:meth:`ShardTable.locate`), the shard's sidecar is memory-mapped (its offsets checked against
their CRC on this first read), its access reads the record (:class:`~ofindex.read.access.
MappedAccess`: one compiled call, ``_native.record``, cuts the record out of the map and
checks its length and CRCs), and the shard is bound to the compiled reader.
``ds.__getitems__(indices)``: the mapped access makes one compiled pass over the maps in the
order asked for (copies on threads for batches of several MB,
:mod:`ofindex.read.mapped_gather`); with ``mmap=False`` (or without the compiled module,
which alone reads maps: in guarded calls, see ofindex/csrc/guard.c) the descriptor access
reads with compiled ``preadv`` calls without the GIL, or Python-level reads
(:mod:`ofindex.read.access.descriptors`). Iteration (:mod:`ofindex.read.iteration`) cuts batches out
of the maps (:mod:`ofindex.read.sequential.mapped_batches`): with a core to spare, the CRCs of small
records are checked by a compiled thread ahead of the list being made, and lists of a MB or
more are copied and checked on the pool's threads one list ahead of the one handed out;
``for record in ds`` hands out the records of such lists, a few MB at a time.

**Remote files.** A batch's records are grouped by shard (:meth:`ShardTable.group`); one
index round (:mod:`ofindex.read.remote.index_round`) fetches, for every shard touched, the sidecar
pages and headers it lacks (:mod:`ofindex.read.remote.pages`; or whole sidecars) and the data files'
stamps, at once (over HTTP one multi-range request per sidecar, and no stamp request: the
data's first response is checked instead, :meth:`Storage.expect_indexed`); the ranged access
then merges neighbouring records into ranges (:func:`ofindex.read.payloads.coalesce`) and the
storage fetches them in one concurrent round (:meth:`Storage.read_ranges_concat`: over HTTP as
multi-range requests, one per shard), the records cut out and checked as locally. Two rounds
cold, one once the pages are cached (in this process, and with ``cache_dir`` for the whole
machine: :mod:`ofindex.cache.machine`). With ``data_cache_bytes`` too, the data is kept on
the machine's disk in blocks of each file (the cached access: :mod:`ofindex.cache.data`,
planned by :mod:`ofindex.cache.block_plan`; the data files' stamps, which key the blocks, are
then asked for in the index round over HTTP too): a batch copies its records out of the
blocks kept there and fetches the others in its one round, so that a later epoch makes no
data request; once every block of a file is kept, the file is mapped whole and batches are
cut out of it as out of a local file (:mod:`ofindex.read.remote.resident_gather`).

**Compressed files.** The inflating access (:mod:`ofindex.read.compressed`): each record
is inflated from the seek point before it (:mod:`ofindex.deflate`); a batch is cut into pieces
that one inflate pass serves, each piece's compressed span read once (on remote storage up to
its fetch bound) and inflated on a few threads; iteration inflates each shard once from its
start (:mod:`ofindex.read.sequential.compressed_stream`), checking the gzip CRC32 at the end.

Every path checks every record the same way (:class:`~ofindex.read.payloads.RecordChecks`):
its framing against the span its index gives (:class:`ofindex.IndexMismatchError` otherwise),
TFRecord CRCs and OFRecord sidecar checksums with ``verify``; and every data file opened is
checked to be the file its index describes (:class:`~ofindex.storage.stamp.ExpectedFiles`).
"""
