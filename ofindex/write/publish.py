"""Publishing a dataset written under hidden names: rename each data file to its final name
and move its sidecar along (re-stamped when the storage gave the renamed file a new
fingerprint, as object stores do), without reading the data again.

The order makes every interrupted state one that does not open as a dataset: all data files
are renamed first, while their sidecars still carry the hidden names (``ofindex.open`` of the
directory then raises ``IndexNotFoundError``); then the sidecars are moved; the manifest is
written last (see :mod:`ofindex.write.sharded`).
"""

from __future__ import annotations

import dataclasses
import os

from ofindex.formats.sidecar import restamped
from ofindex.formats.sidecar_header import HEADER_SIZE, decode_header
from ofindex.storage import LocalStorage, Storage


def rename_data(storage: Storage, src: str, dst: str) -> None:
    """Rename a data file (an atomic ``os.replace`` locally; a server-side copy and delete on
    an object store)."""
    if isinstance(storage, LocalStorage):
        os.replace(src, dst)
        return
    fs = getattr(storage, "fs", None)
    if fs is None:  # pragma: no cover - every remote storage has a filesystem
        raise OSError(f"{storage.url(src)}: this storage cannot rename files")
    fs.mv(src, dst)


def move_sidecar(data_storage: Storage, data_path: str, old: tuple[Storage, str],
                 new: tuple[Storage, str]) -> None:
    """Move the sidecar of a data file renamed to ``data_path`` from ``old`` to ``new``
    (``(storage, path)`` pairs), re-stamped with the file's current size and fingerprint when
    they changed (the body, and so its CRC, stays as written)."""
    old_storage, old_path = old
    new_storage, new_path = new
    raw = old_storage.read_all(old_path)
    header = decode_header(raw[:HEADER_SIZE], path=old_storage.url(old_path))
    stamp = data_storage.stamp(data_path)
    if stamp != header.stamp:  # the same bytes: the same content digest
        stamp = dataclasses.replace(stamp, content=header.stamp.content)
        raw = restamped(raw, stamp, path=old_storage.url(old_path))
    new_storage.write_atomic(new_path, [raw])
    old_storage.remove(old_path)
