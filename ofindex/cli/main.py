"""``ofindex`` / ``python -m ofindex``: parse the command line, run the command, map errors to
exit codes."""

from __future__ import annotations

import sys

from ..errors import OfindexError
from . import commands
from .exitcodes import EXIT_ERROR, EXIT_INTERRUPTED
from .parser import build_parser, storage_options


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = getattr(commands, "cmd_" + args.command.replace("-", "_"))
    try:
        return handler(args, storage_options(getattr(args, "storage_option", None)))
    except OfindexError as exc:
        print(f"ofindex: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        print(f"ofindex: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("ofindex: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
