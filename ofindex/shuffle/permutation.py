"""Stateless pseudo-random permutations of ``range(n)`` in O(1) time and memory.

A :class:`FeistelPermutation` maps an epoch position ``i`` to a record index ``perm(i)``
without ever materialising the permutation, so shuffling 1e9 (or 1e12) records costs the same
memory as shuffling ten.

Construction
------------
* The Feistel domain is ``[0, A*B)`` with ``A = ceil(sqrt(n))`` and ``B = ceil(n / A)``, so
  ``n <= A*B < n + A``.  A value ``x`` is split into a left half ``x // B`` (radix ``A``) and a
  right half ``x % B`` (radix ``B``): every value of the domain has exactly one split, for every
  ``n`` (no halves that drop a bit at odd bit counts, the bug that makes some public
  power-of-two implementations duplicate an index at sizes like 2**16 + 1).
* Each round adds a keyed hash of one half to the other half modulo its radix (alternating
  halves).  Every round is invertible given the untouched half, so the network is a bijection of
  the domain whatever the round function is.
* Cycle walking: while the image is ``>= n`` apply the network again.  Because the network is a
  bijection of the domain and the start point is ``< n``, the walk returns into ``[0, n)``, and the
  restriction is a bijection of ``range(n)``.  Only a fraction ``< 1/sqrt(n)`` of the domain lies
  outside ``range(n)``, so walks are rare (a power-of-two domain would walk up to half the time).
* Round function: a 64-bit multiply / xor-shift hash of ``value ^ round_key`` whose top 32 bits
  are reduced to the radix by a multiply-high; round keys come from ``(seed, epoch, salt)`` via
  splitmix64, so every epoch (and every salt, used by the block shuffle for per-window
  permutations) gets an unrelated permutation.  All arithmetic is wrapping uint64 numpy.

The result is for shuffling, not cryptography.  The exact order is covered by golden tests:
changing anything here changes every user's epoch order.
"""

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["DEFAULT_ROUNDS", "MAX_N", "FeistelPermutation"]

DEFAULT_ROUNDS = 4
MAX_N = 1 << 63  # exclusive upper bound of n: positions must fit int64
_CHUNK = 1 << 16  # evaluation chunk: keeps temporaries in cache and memory O(1)

_U64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_M1 = np.uint64(_C1)
_M2 = np.uint64(_C2)
_S32 = np.uint64(32)

#: Epoch positions (or record indices): an int, or integers of any shape.
Positions = int | np.integer[Any] | np.ndarray | Sequence[int]


def splitmix64(x: int) -> int:
    """The splitmix64 output function on a Python int (used to derive round keys)."""
    x = (x + _GOLDEN) & _U64
    x = ((x ^ (x >> 30)) * _C1) & _U64
    x = ((x ^ (x >> 27)) * _C2) & _U64
    return x ^ (x >> 31)


def splitmix64_np(x: np.ndarray) -> np.ndarray:
    """Vectorised :func:`splitmix64` over a uint64 array (returns a new array)."""
    x = x + np.uint64(_GOLDEN)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def round_keys(seed: int, epoch: int, salt: int, rounds: int) -> list[int]:
    """Round keys for ``(seed, epoch, salt)`` as Python ints in ``[0, 2**64)``."""
    base = splitmix64(splitmix64(seed & _U64) ^ (epoch & _U64))
    base = splitmix64(base ^ splitmix64((salt * _GOLDEN) & _U64))
    return [splitmix64((base + r * _C2) & _U64) for r in range(rounds)]


def domain_shape(n: int) -> tuple[int, int]:
    """``(A, B)``: radices of the left and right halves; ``n <= A * B < n + A``."""
    a = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
    return a, (n + a - 1) // a


def _network(x: np.ndarray, keys: Sequence[Any], ra: int, rb: int, inverse: bool) -> np.ndarray:
    """Apply the Feistel network (or its inverse) to uint64 values ``x`` in ``[0, ra * rb)``.

    ``x`` is split as ``left = x // rb`` (radix ``ra``) and ``right = x % rb`` (radix ``rb``).
    Round ``r`` adds ``F_r(other half)`` modulo its radix to the left half (even ``r``) or the
    right half (odd ``r``); the inverse subtracts in reverse round order.  ``keys`` holds one key
    per round: np.uint64 scalars or uint64 arrays shaped like ``x`` (per-element keys).
    """
    urb = np.uint64(rb)
    left: np.ndarray = x // urb
    right = left * urb
    np.subtract(x, right, out=right)
    h = np.empty_like(x)
    t = np.empty_like(x)
    order = range(len(keys) - 1, -1, -1) if inverse else range(len(keys))
    for r in order:
        src, dst, radix = (right, left, np.uint64(ra)) if r % 2 == 0 else (left, right, urb)
        np.bitwise_xor(src, keys[r], out=h)
        h *= _M1
        np.right_shift(h, _S32, out=t)
        h ^= t
        h *= _M2
        h >>= _S32
        h *= radix
        h >>= _S32  # F in [0, radix): multiply-high range reduction of the top 32 bits
        if inverse:
            np.subtract(radix, h, out=h)  # (dst - F) mod radix == (dst + radix - F) mod radix
        dst += h  # now in [0, 2 * radix)
        np.subtract(dst, radix, out=t)  # wraps around to a huge value where dst < radix
        np.minimum(dst, t, out=dst)
    left *= urb
    left += right
    return left


def _walk(x: np.ndarray, n: int, keys: Sequence[Any], ra: int, rb: int,
          inverse: bool) -> np.ndarray:
    """Cycle-walking evaluation on one chunk; ``keys`` entries may be per-element arrays."""
    y = _network(x, keys, ra, rb, inverse)
    if ra * rb == n:
        return y
    nn = np.uint64(n)
    idx = np.flatnonzero(y >= nn)
    if idx.size:
        cur = y[idx]
        sub = [k if np.ndim(k) == 0 else k[idx] for k in keys]
        while idx.size:
            cur = _network(cur, sub, ra, rb, inverse)
            done = cur < nn
            y[idx[done]] = cur[done]
            keep = ~done
            idx, cur = idx[keep], cur[keep]
            sub = [k if np.ndim(k) == 0 else k[keep] for k in sub]
    return y


class FeistelPermutation:
    """A seeded bijection of ``range(n)``: ``perm(i)`` in O(1) time and memory.

    ``perm(positions)`` maps epoch positions to record indices and ``perm.inverse(values)``
    maps record indices back to the positions at which they are visited. Instances are
    small, immutable, hashable and picklable; ``len(perm) == n`` and iterating yields
    ``perm(0), perm(1), ...``.

    Args:
        n: The size of the permuted range, ``1 <= n < 2**63``.
        seed: Any int; with ``epoch`` it selects the permutation.
        epoch: Any int; every ``(seed, epoch)`` pair gives an independent-looking order.
        salt: Extra key material, used internally to derive sub-permutations.
        rounds: Feistel rounds (default 4); more rounds mix better and cost proportionally
            more time.

    Raises:
        ValueError: ``n`` is outside ``[1, 2**63)`` or ``rounds < 2``.
    """

    __slots__ = ("_a", "_b", "_keys", "epoch", "n", "rounds", "salt", "seed")

    def __init__(
        self, n: int, seed: int = 0, epoch: int = 0, *, salt: int = 0, rounds: int = DEFAULT_ROUNDS
    ) -> None:
        n = int(n)
        if not 1 <= n < MAX_N:
            raise ValueError(f"FeistelPermutation needs 1 <= n < 2**63, got n={n}")
        if rounds < 2:
            raise ValueError(f"rounds must be >= 2, got {rounds}")
        self.n, self.seed, self.epoch = n, int(seed), int(epoch)
        self.salt, self.rounds = int(salt), int(rounds)
        self._a, self._b = domain_shape(n)
        self._keys = [np.uint64(k) for k in round_keys(self.seed, self.epoch, self.salt, rounds)]

    def __len__(self) -> int:
        """``n``, the size of the permuted range."""
        return self.n

    def __repr__(self) -> str:
        return (
            f"FeistelPermutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, "
            f"salt={self.salt}, rounds={self.rounds})"
        )

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[int, int, int, int, int]]:
        return (_rebuild, (self.n, self.seed, self.epoch, self.salt, self.rounds))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeistelPermutation) and self.__reduce__() == other.__reduce__()

    def __hash__(self) -> int:
        return hash(self.__reduce__()[1])

    @overload
    def __call__(self, positions: int | np.integer[Any]) -> int: ...
    @overload
    def __call__(self, positions: np.ndarray | Sequence[int]) -> np.ndarray: ...

    def __call__(self, positions: Positions) -> int | np.ndarray:
        """The record index at each epoch position.

        Args:
            positions: An int, or integers of any shape (array or nested sequence), each in
                ``[0, n)``.

        Returns:
            A Python int for a scalar input, else an int64 array of the input's shape.

        Raises:
            TypeError: ``positions`` are not integers.
            IndexError: A position lies outside ``[0, n)``.
        """
        return self._apply(positions, inverse=False)

    @overload
    def inverse(self, values: int | np.integer[Any]) -> int: ...
    @overload
    def inverse(self, values: np.ndarray | Sequence[int]) -> np.ndarray: ...

    def inverse(self, values: Positions) -> int | np.ndarray:
        """The epoch position of each record index (the inverse permutation).

        Args:
            values: Record indices: an int, or integers of any shape, each in ``[0, n)``.

        Returns:
            A Python int for a scalar input, else an int64 array of the input's shape;
            ``perm.inverse(perm(i)) == i``.

        Raises:
            TypeError: ``values`` are not integers.
            IndexError: A value lies outside ``[0, n)``.
        """
        return self._apply(values, inverse=True)

    def _apply(self, positions: Positions, inverse: bool) -> int | np.ndarray:
        scalar = np.ndim(positions) == 0
        arr = np.asarray(positions)
        if arr.dtype.kind not in "iu":
            if arr.size == 0:
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"positions must be integers, got dtype {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.n):
            raise IndexError(
                f"positions must lie in [0, {self.n}); got min {arr.min()} max {arr.max()}"
            )
        flat = arr.reshape(-1).astype(np.uint64)
        out = np.empty(flat.shape, dtype=np.int64)
        for s in range(0, flat.size, _CHUNK):
            y = _walk(flat[s : s + _CHUNK], self.n, self._keys, self._a, self._b, inverse)
            out[s : s + _CHUNK] = y.view(np.int64)
        if scalar:
            return int(out[0])
        return out.reshape(arr.shape)

    def range(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``perm(arange(start, stop))`` as one array (materialises ``stop - start`` values).

        Args:
            start: The first position (clipped to 0).
            stop: The end position, exclusive (clipped to ``n``; ``None``: ``n``).

        Returns:
            An int64 array of ``max(0, stop - start)`` record indices.
        """
        stop = self.n if stop is None else min(int(stop), self.n)
        start = max(0, int(start))
        out = np.empty(max(0, stop - start), dtype=np.int64)
        for i, chunk in enumerate(self.iter_chunks(start, stop)):
            out[i * _CHUNK : i * _CHUNK + chunk.size] = chunk
        return out

    def iter_chunks(
        self, start: int = 0, stop: int | None = None, chunk: int = _CHUNK
    ) -> Iterator[np.ndarray]:
        """Yield ``perm(i)`` for ``i`` in ``[start, stop)``, a chunk at a time.

        Memory is O(chunk) whatever ``n`` is.

        Args:
            start: The first position (clipped to 0).
            stop: The end position, exclusive (clipped to ``n``; ``None``: ``n``).
            chunk: The number of values per yielded array.

        Yields:
            int64 arrays of ``chunk`` record indices (the last one may be shorter).
        """
        stop = self.n if stop is None else min(int(stop), self.n)
        for s in range(max(0, int(start)), stop, chunk):
            x = np.arange(s, min(s + chunk, stop), dtype=np.uint64)
            yield _walk(x, self.n, self._keys, self._a, self._b, False).view(np.int64)

    def __iter__(self) -> Iterator[int]:
        """Iterate over the whole permutation.

        Yields:
            ``perm(0), perm(1), ..., perm(n - 1)`` as Python ints.
        """
        for chunk in self.iter_chunks():
            yield from chunk.tolist()


def _rebuild(n: int, seed: int, epoch: int, salt: int, rounds: int) -> FeistelPermutation:
    return FeistelPermutation(n, seed, epoch, salt=salt, rounds=rounds)
