"""A user task metric (``--metric path/file.py:fn``, loaded by
``amptool.network.taskmetric``) and its drop budget.

``fn(outputs, labels)`` takes the list of output arrays of one side (in output order) and
the labels (an array, or None) and returns a float, higher is better. The reference's value
minus the candidate's is the drop, held to ``max_metric_drop``. The file is user code named
on the command line: it is imported like a model file, and every error it raises becomes one
line naming the file and the function.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from amptool.documents.door import from_json
from amptool.documents.parity import TaskResult
from amptool.network.taskmetric import FIX, evaluate, load_metric
from amptool.stats.counts import count_resolution, drop_interval
from amptool.stats.judge import drop_within

__all__ = ["FIX", "evaluate", "judge_task", "judge_task_value", "load_metric"]


def judge_task(spec: str, fn: Callable, ref_value: float, cand_out: list, labels,
               limit: Optional[float], samples: int = 0) -> TaskResult:
    """The task entry of a candidate: name, metrics, checks, passed (as an output's). A
    metric that is a rate over the ``samples`` (both values k/n, one strictly between 0 and
    1) gets the interval and resolution of a count (``metrics.count_resolution``)."""
    return judge_task_value(spec, ref_value, evaluate(fn, spec, cand_out, labels, "candidate"),
                            limit, samples)


def judge_task_value(spec: str, ref_value: float, value: float, limit: Optional[float],
                     samples: int = 0) -> TaskResult:
    """``judge_task`` on the candidate's value of the metric, computed already."""
    drop = ref_value - value
    metrics: Dict[str, Any] = {"task_ref": ref_value, "task_cand": value, "task_drop": drop}
    counts = rate_counts(ref_value, value, samples)
    if counts is not None:  # the sides' per-sample outcomes are unknown: taken as independent
        metrics.update(counted=samples, task_drop_ci=drop_interval(*counts, samples))
    checks = []
    if limit is not None:
        checks.append({"metric": "task_drop", "value": drop, "limit": f"<= {limit}",
                       "passed": drop_within(drop, limit),
                       **count_resolution("task_drop", limit, metrics)})
    return from_json(TaskResult, {"name": "task", "spec": spec, "metrics": metrics,
                                  "checks": checks,
                                  "passed": all(c["passed"] for c in checks)}, "task metric")


def rate_counts(ref_value: float, cand_value: float, n: int) -> Optional[Tuple[int, int]]:
    """(k_ref, k_cand) when both values are counts over ``n`` samples (k/n in [0, 1], one
    of them strictly inside), else None."""
    if n < 1 or not all(0.0 <= v <= 1.0 for v in (ref_value, cand_value)):
        return None
    if all(v in (0.0, 1.0) for v in (ref_value, cand_value)):
        return None
    ks = [v * n for v in (ref_value, cand_value)]
    if any(abs(k - round(k)) > 1e-6 for k in ks):
        return None
    return round(ks[0]), round(ks[1])
