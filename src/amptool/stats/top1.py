"""Top-1 agreement, near-tie flips and accuracy of class logits, accumulated batch by batch
and merged across shards: the streaming form of ``amptool.stats.metrics.top1_metrics``.

What is exact: the sample, agreement and flip counts, the 2x2 table of (reference right,
candidate right) that accuracy and its paired interval read, and each flip's margin (gap)
and near-tie eligibility (finite error, gap <= TIE_SHARE of the sample's logit range),
decided on the sample itself as ``top1_metrics`` decides it.

What is not: ``tie_tol`` is twice a median known only at the end; it is read from a
``LogHistogram`` of the agreeing samples' errors and reported as the lower bound of that
median (within ``GRID.rel_bound``, ~1.09 %, below twice the exact median, never above it).
Every eligible flip is kept with its gap while at most ``FLIP_CAP`` are, so the near-tie
decision of each is exactly the rule's at the reported ``tie_tol``; beyond the cap the
``FLIP_CAP`` smallest gaps are kept (the same ones in any merge order) and the rest go to
coarser histograms, one per (reference right, candidate right) kind of flip, which count a
flip as a near tie only where its bin lies wholly at or below ``tie_tol``. Those larger
gaps matter only when more than ``FLIP_CAP`` flips are near ties. ``tie_ambiguity`` counts
the flips whose decision the median's bound leaves open: when it is 0, ``near_tie_flips``
and every figure built on it equal ``top1_metrics``'. A lower ``tie_tol`` forgives fewer
flips: ``top1_agree_clear`` is then never above the exact figure (the safe side of
``min_top1``); ``acc_drop_clear`` can move either way (settling a flip the reference got
wrong raises the drop).
"""
from __future__ import annotations

import numpy as np

from amptool.stats.counts import paired_drop_from_counts, wilson
from amptool.stats.metrics import TIE_SHARE, labels_fit
from amptool.stats.sketch import GRID, LogGrid, LogHistogram, substate

FLIP_CAP = 4096
"""Eligible flips kept one by one (a gap and a kind each: 9 bytes)."""
GAP_GRID = LogGrid(per_octave=16)
"""The grid of the flips beyond ``FLIP_CAP`` (rel_bound ~ 4.4 %)."""
KINDS = 3
"""Kinds of flip: 2 * reference right + candidate right (both right cannot flip); 0 when
there are no labels."""


class FlipStore:
    """The gaps of eligible flips: the ``cap`` smallest exactly, the rest binned; mutable."""

    def __init__(self, cap: int = FLIP_CAP) -> None:
        if cap < 1:
            raise ValueError(f"a flip store keeps at least one flip, not {cap}")
        self.cap = cap
        self.gaps = np.empty(0, dtype=np.float64)
        self.kinds = np.empty(0, dtype=np.int8)
        self.over = [LogHistogram(GAP_GRID) for _ in range(KINDS)]

    @property
    def overflowed(self) -> bool:
        return any(h.total for h in self.over)

    def add(self, gaps: np.ndarray, kinds: np.ndarray) -> None:
        """Keep these flips: the smallest ``cap`` (by gap, then kind) of all seen stay exact."""
        if not len(gaps):
            return
        gaps = np.concatenate((self.gaps, np.asarray(gaps, dtype=np.float64)))
        kinds = np.concatenate((self.kinds, np.asarray(kinds, dtype=np.int8)))
        if gaps.size <= self.cap:
            self.gaps, self.kinds = gaps, kinds
            return
        order = np.lexsort((kinds, gaps))
        keep, spill = order[:self.cap], order[self.cap:]
        self.gaps, self.kinds = gaps[keep], kinds[keep]
        for kind in range(KINDS):
            self.over[kind].add(gaps[spill][kinds[spill] == kind])

    def merge(self, other: "FlipStore") -> "FlipStore":
        """Add ``other``'s flips (the kept set is the same in any merge order); returns self."""
        if other.cap != self.cap:
            raise ValueError(f"cannot merge a flip store of cap {other.cap} into {self.cap}")
        for mine, theirs in zip(self.over, other.over):
            mine.merge(theirs)
        self.add(other.gaps, other.kinds)
        return self

    def ties(self, tol: float) -> tuple:
        """(certain, possible) near ties at ``tol``, by kind: gap <= tol surely, and possibly
        (a binned flip whose bin straddles ``tol``)."""
        certain = np.bincount(self.kinds[self.gaps <= tol], minlength=KINDS).astype(np.int64)
        possible = certain.copy()
        if self.overflowed and self.gaps.size and tol >= self.gaps.max():
            for kind, hist in enumerate(self.over):
                sure, maybe = hist.count_at_most(tol)
                certain[kind] += sure
                possible[kind] += maybe
        return certain, possible

    def to_state(self) -> dict:
        """Arrays of fixed size: gaps and kinds (sorted, padded to ``cap`` with NaN, -1), the
        count kept and the binned flips' histograms."""
        order = np.lexsort((self.kinds, self.gaps))
        gaps = np.full(self.cap, np.nan)
        kinds = np.full(self.cap, -1, dtype=np.int8)
        gaps[:order.size], kinds[:order.size] = self.gaps[order], self.kinds[order]
        state = {"kept": np.array([self.gaps.size, self.cap], dtype=np.int64),
                 "gaps": gaps, "kinds": kinds}
        for kind, hist in enumerate(self.over):
            state |= {f"over{kind}.{k}": v for k, v in hist.to_state().items()}
        return state

    @classmethod
    def from_state(cls, state: dict) -> "FlipStore":
        n, cap = (int(v) for v in state["kept"])
        out = cls(cap)
        out.gaps = np.asarray(state["gaps"], dtype=np.float64)[:n].copy()
        out.kinds = np.asarray(state["kinds"], dtype=np.int8)[:n].copy()
        out.over = [LogHistogram.from_state(substate(state, f"over{kind}."))
                    for kind in range(KINDS)]
        return out



class Top1Stats:
    """Counts behind ``top1_metrics`` over the batches seen (see the module docstring)."""

    def __init__(self, cap: int = FLIP_CAP) -> None:
        self.samples, self.agree = 0, 0
        self.labels_fit = True
        self.table = np.zeros(4, dtype=np.int64)  # a, b, cc, d of paired_drop_from_counts
        self.calm = LogHistogram(GRID)
        self.flips = FlipStore(cap)

    def update(self, r: np.ndarray, c: np.ndarray, row_err: np.ndarray, labels=None) -> None:
        """One non-empty batch of class logits: reference ``r``, finite candidate ``c``
        (float64), each sample's largest error ``row_err`` and the labels if any."""
        ref_top, cand_top = r.argmax(axis=1), c.argmax(axis=1)
        agree = ref_top == cand_top
        self.samples += len(r)
        self.agree += int(agree.sum())
        self.calm.add(row_err[agree & np.isfinite(row_err)])
        flips = np.flatnonzero(~agree)
        gap = r[flips, ref_top[flips]] - r[flips, cand_top[flips]]
        spread = r[flips].max(axis=1) - r[flips].min(axis=1)
        eligible = np.isfinite(row_err[flips]) & (gap <= TIE_SHARE * spread)
        kinds = np.zeros(len(flips), dtype=np.int8)
        if labels_fit(labels, r):
            y = np.asarray(labels).astype(np.int64)
            ref_right, cand_right = ref_top == y, cand_top == y
            self.table += _table(ref_right, cand_right)
            kinds = (2 * ref_right[flips] + cand_right[flips]).astype(np.int8)
        else:
            self.labels_fit = False
        self.flips.add(gap[eligible], kinds[eligible])

    def merge(self, other: "Top1Stats") -> "Top1Stats":
        """Add ``other``'s samples (exact but for the binned flips); returns self."""
        self.samples += other.samples
        self.agree += other.agree
        self.labels_fit = self.labels_fit and other.labels_fit
        self.table += other.table
        self.calm.merge(other.calm)
        self.flips.merge(other.flips)
        return self

    def tol_bounds(self) -> tuple:
        """(lower, upper) around the exact ``tie_tol``: twice the agreeing samples' median."""
        if not self.calm.total:
            return 0.0, 0.0
        lo, hi = self.calm.median_bounds()
        return 2.0 * lo, 2.0 * hi

    def tie_ambiguity(self) -> int:
        """Flips whose near-tie decision the bounds of ``tie_tol`` leave open (0: the tie
        figures are ``top1_metrics``' exactly)."""
        lo, hi = self.tol_bounds()
        return int(self.flips.ties(hi)[1].sum() - self.flips.ties(lo)[0].sum())

    def result(self) -> dict:
        """``top1_metrics``' keys and meanings (call after at least one sample)."""
        n = self.samples
        tol = self.tol_bounds()[0]
        tied = self.flips.ties(tol)[0]
        clear = self.agree + int(tied.sum())
        lo, hi = wilson(n - clear, n)
        out = {"top1_agree": self.agree / n, "top1_agree_clear": clear / n,
               "near_tie_flips": int(tied.sum()), "tie_tol": tol, "counted": n,
               "top1_agree_clear_ci": [1.0 - hi, 1.0 - lo]}
        if self.labels_fit:
            out |= _accuracy(self.table, int(tied[2]), int(tied[1]))
        return out

    def to_state(self) -> dict:
        """Plain arrays of fixed size (see ``FlipStore.to_state``)."""
        state = {"counts": np.array([self.samples, self.agree, int(self.labels_fit)],
                                    dtype=np.int64), "table": self.table.copy()}
        state |= {f"calm.{k}": v for k, v in self.calm.to_state().items()}
        return state | {f"flips.{k}": v for k, v in self.flips.to_state().items()}

    @classmethod
    def from_state(cls, state: dict) -> "Top1Stats":
        out = cls()
        out.samples, out.agree, fit = (int(v) for v in state["counts"])
        out.labels_fit = bool(fit)
        out.table = np.asarray(state["table"], dtype=np.int64).copy()
        out.calm = LogHistogram.from_state(substate(state, "calm."))
        out.flips = FlipStore.from_state(substate(state, "flips."))
        return out


def _table(ref_right: np.ndarray, cand_right: np.ndarray) -> np.ndarray:
    r, c = ref_right, cand_right
    return np.array([(r & c).sum(), (r & ~c).sum(), (~r & c).sum(), (~r & ~c).sum()],
                    dtype=np.int64)


def _accuracy(table: np.ndarray, ref_only_tied: int, cand_only_tied: int) -> dict:
    """Accuracy keys of ``top1_metrics`` from the 2x2 table; a near tie takes the reference's
    class, moving a flip only the reference got right to both right (``ref_only_tied``) and
    one only the candidate got right to neither (``cand_only_tied``)."""
    a, b, cc, d = (int(v) for v in table)
    n = a + b + cc + d
    ref_acc, cand_acc = (a + b) / n, (a + cc) / n
    settled = (a + ref_only_tied, b - ref_only_tied, cc - cand_only_tied, d + cand_only_tied)
    return {"ref_acc": ref_acc, "cand_acc": cand_acc, "acc_drop": ref_acc - cand_acc,
            "acc_drop_ci": paired_drop_from_counts(a, b, cc, d),
            "acc_drop_clear": ref_acc - (settled[0] + settled[2]) / n,
            "acc_drop_clear_ci": paired_drop_from_counts(*settled)}
