"""A source's next batches read on a helper thread while the current one is encoded and written.

Reading a batch (pyarrow decoding Parquet pages, an image folder's file reads) and encoding and
writing the one before it (the compiled encoder, the kernel's copy into the file) all run
without the GIL, so a conversion takes about the longer of reading and writing rather than
their sum. At most ``depth`` batches wait; the source's iterator is advanced, and closed, on
the helper thread only; an error there is raised by the consumer's next ``next()``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetched(Generic[T]):
    """Iterate over ``source`` with up to ``depth`` items read ahead on a helper thread.

    Args:
        source: The iterator to read ahead (advanced and closed on the helper thread).
        depth: Items read ahead at most.

    Use as a context manager (or call :meth:`close`): leaving stops the helper thread.
    """

    def __init__(self, source: Iterator[T], depth: int = 2) -> None:
        self._source = source
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="ofindex-prefetch",
                                        daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:
            self._put(_Failure(exc))
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Prefetched[T]:
        return self

    def __next__(self) -> T:
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # later calls stop too
            raise StopIteration
        if isinstance(item, _Failure):
            raise item.error
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop reading ahead and wait for the helper thread (it ends after the item it is
        reading)."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)

    def __enter__(self) -> Prefetched[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
