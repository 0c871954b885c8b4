"""Shared by the test files: datasets, servers, reference readers and paths (tests/kit/paths.py)."""
