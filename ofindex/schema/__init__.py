"""Knowing what a dataset holds: :func:`infer_spec` samples records and infers each feature's
type, length and presence; :func:`to_python` / :func:`to_tf` print the result as code, and
:func:`spec_from_tf` reads a TensorFlow ``feature_description``."""

from ofindex.schema.infer import FeatureStats, Schema, infer_spec
from ofindex.schema.text import spec_from_tf, to_python, to_tf

__all__ = ["FeatureStats", "Schema", "infer_spec", "spec_from_tf", "to_python", "to_tf"]
