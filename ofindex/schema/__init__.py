"""Knowing what a dataset holds: :func:`infer_spec` samples records and infers each feature's
type, length and presence; :func:`to_python` prints the result as code for
:mod:`ofindex.decode`, :func:`to_tf` gives it as TensorFlow's ``feature_description`` (or as
code), and :func:`spec_from_tf` reads a ``feature_description`` back."""

from ofindex.schema.infer import FeatureStats, Schema, infer_spec
from ofindex.schema.text import spec_from_tf, to_python, to_tf

__all__ = ["FeatureStats", "Schema", "infer_spec", "spec_from_tf", "to_python", "to_tf"]
