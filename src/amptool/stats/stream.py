"""Parity metrics accumulated batch by batch and merged across shards: ``OutputStats`` gives
``amptool.stats.metrics.compute_metrics``' dict for one output without holding its outputs.

``update(ref_batch, cand_batch, labels_batch)`` takes one batch (first axis: samples);
``merge(other)`` adds another shard's statistics; ``result()`` returns the keys and meanings
of ``compute_metrics`` on the concatenated batches; ``to_state()`` / ``from_state()`` carry
the statistics between processes as a flat dict of numpy arrays of fixed sizes (their
``tolist()`` is its JSON form, NaN and Infinity written as Python's json writes them).

Exactness against ``compute_metrics`` on the whole arrays:

* exact: ``nonfinite``, ``outside_frac``, ``max_abs``, ``ref_absmax``, ``max_rel`` and
  ``max_abs_scaled`` (counts and extremes, NaN propagated as numpy does), and the top-1
  and accuracy counts (``amptool.stats.top1``);
* correctly rounded sums (``amptool.stats.exactsum``) under ``mean_abs``, ``rmse``, ``cosine``
  and ``rel_l2``: they differ from ``compute_metrics``' by numpy's own rounding of its sums
  and dot products (1e-16 to 1e-15 relative on the tests' data); batched, sharded and merged
  in any order they agree to the last bit;
* ``p999_abs_scaled``: the upper edge of the ``amptool.stats.sketch`` bin holding the element numpy
  picks, so never below the exact value and within ``GRID.rel_bound`` (~1.09 %) above it
  (errors below 2^-100 read as 2^-100). A larger reported value only errs toward failing
  ``max_p999_abs_scaled`` (default 2^-5 on outputs that are no class logits): the sketch
  never passes an output the exact percentile would fail;
* ``tie_tol`` and the near-tie figures: see ``amptool.stats.top1`` (``tie_ambiguity()``
  counts the flips whose decision the sketch leaves open; 0 means exact).

State size: 118 KB an output, 241 KB more for class logits, whatever the sample count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.stats.exactsum import ExactSum
from amptool.stats.metrics import degenerate_reason, is_class_logits
from amptool.stats.sketch import GRID, LogHistogram, substate
from amptool.stats.top1 import FLIP_CAP, Top1Stats

P999 = 0.999
_SUMS = ("abs", "sq", "ref_sq", "cand_sq", "dot")
_ERROR_KEYS = ("max_abs", "max_abs_scaled", "p999_abs_scaled", "ref_absmax", "max_rel",
               "mean_abs", "rmse", "rel_l2", "outside_frac")


@dataclass(frozen=True)
class StatsConfig:
    """What an output's statistics are computed with: merged statistics must share it."""

    atol: float = 1e-3
    """Absolute tolerance of ``outside_frac`` (``compute_metrics``' ``atol``)."""
    rtol: float = 1e-2
    """Relative tolerance of ``outside_frac``."""
    logits: bool = True
    """Whether the output may be class logits (top-1 metrics when it is 2-D with columns)."""
    cap: int = FLIP_CAP
    """Near-tie flips kept one by one (``amptool.stats.top1``)."""


class ErrorStats:
    """Element-wise error statistics of the batches seen; mutable."""

    def __init__(self) -> None:
        self.size, self.outside = 0, 0
        self.max_abs = self.ref_absmax = self.max_rel = -math.inf
        self.sums = {name: ExactSum() for name in _SUMS}
        self.sketch = LogHistogram(GRID)

    def update(self, r: np.ndarray, c: np.ndarray, diff: np.ndarray, cfg: StatsConfig) -> None:
        """One non-empty batch: reference ``r``, finite candidate ``c``, ``diff`` (float64)."""
        abs_r = np.abs(r)
        self.size += diff.size
        self.outside += int((diff > cfg.atol + cfg.rtol * abs_r).sum())
        self.max_abs = float(np.maximum(self.max_abs, diff.max()))
        self.ref_absmax = float(np.maximum(self.ref_absmax, abs_r.max()))
        self.max_rel = float(np.maximum(self.max_rel, (diff / (abs_r + 1e-6)).max()))
        for name, terms in zip(_SUMS, (diff, diff ** 2, r * r, c * c, r * c)):
            self.sums[name].add(terms)
        self.sketch.add(diff)

    def merge(self, other: "ErrorStats") -> "ErrorStats":
        self.size += other.size
        self.outside += other.outside
        for name in ("max_abs", "ref_absmax", "max_rel"):
            setattr(self, name, float(np.maximum(getattr(self, name), getattr(other, name))))
        for name in _SUMS:
            self.sums[name].merge(other.sums[name])
        self.sketch.merge(other.sketch)
        return self

    def result(self, nonfinite: int) -> dict:
        """``compute_metrics``' error keys (``_error_metrics``)."""
        if not self.size:
            return {k: 0.0 for k in _ERROR_KEYS} | {"cosine": 1.0, "nonfinite": nonfinite}
        n, s = self.size, self.sums
        scale = max(1.0, self.ref_absmax)
        rn, norm_d = math.sqrt(s["ref_sq"].value()), math.sqrt(s["sq"].value())
        return {
            "max_abs": self.max_abs,
            "max_abs_scaled": self.max_abs / scale,
            "p999_abs_scaled": self.sketch.quantile_bounds(P999)[1] / scale,
            "ref_absmax": self.ref_absmax,
            "max_rel": self.max_rel,
            "mean_abs": s["abs"].value(n),
            "rmse": math.sqrt(s["sq"].value(n)),
            "cosine": _cosine(rn, math.sqrt(s["cand_sq"].value()), s["dot"].value(), nonfinite),
            "rel_l2": norm_d / rn if rn > 0 else norm_d,
            "outside_frac": self.outside / n,
            "nonfinite": nonfinite,
        }

    def to_state(self) -> dict:
        state = {"counts": np.array([self.size, self.outside], dtype=np.int64),
                 "extremes": np.array([self.max_abs, self.ref_absmax, self.max_rel])}
        for name in _SUMS:
            state |= {f"sum.{name}.{k}": v for k, v in self.sums[name].to_state().items()}
        return state | {f"sketch.{k}": v for k, v in self.sketch.to_state().items()}

    @classmethod
    def from_state(cls, state: dict) -> "ErrorStats":
        out = cls()
        out.size, out.outside = (int(v) for v in state["counts"])
        out.max_abs, out.ref_absmax, out.max_rel = (float(v) for v in state["extremes"])
        out.sums = {name: ExactSum.from_state(substate(state, f"sum.{name}.")) for name in _SUMS}
        out.sketch = LogHistogram.from_state(substate(state, "sketch."))
        return out


def _cosine(rn: float, cn: float, dot: float, nonfinite: int) -> float:
    """``compute_metrics``' cosine from the two norms and the dot product."""
    if nonfinite:
        return math.nan
    if rn == 0.0 and cn == 0.0:
        return 1.0
    if rn == 0.0 or cn == 0.0:
        return 0.0
    with np.errstate(all="ignore"):
        return float(np.float64(dot) / (np.float64(rn) * np.float64(cn)))


class OutputStats:
    """The parity metrics of one output, accumulated (see the module docstring); mutable.
    The arguments are ``StatsConfig``'s; ``top1`` is made for class logits only."""

    def __init__(self, atol: float = 1e-3, rtol: float = 1e-2, logits: bool = True,
                 cap: int = FLIP_CAP) -> None:
        self.config = StatsConfig(float(atol), float(rtol), bool(logits), int(cap))
        self.shape: Optional[tuple] = None
        self.samples, self.nonfinite = 0, 0
        self.errors = ErrorStats()
        self.top1: Optional[Top1Stats] = None

    def update(self, ref: np.ndarray, cand: np.ndarray, labels: Optional[np.ndarray] = None
               ) -> "OutputStats":
        """Add one batch: ``ref`` and ``cand`` of the same shape, samples on the first axis,
        ``labels`` one class index a sample (or None). Returns self."""
        ref, cand = np.asarray(ref), np.asarray(cand)
        if ref.shape != cand.shape:
            raise UsageError(f"output shapes differ: reference {ref.shape}, candidate "
                             f"{cand.shape}", "compare artefacts of the same model and batch size")
        self._check_shape(ref.shape)
        r, c = ref.astype(np.float64), cand.astype(np.float64)
        finite = np.isfinite(c)
        self.nonfinite += int(c.size - finite.sum())
        self.samples += len(r)
        if not c.size:
            return self
        c_clean = np.where(finite, c, 0.0)
        diff = np.where(finite, np.abs(c_clean - r), np.inf)
        self.errors.update(r, c_clean, diff, self.config)
        if self._has_top1():
            self._top1().update(r, c_clean, diff.max(axis=1), labels)
        return self

    def _top1(self) -> Top1Stats:
        if self.top1 is None:
            self.top1 = Top1Stats(self.config.cap)
        return self.top1

    def _check_shape(self, shape: tuple) -> None:
        if len(shape) < 1:
            raise UsageError("a batch of outputs needs a first axis of samples, got a scalar",
                             "pass arrays of shape (samples, ...)")
        if self.shape is not None and shape[1:] != self.shape:
            raise UsageError(f"batch shape {shape} does not follow the earlier batches' "
                             f"(samples, {', '.join(map(str, self.shape))})",
                             "stream batches of one output")
        self.shape = tuple(shape[1:])

    def _has_top1(self) -> bool:
        return (self.config.logits and self.shape is not None
                and is_class_logits(np.empty((0,) + self.shape)))

    def merge(self, other: "OutputStats") -> "OutputStats":
        """Add another shard's statistics of the same output (same config); returns self."""
        if other.config != self.config:
            raise UsageError(f"cannot merge statistics of {other.config} into {self.config}",
                             "give every shard the same atol, rtol, logits and cap")
        if other.shape is not None:
            self._check_shape((0,) + other.shape)
        self.samples += other.samples
        self.nonfinite += other.nonfinite
        self.errors.merge(other.errors)
        if other.top1 is not None:
            self._top1().merge(other.top1)
        return self

    def result(self) -> dict:
        """``compute_metrics``' dict of the batches seen (bounds: the module docstring)."""
        out = self.errors.result(self.nonfinite)
        if self._has_top1() and self.samples:
            out.update(self._top1().result())
        return out

    def tie_ambiguity(self) -> int:
        """Flips whose near-tie decision the median's sketch leaves open (0: exact)."""
        return self._top1().tie_ambiguity() if self._has_top1() and self.samples else 0

    def to_state(self) -> dict:
        """A flat dict of numpy arrays whose sizes do not depend on the samples seen (the
        ``top1.`` ones only for class logits)."""
        cfg = self.config
        shape = [-1] if self.shape is None else [len(self.shape), *self.shape]
        state = {"config": np.array([cfg.atol, cfg.rtol, float(cfg.logits), float(cfg.cap)]),
                 "shape": np.array(shape, dtype=np.int64),
                 "counts": np.array([self.samples, self.nonfinite], dtype=np.int64)}
        state |= {f"errors.{k}": v for k, v in self.errors.to_state().items()}
        if self.top1 is None:
            return state
        return state | {f"top1.{k}": v for k, v in self.top1.to_state().items()}

    @classmethod
    def from_state(cls, state: dict) -> "OutputStats":
        """The statistics ``to_state`` wrote (its arrays, or their ``tolist()`` via JSON)."""
        atol, rtol, logits, cap = (float(v) for v in state["config"])
        out = cls(atol, rtol, bool(logits), int(cap))
        shape = [int(v) for v in state["shape"]]
        out.shape = None if shape[0] < 0 else tuple(shape[1:])
        out.samples, out.nonfinite = (int(v) for v in state["counts"])
        out.errors = ErrorStats.from_state(substate(state, "errors."))
        if "top1.counts" in state:
            out.top1 = Top1Stats.from_state(substate(state, "top1."))
        return out



class ReferenceSpread:
    """The figures of ``metrics.degenerate_reference`` over the batches of one reference
    output, in memory of one sample's output: NaN/Inf count, largest magnitude and, per
    element, the count, mean and sum of squared deviations, merged by Chan's formula;
    mutable."""

    def __init__(self) -> None:
        self.samples, self.bad, self.absmax = 0, 0, 0.0
        self.mean: Optional[np.ndarray] = None
        self.m2: Optional[np.ndarray] = None

    def update(self, ref: np.ndarray) -> "ReferenceSpread":
        """Add one batch (samples on the first axis); returns self."""
        r = np.asarray(ref, dtype=np.float64)
        if not len(r):
            return self
        finite = np.isfinite(r)
        self.bad += int(r.size - finite.sum())
        if r.size:
            self.absmax = max(self.absmax, float(np.abs(np.where(finite, r, 0.0)).max()))
        with np.errstate(all="ignore"):
            mean = r.mean(axis=0)
            return self._add(len(r), mean, ((r - mean) ** 2).sum(axis=0))

    def _add(self, n: int, mean: np.ndarray, m2: np.ndarray) -> "ReferenceSpread":
        if self.mean is None:
            self.samples, self.mean, self.m2 = n, mean, m2
            return self
        total = self.samples + n
        with np.errstate(all="ignore"):
            delta = mean - self.mean
            self.mean = self.mean + delta * (n / total)
            self.m2 = self.m2 + m2 + delta ** 2 * (self.samples * n / total)
        self.samples = total
        return self

    def merge(self, other: "ReferenceSpread") -> "ReferenceSpread":
        """Add another shard's figures of the same output; returns self."""
        self.bad += other.bad
        self.absmax = max(self.absmax, other.absmax)
        if other.mean is not None and other.m2 is not None:
            self._add(other.samples, other.mean, other.m2)
        return self

    def reason(self) -> Optional[str]:
        """``degenerate_reference``'s answer on the batches seen."""
        if self.mean is None or self.m2 is None or not self.mean.size:
            return None
        if self.bad:
            return degenerate_reason(self.bad, 0.0, 0.0, None)
        n, values = self.samples, self.mean.size
        spread = self.m2.sum() + n * ((self.mean - self.mean.mean()) ** 2).sum()
        std = math.sqrt(max(0.0, float(spread)) / (n * values))
        across = (math.sqrt(max(0.0, float(self.m2.max())) / n)
                  if self.mean.ndim >= 1 and n > 1 else None)
        return degenerate_reason(0, self.absmax, std, across)

    def to_state(self) -> dict:
        """Arrays of one sample's output size (``mean`` and ``m2``) and two of counts."""
        shape = () if self.mean is None else self.mean.shape
        empty = np.zeros(shape)
        return {"counts": np.array([self.samples, self.bad, int(self.mean is not None)],
                                   dtype=np.int64), "absmax": np.array([self.absmax]),
                "mean": empty if self.mean is None else self.mean,
                "m2": empty if self.m2 is None else self.m2}

    @classmethod
    def from_state(cls, state: dict) -> "ReferenceSpread":
        out = cls()
        out.samples, out.bad, seen = (int(v) for v in state["counts"])
        out.absmax = float(np.asarray(state["absmax"]).reshape(-1)[0])
        if seen:
            out.mean = np.asarray(state["mean"], dtype=np.float64)
            out.m2 = np.asarray(state["m2"], dtype=np.float64)
        return out
