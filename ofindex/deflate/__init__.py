"""Everything that inflates or deflates gzip/zlib data for random access, used by the index
builder (one pass that inflates a file and finds its seek points) and by the readers
(inflating from a seek point):

* :mod:`.inflate`: inflating a span from a seek point (zlib, or ISA-L through
  :mod:`.fast_inflate`), and the errors that name the compressed offset;
* :mod:`.stream`: a file's decompressed stream as a readable storage, which notes seek points
  as it goes;
* :mod:`.windows`: the sparse windows stored with seek points;
* :mod:`.sink`: deflating as :class:`ofindex.Writer` writes, with full-flush seek points.

The seek table's byte layout is a file format: :mod:`ofindex.formats.seekpoints`.
"""
