"""Forward-overflow forensics: the first cell whose output under a low-precision policy is
not finite while its fp32 output is.

The same input runs through the fp32 network and through the network under the policy,
eagerly (``amptool.precision.eager``) with a forward hook on every cell; each cell's output is
reduced as it comes to what the verdict needs (all finite, the largest magnitude), so nothing of
the activations is held. When the first such cell's input is not finite already, the value
was made in the construct of a cell around it (no cell before it gave one), and that cell is
named. A training run asks for its batch normalizations on the batch's statistics, as its
step computes them (``amptool.precision.ranges`` says why).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from amptool.precision.eager import Hooks, eager, float_arrays, tensors


def first_overflow(fp32_net, low_net, low_runnable, inputs: list,
                   batch_stats: bool = False) -> Optional[dict]:
    """The first cell (in execution order) whose output under the low-precision policy is
    not finite while its fp32 output is. ``fp32_net`` and ``low_net`` are two builds of the
    same network with the same weights; ``low_runnable`` is ``low_net`` under the policy
    (``apply_policy`` keeps cell objects, so hooks set on ``low_net`` see its cells).
    ``batch_stats``: batch normalizations on the batch's statistics. Returns {path, type,
    fp32_max, input_finite} or None when nothing overflows."""
    import mindspore as ms

    fp32_out: dict = {}  # path -> (all finite, largest magnitude) of its first output
    low_rows: list = []

    def keep_fp32(path, cell, inputs, output):
        arrays = float_arrays(output)
        if arrays and path not in fp32_out:
            fp32_out[path] = (_finite(arrays), max((float(np.abs(a).max()) for a in arrays
                                                    if a.size), default=0.0))

    def keep_low(path, cell, inputs, output):
        arrays = float_arrays(output)
        if not arrays:
            return
        first_in = float_arrays(tensors(inputs)[:1])
        low_rows.append((path, type(cell).__name__, _finite(arrays), _finite(first_in)))

    feed = [ms.Tensor(a) for a in inputs]
    for net, runnable, record in ((fp32_net, fp32_net, keep_fp32),
                                  (low_net, low_runnable, keep_low)):
        hooks = Hooks(net, record)
        try:
            with eager(runnable, batch_stats):
                runnable(*feed)
        finally:
            hooks.close()
    for index, (path, kind, finite, input_finite) in enumerate(low_rows):
        ref = fp32_out.get(path)
        if finite or ref is None or not ref[0]:
            continue
        if not input_finite:  # made by a construct around it, after every cell before it
            maker = _enclosing(path, low_rows[index + 1:], fp32_out)
            if maker is not None:
                path, kind, input_finite = maker
                ref = fp32_out[path]
        return {"path": path or "(network)", "type": kind, "fp32_max": ref[1],
                "input_finite": input_finite}
    return None


def _finite(arrays: list) -> bool:
    return all(bool(np.isfinite(a).all()) for a in arrays)


def _enclosing(path: str, later: list, fp32_out: dict) -> Optional[tuple]:
    """(path, type, input finite) of the innermost cell around ``path`` (never the network)
    whose low-precision output is not finite while its fp32 output is: the cell whose own
    construct made the value ``path`` took in (a mask's ``0 * -inf``); None without one."""
    rows = {row[0]: row for row in later}
    outer = path
    while "." in outer:
        outer = outer.rpartition(".")[0]
        row = rows.get(outer)
        ref = fp32_out.get(outer)
        if row is not None and not row[2] and ref is not None and ref[0]:
            return outer, row[1], row[3]
    return None
