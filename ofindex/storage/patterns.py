"""When a name is a glob. A path that exists is that path, whatever its characters (a file
named ``a[1]`` or ``b*`` is that file, not a pattern matching ``a1`` or ``bb``); only a path
that does not exist may be a glob, and then its leading directories that exist as written are
taken literally (``run[3]/part-*`` in a directory ``run[3]`` lists ``run[3]``'s files, not
``run3``'s). Every storage's ``expand`` decides so through these two functions, for every
command and call that names data (``open``, ``build``, ``info``, ``convert`` …).
"""

import glob

#: ``has_magic(path)``: whether ``path`` holds glob characters (``*``, ``?``, ``[``): it may
#: be a pattern, if no file or directory has that very name (the standard library's test).
has_magic = glob.has_magic


def literal_heads(pattern: str, sep: str = "/") -> list[str]:
    """The leading directories of ``pattern`` that hold glob characters, longest first: the
    ones to look up before globbing (the first that exists is taken as written, see
    :func:`with_literal_head`).

    Args:
        pattern: A path that does not exist and holds glob characters.
        sep: The storage's path separator.

    Returns:
        Candidate directories (none when only the last part holds glob characters).
    """
    parts = pattern.split(sep)
    heads = [sep.join(parts[:k]) for k in range(len(parts) - 1, 0, -1)]
    return [head for head in heads if head and has_magic(head)]


def with_literal_head(pattern: str, head: str) -> str:
    """``pattern`` with its leading directory ``head`` (which exists as written) escaped, so
    that a glob matches inside that directory only.

    Args:
        pattern: The pattern.
        head: A prefix of ``pattern`` from :func:`literal_heads`.

    Returns:
        The pattern to glob.
    """
    return glob.escape(head) + pattern[len(head):]
