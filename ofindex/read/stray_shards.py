"""Opening listed files: a file without a sidecar that is plainly not a record file is left
out (a README beside the shards), as the build left it out (see :mod:`ofindex.formats.strays`).
"""

from __future__ import annotations

from ..errors import IndexNotFoundError
from ..formats.location import DatasetLocation
from ..formats.strays import is_stray, name_pattern, only_strays, warn_skipped
from .remote.header_round import open_sidecars
from .shards import Shard, missing_indexes


def load_sidecars(location: DatasetLocation, shards: list[Shard],
                  stacklevel: int = 2) -> list[Shard]:
    """Open the sidecars of ``shards`` (:func:`~.header_round.open_sidecars`), leaving out the
    files found by a directory or glob that have no sidecar and are plainly not record files.

    Only files without a sidecar are looked at (by name, else by their first bytes): a
    dataset whose every shard is indexed costs nothing more. One named like the indexed
    shards is a shard (:func:`~ofindex.formats.strays.looks_like_shard`), missing its index.

    Args:
        location: Where the shards are (which files the user named on their own).
        shards: The shards of the listed files, in dataset order.
        stacklevel: Where the warning points, counted from the caller of this function.

    Returns:
        The shards of the record files, their sidecars opened.

    Raises:
        IndexNotFoundError: Record files without a sidecar (strays are not named).
        DataFileNotFoundError: Every file is a stray.

    Warns:
        SkippedFilesWarning: Once, naming the files left out.
    """
    try:
        open_sidecars(shards)
        return shards
    except IndexNotFoundError:
        storage = location.storage
        missing = [s for s in shards if not s.found]
        patterns = {name_pattern(storage.basename(s.path)) for s in shards if s.found}
        strays = {id(s) for s in missing
                  if s.path not in location.named and is_stray(storage, s.path, patterns)}
        if not strays:
            raise
    left_out = [s.data_url for s in shards if id(s) in strays]
    kept = [s for s in shards if id(s) not in strays]
    if len(strays) < len(missing):
        raise missing_indexes([s for s in missing if id(s) not in strays], len(kept))
    if not kept:
        raise only_strays(left_out)
    warn_skipped(left_out, stacklevel=stacklevel + 1)
    return kept
