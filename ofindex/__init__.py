"""ofindex: random access to TFRecord and OneFlow OFRecord datasets, locally and in buckets."""

from .formats.framing import RecordFormat
from .index.build_file import BuildResult
from .index.builder import build_index
from .index.writer import Writer
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
from .read.dataset import Dataset
from .read.open import open

__version__ = "0.1.0"

__all__ = [
    "open", "Dataset", "build_index", "BuildResult", "Writer", "RecordFormat",
    "OfindexError", "CorruptRecordError", "TruncatedRecordError", "FormatDetectionError",
    "IndexNotFoundError", "DataFileNotFoundError", "SidecarError", "StaleIndexError",
    "RecordIndexError", "RangeReadError", "DecodeError",
]
