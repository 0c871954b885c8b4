"""Planning a read before making it: what a store allows and charges
(:mod:`.stores`), the requests a reader makes per batch (:mod:`.requests`), and which shuffle
block size reaches a throughput under those limits at what cost in mixing and requests
(:mod:`.advice`: ``ofindex plan``)."""

from .advice import BLOCK_SIZES, Candidate, ShufflePlan, plan_for, plan_shuffle
from .requests import BatchRequests, DatasetShape
from .stores import STORES, StoreLimits, store_for_url, store_limits

__all__ = [
    "BLOCK_SIZES",
    "STORES",
    "BatchRequests",
    "Candidate",
    "DatasetShape",
    "ShufflePlan",
    "StoreLimits",
    "plan_for",
    "plan_shuffle",
    "store_for_url",
    "store_limits",
]
