"""The network, alone: requests to object stores and web servers (through fsspec's public API,
and a small HTTP client of our own for checked ranged GETs), their one policy (retries,
deadline, pacing, hedging) and their failures as ofindex errors. Nothing here knows about
files' meaning, sidecars or datasets (:mod:`ofindex.storage` builds on it)."""
