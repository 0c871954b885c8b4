"""The exit codes of the ``ofindex`` command, as the README documents them."""

from ..errors import OfindexError

#: Success.
EXIT_OK = 0
#: A data, index or storage error (corrupt record, stale or missing index, file not found …).
EXIT_ERROR = 1
#: A bad command line.
EXIT_USAGE = 2
#: ``build --allow-partial`` indexed only a valid prefix, or ``verify`` found a partial index.
EXIT_PARTIAL = 3
#: Interrupted (Ctrl-C).
EXIT_INTERRUPTED = 130


class UsageError(OfindexError, ValueError):
    """A command line that parsing accepted but its command cannot run as asked (``-o -``
    for several files): reported in one line with :data:`EXIT_USAGE`."""
