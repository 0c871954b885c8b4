"""A small reference implementation of the mixture definition (ofindex/shuffle/mixplan.py's
docstring), written from the text, not from ofindex.shuffle.mixing / mixplan: plain Python
integers, one record at a time. The source permutations are ofindex's FeistelPermutation (the
definition names it; tests/shuffle/test_permutation.py holds it to its own golden values).

``python -m tests.kit.mixref`` rewrites tests/golden/mixture_first_1000.json (the golden list of
the first 1,000 (source, record) pairs of a fixed mixture); the test suite only reads it.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction

from ofindex.shuffle import FeistelPermutation
from tests.kit import paths

SOURCE_SALT = 0x6D69780000
MIX_SALT = 0x6D69782D73
MASK = (1 << 64) - 1
GOLDEN = os.path.join(paths.GOLDEN,
                      "mixture_first_1000.json")
#: The golden mixture: three sources of very different sizes.
GOLDEN_CASE = {"sizes": [100, 1_000_000, 777], "weights": [0.5, 0.3, 0.2], "batch_size": 64,
               "seed": 1234}


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def exact_counts(weights, batch_size):
    """Hamilton: floors of the exact quotas, then +1 by largest remainder (lower source on
    ties)."""
    fr = [Fraction(w) for w in weights]
    quotas = [Fraction(batch_size) * w / sum(fr) for w in fr]
    floors = [q.numerator // q.denominator for q in quotas]
    order = sorted(range(len(fr)), key=lambda s: (floors[s] - quotas[s], s))
    for s in order[: batch_size - sum(floors)]:
        floors[s] += 1
    return floors


def slot_source(weights, seed, batch_size, g, u):
    fr = [Fraction(w) for w in weights]
    h = splitmix64(splitmix64((seed ^ MIX_SALT) & MASK) ^ (g * batch_size + u))
    running = Fraction(0)
    for s, w in enumerate(fr):
        running += w
        limit = (1 << 64) if s == len(fr) - 1 else int(running / sum(fr) * (1 << 64))
        if h < limit:
            return s
    raise AssertionError


def batch_counts(weights, batch_size, seed, g, sampled):
    if not sampled:
        return exact_counts(weights, batch_size)
    counts = [0] * len(weights)
    for u in range(batch_size):
        counts[slot_source(weights, seed, batch_size, g, u)] += 1
    return counts


def stream_record(sizes, seed, s, k):
    n = sizes[s]
    return int(FeistelPermutation(n, seed, k // n, salt=SOURCE_SALT + s)(k % n))


def batches(sizes, weights, batch_size, seed, count, sampled=False, first=0, offsets=None):
    """Batches ``first .. first+count-1`` as lists of (source, record), given the stream
    offsets at batch ``first`` (zeros by default)."""
    k = list(offsets) if offsets is not None else [0] * len(sizes)
    out = []
    for g in range(first, first + count):
        counts = batch_counts(weights, batch_size, seed, g, sampled)
        batch = []
        for s, c in enumerate(counts):
            batch += [(s, stream_record(sizes, seed, s, k[s] + j)) for j in range(c)]
            k[s] += c
        out.append(batch)
    return out


def golden_pairs():
    case = GOLDEN_CASE
    need = -(-1000 // case["batch_size"])
    flat = [p for b in batches(case["sizes"], case["weights"], case["batch_size"], case["seed"],
                               need) for p in b]
    return flat[:1000]


if __name__ == "__main__":
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"case": GOLDEN_CASE, "pairs": golden_pairs()}, f, separators=(",", ":"))
    os.replace(GOLDEN + ".tmp", GOLDEN)
