"""Decoding the events of a TensorBoard event file as its records are scanned: one entry per
summary value (:data:`~.index_file.ENTRY`), so that the events index is built in the scan
that builds the file's sidecar (:class:`~ofindex.index.scan.RecordSink`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from google.protobuf.message import DecodeError as ProtobufDecodeError

from ..proto import event_pb2
from .index_file import ENTRY, MAX_TAGS, Case
from .scalar_wire import Scalars, find_scalars
from .values import scalar_of

#: The ``Summary.Value`` oneof's fields and what each is.
_CASES = {"simple_value": Case.SIMPLE, "histo": Case.HISTOGRAM, "image": Case.IMAGE,
          "audio": Case.AUDIO, "tensor": Case.TENSOR, None: Case.OTHER,
          "obsolete_old_style_histogram": Case.OTHER}
#: TensorFlow's record framing: a payload starts 12 bytes into its record.
_HEAD = 12


class Tags:
    """The tags of one event file: numbered in the order first seen, with the plugin the
    first value that names one gives (TensorFlow 2 writes a tag's metadata once).

    Args:
        known: The tags of the file's index so far, ``(name, plugin)`` in number order.
    """

    def __init__(self, known: list[tuple[str, str]]) -> None:
        self.names = [name for name, _ in known]
        self.plugins = [plugin for _, plugin in known]
        self.number = {name: k for k, name in enumerate(self.names)}
        self.first_new = len(self.names)

    def of(self, name: str, plugin: str) -> int:
        """The number of tag ``name`` (a new one numbered now), its plugin noted."""
        k = self.number.get(name)
        if k is None:
            if len(self.names) >= MAX_TAGS:
                raise ValueError(f"more than {MAX_TAGS} tags")
            k = self.number[name] = len(self.names)
            self.names.append(name)
            self.plugins.append(plugin)
        elif plugin and not self.plugins[k]:
            self.plugins[k] = plugin
        return k

    def new(self) -> list[tuple[str, str]]:
        """The tags numbered since this table was made, ``(name, plugin)``."""
        return list(zip(self.names[self.first_new:], self.plugins[self.first_new:],
                        strict=True))


class EventSink:
    """Collects the entries of the events scanned (see the module).

    Args:
        tags: The file's tag table.
        read: Reads record ``(offset, length)``'s payload again, for records a scan streamed
            (larger than its blocks).
    """

    def __init__(self, tags: Tags, read: Callable[[int, int], bytes] | None = None) -> None:
        self.tags = tags
        self.read = read
        self.rows: list[tuple[int, int, float, float, int, int, int]] = []
        self.parts: list[np.ndarray] = []  # entries of one-scalar events, found in bulk
        self.first: int | None = None  # the first record scanned
        self.late: list[tuple[int, int, int]] = []  # (offset, length, record), streamed

    def records(self, block: memoryview, at: np.ndarray, lengths: np.ndarray,
                first: int) -> None:
        """Decode records ``first …`` of a scanned block (see
        :class:`~ofindex.index.scan.RecordSink`)."""
        if self.first is None:
            self.first = first
        starts = at.astype(np.int64) + _HEAD
        ends = starts + lengths.astype(np.int64)
        try:  # one-scalar events in bulk (see .scalar_wire); every other event by protobuf
            found = find_scalars(block, starts, ends)
        except (ValueError, ProtobufDecodeError):  # (unexpected bytes: all by protobuf)
            found = None
        rest = np.ones(len(at), dtype=bool)
        if found is not None and len(found.which):
            rest[found.which] = False
            self._add_bulk_scalars(found, first)
        for k in np.flatnonzero(rest).tolist():
            self.event(bytes(block[int(starts[k]) : int(ends[k])]), first + k)

    def _add_bulk_scalars(self, found: Scalars, first: int) -> None:
        """The entries of one-scalar events found in bulk."""
        numbers = np.array([self.tags.of(name, plugin) for name, plugin in found.names],
                           dtype=np.uint32)
        part = np.zeros(len(found.which), dtype=ENTRY)
        part["record"] = found.which + first
        part["step"], part["wall_time"], part["value"] = found.step, found.wall_time, found.value
        part["tag"], part["case"] = numbers[found.named], found.case
        self.parts.append(part)

    def streamed(self, offset: int, length: int, record: int) -> None:
        """Note a record too large for the scan's blocks (decoded by :meth:`finish`)."""
        if self.first is None:
            self.first = record
        self.late.append((offset, length, record))

    def finish(self, records: int) -> np.ndarray:
        """The entries of the records scanned below ``records`` (the records the index
        kept), the streamed ones read and decoded now, in record order.

        Args:
            records: The records the scan kept (those after: past a damaged end).
        """
        for offset, length, record in self.late:
            if record < records and self.read is not None:
                self.event(self.read(offset + _HEAD, length), record)
        self.late = []
        table = np.array(self.rows, dtype=[(name, ENTRY[name]) for name in (
            "record", "step", "wall_time", "value", "tag", "slot", "case")])
        entries = np.zeros(len(table), dtype=ENTRY)
        for name in table.dtype.names or ():
            entries[name] = table[name]
        entries = np.concatenate([entries, *self.parts])
        self.rows, self.parts = [], []
        entries = entries[entries["record"] < records]
        return entries[np.argsort(entries["record"], kind="stable")]

    def event(self, payload: bytes, record: int) -> None:
        """Decode one event (a record that is no ``Event``, or holds no summary, gives no
        entry: TensorBoard skips it too)."""
        try:
            event = event_pb2.Event.FromString(payload)
        except ProtobufDecodeError:
            return
        if not event.HasField("summary"):
            return
        step, wall = event.step, event.wall_time
        rows, tags = self.rows, self.tags
        for slot, value in enumerate(event.summary.value):
            if slot > 0xFFFF:  # (an entry numbers its value in 16 bits)
                break
            plugin = value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""
            tag = tags.of(value.tag, plugin)
            field = value.WhichOneof("value")
            case = _CASES.get(field, Case.OTHER)
            number = math.nan
            if case is Case.SIMPLE:
                number = value.simple_value
            elif case is Case.TENSOR:
                scalar = scalar_of(value.tensor)
                if scalar is not None:
                    case, number = Case.TENSOR_SCALAR, scalar
            rows.append((record, step, wall, number, tag, slot, int(case)))
