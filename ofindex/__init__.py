"""ofindex: random access to TFRecord and OneFlow OFRecord datasets, locally and in buckets."""

from .convert import convert
from .errors import (
    CorruptRecordError,
    DataFileNotFoundError,
    DatasetExistsError,
    DecodeError,
    EncodeError,
    FormatDetectionError,
    IncompleteDatasetError,
    IndexMismatchError,
    IndexNotFoundError,
    InvalidURLError,
    ManifestError,
    MissingDependencyError,
    OfindexError,
    RangeReadError,
    RecordIndexError,
    SidecarError,
    StaleIndexError,
    StorageError,
    TruncatedRecordError,
)
from .formats.framing import RecordFormat
from .formats.shard_set import MissingShardsWarning
from .formats.sidecar_header import Compression
from .formats.strays import SkippedFilesWarning
from .index.build_file import BuildResult
from .index.build_results import BuildResults
from .index.builder import build_index
from .index.migrate import LegacyLayoutWarning
from .index.writer import Writer
from .opening import open
from .read.dataset import Dataset
from .read.nodecache import CacheDirWarning
from .read.open import PartialIndexWarning
from .schema import infer_spec, spec_from_tf
from .write import ShardedWriter, WriteSummary

__version__ = "0.2.0"

__all__ = [
    "BuildResult",
    "BuildResults",
    "CacheDirWarning",
    "Compression",
    "CorruptRecordError",
    "DataFileNotFoundError",
    "Dataset",
    "DatasetExistsError",
    "DecodeError",
    "EncodeError",
    "FormatDetectionError",
    "IncompleteDatasetError",
    "IndexMismatchError",
    "IndexNotFoundError",
    "InvalidURLError",
    "LegacyLayoutWarning",
    "ManifestError",
    "MissingDependencyError",
    "MissingShardsWarning",
    "OfindexError",
    "PartialIndexWarning",
    "RangeReadError",
    "RecordFormat",
    "RecordIndexError",
    "ShardedWriter",
    "SidecarError",
    "SkippedFilesWarning",
    "StaleIndexError",
    "StorageError",
    "TruncatedRecordError",
    "WriteSummary",
    "Writer",
    "build_index",
    "convert",
    "infer_spec",
    "open",
    "spec_from_tf",
]
