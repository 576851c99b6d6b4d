"""A user task metric (``--metric path/file.py:fn``) and its drop budget.

``fn(outputs, labels)`` takes the list of output arrays of one side (in output order) and
the labels (an array, or None) and returns a float, higher is better. The reference's value
minus the candidate's is the drop, held to ``max_metric_drop``. The file is user code named
on the command line: it is imported like a model file, and every error it raises becomes one
line naming the file and the function.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

from amptool.errors import UsageError

FIX = "fn(outputs: list of numpy arrays, labels or None) -> float, higher is better"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_metric(spec: str) -> Callable:
    """The function named by ``path/file.py:fn``."""
    path_text, _, name = spec.rpartition(":")
    if not path_text.endswith(".py") or not name:
        raise UsageError(f"--metric takes path/file.py:fn, got {spec!r}", f"define {FIX}")
    from amptool.models import import_user_file

    path = Path(path_text)
    module = import_user_file(path, "metric", "':fn'")
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"metric file {path} has no function '{name}'", f"define {FIX}")
    return fn


def evaluate(fn: Callable, spec: str, outputs: list, labels, side: str) -> float:
    """``fn`` on one side's outputs; a float, or one line saying what went wrong."""
    try:
        value = fn(list(outputs), labels)
    except Exception as exc:
        raise UsageError(f"--metric {spec} raised {_first_line(exc)} on the {side}'s outputs",
                         "fix the metric function") from None
    if isinstance(value, bool):
        value = None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--metric {spec} returned {type(value).__name__} on the {side}'s "
                         "outputs, not a number", f"return a float: {FIX}") from None
    if side == "reference" and not math.isfinite(number):
        raise UsageError(f"--metric {spec} returned {number} on the reference's outputs",
                         "check the metric function and the reference")
    return number


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
