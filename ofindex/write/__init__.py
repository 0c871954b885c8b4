"""Writing datasets: :class:`ShardedWriter` writes records, feature mappings or columns into
shards of a target size (``part-00000-of-00012``) with their sidecars and a manifest."""

from ofindex.write.sharded import ShardedWriter, ShardStream, WriteSummary

__all__ = ["ShardStream", "ShardedWriter", "WriteSummary"]
