"""What a dataset read as growing needs of the index builder (:mod:`ofindex.read.refresh`):
the reading layer does not import the builder, so :func:`ofindex.open` gives each dataset an
:class:`IndexGrower`."""

from __future__ import annotations

from .formats.location import DatasetLocation
from .formats.sidecar import Sidecar
from .formats.sidecar_growth import Growth
from .index.builder import build_location
from .index.growth import scan_growth
from .storage import FileStamp, Storage


class IndexGrower:
    """The index builder's part in :meth:`ofindex.Dataset.refresh` (picklable: it holds
    nothing)."""

    def scan(self, storage: Storage, path: str, sidecar: Sidecar,
             current: FileStamp) -> Growth:
        """Index what ``path`` gained since ``sidecar`` (see
        :func:`ofindex.index.growth.scan_growth`); a record cut short at its end is not
        written yet.

        Raises:
            CorruptRecordError: The new bytes are damaged.
        """
        return scan_growth(storage, path, sidecar, current, open_tail=True)

    def build(self, location: DatasetLocation) -> None:
        """Index new files of a dataset (as files still being written; no manifest).

        Raises:
            CorruptRecordError, FormatDetectionError: As :func:`ofindex.build_index`.
        """
        build_location(location, manifest=False, growing=True)
