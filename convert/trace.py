"""Leaf cells of a network in execution order, with a FLOP estimate, from one eager forward.

PyNative forward hooks record each leaf cell's first call. FLOPs: Dense and Conv count
2 x multiply-accumulates; every other leaf cell counts one operation per output element.
Operators written directly in a non-leaf cell's ``construct`` are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amptool.network.models import flat_outputs


@dataclass(frozen=True)
class LeafCall:
    """One leaf cell as first executed."""

    path: str
    type: str
    flops: int
    params: int


def leaf_paths(net) -> dict:
    """Path -> cell of every leaf (cell without sub-cells), root excluded."""
    return {name: cell for name, cell in net.cells_and_names()
            if name and not list(cell.cells())}


def _size(output) -> int:
    if isinstance(output, (tuple, list)):
        return sum(_size(o) for o in output)
    shape = getattr(output, "shape", None)
    return int(np.prod(shape)) if shape is not None else 0


def estimate_flops(cell, output) -> int:
    """FLOPs of one call of a leaf cell given its output."""
    from mindspore import nn

    out = _size(output)
    if isinstance(cell, nn.Dense):
        return 2 * out * int(cell.in_channels)
    if isinstance(cell, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        weight = cell.weight
        return 2 * out * int(np.prod(weight.shape[1:]))
    return out


def record_execution(net, x) -> tuple:
    """Run ``net(x)`` once in PyNative mode; return its output (an array, or a list of one
    array per output, nested outputs unrolled) and the leaf calls in order."""
    leaves = leaf_paths(net)
    by_id = {id(cell): path for path, cell in leaves.items()}
    seen: dict = {}

    def hook(cell, inputs, output):
        path = by_id.get(id(cell))
        if path is not None and path not in seen:
            params = sum(int(p.size) for p in cell.get_parameters())
            seen[path] = LeafCall(path, type(cell).__name__, estimate_flops(cell, output), params)
        elif path is not None:
            old = seen[path]
            seen[path] = LeafCall(path, old.type, old.flops + estimate_flops(cell, output),
                                  old.params)

    handles = [cell.register_forward_hook(hook) for cell in leaves.values()]
    try:
        out = net(x)
    finally:
        for handle in handles:
            handle.remove()
    if isinstance(out, (tuple, list)):
        return [np.asarray(o.asnumpy()) for o in flat_outputs(tuple(out))], list(seen.values())
    return np.asarray(out.asnumpy()), list(seen.values())
