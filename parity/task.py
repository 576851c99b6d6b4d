"""A user task metric (``--metric path/file.py:fn``, loaded by ``amptool.taskmetric``) and its
drop budget.

``fn(outputs, labels)`` takes the list of output arrays of one side (in output order) and
the labels (an array, or None) and returns a float, higher is better. The reference's value
minus the candidate's is the drop, held to ``max_metric_drop``. The file is user code named
on the command line: it is imported like a model file, and every error it raises becomes one
line naming the file and the function.
"""
from __future__ import annotations

from typing import Callable, Optional

from amptool.taskmetric import FIX, evaluate, load_metric

__all__ = ["FIX", "evaluate", "judge_task", "load_metric"]


def judge_task(spec: str, fn: Callable, ref_value: float, cand_out: list, labels,
               limit: Optional[float]) -> dict:
    """The task entry of a candidate: name, metrics, checks, passed (as an output's)."""
    value = evaluate(fn, spec, cand_out, labels, "candidate")
    drop = ref_value - value
    metrics = {"task_ref": ref_value, "task_cand": value, "task_drop": drop}
    checks = []
    if limit is not None:
        ok = drop == drop and drop <= limit + 1e-12
        checks.append({"metric": "task_drop", "value": drop, "limit": f"<= {limit}",
                       "passed": bool(ok)})
    return {"name": "task", "spec": spec, "metrics": metrics, "checks": checks,
            "passed": all(c["passed"] for c in checks)}
