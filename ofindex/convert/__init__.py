"""Converting Parquet, Hugging Face datasets, image folders, numpy files and other record
datasets into sharded TFRecord / OFRecord datasets (:func:`convert`)."""

from ofindex.convert.run import convert

__all__ = ["convert"]
