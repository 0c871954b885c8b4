"""The error an integration raises when its framework is not installed."""

from __future__ import annotations

from ..errors import MissingDependencyError


def missing_framework(module: str, framework: str, extra: str,
                      exc: ImportError) -> MissingDependencyError:
    """The error for ``ofindex.integrations.<module>`` without its framework.

    Args:
        module: The integration, e.g. ``"tf"``.
        framework: What it needs, e.g. ``"TensorFlow"``.
        extra: The ofindex extra that installs it, e.g. ``"tf"``.
        exc: The ``ImportError`` of the framework's import.

    Returns:
        A :class:`~ofindex.errors.MissingDependencyError` naming the ``pip install`` to run.
    """
    return MissingDependencyError(
        f"ofindex.integrations.{module} needs {framework}, which does not import here "
        f"({exc}); run: pip install 'ofindex[{extra}]'")
