"""Encode Python and numpy values as ``tf.train.Example``, ``SequenceExample`` and OneFlow
``OFRecord`` bytes, the mirror of :mod:`ofindex.decode`.

One record::

    encode_example({"image": array, "label": 7, "name": "cat"}, spec=None) -> bytes
    encode_ofrecord(features, spec=None) -> bytes
    encode_sequence_example(context, feature_lists) -> bytes
    Encoder(spec, kind="example")(features)          # picklable

A batch of columns (numpy arrays with a leading batch dimension, lists, or an Arrow table)::

    encode_columns(columns, spec=None, kind="example") -> [bytes, ...]
    BatchEncoder(spec, kind="example")(columns)

Types follow TensorFlow's tutorial (``bool``/``int`` -> int64, ``float`` -> float32,
``bytes``/``str`` -> bytes) and OFRecord's five lists; a value that cannot be stored without
losing information is an :class:`ofindex.errors.EncodeError` naming the feature and the
record, never a silent cast (see :mod:`ofindex.encode.kinds`). The columns of an Arrow table
(every Arrow type: structs, nested lists, dictionaries, dates …) follow one lossless mapping,
:mod:`ofindex.encode.arrow_map`, read back by :mod:`ofindex.encode.arrow_back`.
"""

from ofindex.encode.columns import BatchEncoder, encode_columns
from ofindex.encode.encoder import Encoder
from ofindex.encode.messages import encode_example, encode_ofrecord, encode_sequence_example
from ofindex.errors import EncodeError

__all__ = ["BatchEncoder", "EncodeError", "Encoder", "encode_columns", "encode_example",
           "encode_ofrecord", "encode_sequence_example"]
