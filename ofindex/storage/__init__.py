"""Byte access behind one narrow interface: local files (``pread`` or memory maps) and every
fsspec filesystem (S3, GCS, HTTP, ``memory://`` …), with checked range reads, retries and a
pure range planner. Nothing here knows about records, sidecars or datasets."""

from __future__ import annotations

from .base import Storage, check_length
from .fsspec_storage import FsspecStorage
from .local import LocalStorage, write_local_atomic
from .paths import (
    DataFiles,
    PathSpec,
    as_list,
    is_data_file_name,
    is_document_name,
    is_glob,
    list_data_files,
    natural_key,
    resolve_data_files,
)
from .registry import Storages, is_local_url, storage_for
from .stamp import FileStamp

__all__ = [
    "DataFiles",
    "FileStamp",
    "FsspecStorage",
    "LocalStorage",
    "PathSpec",
    "Storage",
    "Storages",
    "as_list",
    "check_length",
    "is_data_file_name",
    "is_document_name",
    "is_glob",
    "is_local_url",
    "list_data_files",
    "natural_key",
    "resolve_data_files",
    "storage_for",
    "write_local_atomic",
]
