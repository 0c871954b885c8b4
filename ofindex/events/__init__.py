"""TensorBoard event logs, indexed by run, tag and step: ``ofindex.events(logdir)``.

Event files (``events.out.tfevents.*``) are TFRecord files of ``Event`` protobufs
(:mod:`ofindex.proto.event_pb2`: no TensorFlow or TensorBoard needed), written by
``tf.summary``, ``torch.utils.tensorboard`` and tensorboardX alike. Each gets a sidecar and an
events index, built in one scan and grown with the file (:mod:`.build`); a scalar tag of every
run then loads from the indexes alone (:meth:`EventLog.scalars`, a pandas ``DataFrame`` in
tbparse's long layout), the other values from their records only. pandas (and matplotlib, for
``ofindex events --plot``) come with ``pip install 'ofindex[events]'``.
"""

from .log import EventLog, events

__all__ = ["EventLog", "events"]
