"""Where a dataset's index files live: its sidecars and its manifest.

The globs users write for their data (``DIR/*``, ``DIR/part-*``, ``DIR/*.tfrecord*``,
``DIR/*-of-*``, ``DIR/**``) must return the same files before and after ``ofindex build``. We
measured what each glob returns for index files placed inside the data directory
(``tools/glob_placement.py`` repeats the measurement; the docs have the table): sidecars
beside the data match ``DIR/*``, ``DIR/part-*`` and ``DIR/*-of-*`` everywhere; a hidden
``DIR/.ofindex/`` or hidden files are skipped by Python's ``glob`` but returned by
``tf.io.gfile.glob`` and fsspec's ``glob`` (local, S3, GCS) for ``DIR/*`` and ``DIR/**``; a
``DIR/_ofindex/`` (Hadoop's hidden prefix) is returned by all of them. Only a place outside the
data directory changes none of these globs, so the default (:attr:`Layout.SIBLING`) is a
sibling directory::

    data/train/part-00000-of-00008            the data, untouched
    data/train.ofindex/part-00000-of-00008.ofidx
    data/train.ofindex/ofindex-manifest.json

(``s3://bucket/train/`` -> ``s3://bucket/train.ofindex/``). Files at the root of a filesystem
or bucket have no sibling: their index directory is a hidden ``.ofindex/`` inside it.
``index_dir=`` puts them anywhere else (:attr:`Layout.INDEX_DIR`). Datasets indexed by ofindex
0.2 and earlier keep their sidecars beside the data (:attr:`Layout.BESIDE`) and still open;
``ofindex build --migrate`` moves them.

The sibling is created in the data directory's parent, which the user named only when they
named the directory: a file named on its own (``ofindex.Writer("train.tfrecord")``,
``build_index("train.tfrecord")``) indexes into the sibling only when that directory already
exists, and a local place that cannot be written is not used. Those indexes go to the
per-user index cache instead (:attr:`Layout.USER_CACHE`, :mod:`.index_cache`):
:func:`new_index_layout` is that rule. Readers look in every place, the default first.
"""

from __future__ import annotations

import dataclasses
import enum
import os

from ..storage import Storage
from .index_cache import cached_index_dir, may_create, prune, usable
from .sidecar import SUFFIX

#: The name a data directory's sibling index directory ends with.
INDEX_DIR_SUFFIX = ".ofindex"
#: The index directory inside a root (a filesystem's or a bucket's), which has no sibling.
ROOT_INDEX_DIR = ".ofindex"


class Layout(enum.Enum):
    """How a dataset's index files are placed (see the module's notes)."""

    SIBLING = "sibling"
    INDEX_DIR = "index-dir"
    BESIDE = "beside"
    USER_CACHE = "user-cache"


def _is_root(storage: Storage, directory: str) -> bool:
    """Whether ``directory`` is the root of its filesystem or bucket (it has no parent)."""
    if storage.is_local:
        absolute = os.path.abspath(directory)
        return os.path.dirname(absolute) == absolute
    bare = directory.split("://", 1)[-1].strip("/")
    return "/" not in bare


def sibling_index_dir(storage: Storage, data_dir: str) -> str:
    """The index directory of the files of ``data_dir`` under :attr:`Layout.SIBLING`."""
    if storage.is_local:  # "" (files named without a directory) is the working directory
        data_dir = os.path.abspath(data_dir)
    if _is_root(storage, data_dir):
        return storage.join(data_dir, ROOT_INDEX_DIR)
    return data_dir.rstrip("/") + INDEX_DIR_SUFFIX


def new_index_layout(storage: Storage, data_dir: str, *, whole_directory: bool) -> Layout:
    """Where a new index of files of ``data_dir`` goes when nothing says (no ``index_dir``,
    no index of them yet): the one rule for single files and unwritable places.

    - Remote files: the sibling (``s3://b/train.ofindex/``; a bucket has no per-user place).
    - The sibling, when it exists and this process may write into it.
    - The sibling, when ``whole_directory`` (the user named the directory, or a glob in it:
      its sibling is part of the dataset's documented layout) and it may be created.
    - Otherwise the per-user index cache (:mod:`.index_cache`), when it may be written: a
      file named on its own never creates a directory in a place the user did not name
      (``../<cwd>.ofindex/``, a temporary directory's parent), and a place the user may not
      write (``/home`` for ``~/train.tfrecord``) is never tried.
    - The sibling otherwise (writing there then fails, saying where else to write).

    Args:
        storage: Storage of the data.
        data_dir: The data files' directory.
        whole_directory: The files were found by naming their directory (or a glob), not
            one by one.

    Returns:
        :attr:`Layout.SIBLING` or :attr:`Layout.USER_CACHE`.
    """
    if not storage.is_local:
        return Layout.SIBLING
    sibling = sibling_index_dir(storage, data_dir)
    exists = os.path.isdir(sibling)
    if (exists or whole_directory) and may_create(sibling):
        return Layout.SIBLING
    if usable():
        prune()  # entries of directories that are gone (at most hourly)
        return Layout.USER_CACHE
    return Layout.SIBLING


def new_index_dir(storage: Storage, data_dir: str) -> str:
    """The index directory :func:`new_index_layout` gives a directory named as a whole (a
    dataset written or built there): its sibling, or its entry in the per-user cache.

    Args:
        storage: Storage of the data.
        data_dir: The data directory.

    Returns:
        The index directory's path on ``storage``.
    """
    if new_index_layout(storage, data_dir, whole_directory=True) is Layout.USER_CACHE:
        return cached_index_dir(data_dir)
    return sibling_index_dir(storage, data_dir)


def sibling_data_dir(index_dir: str) -> str | None:
    """The inverse of :func:`sibling_index_dir`, on a URL or path: the data directory whose
    index directory is ``index_dir`` (``train.ofindex`` -> ``train``; a root's ``.ofindex`` ->
    the root), or ``None`` when ``index_dir`` is not one."""
    index_dir = index_dir.rstrip("/")
    parent, slash, name = index_dir.rpartition("/")
    if name == ROOT_INDEX_DIR:
        if not slash:
            return "."
        return parent or "/"
    if name.endswith(INDEX_DIR_SUFFIX) and len(name) > len(INDEX_DIR_SUFFIX):
        return index_dir[: -len(INDEX_DIR_SUFFIX)]
    return None


@dataclasses.dataclass(frozen=True)
class SidecarPlace:
    """The rule that maps a data file to its sidecar.

    Attributes:
        layout: Which rule.
        storage: Storage of the sidecars with ``index_dir`` (else the data's own).
        directory: The index directory with ``index_dir``, else ``None``.
    """

    layout: Layout
    storage: Storage | None = None
    directory: str | None = None

    def of(self, data_storage: Storage, data_path: str) -> tuple[Storage, str]:
        """Return ``(storage, path)`` of the sidecar of ``data_path`` (on ``data_storage``)."""
        name = data_storage.basename(data_path) + SUFFIX
        if self.layout is Layout.BESIDE:
            return data_storage, data_path + SUFFIX
        if self.layout is Layout.SIBLING:
            directory = sibling_index_dir(data_storage, data_storage.dirname(data_path))
            return data_storage, data_storage.join(directory, name)
        if self.layout is Layout.USER_CACHE:
            return data_storage, os.path.join(cached_index_dir(os.path.dirname(data_path)),
                                              name)
        assert self.storage is not None and self.directory is not None
        return self.storage, self.storage.join(self.directory, name)

    def index_dir_of(self, data_storage: Storage, data_dir: str) -> tuple[Storage, str] | None:
        """Where the sidecars of ``data_dir``'s files go (and its manifest), or ``None`` for
        sidecars beside the data (the manifest then lives in ``data_dir``)."""
        if self.layout is Layout.BESIDE:
            return None
        if self.layout is Layout.SIBLING:
            return data_storage, sibling_index_dir(data_storage, data_dir)
        if self.layout is Layout.USER_CACHE:
            return data_storage, cached_index_dir(data_dir)
        assert self.storage is not None and self.directory is not None
        return self.storage, self.directory
