"""``ofindex`` / ``python -m ofindex``: parse the command line, run the command, and turn every
failure into one line and an exit code (the traceback only with ``--debug`` or
``OFINDEX_DEBUG=1``)."""

import errno
import os
import sys
import traceback

from ..errors import OfindexError
from ..transport.failures import first_line
from ..transport.policy import retry_settings
from . import commands
from .exitcodes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError
from .parser import build_parser, check, storage_options


def main(argv: list[str] | None = None) -> int:
    """Run the ``ofindex`` command.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 a data/index/storage error, 2 a bad command line (raised
        as ``SystemExit(2)`` by argument parsing), 3 a partial index, 130 interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    check(args, parser)
    debug = getattr(args, "debug", False) or os.environ.get("OFINDEX_DEBUG", "") not in ("", "0")
    options = storage_options(getattr(args, "storage_option", None), parser)
    handler = getattr(commands, "cmd_" + args.command.replace("-", "_"))
    settings = retry_settings(getattr(args, "retries", None), getattr(args, "timeout", None))
    try:
        with settings:  # for every storage the command makes
            code: int = handler(args, options)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("ofindex: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our output went away (`ofindex info … | head -1`): nothing to report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except UsageError as exc:
        print(f"ofindex {args.command}: error: {exc.cli_message()}", file=sys.stderr)
        return EXIT_USAGE
    except OfindexError as exc:
        if debug:
            traceback.print_exc()
        print(f"ofindex: error: {exc.cli_message()}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # not an ofindex error: still one line, unless --debug
        if debug:
            traceback.print_exc()
        line, foreseen = describe(exc)
        print(f"ofindex: error: {line}", file=sys.stderr)
        if not (debug or foreseen):
            print("ofindex: run again with --debug for the traceback", file=sys.stderr)
        return EXIT_ERROR


_OS_ADVICE = {
    errno.EACCES: "check its permissions (ls -l), or run as a user who may read and write it",
    errno.EPERM: "check its permissions (ls -l), or run as a user who may read and write it",
    errno.EROFS: "the file system is read-only: keep the indexes elsewhere with --index-dir DIR",
    errno.ENOSPC: "the disk is full: free some space, or keep the indexes elsewhere with "
                  "--index-dir DIR",
    errno.EISDIR: "name a file, or the directory itself without a trailing glob",
}


def describe(exc: BaseException) -> tuple[str, bool]:
    """One line for a failure that no layer translated (the command line prints it).

    Returns:
        ``(line, foreseen)``: ``foreseen`` is true for failures the line fully explains (an
        operating-system error on a named file), false for the unexpected ones.
    """
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        advice = _OS_ADVICE.get(exc.errno or 0)
        line = f"{exc.filename}: {exc.strerror}" + (f"; {advice}" if advice else "")
        return line, True
    return first_line(exc), False
