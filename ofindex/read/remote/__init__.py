"""What opening and reading a remote dataset needs beyond its shards' accesses: the rounds of
requests that fetch the pieces of index a read lacks (:mod:`.index_round`; at open, the
sidecars' headers: :mod:`.header_round`), the checks of the data files a round touched
(:mod:`.rounds`), paged sidecars (:mod:`.pages`) and the batches cut out of files the data
cache holds whole (:mod:`.resident_gather`).

These modules build on the dataset's core (its shards and shard table) and are used by the
accesses (:mod:`ofindex.read.access`) and by opening; they know nothing of the sequential
read paths (:mod:`ofindex.read.sequential`) nor of the accesses.
"""
