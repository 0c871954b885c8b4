"""What a path, directory or glob names on an fsspec filesystem: its files (not directories).

A path that exists is that path, whatever its characters; only one that does not may be a
glob (:mod:`.patterns`). One coroutine serves both kinds of filesystem (:func:`.aio.awaitable`):
an asynchronous one's listing runs on its loop, where the retry policy's deadline cuts a
request that hangs; a synchronous one's runs at once (:func:`.aio.run_now`).
"""

from typing import Any

from ..transport.aio import awaitable
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
            await awaitable(fs, "info")(pattern)
        except (FileNotFoundError, NotADirectoryError):
            return await list_matches(fs, pattern)
    try:
        entries = await awaitable(fs, "ls")(pattern, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = [e for e in entries if e.get("type") != "directory"]
    if len(files) == 1 and files[0]["name"].rstrip("/") == pattern.rstrip("/"):
        return [pattern]  # ls of a file lists the file itself
    if not entries and await awaitable(fs, "exists")(pattern) \
            and not await awaitable(fs, "isdir")(pattern):
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
        if await awaitable(fs, "isdir")(head):
            pattern = with_literal_head(pattern, head)
            break
    found = await awaitable(fs, "glob")(pattern, detail=True)
    return [p for p, info in found.items() if info.get("type") != "directory"]
