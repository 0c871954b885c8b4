"""The caches a remote dataset reads through, as one read-through chain keyed by the identity
of what each entry copies (:mod:`ofindex.cache.chain`): this process's memory, the machine's
``cache_dir`` (pages, headers, whole sidecars, identity checks) and its data blocks."""
