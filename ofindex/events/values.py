"""What a summary value holds, as numpy: tensors (as TensorFlow's ``make_ndarray`` reads a
``TensorProto``), histograms (TensorFlow 1's ``HistogramProto`` and TensorFlow 2's
``[k, 3]`` tensors alike), images and text."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import DecodeError
from ..proto import event_pb2

#: numpy dtypes of the tensor dtypes (TensorFlow's ``DataType``) and the field holding their
#: values when ``tensor_content`` is empty.
_DTYPES: dict[int, tuple[Any, str]] = {
    event_pb2.DT_FLOAT: (np.float32, "float_val"),
    event_pb2.DT_DOUBLE: (np.float64, "double_val"),
    event_pb2.DT_INT32: (np.int32, "int_val"),
    event_pb2.DT_UINT8: (np.uint8, "int_val"),
    event_pb2.DT_INT16: (np.int16, "int_val"),
    event_pb2.DT_INT8: (np.int8, "int_val"),
    event_pb2.DT_UINT16: (np.uint16, "int_val"),
    event_pb2.DT_INT64: (np.int64, "int64_val"),
    event_pb2.DT_BOOL: (np.bool_, "bool_val"),
    event_pb2.DT_HALF: (np.float16, "half_val"),
    event_pb2.DT_UINT32: (np.uint32, "uint32_val"),
    event_pb2.DT_UINT64: (np.uint64, "uint64_val"),
    event_pb2.DT_COMPLEX64: (np.complex64, "scomplex_val"),
    event_pb2.DT_COMPLEX128: (np.complex128, "dcomplex_val"),
}
#: The most elements a tensor may claim (its shape is checked before anything is allocated).
MAX_ELEMENTS = 1 << 31


def tensor_shape(tensor: event_pb2.TensorProto) -> tuple[int, ...]:
    """The tensor's shape.

    Raises:
        DecodeError: A negative dimension, an unknown rank, or more elements than
            :data:`MAX_ELEMENTS`.
    """
    shape = tuple(int(dim.size) for dim in tensor.tensor_shape.dim)
    if tensor.tensor_shape.unknown_rank or any(d < 0 for d in shape) or math.prod(
            shape) > MAX_ELEMENTS:
        raise DecodeError(f"a tensor of shape {shape} (unknown rank: "
                          f"{tensor.tensor_shape.unknown_rank}) cannot be read")
    return shape


def tensor_to_array(tensor: event_pb2.TensorProto) -> np.ndarray:
    """A ``TensorProto`` as a numpy array (strings as an object array of ``bytes``), as
    TensorFlow's ``tf.make_ndarray`` reads it: from ``tensor_content``, else from its typed
    values, the last repeated to fill the shape.

    Raises:
        DecodeError: A dtype this reader does not know, or values that do not fit the shape.
    """
    shape = tensor_shape(tensor)
    size = math.prod(shape)
    if tensor.dtype == event_pb2.DT_STRING:
        values: np.ndarray = np.empty(len(tensor.string_val), dtype=object)
        values[:] = list(tensor.string_val)
        return _fill(values, shape, size)
    if tensor.dtype == event_pb2.DT_BFLOAT16:
        bits = (np.frombuffer(tensor.tensor_content, np.uint16) if tensor.tensor_content
                else np.asarray(tensor.half_val, np.uint16))
        return _fill((bits.astype(np.uint32) << 16).view(np.float32), shape, size)
    known = _DTYPES.get(tensor.dtype)
    if known is None:
        raise DecodeError(f"a tensor of dtype {tensor.dtype} (TensorFlow's DataType) is "
                          "not read")
    dtype, field = known
    if tensor.tensor_content:
        if len(tensor.tensor_content) != size * np.dtype(dtype).itemsize:
            raise DecodeError(f"a tensor of shape {shape} holds {len(tensor.tensor_content)} "
                              f"bytes of {np.dtype(dtype).name}")
        content: np.ndarray = np.frombuffer(tensor.tensor_content, dtype).reshape(shape).copy()
        return content
    raw = getattr(tensor, field)
    if dtype is np.float16:
        values = np.asarray(raw, np.uint16).view(np.float16)
    elif np.issubdtype(dtype, np.complexfloating):
        pairs = np.asarray(raw, np.float64).reshape(-1, 2)
        values = (pairs[:, 0] + 1j * pairs[:, 1]).astype(dtype)
    else:
        values = np.asarray(raw, dtype)
    return _fill(values, shape, size)


def _fill(values: np.ndarray, shape: tuple[int, ...], size: int) -> np.ndarray:
    if len(values) == size:
        return values.reshape(shape)
    if len(values) == 0 or len(values) > size:
        if size == 0:
            return values[:0].reshape(shape)
        raise DecodeError(f"{len(values)} values for a tensor of shape {shape}")
    filled = np.empty(size, dtype=values.dtype)
    filled[: len(values)] = values
    filled[len(values):] = values[-1]
    return filled.reshape(shape)


def scalar_of(tensor: event_pb2.TensorProto) -> float | None:
    """The number a one-element numeric tensor holds (TensorFlow 2's scalars), else
    ``None``."""
    known = _DTYPES.get(tensor.dtype)
    if known is None or tensor.dtype in (event_pb2.DT_COMPLEX64, event_pb2.DT_COMPLEX128):
        return None
    dims = tensor.tensor_shape.dim
    if any(dim.size != 1 for dim in dims) or tensor.tensor_shape.unknown_rank:
        return None
    dtype, field = known
    if tensor.tensor_content:
        if len(tensor.tensor_content) != np.dtype(dtype).itemsize:
            return None
        return float(np.frombuffer(tensor.tensor_content, dtype)[0])
    raw = getattr(tensor, field)
    if len(raw) != 1:
        return None
    if dtype is np.float16:
        return float(np.asarray(raw, np.uint16).view(np.float16)[0])
    return float(np.asarray(raw, dtype)[0])


def histogram_of(value: event_pb2.Summary.Value) -> dict[str, Any]:
    """A histogram value as ``limits`` (each bucket's right edge) and ``counts`` arrays, with
    ``min``, ``max``, ``num``, ``sum`` and ``sum_squares`` (NaN where a TensorFlow 2 histogram,
    a ``[k, 3]`` tensor of left edges, right edges and counts, does not say).

    Raises:
        DecodeError: The value is not a histogram.
    """
    if value.WhichOneof("value") == "histo":
        h = value.histo
        return {"limits": np.asarray(h.bucket_limit, np.float64),
                "counts": np.asarray(h.bucket, np.float64), "min": h.min, "max": h.max,
                "num": h.num, "sum": h.sum, "sum_squares": h.sum_squares}
    if value.WhichOneof("value") == "tensor":
        table = tensor_to_array(value.tensor)
        if table.ndim == 2 and table.shape[1] == 3 and table.dtype != object:
            table = table.astype(np.float64)
            counts = table[:, 2]
            nan = math.nan
            return {"limits": table[:, 1].copy(), "counts": counts.copy(),
                    "min": float(table[0, 0]) if len(table) else nan,
                    "max": float(table[-1, 1]) if len(table) else nan,
                    "num": float(counts.sum()), "sum": nan, "sum_squares": nan}
        if table.size == 0:
            empty = np.zeros(0, np.float64)
            return {"limits": empty, "counts": empty, "min": math.nan, "max": math.nan,
                    "num": 0.0, "sum": math.nan, "sum_squares": math.nan}
    raise DecodeError(f"tag {value.tag!r}: the value is not a histogram")


def image_bytes(value: event_pb2.Summary.Value) -> list[bytes]:
    """The encoded images (PNG, JPEG …) a value holds: TensorFlow 1's ``Summary.Image``, or
    TensorFlow 2's string tensor (width, height, then the images).

    Raises:
        DecodeError: The value holds no image.
    """
    case = value.WhichOneof("value")
    if case == "image":
        return [value.image.encoded_image_string]
    if case == "tensor" and value.tensor.dtype == event_pb2.DT_STRING:
        return list(value.tensor.string_val[2:])
    raise DecodeError(f"tag {value.tag!r}: the value holds no image")


def text_of(value: event_pb2.Summary.Value) -> Any:
    """The text a value holds: a ``str`` for one string, else an array of them (the text
    plugin's string tensors).

    Raises:
        DecodeError: The value holds no text.
    """
    if value.WhichOneof("value") != "tensor" or value.tensor.dtype != event_pb2.DT_STRING:
        raise DecodeError(f"tag {value.tag!r}: the value holds no text")
    strings = tensor_to_array(value.tensor)
    texts = np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(strings)
    return texts.item() if texts.ndim == 0 or texts.size == 1 else texts
