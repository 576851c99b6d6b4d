"""Exact sums of float64 values, mergeable in any order to the same bits.

Every finite float64 value is an integer multiple of 2^-1126 (a 53-bit significand times
2^(e - 53), e >= -1073), so ``ExactSum`` keeps the sum of the finite values added as one
Python integer in those units: no rounding happens while adding or merging, and ``value``
rounds once, correctly (Python's int / int), at the end. Sums of the same values therefore
agree to the last bit whatever the batches, the shards and the order of merging; they
differ from numpy's pairwise ``sum`` only by numpy's own rounding (a few units in the last
place of a sum of same-signed terms). NaN, +Inf and -Inf are counted apart and give IEEE's
answer (NaN, or an infinity) as ``np.sum`` does.
"""
from __future__ import annotations

import math

import numpy as np

SHIFT = 1073
"""frexp's exponent of the smallest subnormal is -1073: exponent + SHIFT >= 0."""
UNIT_BITS = SHIFT + 53
"""The integer counts units of 2^-UNIT_BITS."""
STATE_BYTES = 280
"""Two's complement width of the serialized integer: 2240 bits hold 2^89 values of the
largest float64 (2^1024 is 2^2150 units)."""
_LOW_BITS = 26
_CHUNK = 1 << 20
"""Values per bincount (at most 2^26 halves of at most 2^27 sum exactly in float64)."""


def fixed_point_sum(values: np.ndarray) -> int:
    """The exact sum of finite float64 ``values`` as an integer in units of 2^-UNIT_BITS."""
    total = 0
    flat = np.asarray(values, dtype=np.float64).ravel()
    for start in range(0, flat.size, _CHUNK):
        total += _chunk_sum(flat[start:start + _CHUNK])
    return total


def _chunk_sum(x: np.ndarray) -> int:
    if not x.size:
        return 0
    frac, exp = np.frexp(x)  # x = frac * 2^exp, 0.5 <= |frac| < 1, 53 significant bits
    frac *= 2.0 ** (53 - _LOW_BITS)
    high = np.floor(frac)  # whole part: |high| <= 2^27
    frac -= high
    frac *= 2.0 ** _LOW_BITS  # the low 26 bits, a whole number in [0, 2^26): all exact
    exp += SHIFT
    high_sums = np.bincount(exp, weights=high)
    low_sums = np.bincount(exp, weights=frac)
    total = 0
    for s in np.flatnonzero((high_sums != 0) | (low_sums != 0)):
        total += ((int(high_sums[s]) << _LOW_BITS) + int(low_sums[s])) << int(s)
    return total


class ExactSum:
    """The exact sum of every value added (see the module docstring); mutable."""

    __slots__ = ("fixed", "nan", "pos_inf", "neg_inf")

    def __init__(self) -> None:
        self.fixed, self.nan, self.pos_inf, self.neg_inf = 0, 0, 0, 0

    def add(self, values: np.ndarray) -> None:
        """Add every element of ``values`` (any shape)."""
        x = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(x)
        if not finite.all():
            self.nan += int(np.isnan(x).sum())
            self.pos_inf += int((x == np.inf).sum())
            self.neg_inf += int((x == -np.inf).sum())
            x = x[finite]
        self.fixed += fixed_point_sum(x)

    def merge(self, other: "ExactSum") -> "ExactSum":
        """Add ``other``'s values to this sum (exact); returns self."""
        self.fixed += other.fixed
        self.nan += other.nan
        self.pos_inf += other.pos_inf
        self.neg_inf += other.neg_inf
        return self

    def value(self, divisor: int = 1) -> float:
        """The sum divided by the positive integer ``divisor``, correctly rounded once."""
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf or self.neg_inf:
            return math.inf if self.pos_inf else -math.inf
        try:
            return self.fixed / (divisor << UNIT_BITS)
        except OverflowError:
            return math.inf if self.fixed > 0 else -math.inf

    def to_state(self) -> dict:
        """Plain arrays: the integer's bytes and the NaN/+Inf/-Inf counts."""
        raw = self.fixed.to_bytes(STATE_BYTES, "little", signed=True)
        return {"fixed": np.frombuffer(raw, dtype=np.uint8).copy(),
                "special": np.array([self.nan, self.pos_inf, self.neg_inf], dtype=np.int64)}

    @classmethod
    def from_state(cls, state: dict) -> "ExactSum":
        """The sum ``to_state`` wrote (arrays, or the lists of its JSON form)."""
        out = cls()
        raw = np.asarray(state["fixed"], dtype=np.uint8).tobytes()
        out.fixed = int.from_bytes(raw, "little", signed=True)
        out.nan, out.pos_inf, out.neg_inf = (int(v) for v in state["special"])
        return out
