"""ofindex: random access to TFRecord and OneFlow OFRecord datasets, locally and in buckets."""

from .errors import (
    CorruptRecordError,
    DataFileNotFoundError,
    DecodeError,
    FormatDetectionError,
    IndexNotFoundError,
    OfindexError,
    RangeReadError,
    RecordIndexError,
    SidecarError,
    StaleIndexError,
    TruncatedRecordError,
)
from .formats.framing import RecordFormat
from .formats.sidecar_header import Compression
from .index.build_file import BuildResult
from .index.builder import build_index
from .index.writer import Writer
from .read.dataset import Dataset
from .read.open import open

__version__ = "0.1.0"

__all__ = [
    "BuildResult",
    "Compression",
    "CorruptRecordError",
    "DataFileNotFoundError",
    "Dataset",
    "DecodeError",
    "FormatDetectionError",
    "IndexNotFoundError",
    "OfindexError",
    "RangeReadError",
    "RecordFormat",
    "RecordIndexError",
    "SidecarError",
    "StaleIndexError",
    "TruncatedRecordError",
    "Writer",
    "build_index",
    "open",
]
