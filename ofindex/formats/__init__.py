"""Bytes on disk: record framing and its CRCs, format detection, the binary sidecar, the text
index of DALI / tfrecord2idx, the dataset manifest, and where each of them lives."""
