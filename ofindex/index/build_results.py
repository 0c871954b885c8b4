"""A build's results kept compactly: what ``build_index`` returns for a million files.

A :class:`~ofindex.index.build_file.BuildResult` is a Python object of about 1 kB with its
four strings; a million of them held at once in a cluster build's driver would take a GB.
:class:`BuildResults` keeps the numbers in arrays and the strings in one byte blob each
(about 200 bytes a file) and makes a ``BuildResult`` when one is asked for; results are
appended in dataset order as they arrive (:func:`ofindex.index.cluster.run_on_executor`
delivers them so).
"""

from array import array
from collections.abc import Sequence

from ..formats.framing import RecordFormat
from ..formats.lazy_rows import LazyRows
from ..formats.sidecar_header import Compression
from .build_file import BuildResult

#: The numbers of a result, in the order they are stored.
_NUMBERS = ("records", "size", "uncompressed_size", "index_bytes", "seek_points")
_FORMATS = [None, *RecordFormat]


class _Strings:
    """Strings appended one after another: one UTF-8 blob and the end of each."""

    def __init__(self) -> None:
        self.blob = bytearray()
        self.ends = array("q")

    def append(self, text: str) -> None:
        self.blob += text.encode("utf-8")
        self.ends.append(len(self.blob))

    def __getitem__(self, k: int) -> str:
        start = self.ends[k - 1] if k else 0
        return self.blob[start : self.ends[k]].decode("utf-8")


class BuildResults(LazyRows[BuildResult]):
    """A build's results in dataset order, kept compactly: what ``build_index`` returns for
    a build on an executor. A sequence (``len``, indexing, slices, iteration, ``==`` with a
    list) whose items are :class:`BuildResult` objects made when asked for; about 200 bytes
    a file instead of about 1 kB."""

    def __init__(self) -> None:
        self._numbers = {name: array("q") for name in _NUMBERS}
        # format, compression, partial, and skipped + 2 appended + 4 open tail: a byte each
        self._codes = array("b")
        self._body_crcs = array("q")  # -1: none
        self._contents = array("q")  # -1: none
        self._strings = {name: _Strings() for name in ("data_url", "index_url", "fingerprint")}
        self._problems: dict[int, str] = {}  # only partial files have one

    def append(self, result: BuildResult) -> None:
        """Keep the next result.

        Args:
            result: The next file's result, in dataset order.
        """
        k = len(self)
        for name in _NUMBERS:
            self._numbers[name].append(getattr(result, name))
        self._codes.extend([_FORMATS.index(result.format), int(result.compression),
                            int(result.partial),
                            int(result.skipped) | 2 * result.appended | 4 * result.open_tail])
        self._body_crcs.append(-1 if result.body_crc is None else result.body_crc)
        self._contents.append(-1 if result.content is None else result.content)
        for name, strings in self._strings.items():
            strings.append(getattr(result, name))
        if result.problem is not None:
            self._problems[k] = result.problem

    def __len__(self) -> int:
        """The number of results kept."""
        return len(self._body_crcs)

    def __repr__(self) -> str:
        return f"BuildResults({len(self)} files)"

    def make(self, k: int) -> BuildResult:
        """Result ``k``, made from its row.

        Args:
            k: A result number, ``0 <= k < len(self)``.

        Returns:
            A :class:`BuildResult` equal to the one appended.
        """
        fmt, compression, partial, how = self._codes[4 * k : 4 * k + 4]
        crc, content = self._body_crcs[k], self._contents[k]
        return BuildResult(
            self._strings["data_url"][k], self._strings["index_url"][k], _FORMATS[fmt],
            self._numbers["records"][k], self._numbers["size"][k], bool(partial),
            self._problems.get(k), self._strings["fingerprint"][k], bool(how & 1),
            Compression(compression), self._numbers["uncompressed_size"][k],
            self._numbers["index_bytes"][k], self._numbers["seek_points"][k],
            None if crc < 0 else crc, None if content < 0 else content, bool(how & 2),
            bool(how & 4))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]
