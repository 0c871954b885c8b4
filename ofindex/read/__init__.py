"""Using indexes: opening a dataset, the dataset itself, shards and their sidecars, batched and
streamed reads, and cutting payloads out of the bytes read."""
