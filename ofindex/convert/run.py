"""``ofindex.convert``: any source of :mod:`ofindex.convert.sources` into a sharded dataset,
atomically (the dataset appears whole at the end, or not at all), with a progress bar and a
summary; the source's next batch is read while the current one is written
(:mod:`ofindex.convert.prefetch`)."""

import dataclasses
import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from ofindex.convert.prefetch import Prefetched
from ofindex.convert.sources import open_source
from ofindex.decode import decode_example, decode_ofrecord
from ofindex.decode.example import top_fields
from ofindex.decode.image_kinds import count_formats
from ofindex.decode.spec import Spec
from ofindex.encode import encode_example, encode_ofrecord
from ofindex.encode.arrow_map import EXACT
from ofindex.encode.nulls import REFUSE, Nulls, null_policy
from ofindex.errors import EncodeError, LeftoverFilesWarning, NestedPathsError, hint
from ofindex.formats.framing import RecordFormat
from ofindex.storage.patterns import has_magic, literal_heads
from ofindex.write.leftovers import find_leftovers
from ofindex.write.sharded import ShardedWriter, WriteSummary


def _recoded(records: Iterable[bytes], source: str, target: str,
             first: int) -> Iterable[bytes]:
    """Examples as OFRecords or the other way (the same features and lists: an OFRecord's
    float64 and int32 lists become float32 and int64 lists, as an Example holds them)."""
    if source == target:
        return records
    if target == "ofrecord":
        return [_as_ofrecord(r, first + k) for k, r in enumerate(records)]
    return [encode_example(decode_ofrecord(r), record=first + k) for k, r in enumerate(records)]


def _as_ofrecord(record: bytes, number: int) -> bytes:
    """An Example as an OFRecord; a record holding more than an Example's features (a
    SequenceExample's feature lists) is refused rather than cut down to them.

    Raises:
        EncodeError: The record holds other top-level fields than an Example's features.
    """
    beyond = top_fields(record) - {1}
    if beyond:
        what = ("a tf.train.SequenceExample with feature lists" if beyond == {2}
                else f"not a tf.train.Example (it holds fields {sorted(beyond)})")
        keep = hint("format='tfrecord'", "--to tfrecord")
        raise EncodeError(
            f"record {number} of the source is {what}: an OFRecord holds features only, so "
            f"converting would drop them; keep TFRecord ({keep})")
    return encode_ofrecord(decode_example(record), record=number)


def _source_root(src: str) -> str:
    """The local path a path source reads under: the path itself when it exists (whatever its
    characters, as :mod:`ofindex.storage.patterns` decides), else a glob's longest leading
    directory that exists as written, else its directory before any pattern."""
    if has_magic(src) and not os.path.lexists(src):
        heads = [head for head in literal_heads(src, os.sep) if os.path.isdir(head)]
        if heads:
            src = heads[0]
        else:
            parts = []
            for part in src.split(os.sep):
                if has_magic(part):
                    break
                parts.append(part)
            src = os.sep.join(parts) or os.curdir
    return os.path.realpath(src)


def refuse_nested(src: object, dst: str) -> None:
    """Refuse an output inside the source, or a source inside the output (local paths).

    Raises:
        NestedPathsError: Naming both.
    """
    if not isinstance(src, (str, os.PathLike)):
        return
    source = os.fspath(src)
    if "://" in source or "://" in dst:
        return
    root, out = _source_root(source), os.path.realpath(dst)
    if out == root or out.startswith(root.rstrip(os.sep) + os.sep):
        raise NestedPathsError(
            f"the output {dst} is inside the source {source}: the conversion would read what "
            "it writes, or a rerun would take it as source data; write the dataset to a "
            "directory outside the source")
    if root.startswith(out.rstrip(os.sep) + os.sep):
        raise NestedPathsError(
            f"the source {source} is inside the output {dst}: the dataset's directory would "
            "hold its source; write it to a directory of its own")


def _bar(enabled: bool, total: int | None, description: str) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit=" records", desc=f"converting {description}", leave=False,
                file=sys.stderr)


def convert(src: object, dst: str | os.PathLike[str], *, format: str = "tfrecord",
            shard_bytes: int | None = None, shard_records: int | None = None,
            compression: str | None = None, spec: Spec = None, batch_size: int | None = None,
            recode: bool = True, progress: bool = False,
            storage_options: dict[str, Any] | None = None,
            nulls: Nulls = REFUSE, float64: str = EXACT) -> WriteSummary:
    """Convert a dataset of another kind into a sharded TFRecord / OFRecord dataset.

    >>> ofindex.convert("train.parquet", "train/", shard_records=100_000)  # doctest: +SKIP

    Args:
        src: Parquet file(s) (a file, directory or glob), a Hugging Face ``datasets``
            dataset (the object or a ``save_to_disk`` directory), an image folder
            (``class/file.jpg``: features ``image``, ``label``, ``class``, ``filename``), an
            ``.npy`` / ``.npz`` file, or a TFRecord / OFRecord dataset (to reshard, change
            compression, or change framing).
        dst: The new dataset's directory (must hold no data files).
        format: ``"tfrecord"`` (Examples) or ``"ofrecord"``.
        shard_bytes: Target shard size (default 256 MiB when ``shard_records`` is not given).
        shard_records: Records per shard.
        compression: ``"gzip"``, ``"zlib"`` or ``None``.
        spec: The decoding spec records must fit (its dtypes choose the lists), or ``None``.
        batch_size: Records encoded at once; ``None``: Parquet and Hugging Face batches of
            about 4 MiB of columns (1,024 to 65,536 records; records above 4 KiB, about 16 MiB, at
            least 16), other sources' of 1,024.
        recode: When a record dataset changes framing, re-encode Examples as OFRecords (or
            back); ``False`` copies payloads as they are.
        progress: Show a progress bar on stderr.
        storage_options: fsspec options for ``dst`` (and a record dataset ``src``).
        nulls: What a null element inside a list (Parquet, Hugging Face) becomes:
            ``"refuse"`` (an EncodeError naming the column and the row), ``"drop"`` (left
            out of its list) or ``("fill", value)``. A null cell always leaves the feature
            out of that record (see :mod:`ofindex.encode.nulls`).
        float64: How an Example holds float64 columns (Parquet, Hugging Face): ``"exact"``
            (the raw doubles in a bytes value: read back equal) or ``"float32"``
            (TensorFlow's float_list, rounded). An OFRecord holds doubles either way.

    Columns of Parquet files and Hugging Face datasets are stored by one mapping
    (:mod:`ofindex.encode.arrow_map`: docs/writing.md's table) and the dataset gets a column
    map beside its manifest, with which ``ofindex.integrations.hf.to_hf_dataset`` gives the
    same columns back: features, types, order, values and nulls. Images keep their bytes.

    Returns:
        The :class:`~ofindex.write.sharded.WriteSummary` (records, shards, bytes, time, and
        the formats of the images written).

    Raises:
        EncodeError: A column that cannot be represented (before anything is written), or a
            value that cannot be encoded (nothing is left behind).
        DatasetExistsError: ``dst`` already holds data files.
        NestedPathsError: ``dst`` is inside the source, or the source inside ``dst``.
        ValueError: A bad ``format`` or ``nulls``.
    """
    target = RecordFormat.parse(format).name.lower()
    nulls = null_policy(nulls)
    refuse_nested(src, os.fspath(dst))
    source = open_source(src, batch_size, storage_options)
    left = find_leftovers(os.fspath(dst)) if storage_options is None or "://" not in str(
        dst) else None
    if left is not None:  # a writer killed earlier: say so, delete nothing
        warnings.warn(LeftoverFilesWarning(left.describe()), stacklevel=2)
    bar = _bar(progress, source.records, source.description)
    formats: dict[str, int] = {}
    try:
        with ShardedWriter(dst, target, shard_bytes=shard_bytes, shard_records=shard_records,
                           compression=compression, spec=spec, nulls=nulls,
                           storage_options=storage_options, float64=float64) as writer, \
                Prefetched(source.batches()) as batches:
            for batch in batches:
                if source.images is not None:
                    count_formats(source.images(batch), formats)
                if source.raw:
                    records = batch if not recode else _recoded(
                        batch, source.record_format, target, len(writer))
                    written = writer.write_many(records)
                else:
                    written = writer.write_columns(batch)
                if bar is not None:
                    bar.update(written)
    finally:
        if bar is not None:
            bar.close()
    assert writer.summary is not None
    if formats:
        writer.summary = dataclasses.replace(writer.summary, image_formats=formats)
    return writer.summary
