"""A user task metric (``--metric path/file.py:fn``): loaded and evaluated in one place.

``fn(outputs, labels)`` takes the list of output arrays of a network (in output order) and
the labels or targets (an array, a list of arrays for several targets, or None) and returns
a float, higher is better. Training picks ``best`` by it on the held-out split; parity holds
its drop to a budget. The file is user code named on the command line: it is imported like a
model file, and every error it raises becomes one line naming the file and the function.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Optional

from amptool.errors import UsageError
from amptool.network.usercode import import_user_file

FIX = "fn(outputs: list of numpy arrays, labels or None) -> float, higher is better"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def check_metric_spec(spec: str) -> tuple:
    """(path, function name) of ``path/file.py:fn``, or a UsageError."""
    path_text, _, name = str(spec).rpartition(":")
    if not path_text.endswith(".py") or not name:
        raise UsageError(f"--metric takes path/file.py:fn, got {spec!r}", f"define {FIX}")
    return Path(path_text), name


def load_metric(spec: str) -> Callable:
    """The function named by ``path/file.py:fn``."""
    path, name = check_metric_spec(spec)
    module = import_user_file(path, "metric", "':fn'")
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"metric file {path} has no function '{name}'", f"define {FIX}")
    return fn


def evaluate(fn: Callable, spec: Optional[str], outputs: list, labels, side: str) -> float:
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


STREAM_HOOKS = ("init", "update", "merge", "result")
"""The attributes a metric declares to be computed batch by batch."""
STREAM_FIX = ("give the function init() -> state, update(state, outputs, labels) -> state, "
              "merge(state, state) -> state and result(state) -> float, or set "
              "fn.needs_all = True to be given every output at once")


def metric_mode(fn: Callable) -> str:
    """``stream``: ``fn`` declares ``init/update/merge/result`` (batch by batch, mergeable);
    ``whole``: it sets ``needs_all = True``; ``undeclared``: neither (it is given every
    output at once, as a whole-array function)."""
    if all(callable(getattr(fn, hook, None)) for hook in STREAM_HOOKS):
        return "stream"
    return "whole" if getattr(fn, "needs_all", False) is True else "undeclared"


def call_hook(fn: Callable, hook: str, spec: str, side: str, *args):
    """``fn.<hook>(*args)``, or one line saying what it raised."""
    try:
        return getattr(fn, hook)(*args)
    except Exception as exc:
        raise UsageError(f"--metric {spec} {hook}() raised {_first_line(exc)} on the {side}'s "
                         "outputs", "fix the metric function") from None


def stream_result(fn: Any, spec: str, state, side: str) -> float:
    """A streamed metric's value, checked as ``evaluate`` checks a whole one's."""
    return evaluate(lambda *_: fn.result(state), spec, [], None, side)
