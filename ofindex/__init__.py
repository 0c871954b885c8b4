"""ofindex: random access to TFRecord and OneFlow OFRecord datasets, locally and in buckets."""

from .convert import convert
from .errors import (
    CacheDirWarning,
    ClusterError,
    ColumnError,
    ColumnNotFoundError,
    CorruptRecordError,
    DataCacheWarning,
    DataFileNotFoundError,
    DatasetExistsError,
    DecodeError,
    EncodeError,
    FormatDetectionError,
    IncompleteDatasetError,
    IndexMismatchError,
    IndexNotFoundError,
    InvalidURLError,
    LeftoverFilesWarning,
    LegacyLayoutWarning,
    ManifestError,
    MissingDependencyError,
    MissingShardsWarning,
    NestedPathsError,
    NotAppendedError,
    OfindexError,
    OfindexWarning,
    PartialIndexWarning,
    RangeReadError,
    RecordIndexError,
    SidecarError,
    SkippedFilesWarning,
    SourceError,
    StaleIndexError,
    StateError,
    StorageError,
    TruncatedRecordError,
    UnverifiedIndexWarning,
)
from .events import EventLog, events
from .formats.framing import RecordFormat
from .formats.sidecar_header import Compression
from .index.build_file import BuildResult
from .index.build_results import BuildResults
from .index.builder import build_index
from .opening import open
from .read.dataset import Dataset
from .read.view import DatasetView
from .schema import infer_spec, spec_from_tf
from .tfds import open_tfds
from .write import ShardedWriter, WriteSummary
from .write.writer import Writer

__version__ = "0.2.0"

__all__ = [
    "BuildResult",
    "BuildResults",
    "CacheDirWarning",
    "ClusterError",
    "ColumnError",
    "ColumnNotFoundError",
    "Compression",
    "CorruptRecordError",
    "DataCacheWarning",
    "DataFileNotFoundError",
    "Dataset",
    "DatasetExistsError",
    "DatasetView",
    "DecodeError",
    "EncodeError",
    "EventLog",
    "FormatDetectionError",
    "IncompleteDatasetError",
    "IndexMismatchError",
    "IndexNotFoundError",
    "InvalidURLError",
    "LeftoverFilesWarning",
    "LegacyLayoutWarning",
    "ManifestError",
    "MissingDependencyError",
    "MissingShardsWarning",
    "NestedPathsError",
    "NotAppendedError",
    "OfindexError",
    "OfindexWarning",
    "PartialIndexWarning",
    "RangeReadError",
    "RecordFormat",
    "RecordIndexError",
    "ShardedWriter",
    "SidecarError",
    "SkippedFilesWarning",
    "SourceError",
    "StaleIndexError",
    "StateError",
    "StorageError",
    "TruncatedRecordError",
    "UnverifiedIndexWarning",
    "WriteSummary",
    "Writer",
    "build_index",
    "convert",
    "events",
    "infer_spec",
    "open",
    "open_tfds",
    "spec_from_tf",
]
