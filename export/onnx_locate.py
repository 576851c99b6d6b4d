"""Which cell uses an operator MindSpore's ONNX exporter cannot convert: a primitive it holds,
a cell of that type, or a call spelled like it in the source of one of its methods."""
from __future__ import annotations

import inspect
import re

from .onnx_compat import from_mindspore, user_methods

_SOURCE_HINTS = {  # how an operator shows in Python source when its name does not
    "LogicalNot": r"~\s*[\w(]|logical_not\s*\(",
    "ResizeBilinearV2": r"interpolate\s*\(|resize_bilinear\w*\s*\(",
    "Shape": r"\.shape\s*\[\s*0\s*\]|\.shape[ \t]*(?:#[^\n]*)?\n",
    "TensorShape": r"\.shape\s*\[\s*0\s*\]|\.shape[ \t]*(?:#[^\n]*)?\n",
}
SHAPE_OPS = ("Shape", "TensorShape")
"""Operators that read a tensor's shape: folded to constants in a fixed-shape graph, left in
it only where code reads a dynamic dimension — under a dynamic batch, the batch
(``x.shape[0]``, or the whole shape: ``b, c, a = x.shape``), not a channel or a spatial
size. MindSpore's own cells hold them for checks on their inputs (``nn.BatchNorm2d``),
which is never where they are left."""


def _source_pattern(op: str):
    if op.startswith("Inplace"):
        return re.compile(r"[-+*/]=")
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", re.sub(r"Ext$", "", op)).lower()
    names = rf"\b({op}|{snake}|{op.lower()})\s*\("
    return re.compile(names + (f"|{_SOURCE_HINTS[op]}" if op in _SOURCE_HINTS else ""))


def locate_operator(net, op: str):
    """Path of the first cell that uses operator ``op`` (a primitive attribute, a cell of
    that type, or a call spelled like it in a method's source), or None."""
    for path, cell in net.cells_and_names():
        if op in SHAPE_OPS and from_mindspore(type(cell)):
            continue
        if type(cell).__name__ == op or any(getattr(v, "name", None) == op
                                            for v in vars(cell).values()):
            return path or "(root)"
    pattern = _source_pattern(op)
    for path, cell in net.cells_and_names():
        for fn in user_methods(type(cell)).values():
            try:
                source = inspect.getsource(fn)
            except (OSError, TypeError):
                continue
            if pattern.search(source):
                return path or "(root)"
    return None
