"""Local writes through :class:`LocalStorage`: a file it replaces (``write_atomic``) is read
as the new file afterwards by the same storage, never through the descriptor it had cached for
the old one (a key index written by a lookup was read at the old file's size: RangeReadError)."""

from __future__ import annotations

from ofindex.storage.local import LocalStorage


def test_a_replaced_file_reads_as_the_new_one(tmp_path):
    path = str(tmp_path / "f.bin")
    storage = LocalStorage()
    storage.write_atomic(path, [b"old!" * 4])
    assert storage.read(path, 0, 16) == b"old!" * 4  # its descriptor now cached
    storage.write_atomic(path, [b"new:" * 8])
    assert storage.stamp(path).size == 32
    assert storage.read(path, 0, 32) == b"new:" * 8
    assert storage.read_all(path) == b"new:" * 8
    storage.close()


def test_a_file_replaced_by_someone_else_reads_as_the_new_one_once_stamped(tmp_path):
    # another process (or another storage: a build) renames a new file over the path: the
    # stamp that finds the new size also lets go of the descriptor of the old file, which the
    # read after it used to be refused through (RangeReadError at the old size)
    from ofindex.storage.mapped import MappedLocalStorage

    for storage in (LocalStorage(), MappedLocalStorage()):
        path = str(tmp_path / f"{type(storage).__name__}.bin")
        LocalStorage().write_atomic(path, [b"old!" * 4])
        assert storage.read(path, 0, 16) == b"old!" * 4  # its descriptor now cached
        LocalStorage().write_atomic(path, [b"new:" * 8])
        assert storage.stamp(path).size == 32
        assert storage.read(path, 0, 32) == b"new:" * 8
        assert storage.stamp(path).size == 32  # the same file: nothing dropped
        assert storage.read(path, 0, 32) == b"new:" * 8
        storage.close()
