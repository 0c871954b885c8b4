"""Making indexes: scanning data files for record offsets and checking them, and the builder
that indexes many files and writes the manifest (the writers, which index as they write, are
in :mod:`ofindex.write`)."""
