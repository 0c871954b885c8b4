"""Columns: chosen scalar features of every record, stored beside the index and queried
without reading the records."""
