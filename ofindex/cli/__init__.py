"""The ``ofindex`` command line: argument parsing, the commands, the demo and its synthetic
data."""

from .exitcodes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE
from .main import main

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PARTIAL", "EXIT_USAGE", "main"]
