"""How much worse a parity figure may get between two reports (``RegressionBudget``), and
what counts as noise for each figure (``counted_change``, ``error_change``).

Two parity reports of one model on the same inputs are compared figure by figure
(``amptool diff``). A figure has *regressed* when it is worse by more than its own noise
plus the budget's allowance; noise is what the figure cannot tell apart:

- a **counted** figure (clear top-1 agreement, the clear accuracy drop, a task metric's drop
  with an interval) estimates a rate from n samples: its noise is its sampling error. Each
  report states a 95 % interval; the change's interval is recovered from the two (Zou and
  Donner's MOVER, as Newcombe builds a drop's interval from two Wilson intervals), treating
  the two reports as independent: wider than the paired interval one run of both sides on the
  same samples would give, so no noise is taken for a regression. Never less than one
  sample (``1/n``), the finest step such a figure takes;
- an **error** figure (1 - cosine, the scaled 99.9th percentile and worst error) is computed
  exactly from the same elements, so it has no sampling noise between two reports on the same
  inputs: its noise is its resolution, ``error_floor`` (rounding of the fp32 reference itself)
  plus, for the 99.9th percentile, the streamed sketch's stated bound (it is reported as the
  upper edge of a bin 1.09 % wide, ``amptool.stats.sketch``);
- the **non-finite** count is exact: any NaN/Inf element more is a change.

A limit set to ``off`` (``"off"`` in a file) leaves those figures shown but never failing.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Literal, Optional

from amptool.errors import UsageError
from amptool.stats.limits import DOCUMENT_RULES

SKETCH_BINS_PER_OCTAVE = 64
"""The bins an octave of the percentile sketch parity streams (``stats.sketch.GRID``)."""
P999_RESOLUTION = 2.0 ** (1.0 / SKETCH_BINS_PER_OCTAVE) - 1.0
"""The relative width of one of its bins (~1.09 %): a streamed 99.9th percentile is the upper
edge of the bin holding the exact value, so two reports' values within it cannot be told
apart (``stats.sketch.LogGrid.rel_bound``; numpy-free here, a test keeps the two equal)."""
TABLE = "regression"
"""The config file's table holding the budget (beside ``thresholds``)."""
REORDER_NOISE = 1e-5
"""Default ``error_floor``: two runs of one fp32 graph on CPUs that order their sums
differently differ by up to 7.5e-6 of the output's scale (measured on seeded repvgg_a0 logits
of 2,400 to 56,000; ``limits.SAME_PRECISION``): a scaled error moving by less cannot be told
from the reference's own rounding."""


@dataclass(frozen=True)
class RegressionBudget:
    """How much worse NEW may be than BASE (``amptool diff``) beyond each figure's noise;
    None (``off``) stops a kind of figure from failing the diff (it is still shown)."""

    __pydantic_config__: ClassVar[Dict[str, Any]] = DOCUMENT_RULES

    rate_allowance: Optional[float] = 0.0
    """Worsening of a counted figure (clear top-1 agreement, clear accuracy drop), as a
    fraction (0.005 = 0.5 pp), allowed on top of the 95 % interval of its change."""
    task_allowance: Optional[float] = 0.0
    """Growth of the task metric's drop (``--metric``), in the metric's units, allowed on top
    of its interval (a metric counted over samples) or of nothing (any other)."""
    error_growth: Optional[float] = 0.0
    """Relative growth of an error figure (1 - cosine, ``p999_abs_scaled``,
    ``max_abs_scaled``) allowed on top of its resolution: 0.5 lets an error grow by half."""
    error_floor: float = REORDER_NOISE
    """The resolution of the scaled errors, in units of the output's scale: changes below it
    are rounding of the reference (1 - cosine's is its square over 2)."""
    nonfinite_allowance: Optional[int] = 0
    """NaN/Inf elements more than BASE's allowed in an output of NEW."""
    check_flips: bool = True
    """A check that fails in NEW and did not in BASE (it passed, or was not made) is a
    regression, whatever the figures."""
    missing_candidates: bool = True
    """A candidate of BASE that NEW does not have is a regression (its check was dropped)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_OFFABLE = ("rate_allowance", "task_allowance", "error_growth", "nonfinite_allowance")
_FLAGS = ("check_flips", "missing_candidates")


def budget_from_table(table, source: str = "regression") -> RegressionBudget:
    """A config file's ``regression`` table as a budget: every bad key or value in one
    UsageError naming the file (``source``)."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: {TABLE} must be a table", f"write [{TABLE}] key = value")
    names = [f.name for f in dataclasses.fields(RegressionBudget)]
    errors: list = []
    values: dict = {}
    for key, value in table.items():
        name = str(key).replace("-", "_")
        if name not in names:
            errors.append(f"unknown key '{key}'")
            continue
        if isinstance(value, str) and value.lower() in ("off", "none") and name in _OFFABLE:
            values[name] = None
        elif name in _FLAGS:
            if isinstance(value, bool):
                values[name] = value
            else:
                errors.append(f"{key} must be true or false, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or not math.isfinite(value):
            errors.append(f"{key} must be a number >= 0"
                          + (" or off" if name in _OFFABLE else "") + f", got {value!r}")
        elif name == "nonfinite_allowance" and value != int(value):
            errors.append(f"{key} must be a whole number, got {value!r}")
        else:
            values[name] = int(value) if name == "nonfinite_allowance" else float(value)
    if errors:
        raise UsageError(f"{source}: [{TABLE}] " + "; ".join(errors),
                         f"known keys: {', '.join(names)}")
    return RegressionBudget(**values)


Judged = Literal["unchanged", "within noise", "improved", "regressed"]
"""What a change of a figure is."""


@dataclass(frozen=True)
class Change:
    """One figure's change, judged: its noise and whether it is beyond it."""

    noise: Optional[float]
    """How far the figure may move either way without telling anything (None: not judged)."""
    status: Judged
    """unchanged, within noise, improved or regressed."""


def _status(worse: float, better_noise: float, worse_noise: float,
            allowed: Optional[float]) -> Judged:
    """``worse``: the change, positive when worse; ``*_noise``: the noise toward each side;
    ``allowed``: the allowance beyond the noise (None: never a regression)."""
    if worse == 0:
        return "unchanged"
    slack = 1e-12 * max(1.0, abs(worse))  # a change of exactly the noise is within it
    if worse < 0:
        return "improved" if -worse > better_noise + slack else "within noise"
    if allowed is not None and worse > worse_noise + allowed + slack:
        return "regressed"
    return "within noise"


def counted_change(base: float, new: float, base_ci, new_ci, samples: int,
                   higher_is_worse: bool, allowed: Optional[float]) -> Change:
    """A counted figure's change (``*_ci``: each report's 95 % interval, None where absent):
    beyond its noise when the change's 95 % interval (MOVER, from the two intervals) lies
    wholly on one side of zero, and by at least one sample in ``samples``."""
    sign = 1.0 if higher_is_worse else -1.0
    worse = sign * (new - base)
    one = 1.0 / samples if samples else 0.0

    def gap(ci, value, up: bool) -> float:
        if not ci or len(ci) != 2:
            return 0.0
        return max(0.0, (ci[1] - value) if up else (value - ci[0]))

    # toward "worse": NEW's interval on its better side, BASE's on its worse side
    toward_worse = math.hypot(gap(new_ci, new, not higher_is_worse),
                              gap(base_ci, base, higher_is_worse))
    toward_better = math.hypot(gap(new_ci, new, higher_is_worse),
                               gap(base_ci, base, not higher_is_worse))
    worse_noise, better_noise = max(toward_worse, one), max(toward_better, one)
    return Change(worse_noise if worse >= 0 else better_noise,
                  _status(worse, better_noise, worse_noise, allowed))


def error_change(base: float, new: float, rel: float, floor: float,
                 growth: Optional[float]) -> Change:
    """An error figure's change (both values error sizes, larger is worse): its resolution is
    ``rel`` of the larger value plus ``floor``; ``growth`` (relative, of BASE's value) is the
    allowance beyond it (None: never a regression). A non-finite value is worse than any
    finite one."""
    if not (math.isfinite(base) and math.isfinite(new)):
        if not (math.isfinite(base) or math.isfinite(new)):
            return Change(0.0, "unchanged")  # NaN/Inf on both sides
        worse = 1.0 if math.isfinite(base) else -1.0
        return Change(0.0, _status(worse, 0.0, 0.0, None if growth is None else 0.0))
    noise = rel * max(abs(base), abs(new)) + floor
    allowed = None if growth is None else growth * abs(base)
    return Change(noise, _status(new - base, noise, noise, allowed))


def count_change(base: int, new: int, allowed: Optional[int]) -> Change:
    """An exact count's change (NaN/Inf elements): any element more is a change."""
    return Change(0.0, _status(float(new - base), 0.0, 0.0,
                               None if allowed is None else float(allowed)))
