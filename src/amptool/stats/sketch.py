"""A mergeable histogram of non-negative values on a fixed logarithmic grid, and the
percentiles read from it with a stated error bound.

``LogGrid`` cuts every octave [2^k, 2^(k+1)) of [2^min_exp, 2^max_exp) into ``per_octave``
bins whose edges are 2^k times the float64 values 2^(j/per_octave), plus four bins of their
own: exact zero, (0, 2^min_exp), [2^max_exp, largest float64] and +Inf. A value is binned by
comparing it with those edges (no logarithm is rounded), so it always lies in [lower, upper]
of its bin. Hence, for the k-th smallest value x of a ``LogHistogram``:

* ``upper`` (the bin's upper edge) satisfies x <= upper <= x * (1 + rel_bound) when
  2^min_exp <= x < 2^max_exp; upper = 2^min_exp below that range (absolute error < 2^min_exp)
  and the largest float64 above it; zero and +Inf are exact;
* ``lower`` satisfies x / (1 + rel_bound) <= lower <= x in the range, 0 below it.

With the default grid (64 bins an octave, 2^-100 ~ 7.9e-31 to 2^128 ~ 3.4e38) rel_bound is
2^(1/64) - 1 ~ 1.09 %. Counts are integers: merging is exact, associative and commutative,
and the state (one int64 a bin) has the same size whatever the number of values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

_SPECIAL_BELOW = 2
"""Bins before the regular ones: exact zero, then (0, 2^min_exp)."""
_SLICES = 4096
"""Equal slices of [1, 2) looked up to find a bin: narrower than any bin up to 2048 an
octave, so one comparison with the next edge settles it."""


@dataclass(frozen=True)
class LogGrid:
    """The bins of a ``LogHistogram`` (see the module docstring)."""

    per_octave: int = 64
    """Bins an octave: the relative width of a bin is 2^(1/per_octave) - 1."""
    min_exp: int = -100
    """Values below 2^min_exp (and above zero) share one bin."""
    max_exp: int = 128
    """Finite values from 2^max_exp up share one bin."""

    def __post_init__(self) -> None:
        if not 1 <= self.per_octave <= _SLICES // 2 or self.min_exp >= self.max_exp:
            raise ValueError(f"a log grid needs 1..{_SLICES // 2} bins an octave and "
                             f"min_exp < max_exp, not {self}")

    @cached_property
    def edges(self) -> np.ndarray:
        """Bin edges within an octave, scaled to [1, 2]: 2^(j/per_octave), j = 0..per_octave."""
        edges = np.exp2(np.arange(self.per_octave + 1) / self.per_octave)
        edges[0], edges[-1] = 1.0, 2.0
        return edges

    @cached_property
    def first_edge(self) -> np.ndarray:
        """The bin holding the lower end of each of ``_SLICES`` equal slices of [1, 2)."""
        starts = 1.0 + np.arange(_SLICES) / _SLICES
        return np.searchsorted(self.edges, starts, side="right") - 1

    @property
    def regular(self) -> int:
        return (self.max_exp - self.min_exp) * self.per_octave

    @property
    def size(self) -> int:
        return self.regular + _SPECIAL_BELOW + 2

    @cached_property
    def rel_bound(self) -> float:
        """Largest upper/lower edge ratio of a regular bin, minus one (rounding included)."""
        return float((self.edges[1:] / self.edges[:-1]).max() - 1.0) + 4e-16

    def index(self, values: np.ndarray) -> np.ndarray:
        """The bin of every value (finite, non-negative)."""
        frac, exp = np.frexp(values)  # value = (2 frac) * 2^(exp - 1), 2 frac in [1, 2)
        octave = exp.astype(np.int64) - 1 - self.min_exp
        frac *= 2.0
        sub = self.first_edge[((frac - 1.0) * _SLICES).astype(np.intp) % _SLICES]
        sub += frac >= self.edges[sub + 1]  # a slice holds one edge at most
        bins = _SPECIAL_BELOW + octave * self.per_octave + sub
        bins = np.where(octave < 0, 1, bins)
        bins = np.where(octave >= self.max_exp - self.min_exp, self.size - 2, bins)
        return np.where(values == 0, 0, bins)

    @cached_property
    def table(self) -> tuple:
        """(lower, upper) edges of every bin: its values lie within them."""
        octave, sub = np.divmod(np.arange(self.regular), self.per_octave)
        exp = self.min_exp + octave
        lower = np.concatenate(([0.0, 0.0], np.ldexp(self.edges[sub], exp),
                                [math.ldexp(1.0, self.max_exp), math.inf]))
        upper = np.concatenate(([0.0, math.ldexp(1.0, self.min_exp)],
                                np.ldexp(self.edges[sub + 1], exp),
                                [float(np.finfo(np.float64).max), math.inf]))
        return lower, upper

    def bounds(self, b: int) -> tuple:
        """(lower, upper) of bin ``b``."""
        lower, upper = self.table
        return float(lower[b]), float(upper[b])


GRID = LogGrid()
"""The default grid: 64 bins an octave over 2^-100..2^128 (rel_bound ~ 1.09 %)."""


def higher_rank(n: int, q: float) -> int:
    """The 0-based rank numpy's ``quantile(..., method="higher")`` takes of ``n`` values."""
    return min(n - 1, max(0, int(np.ceil((n - 1) * q))))


class LogHistogram:
    """Counts of non-negative values (and of NaN) on a ``LogGrid``; mutable."""

    def __init__(self, grid: LogGrid = GRID) -> None:
        self.grid = grid
        self.counts = np.zeros(grid.size, dtype=np.int64)
        self.nan = 0

    @property
    def total(self) -> int:
        """Values added, NaN included."""
        return int(self.counts.sum()) + self.nan

    def add(self, values: np.ndarray) -> None:
        """Count every element of ``values`` (NaN apart); a negative value is an error."""
        x = np.asarray(values, dtype=np.float64).ravel()
        nan = np.isnan(x)
        if nan.any():
            self.nan += int(nan.sum())
            x = x[~nan]
        if not x.size:
            return
        if x.min() < 0:
            raise ValueError("LogHistogram counts non-negative values only")
        inf = x == np.inf
        if inf.any():
            self.counts[-1] += int(inf.sum())
            x = x[~inf]
            if not x.size:
                return
        bins = self.grid.index(x)
        first = int(bins.min())
        part = np.bincount(bins - first)
        self.counts[first:first + part.size] += part

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        """Add ``other``'s counts (exact); returns self."""
        if other.grid != self.grid:
            raise ValueError(f"cannot merge histograms on {other.grid} into {self.grid}")
        self.counts += other.counts
        self.nan += other.nan
        return self

    def rank_bounds(self, k: int) -> tuple:
        """(lower, upper) around the k-th smallest value (0-based; NaN not counted)."""
        b = int(np.searchsorted(np.cumsum(self.counts), k, side="right"))
        return self.grid.bounds(b)

    def quantile_bounds(self, q: float) -> tuple:
        """(lower, upper) around ``np.quantile(values, q, method="higher")``; NaN, NaN when
        a value is NaN (numpy's answer then)."""
        if self.nan:
            return math.nan, math.nan
        return self.rank_bounds(higher_rank(int(self.counts.sum()), q))

    def median_bounds(self) -> tuple:
        """(lower, upper) around ``np.median(values)`` (the mean of the two middle values
        of an even count): lower <= median <= upper, within the grid's bound of it."""
        n = int(self.counts.sum())
        lo_a, hi_a = self.rank_bounds((n - 1) // 2)
        if n % 2:
            return lo_a, hi_a
        lo_b, hi_b = self.rank_bounds(n // 2)
        return (lo_a + lo_b) / 2.0, (hi_a + hi_b) / 2.0

    def count_at_most(self, t: float) -> tuple:
        """(certain, possible): values surely <= t, and those whose bin leaves it open."""
        lower, upper = self.grid.table
        certain = int(self.counts[upper <= t].sum())
        return certain, certain + int(self.counts[(lower <= t) & (upper > t)].sum())

    def to_state(self) -> dict:
        """Plain arrays: the grid, the bin counts and the NaN count (sizes fixed by the grid)."""
        g = self.grid
        return {"grid": np.array([g.per_octave, g.min_exp, g.max_exp], dtype=np.int64),
                "counts": self.counts.copy(), "nan": np.array([self.nan], dtype=np.int64)}

    @classmethod
    def from_state(cls, state: dict) -> "LogHistogram":
        """The histogram ``to_state`` wrote (arrays, or the lists of its JSON form)."""
        per_octave, min_exp, max_exp = (int(v) for v in state["grid"])
        out = cls(LogGrid(per_octave, min_exp, max_exp))
        counts = np.asarray(state["counts"], dtype=np.int64)
        if counts.shape != out.counts.shape:
            raise ValueError(f"histogram state has {counts.size} bins, its grid {out.grid.size}")
        out.counts = counts.copy()
        out.nan = int(np.asarray(state["nan"]).ravel()[0])
        return out


def substate(state: dict, prefix: str) -> dict:
    """The entries of a flat state dict under ``prefix`` (a part's own ``to_state``)."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
