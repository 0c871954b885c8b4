"""Writing datasets: :class:`Writer` writes records into one data file and indexes them as it
writes (and appends to a file, :mod:`.appending`); :class:`ShardedWriter` writes records,
feature mappings or columns into shards of a target size (``part-00000-of-00012``) with their
sidecars and a manifest."""

from ofindex.write.sharded import ShardedWriter, ShardStream, WriteSummary
from ofindex.write.writer import Writer

__all__ = ["ShardStream", "ShardedWriter", "WriteSummary", "Writer"]
