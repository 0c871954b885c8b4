"""The network, alone: requests to object stores and web servers (through fsspec's public API,
and a small HTTP client of our own for checked ranged GETs), their one policy (retries,
deadline, pacing, hedging) and their failures as ofindex errors. Nothing here knows what the
bytes mean (:mod:`ofindex.storage` builds on it).

:mod:`.store` the requests of one storage, and rounds of range reads; :mod:`.policy` the
policy; :mod:`.http` our HTTP client; :mod:`.clients` this process's clients;
:mod:`.failures` which failures are worth retrying, and each as an ofindex error.
"""

from .policy import RequestPolicy, current_policy, retry_settings

__all__ = ["RequestPolicy", "current_policy", "retry_settings"]
