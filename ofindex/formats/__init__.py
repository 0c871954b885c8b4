"""Bytes on disk: record framing and its CRCs, format detection, the binary sidecar, the text
index of DALI / tfrecord2idx, the dataset manifest, and where each of them lives.

docs/format.md specifies every one of these files and is their source of truth: where this
code and the page disagree, the code is wrong. tests/formats/test_conformance.py reads the page's
conformance corpus (tests/conformance/) with this code and with a reader written from the
page alone."""
