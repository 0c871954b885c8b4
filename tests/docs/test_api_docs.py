"""The public API documents itself: every public name has a docstring in one convention
(Google style: Args / Returns / Raises), every parameter is described, and help() shows
real types, not quoted strings."""

from __future__ import annotations

import enum
import inspect

import pytest

import ofindex
import ofindex.cache.chain
import ofindex.cache.data
import ofindex.decode
import ofindex.encode
import ofindex.schema
import ofindex.shuffle
import ofindex.tfds
import ofindex.write
from tests.kit.helpers import need

need("torch", "torch")
need("tensorflow", "tf")
need("keras", "keras")
import ofindex.integrations.keras  # noqa: E402
import ofindex.integrations.tf  # noqa: E402
import ofindex.integrations.tfds_torch  # noqa: E402
import ofindex.integrations.torch  # noqa: E402

MODULES = [ofindex, ofindex.decode, ofindex.encode, ofindex.write, ofindex.schema,
           ofindex.shuffle, ofindex.integrations.torch, ofindex.integrations.tf,
           ofindex.integrations.keras, ofindex.cache.chain, ofindex.cache.data, ofindex.tfds,
           ofindex.integrations.tfds_torch]
#: Methods documented even though they start with an underscore.
DUNDERS = {"__getitem__", "__getitems__", "__iter__", "__len__", "__call__"}


def _public(module) -> list[tuple[str, object]]:
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in module.__all__]


def _callables(module):
    for qual, obj in _public(module):
        if inspect.isclass(obj):
            if issubclass(obj, (BaseException, enum.Enum)):
                yield qual, obj, None  # documented by their class docstring alone
                continue
            yield qual, obj, obj.__init__
            for name, member in vars(obj).items():
                if name.startswith("_") and name not in DUNDERS:
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    yield f"{qual}.{name}", member, member
        elif callable(obj):
            yield qual, obj, obj


ITEMS = [item for m in MODULES for item in _callables(m)]


@pytest.mark.parametrize("qual,obj,fn", ITEMS, ids=[i[0] for i in ITEMS])
def test_public_name_is_documented(qual, obj, fn):
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{qual} has no docstring"
    if fn is None or fn is object.__init__:
        return
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL,
                                                                   p.VAR_KEYWORD)]
    owner_doc = doc if fn.__name__ != "__init__" else inspect.getdoc(obj) or ""
    if params:
        assert "Args:" in owner_doc or "Attributes:" in owner_doc, f"{qual}: no Args: section"
        missing = [p.name for p in params
                   if f"    {p.name}:" not in owner_doc and f"    {p.name} " not in owner_doc]
        assert not missing, f"{qual}: parameters not described under Args: {missing}"
    ret = inspect.signature(fn).return_annotation
    if fn.__name__ != "__init__" and ret not in (None, "None", inspect.Signature.empty):
        assert "Returns:" in doc or "Yields:" in doc or fn.__name__ in DUNDERS | {"__enter__"}, (
            f"{qual}: no Returns: section")


@pytest.mark.parametrize("qual,obj,fn", ITEMS, ids=[i[0] for i in ITEMS])
def test_annotations_are_types_not_strings(qual, obj, fn):
    if fn is None or fn is object.__init__:
        return
    sig = inspect.signature(fn)
    names = set(qual.split("."))  # a class may name itself inside its own body
    for where, ann in [*((p.name, p.annotation) for p in sig.parameters.values()),
                       ("return", sig.return_annotation)]:
        if isinstance(ann, str):
            assert set(ann.strip("'\"").replace(" ", "").split("|")) <= names | {"str"}, (
                f"{qual}: annotation of {where} is the string {ann!r}")


def test_the_checker_catches_an_undocumented_parameter():
    def f(a: int, b: int) -> int:
        """Add.

        Args:
            a: One.

        Returns:
            The sum.
        """
        return a + b

    with pytest.raises(AssertionError, match=r"\['b'\]"):
        test_public_name_is_documented("f", f, f)
