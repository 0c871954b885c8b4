"""A griffe extension of the documentation site (mkdocs.yml names this file): the library's
docstrings, written for ``help()`` with Sphinx's inline roles and reStructuredText blocks,
rendered by mkdocstrings as the Markdown it understands.

- ``:class:`X```, ``:func:``, ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:`` and
  ``:obj:`` become links to the API reference when it documents the name (resolved from the
  docstring's own scope as Sphinx does; ``~`` shows the last part only), inline code when it
  does not.
- ``>>>`` examples become ``pycon`` code blocks, without ``# doctest:`` directives.
- A paragraph ending in ``::`` and the indented block after it become a paragraph ending in
  ``:`` and a code block (``python`` when the block parses as Python, ``text`` otherwise).
- A parameter whose default is a named constant (``sample=SAMPLE``) shows its value
  (``sample=256``; ``256 << 20`` as written for byte sizes).

Nothing in the source changes, so ``help()`` keeps the roles and the site needs no second
copy of any docstring. tests/docs/test_docs_site.py builds the site and fails on a raw role.
"""

from __future__ import annotations

import ast
import html
import importlib
import re
import textwrap
from typing import Any

import griffe

#: The roles converted; any other ``:name:`text``` stays as written (and the site test fails).
ROLES = ("class", "func", "meth", "mod", "data", "attr", "exc", "obj", "const")
ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<target>[^`]+)`")
DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")
#: A default's text that is a value already (digits, operators, quotes, brackets...).
NUMERIC = re.compile(r"[\d\s<>*+\-/().x_]+")


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as seen from ``obj``'s docstring (as written when no
    scope holds it)."""
    if target.startswith("ofindex."):
        return target
    head, _, rest = target.partition(".")
    for scope in (obj, *_parents(obj)):
        try:
            path = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            continue
        return f"{path}.{rest}" if rest else path
    return target


def _parents(obj: griffe.Object) -> list[griffe.Object]:
    out = []
    parent = obj.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


def convert_roles(text: str, obj: griffe.Object) -> str:
    """Replace the Sphinx roles of a docstring with optional cross-references (a link when
    the site documents the target, else inline code)."""

    def link(match: re.Match[str]) -> str:
        target = re.sub(r"\s+", "", match["target"])  # a role may wrap across lines
        short = target.startswith("~")
        target = target.lstrip("~!.")
        title = target.rsplit(".", 1)[-1] if short else target
        identifier = html.escape(_resolve(obj, target), quote=True)
        return (f'<autoref identifier="{identifier}" optional>'
                f"<code>{html.escape(title)}</code></autoref>")

    return ROLE.sub(link, text)


def _fence(lines: list[str], indent: str, lang: str) -> list[str]:
    body = textwrap.dedent("\n".join(lines)).splitlines()
    return [f"{indent}```{lang}", *(f"{indent}{line}".rstrip() for line in body),
            f"{indent}```"]


def convert_doctests(text: str) -> str:
    """``>>>`` examples (with their ``...`` lines and output) as ``pycon`` code blocks."""
    lines, out, k = text.splitlines(), [], 0
    while k < len(lines):
        stripped = lines[k].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[k])
            k += 1
            continue
        indent = lines[k][: len(lines[k]) - len(stripped)]
        block = []
        while k < len(lines) and lines[k].strip():
            line = DIRECTIVE.sub("", lines[k])
            if line.strip() not in ("...", ""):
                block.append(line)
            k += 1
        out += _fence(block, indent, "pycon")
    return "\n".join(out)


def _language(block: list[str]) -> str:
    try:
        ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError:
        return "text"
    return "python"


def convert_literal_blocks(text: str) -> str:
    """reStructuredText ``::`` literal blocks as fenced code blocks."""
    lines, out, k = text.splitlines(), [], 0
    while k < len(lines):
        line = lines[k]
        if not line.rstrip().endswith("::") or k + 1 >= len(lines) or lines[k + 1].strip():
            out.append(line)
            k += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        head = line.rstrip()[:-2].rstrip()
        if head.strip():
            out.append(head + ":")
        k += 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        block = []
        while k < len(lines) and (not lines[k].strip() or (
                len(lines[k]) - len(lines[k].lstrip()) > len(indent))):
            block.append(lines[k])
            k += 1
        while block and not block[-1].strip():
            block.pop()
        out += ["", *_fence(block, indent, _language(block)), ""]
    return "\n".join(out)


def _constant_text(obj: griffe.Object, name: str) -> str | None:
    """The value of the module constant ``name`` seen from ``obj``, as text (``None``: not a
    plain value)."""
    path = _resolve(obj, name)
    module_path, _, attribute = path.rpartition(".")
    try:
        constant = obj.modules_collection.get_member(path)
    except (KeyError, ValueError, AttributeError):
        constant = None
    value = None if constant is None else getattr(constant, "value", None)
    if value is not None and NUMERIC.fullmatch(str(value)):
        return str(value)
    try:  # assigned by unpacking, or computed: the value at import
        runtime = getattr(importlib.import_module(module_path), attribute)
    except (ImportError, AttributeError, ValueError):
        return None
    if isinstance(runtime, (bool, int, float, str, bytes, type(None))) or (
            isinstance(runtime, tuple) and all(isinstance(v, (int, float, str))
                                               for v in runtime)):
        return repr(runtime)
    return None


def show_default_values(func: griffe.Function) -> None:
    """Defaults that name a constant show its value."""
    for parameter in func.parameters:
        default = parameter.default
        text = None if default is None else str(default)
        if text and re.fullmatch(r"[A-Za-z_][\w.]*", text) and text not in (
                "True", "False", "None") and text.split(".")[-1].isupper():
            value = _constant_text(func, text)
            if value is not None:
                parameter.default = value


class SphinxToMarkdown(griffe.Extension):
    """Convert every docstring and named default of a loaded package (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Convert the whole package once it is loaded.

        Args:
            pkg: The package.
            **kwargs: What else griffe passes.
        """
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            text = convert_literal_blocks(convert_doctests(obj.docstring.value))
            obj.docstring.value = convert_roles(text, obj)
        if isinstance(obj, griffe.Function):
            show_default_values(obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)
