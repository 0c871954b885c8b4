"""protobuf's own reading of a record, the reference of tests/decode/test_decode_differential.py.

ofindex's decoders follow the rules of protobuf 7 (upb). protobuf 6 differs on a few edges: it
accepts a length or tag in more than 5 bytes and refuses field number 0 inside a group, among
others, and the test environment holds protobuf 6 because Apache Beam's extra requires
protobuf < 7. So when the installed protobuf is older than 7, :func:`protobuf_answer` asks a
process of its own that imports protobuf 7 from ``<venv>/protobuf7`` (installed there by
tools/run-tests.sh: ``pip install --target .venv/protobuf7 'protobuf>=7'``); this module is
that process's program too.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from typing import IO, Any

import numpy as np
from google.protobuf import __version__ as protobuf_version
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit import paths

#: The installed protobuf's major version.
PROTOBUF_MAJOR = int(protobuf_version.split(".")[0])
#: Where tools/run-tests.sh installs protobuf 7 beside an older one.
PROTOBUF_7_DIR = os.path.join(sys.prefix, "protobuf7")

MESSAGES = {"example": example_pb2.Example, "sequence": example_pb2.SequenceExample,
            "ofrecord": ofrecord_pb2.OFRecord}
DTYPES = {"bytes_list": np.dtype(object), "float_list": np.dtype(np.float32),
          "double_list": np.dtype(np.float64), "int32_list": np.dtype(np.int32),
          "int64_list": np.dtype(np.int64)}


def _entries_message() -> Any:
    """``OFRecordEntries``: an OFRecord whose map is a plain repeated field with ``bytes``
    keys, to read back what protobuf put in an OFRecord's map whatever the keys (protobuf's
    Python API cannot hand out a proto2 map value whose key is not UTF-8)."""
    name = "ofindex_tests/ofrecord_entries.proto"
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name=name, package="ofindex_tests", dependency=["ofindex/proto/ofrecord.proto"])
        record = proto.message_type.add(name="OFRecordEntries")
        entry = record.nested_type.add(name="Entry")
        optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        entry.field.add(name="key", number=1, label=optional,
                        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES)
        entry.field.add(name="value", number=2, label=optional,
                        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        type_name=".ofindex.oneflow.Feature")
        record.field.add(name="feature", number=1,
                         label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                         type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                         type_name=".ofindex_tests.OFRecordEntries.Entry")
        pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("ofindex_tests.OFRecordEntries"))


OFRECORD_ENTRIES = _entries_message()


def _feature(feature: Any) -> tuple[str | None, np.ndarray]:
    """A parsed Feature as (its list's name or None, its values)."""
    which = feature.WhichOneof("kind")
    if which is None:
        return None, np.empty(0, np.float32)
    values = list(getattr(feature, which).value)
    if DTYPES[which].kind == "O":
        out = np.empty(len(values), object)
        out[:] = values
        return which, out
    return which, np.array(values, DTYPES[which])


def _features(pairs: Any) -> dict[Any, tuple[str | None, np.ndarray]]:
    return {key: _feature(value) for key, value in pairs}


def parsed_here(kind: str, raw: bytes) -> Any:
    """What the installed protobuf makes of ``raw`` (see :func:`protobuf_answer`)."""
    try:
        parsed = MESSAGES[kind].FromString(raw)
    except Exception:
        return None
    if kind == "example":
        return _features(parsed.features.feature.items())
    if kind == "sequence":
        lists = {name: [_feature(step) for step in steps.feature]
                 for name, steps in parsed.feature_lists.feature_list.items()}
        return _features(parsed.context.feature.items()), lists
    parsed.DiscardUnknownFields()  # upb keeps map entries with unknown fields aside
    entries = OFRECORD_ENTRIES.FromString(parsed.SerializeToString())
    return {_name(entry.key): _feature(entry.value) for entry in entries.feature}


def _name(key: bytes) -> str | bytes:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key  # as decode_ofrecord names a feature whose name is not UTF-8




class _Protobuf7:
    """A process that parses records with protobuf 7: pickled ``(kind, raw)`` in, pickled
    answers out, one at a time."""

    def __init__(self) -> None:
        if not os.path.isdir(os.path.join(PROTOBUF_7_DIR, "google", "protobuf")):
            raise RuntimeError(
                f"protobuf {protobuf_version} is installed and the reference is protobuf 7: "
                f"install it beside it with `pip install --target {PROTOBUF_7_DIR} "
                "'protobuf>=7'` (tools/run-tests.sh does)")
        env = dict(os.environ, PYTHONPATH=paths.pythonpath(PROTOBUF_7_DIR))
        self.process = subprocess.Popen([sys.executable, "-m", __name__], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        atexit.register(self.close)
        assert self.ask("version", b"") >= 7

    def ask(self, kind: str, raw: bytes) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        pickle.dump((kind, raw), self.process.stdin)
        self.process.stdin.flush()
        return pickle.load(self.process.stdout)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)
        if self.process.stdout is not None:
            self.process.stdout.close()


_protobuf_7: _Protobuf7 | None = None


def protobuf_answer(kind: str, raw: bytes) -> Any:
    """What protobuf 7 makes of ``raw``: ``{name: (list name, values)}`` (for ``"sequence"``:
    ``(context, {name: [(list name, values) per step]})``), or ``None`` when it refuses it."""
    global _protobuf_7
    if PROTOBUF_MAJOR >= 7:
        return parsed_here(kind, raw)
    if _protobuf_7 is None:
        _protobuf_7 = _Protobuf7()
    return _protobuf_7.ask(kind, raw)


def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    while True:
        try:
            kind, raw = pickle.load(requests)
        except EOFError:
            return
        answer = PROTOBUF_MAJOR if kind == "version" else parsed_here(kind, raw)
        pickle.dump(answer, answers)
        answers.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
