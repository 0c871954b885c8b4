"""The compiled module's C keeps the Python code's complexity cap, or says why not.

ruff caps every Python function at a cyclomatic complexity of 15 (C901, pyproject.toml);
lizard counts the same for the C in ``ofindex/csrc`` (every ``if``, loop, ``case``, ``&&``,
``||``, ``?`` and ``#if`` inside a function adds one). A function over the cap is split into
named static helpers, one concern each (inlined by the compiler: no cost in the -O2/-O3
builds), or listed in ``EXCEPTIONS`` with its reason and its CCN when it was listed as its
own cap, so that it can only go down; an entry no longer needed fails too, so the table stays
the list of what is over the cap.
"""

from __future__ import annotations

import os

import lizard

from tests.kit import paths
from tests.kit.complexity import MAX_COMPLEXITY

ROOT = paths.ROOT
CSRC = os.path.join(paths.PACKAGE, "csrc")

#: ``file:function`` -> (its cap, why it stays over the cap). Each cap is the function's CCN
#: when it was listed.
EXCEPTIONS: dict[str, tuple[int, str]] = {}


#: ruff's cap on Python functions (checked against pyproject.toml by test_architecture).
CAP = MAX_COMPLEXITY


def complexities(paths: list[str]) -> dict[str, int]:
    """Each function's cyclomatic complexity by lizard, as ``file:function`` -> CCN (a
    function defined twice, in two branches of an ``#if``, counts as its larger one)."""
    found: dict[str, int] = {}
    for path in paths:
        for function in lizard.analyze_file(path).function_list:
            key = f"{os.path.basename(path)}:{function.name}"
            found[key] = max(found.get(key, 0), function.cyclomatic_complexity)
    return found


def _sources() -> list[str]:
    return sorted(os.path.join(CSRC, name) for name in os.listdir(CSRC)
                  if name.endswith((".c", ".h")))


def test_lizard_counts_what_the_cap_is_about(tmp_path):
    """The counter itself: a branch, a loop, a case and each && / || add one, and a
    function of 16 branches is over the cap (so the tests below can fail)."""
    source = tmp_path / "sample.c"
    ifs = "".join(f"    if (x == {k}) return {k};\n" for k in range(CAP + 1))
    source.write_text(
        "static int plain(int x) { return x; }\n"
        "static int mixed(int x) {\n"
        "    for (int i = 0; i < x; i++) if (i > 2 && i < 9 || i == 1) x--;\n"
        "    switch (x) { case 1: return 1; default: return x ? 2 : 3; }\n"
        "}\n"
        f"static int branchy(int x) {{\n{ifs}    return -1;\n}}\n")
    found = complexities([str(source)])
    assert found == {"sample.c:plain": 1, "sample.c:mixed": 7, "sample.c:branchy": CAP + 2}


def test_no_c_function_is_over_the_cap_without_a_reason():
    found = complexities(_sources())
    assert len(found) > 100, "lizard found too few functions: is ofindex/csrc parsed?"
    over = {key: ccn for key, ccn in sorted(found.items())
            if ccn > CAP and key not in EXCEPTIONS}
    assert not over, (
        f"C functions over the cap of {CAP}: {over}; split each into named static helpers "
        "(one concern each), or add it to EXCEPTIONS in tests/project/test_c_complexity.py with "
        "its CCN as its cap and the reason, in a comment above the function too")


def test_the_exceptions_only_go_down():
    found = complexities(_sources())
    grown = {key: (found[key], cap) for key, (cap, _) in EXCEPTIONS.items()
             if key in found and found[key] > cap}
    assert not grown, f"over their recorded caps (CCN, cap): {grown}; split them instead"


def test_every_exception_is_still_needed_and_says_why():
    found = complexities(_sources())
    stale = {key: found.get(key) for key in EXCEPTIONS if found.get(key, 0) <= CAP}
    assert not stale, (f"no longer over the cap of {CAP} (or gone): {stale}; remove them "
                       "from EXCEPTIONS")
    for key, (cap, reason) in EXCEPTIONS.items():
        assert cap > CAP and len(reason) > 40, key
