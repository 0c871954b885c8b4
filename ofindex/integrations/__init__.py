"""Optional framework integrations (import the submodule you need; each imports its framework).

* :mod:`ofindex.integrations.torch`: ``TensorBatches`` (items are whole batches: one
  ``__getitems__`` and one ``BatchDecoder`` call each, tensors without copies; the
  recommended way to train), a map-style ``Dataset`` wrapper (``__getitems__`` batched
  fetch), torch-typed samplers and batch sampler (DataLoader with workers, fork and spawn,
  torchdata ``StatefulDataLoader`` checkpointing), ``ResumableLoader`` (checkpoints of what
  the training loop consumed, for any workers and ranks on resume), ``MixtureSampler`` and
  ``MixtureBatches`` (weighted mixing) and a worker-splitting ``IterableDataset``.
* :mod:`ofindex.integrations.grain`: ``GrainBatches``, a Grain ``MapDataset`` of decoded
  batches of a global shuffle, and :mod:`ofindex.integrations.grain_mixing`'s
  ``GrainMixture`` (batches of a weighted mixture). An ofindex dataset also satisfies Grain's
  ``RandomAccessDataSource`` protocol as is (``__len__``, ``__getitem__``, picklable, cheap
  ``__repr__``): ``grain.python.DataLoader(data_source=ds, sampler=...)`` reads it.
* :mod:`ofindex.integrations.tf`: ``TFBatches``, a ``tf.data.Dataset`` of decoded batches of
  a global shuffle (ranks from ``tf.distribute``, a position ``tf.train.Checkpoint`` saves),
  and ``file_infos`` for TensorFlow's ``index_shuffle``.
* :mod:`ofindex.integrations.keras`: ``KerasBatches``, a Keras 3 ``PyDataset``.
* :mod:`ofindex.integrations.hf`: Hugging Face ``datasets.Dataset`` / ``IterableDataset``
  with typed ``Features``.
"""
