"""The sequential read paths: a shard streamed with large block reads (:mod:`.streaming`),
inflated in one pass (:mod:`.compressed_stream`) or cut into batches out of its memory map
(:mod:`.mapped_batches`); the batches they yield (:mod:`.record_batch`); and the records of
a file that has no index, front to back (:mod:`.peek`).

These modules build on the dataset's core (its shards, shard table and record checks) and are
used by the accesses (:mod:`ofindex.read.access`), which hand each shard to one of them; they
know nothing of the remote rounds (:mod:`ofindex.read.remote`) nor of the accesses.
"""
