"""The figures of one compared output (``OutputMetrics``) and how reports write figures,
checks and findings as text (``fmt``, ``breaches``, ``finding_text``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

from amptool.documents.door import Document, Real, optional_key, to_json

CI_SUFFIX = "_ci"
"""A metric's 95 % interval is reported beside it (``<metric>_ci``), not as a row."""


@dataclass(frozen=True)
class OutputMetrics(Document):
    """Every figure computed on one output (or the task metric); ``*_ci``: a 95 % interval."""

    max_abs: Optional[Real] = optional_key()
    """Largest absolute error."""
    max_abs_scaled: Optional[Real] = optional_key()
    """``max_abs`` over max(1, the reference's largest magnitude)."""
    p999_abs_scaled: Optional[Real] = optional_key()
    """The 99.9th percentile of the absolute error, scaled as ``max_abs_scaled``."""
    ref_absmax: Optional[Real] = optional_key()
    """The reference's largest magnitude."""
    max_rel: Optional[Real] = optional_key()
    """Largest relative error."""
    mean_abs: Optional[Real] = optional_key()
    """Mean absolute error."""
    rmse: Optional[Real] = optional_key()
    """Root mean square error."""
    cosine: Optional[Real] = optional_key()
    """Cosine of the flattened outputs (NaN with NaN/Inf)."""
    rel_l2: Optional[Real] = optional_key()
    """L2 norm of the error over the reference's."""
    outside_frac: Optional[Real] = optional_key()
    """Share of elements outside atol + rtol * |reference|."""
    nonfinite: Optional[int] = optional_key()
    """NaN/Inf elements in the candidate's output."""
    top1_agree: Optional[Real] = optional_key()
    """Share of samples whose top-1 class agrees (class logits)."""
    top1_agree_clear: Optional[Real] = optional_key()
    """``top1_agree`` with near-tie flips counted as agreeing."""
    near_tie_flips: Optional[int] = optional_key()
    """Disagreements that are near ties."""
    tie_tol: Optional[Real] = optional_key()
    """The margin below which a flip is a near tie."""
    counted: Optional[int] = optional_key()
    """Samples counted in the rates."""
    top1_agree_clear_ci: Optional[List[Real]] = optional_key()
    """``top1_agree_clear``'s interval."""
    ref_acc: Optional[Real] = optional_key()
    """The reference's top-1 accuracy on the labels."""
    cand_acc: Optional[Real] = optional_key()
    """The candidate's top-1 accuracy on the labels."""
    acc_drop: Optional[Real] = optional_key()
    """``ref_acc - cand_acc``."""
    acc_drop_ci: Optional[List[Real]] = optional_key()
    """``acc_drop``'s interval."""
    acc_drop_clear: Optional[Real] = optional_key()
    """The accuracy drop with near-tie flips left out."""
    acc_drop_clear_ci: Optional[List[Real]] = optional_key()
    """``acc_drop_clear``'s interval."""
    task_ref: Optional[Real] = optional_key()
    """The task metric on the reference's outputs."""
    task_cand: Optional[Real] = optional_key()
    """The task metric on the candidate's outputs."""
    task_drop: Optional[Real] = optional_key()
    """``task_ref - task_cand``."""
    task_drop_ci: Optional[List[Real]] = optional_key()
    """``task_drop``'s interval, when the metric is a rate over the samples."""

    def figures(self) -> dict:
        """The figures present, by name, in the order of the fields."""
        return to_json(self)


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.7g}"
    return str(value)


def finding_text(finding) -> str:
    """A finding's message; with its fix where the finding is about the gate itself."""
    if finding.kind == "under_resolved":
        return f"{finding.message}; {finding.fix}"
    return finding.message


def breaches(group) -> list:
    """The failed checks of one output (or the task metric) as ``metric value (limit ...)``."""
    return [f"{r.metric} {fmt(r.value)} (limit {r.limit})" for r in group.checks
            if r.passed is False]
