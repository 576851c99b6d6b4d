"""Whether one output of a candidate passes its limits: the one rule parity and the policy
search both judge by.

What an output is (``output_role``): the outputs a model declares as class logits are
exactly those, whatever its loss; otherwise the first output of a classifier (a run whose
loss is class cross-entropy, or one that records no loss) is, when it is as wide as the
model's classes (any width where the class count is unknown). A run whose loss is no class
cross-entropy has no class logits. An output that cannot be class logits (not (N, C))
has its scaled error bounded by default. Which limits it is held to: ``output_limits``.
Its metrics and checks: ``judge_output``. A task metric's drop: ``drop_within``. The
lowest cosine over several outputs: ``lowest_cosine`` (NaN, an output holding NaN/Inf,
comes first: it fails).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from amptool.stats.limits import Thresholds, resolve_thresholds
from amptool.stats.metrics import check_metrics, compute_metrics, is_class_logits, passed
from amptool.stats.stream import OutputStats

DROP_TOLERANCE = 1e-12
"""A task metric's drop may exceed its budget by this much (float rounding of equal rates)."""


@dataclass(frozen=True)
class OutputRole:
    """What one output of a network is, for judging it."""

    logits: bool
    """Judged as class logits: top-1 and, on labels, accuracy (where it is (N, C))."""
    classifier: bool
    """Held to a classifier's limits (top-1, accuracy drop); False: the error bounds alone."""
    bound_scaled: bool
    """Its scaled error is bounded by default: it cannot be class logits (not (N, C))."""


def output_role(index: int, ref, classifier: Optional[bool] = None,
                declared: Optional[Sequence[int]] = None,
                classes: Optional[int] = None) -> OutputRole:
    """The role of output ``index`` (``ref``: the reference's array of it). ``classifier``:
    whether the run's loss is class cross-entropy (None: not recorded, taken as one);
    ``declared``: the outputs the model declares as class logits (None: undeclared);
    ``classes``: the model's class count, where known."""
    if declared is not None:
        logits = index in declared
        as_classifier = logits
    else:
        as_classifier = classifier is not False
        logits = index == 0 and as_classifier and (
            not classes or (np.ndim(ref) == 2 and np.shape(ref)[1] == classes))
    return OutputRole(bool(logits), bool(as_classifier),
                      not (logits and is_class_logits(np.asarray(ref))))


def output_limits(role: OutputRole, output: Optional[tuple], ref_precision: Optional[str],
                  cand_precision: Optional[str], table: Optional[dict] = None,
                  flags: Optional[dict] = None) -> Thresholds:
    """The limits of one output (``output``: its index and name) of a candidate in
    ``cand_precision`` against a reference in ``ref_precision``: the pair's defaults for the
    output's role, then the config table (its general, pair and the output's tables), then
    flags."""
    return resolve_thresholds(ref_precision, cand_precision, table, flags, output=output,
                              logits=role.classifier, bound_scaled=role.bound_scaled)


def candidate_limits(ref_precision: Optional[str], cand_precision: Optional[str],
                     table: Optional[dict] = None, flags: Optional[dict] = None,
                     classifier: Optional[bool] = None) -> Thresholds:
    """The limits of a candidate as a whole (its task metric's drop budget): no output's
    own table."""
    return resolve_thresholds(ref_precision, cand_precision, table, flags,
                              logits=classifier is not False)


@dataclass(frozen=True)
class OutputVerdict:
    """One output as judged."""

    metrics: dict
    checks: list
    """One row per limit: ``metric``, ``value``, ``limit``, ``passed`` (None: n/a)."""
    passed: bool

    @property
    def failed(self) -> list:
        """The metrics whose limit was breached."""
        return [row["metric"] for row in self.checks if row["passed"] is False]


def judge_output(ref, cand, labels, role: OutputRole, limits: Thresholds) -> OutputVerdict:
    """The metrics of one output pair and its checks against ``limits``; ``labels`` count
    only on class logits."""
    metrics = compute_metrics(ref, cand, labels if role.logits else None, limits.atol,
                              limits.rtol, logits=role.logits)
    return judge_metrics(metrics, limits)


def judge_metrics(metrics: dict, limits: Thresholds) -> OutputVerdict:
    """The checks of one output's metrics (``compute_metrics``' dict, or the streamed one of
    ``output_stats``) against ``limits``."""
    rows = check_metrics(metrics, limits)
    return OutputVerdict(metrics, rows, passed(rows))


def output_stats(role: OutputRole, limits: Thresholds):
    """The streamed statistics of one output (``amptool.stats.stream.OutputStats``) as
    ``judge_output`` computes them: its tolerances and role; labels count only on class
    logits (``update``'s caller gives None elsewhere)."""
    return OutputStats(limits.atol, limits.rtol, logits=role.logits)


def drop_within(drop: float, limit: Optional[float]) -> bool:
    """Whether a task metric's ``drop`` keeps to ``limit`` (None: no budget); NaN fails."""
    if limit is None:
        return True
    return bool(drop == drop and drop <= limit + DROP_TOLERANCE)


def lowest_cosine(values: Sequence) -> Optional[float]:
    """The lowest of the outputs' cosines (None ignored; None when there is none), NaN
    first: an output holding NaN/Inf fails."""
    found = [v for v in values if v is not None]
    if not found:
        return None
    return next((v for v in found if v != v), min(found))
