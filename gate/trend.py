"""A ledger's figures over time (``trend``): one ``Series`` per figure of each output of each
kind of artefact (model, format, precision), its points in record order, each with its commit
and verdict; and the drift budgets (``--max-drift``) held to the last records of each.

A drift is the change of a least-squares line through the last ``window`` values: a figure
that worsens a little with every commit, each step within what one check tolerates, still
adds up, and the line's change over the window shows it (one noisy record moves it little).
It is taken in the figure's worse direction: up for errors, down for cosine and top-1
agreement, whose gap to 1 is what a relative budget is a share of.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from amptool.errors import UsageError
from amptool.ledger.record import RecordHead
from amptool.ledger.store import RecordFilter, open_ledger

FIGURES = ("cosine", "p999_abs_scaled", "max_abs_scaled", "top1_agree_clear", "acc_drop_clear",
           "nonfinite", "task_drop")
"""The figures a trend shows unless told (each where the records have it)."""
HIGHER_IS_BETTER = ("cosine", "top1_agree", "top1_agree_clear", "ref_acc", "cand_acc",
                    "task_ref", "task_cand")
GAP_TO_ONE = ("cosine", "top1_agree", "top1_agree_clear")
"""Figures at most 1 whose gap to 1 is what worsens (a relative budget is a share of it)."""
WINDOW = 10
"""Records a drift is measured over unless told."""


class Point(NamedTuple):
    """One record's value of a figure."""

    record: int
    """The record's id."""
    where: str
    """Its commit (or label, or time)."""
    value: float
    """The figure (NaN where it was not finite)."""
    passed: bool
    """The record's verdict."""


@dataclass(frozen=True)
class Series:
    """One figure of one output of one kind of artefact, over the records."""

    model: Optional[str]
    format: str
    precision: Optional[str]
    output: str
    figure: str
    points: List[Point] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.model or '?'} {self.format} {self.precision or '?'} {self.output}"


@dataclass(frozen=True)
class DriftBudget:
    """How far a figure may drift over the window: ``amount`` of its own unit, or with
    ``relative`` a share of its fitted value at the window's start (its gap to 1 for cosine
    and top-1)."""

    figure: str
    amount: float
    relative: bool = False

    @classmethod
    def parse(cls, text: str) -> "DriftBudget":
        """``FIGURE=AMOUNT`` or ``FIGURE=PERCENT%``, e.g. ``p999_abs_scaled=50%``."""
        found = re.fullmatch(r"\s*(\w+)\s*=\s*([0-9.eE+-]+)\s*(%?)\s*", text)
        try:
            amount = float(found.group(2)) if found else -1.0
        except ValueError:
            amount = -1.0
        if not found or not math.isfinite(amount) or amount < 0:
            raise UsageError(f"--max-drift {text!r} is not FIGURE=AMOUNT or FIGURE=PERCENT%",
                             "e.g. --max-drift p999_abs_scaled=50% --max-drift cosine=0.0005")
        relative = bool(found.group(3))
        return cls(found.group(1), amount / 100 if relative else amount, relative)

    @property
    def text(self) -> str:
        return f"{self.figure}={self.amount * 100:g}%" if self.relative else \
            f"{self.figure}={self.amount:g}"


@dataclass(frozen=True)
class Drift:
    """A figure's drift over the last records of a series, against its budget."""

    series: Series
    budget: DriftBudget
    records: int
    """Records in the window (with a finite value)."""
    start: float
    """The fitted line's value at the window's first record."""
    end: float
    """... and at its last."""
    worse_by: float
    """How much worse the figure got along the line (negative: better), in its own unit."""
    all_passed: bool
    """Every record in the window passed its own check."""

    @property
    def share(self) -> float:
        """``worse_by`` as a share of the start (its gap to 1 where that is what worsens)."""
        base = abs(1 - self.start) if self.series.figure in GAP_TO_ONE else abs(self.start)
        return self.worse_by / base if base > 0 else (math.inf if self.worse_by > 0 else 0.0)

    @property
    def exceeded(self) -> bool:
        value = self.share if self.budget.relative else self.worse_by
        return value > self.budget.amount * (1 + 1e-9)

    def line(self) -> str:
        """``p999_abs_scaled of simplecnn MINDIR fp16 output0 drifted +101% (0.01 -> 0.0201)
        over its last 6 records (budget 50%)``."""
        amount = (f"{self.share * 100:+.3g}%" if self.budget.relative
                  else f"{self.worse_by:+.3g} worse")
        budget = (f"{self.budget.amount * 100:g}%" if self.budget.relative
                  else f"{self.budget.amount:g}")
        passed = ", though each passed" if self.all_passed else ""
        return (f"{self.series.figure} of {self.series.title} drifted {amount} "
                f"({self.start:.4g} -> {self.end:.4g}) over its last {self.records} records"
                f"{passed} (budget {budget})")


@dataclass(frozen=True)
class Trend:
    """What ``amptool ledger trend`` shows: every series and every drift checked."""

    ledger: str
    """The ledger, as it may be printed."""
    records: List[RecordHead]
    """The records read (without their files, outputs and limits), oldest first."""
    series: List[Series]
    drifts: List[Drift]
    window: int
    budgets: List[DriftBudget] = field(default_factory=list)
    """The budgets given (``drifts``: each held to every series with its figure)."""

    @property
    def passed(self) -> bool:
        """No drift past its budget."""
        return not any(d.exceeded for d in self.drifts)

    @property
    def worst(self) -> Optional[Drift]:
        """The drift furthest past its budget (None: none is)."""
        over = [d for d in self.drifts if d.exceeded]
        return max(over, key=lambda d: (d.share if d.budget.relative else d.worse_by)
                   / max(d.budget.amount, 1e-300), default=None)


def trend(ledger: str, where: RecordFilter = RecordFilter(), figures: Sequence[str] = (),
          budgets: Sequence[DriftBudget] = (), window: int = WINDOW) -> Trend:
    """The figures of the records of ``ledger`` that match ``where`` (``figures``: these
    only, else ``FIGURES`` and every figure a budget names), and each budget held to the last
    ``window`` records of every series that has its figure."""
    if window < 2:
        raise UsageError(f"--window must be 2 or more records (got {window})",
                         "a drift needs two records at least")
    names = list(dict.fromkeys([*(figures or FIGURES), *(b.figure for b in budgets)]))
    with open_ledger(ledger) as book:
        records, rows = book.figures(where, names)
        name = book.name
    series = make_series(records, rows, names)
    unknown = sorted({b.figure for b in budgets} - {s.figure for s in series})
    if unknown and records:
        raise UsageError(f"--max-drift names {', '.join(unknown)}, which no record has",
                         f"the records have {', '.join(sorted({s.figure for s in series}))}")
    drifts = [d for b in budgets for s in series if s.figure == b.figure
              for d in [drift(s, b, window)] if d is not None]
    return Trend(name, records, series, drifts, window, list(budgets))


def make_series(records: List[RecordHead], rows: list, names: Sequence[str]) -> List[Series]:
    """One series per (model, format, precision, output, figure) found, in ``names`` order;
    ``rows``: ``(record id, output, figure, value)`` in record order."""
    found: Dict[Tuple, Series] = {}
    heads = {h.id: (h, h.where) for h in records}
    for rid, output, figure, value in rows:
        head, where = heads[rid]
        key = (head.model, head.format, head.precision, output, figure)
        series = found.get(key)
        if series is None:
            series = found[key] = Series(head.model, head.format, head.precision, output,
                                         figure)
        series.points.append(Point(rid, where, value, head.passed))
    order = {n: i for i, n in enumerate(names)}
    return sorted(found.values(), key=lambda s: (str(s.model), s.format, str(s.precision),
                                                 s.output, order.get(s.figure, len(order))))


def drift(series: Series, budget: DriftBudget, window: int) -> Optional[Drift]:
    """The drift of the last ``window`` records of ``series`` (None: fewer than two finite
    values there)."""
    last = series.points[-window:]
    points = [(i, p.value) for i, p in enumerate(last) if math.isfinite(p.value)]
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    x0, x1 = points[0][0], points[-1][0]
    start, end = my + slope * (x0 - mx), my + slope * (x1 - mx)
    sign = -1.0 if series.figure in HIGHER_IS_BETTER else 1.0
    return Drift(series, budget, n, start, end, sign * (end - start),
                 all(p.passed for p in last))
