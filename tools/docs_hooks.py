"""MkDocs hooks of the documentation site (mkdocs.yml names this file).

``<!-- cli-reference -->`` in a page becomes the ``--help`` text of ``ofindex`` and of each
of its subcommands, taken from the program's own argument parser when the site is built, so
the command-line reference cannot drift from the program.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- cli-reference -->"


def cli_reference() -> str:
    """The Markdown reference of every ``ofindex`` subcommand, from the parser itself."""
    from ofindex.cli.parser import build_parser

    os.environ["COLUMNS"] = "100"  # the help text wraps as on a 100-column terminal
    parser = build_parser()
    parts = [_help_block("ofindex", parser)]
    for action in parser._actions:  # argparse keeps its subparsers here, and only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts.append(_help_block(f"ofindex {name}", sub))
    return "\n".join(parts)


def _help_block(title: str, parser: argparse.ArgumentParser) -> str:
    text = parser.format_help().rstrip()
    return f"### `{title}`\n\n```text\n{text}\n```\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the CLI reference marker of a page with the generated reference."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    return markdown
