"""What a path, directory or glob names on an fsspec filesystem: its files (not directories).

A path that exists is that path, whatever its characters; only one that does not may be a
glob (:mod:`.patterns`). The calls run on the event loop (:func:`ofindex.transport.clients.
call`), where the request policy's deadline cuts one that hangs.
"""

from typing import Any

from ..transport.clients import call
from .patterns import has_magic, literal_heads, with_literal_head


async def list_files(fs: Any, pattern: str) -> list[str]:
    """List the files ``pattern`` names on ``fs``.

    Args:
        fs: An fsspec filesystem.
        pattern: A file, a directory (its files, not recursively) or a glob.

    Returns:
        Paths on ``fs`` (unsorted); ``[]`` when nothing matches.
    """
    if has_magic(pattern):
        try:  # an object or a directory of that very name (one request, HEAD, on a bucket)
            await call(fs, "info", pattern)
        except (FileNotFoundError, NotADirectoryError):
            return await list_matches(fs, pattern)
    try:
        entries = await call(fs, "ls", pattern, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = [e for e in entries if e.get("type") != "directory"]
    if len(files) == 1 and files[0]["name"].rstrip("/") == pattern.rstrip("/"):
        return [pattern]  # ls of a file lists the file itself
    if not entries and await call(fs, "exists", pattern) \
            and not await call(fs, "isdir", pattern):
        return [pattern]
    return [str(e["name"]) for e in files]


async def list_matches(fs: Any, pattern: str) -> list[str]:
    """The files a glob matches (``pattern`` names no path), its leading directories that
    exist as written taken literally.

    Args:
        fs: An fsspec filesystem.
        pattern: A glob that is not the name of a file or directory.

    Returns:
        Paths on ``fs`` (unsorted); ``[]`` when nothing matches.
    """
    for head in literal_heads(pattern):
        if await call(fs, "isdir", head):
            pattern = with_literal_head(pattern, head)
            break
    found = await call(fs, "glob", pattern, detail=True)
    return [p for p, info in found.items() if info.get("type") != "directory"]
