"""The project's complexity cap: ruff's C901 limit for Python (pyproject.toml), which the C in
ofindex/csrc keeps too (tests/project/test_c_complexity.py)."""

#: The most cyclomatic complexity one function may have (ruff's ``max-complexity``).
MAX_COMPLEXITY = 15
