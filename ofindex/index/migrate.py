"""Moving a dataset's index from ofindex 0.2's layout (sidecars beside the data files, the
manifest in the data directory, where the globs of users' pipelines find them) to the default
place, ``<data dir>.ofindex/`` (see :mod:`ofindex.formats.placement`): ``ofindex build
--migrate``.

Each sidecar is copied to its new place (so the build finds it fresh and does not scan its
file again); the old sidecars and manifest are deleted only once the build has written the
new manifest. An interrupted migration leaves the old index in place, and a second run
finishes it.
"""

from __future__ import annotations

import warnings

from ..errors import LegacyLayoutWarning
from ..formats.location import DatasetLocation
from ..formats.manifest import MANIFEST_NAME
from ..formats.sidecar import SUFFIX
from ..storage import Storage


def warn_legacy_layout(location: DatasetLocation) -> None:
    """Warn once when ``location`` keeps its sidecars beside the data (see
    :class:`LegacyLayoutWarning`)."""
    if location.index_dir is not None or not location.files:
        return
    storage = location.storage
    if storage.exists(location.files[0] + SUFFIX):
        warnings.warn(LegacyLayoutWarning(
            f"{storage.url(storage.dirname(location.files[0]))}: the sidecars are beside the "
            "data files (ofindex 0.2's layout), where globs such as part-* return them too and "
            "tf.data then fails on them; move them to the default place "
            "(<data dir>.ofindex/) with `ofindex build --migrate` (build_index(..., "
            "migrate=True) in Python)"),
            stacklevel=3)


def move_legacy_sidecars(location: DatasetLocation) -> list[tuple[Storage, str]]:
    """Copy each file's sidecar from beside it to its place in ``location``'s layout (unless
    one is there already).

    Returns:
        The old files to delete once the build has finished: the sidecars copied and the
        data directories' old manifests.

    Raises:
        StorageError: The new place cannot be written (pass ``index_dir``).
    """
    storage = location.storage
    old: list[tuple[Storage, str]] = []
    for path in location.files:
        legacy = path + SUFFIX
        if not storage.exists(legacy):
            continue
        target_storage, target = location.sidecar_of(path)
        if not target_storage.exists(target):
            target_storage.write_atomic(target, [storage.read_all(legacy)])
        old.append((storage, legacy))
    for directory in sorted({storage.dirname(path) for path in location.files}):
        manifest = storage.join(directory, MANIFEST_NAME)
        if storage.exists(manifest):
            old.append((storage, manifest))
    return old


def drop_legacy_files(old: list[tuple[Storage, str]]) -> None:
    """Delete the old index files :func:`move_legacy_sidecars` named (the new ones are in
    place: the build finished)."""
    for storage, path in old:
        storage.remove(path)
