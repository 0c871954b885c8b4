"""Making indexes: scanning data files for record offsets and checking them, the builder that
indexes many files and writes the manifest, and the writer that indexes as it writes."""
