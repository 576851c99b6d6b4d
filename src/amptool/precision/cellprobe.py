"""One cell computing in fp16 on the inputs the range pass's fp32 forward gave it.

``Fp16Probe`` runs a cell in fp16 two ways: on its own construct, the cells it calls
handing on their recorded fp32 outputs (``own_output``), or whole, on the first PROBE_ROWS
rows (``whole_error``); the cells a policy keeps stay in fp32 inside a probe. A leaf of the
user's own is also differentiated (``grad_overflow``). While a probe runs, ``active`` is
true: the cells it calls are no cells of the fp32 pass.
"""
from __future__ import annotations

import contextlib

import numpy as np

from amptool.precision.safety import LOCAL_ERROR
from amptool.precision.eager import all_finite, computing_in, flat64, floats, replaying, tensors

PROBE_ROWS = 4
"""Rows of the first batch a block run whole in fp16 is probed on, where all its tensor
inputs share the batch's leading dimension (else it is probed on its whole inputs)."""
_FAILS = (RuntimeError, TypeError, ValueError)
"""What a cell raises computing in fp16: no fp16 kernel, dtype rules."""


def relative_error(low: np.ndarray, ref: np.ndarray) -> float:
    """||low - ref|| / ||ref|| in float64; inf when ``low`` is not finite where ``ref`` is."""
    low, ref = np.asarray(low, np.float64), np.asarray(ref, np.float64)
    if low.shape != ref.shape or not np.all(np.isfinite(low)):
        return float("inf")
    scale = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(low - ref))
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def is_chain(cell) -> bool:
    """True for a cell whose construct only calls its sub-cells one after another
    (``nn.SequentialCell``): it makes no value of its own."""
    from mindspore import nn

    return (type(cell).construct is nn.SequentialCell.construct
            and bool(getattr(cell, "_cells", None)))


def own_leaf(cell) -> bool:
    """A cell holding no other whose class is not MindSpore's own: arithmetic written by
    hand (MindSpore's layers are either white-listed or kept in fp32 by the levels)."""
    return not cell._cells and not type(cell).__module__.startswith("mindspore.")


def grad_overflows(cell, inputs) -> bool:
    """Whether the gradient of ``cell``'s outputs (summed) with respect to its float tensor
    inputs is not finite computing in fp16 but finite in fp32 (``cell`` computes in fp32)."""
    import mindspore as ms

    where = tuple(i for i, v in enumerate(inputs)
                  if isinstance(v, ms.Tensor) and v.dtype in (ms.float32, ms.float16))
    if not where:
        return False

    def finite() -> bool:
        grads = ms.grad(cell, grad_position=where)(*inputs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return all(np.isfinite(g.asnumpy()).all() for g in grads)

    with computing_in(cell, ms.float16):
        if finite():
            return False
    return finite()


class Fp16Probe:
    """The fp16 probes of one range pass; ``fp32_kept``: the cells a policy keeps in fp32."""

    def __init__(self, fp32_kept: tuple = ()):
        self.kept_ids = frozenset(id(c) for c in fp32_kept)
        self.kept_all = frozenset(id(c) for k in fp32_kept for _, c in k.cells_and_names())
        self.probing: list = []

    @property
    def active(self) -> bool:
        """A probe is running: the cells called now belong to it."""
        return bool(self.probing)

    @contextlib.contextmanager
    def under_probe(self, cell):
        """``cell``'s probe under way."""
        self.probing.append(cell)
        try:
            yield
        finally:
            self.probing.pop()

    @contextlib.contextmanager
    def in_fp16(self, cell):
        """``cell`` computing in fp16, the kept cells inside it in fp32."""
        import mindspore as ms

        with computing_in(cell, ms.float16):
            for _, inner in cell.cells_and_names():
                if id(inner) in self.kept_ids:
                    inner.to_float(ms.float32)
            yield

    def own_output(self, cell, inputs, calls):
        """The cell computing in fp16 on its fp32 inputs, the cells its construct calls
        handing on their recorded fp32 outputs: its output (float64, flat), or None."""
        import mindspore as ms

        keep = (self.kept_all if id(cell) not in self.kept_all
                else frozenset(id(c) for c, _ in calls))
        given: list = []
        try:
            with self.under_probe(cell):
                try:  # the calls hand on their outputs unchecked, what they were given after
                    with self.in_fp16(cell), replaying(calls, ms.float16, keep, given):
                        low = floats(cell(*inputs))
                    checked = all_finite(given)
                except _FAILS:
                    checked = False
                if not checked:  # a call was given what fp16 cannot hold: it computes there
                    with self.in_fp16(cell), replaying(calls, ms.float16, keep):
                        low = floats(cell(*inputs))
        except _FAILS:
            return None
        return low

    def whole_error(self, cell, inputs, outs, rows):
        """The cell computing whole in fp16 on (the first PROBE_ROWS rows of) its inputs.
        The fp32 side is the rows of the output already at hand; a cell that mixes rows
        would differ there, so a flagging error is confirmed against the cell run in fp32
        on the same rows."""
        import mindspore as ms

        cut = rows > PROBE_ROWS and all(t.shape and t.shape[0] == rows for t in tensors(inputs))
        try:
            with self.under_probe(cell):
                if cut:
                    inputs = tuple(v[:PROBE_ROWS] if isinstance(v, ms.Tensor) else v
                                   for v in inputs)
                with self.in_fp16(cell):
                    low = floats(cell(*inputs))
                if low is None:
                    return None
                ref = flat64([a[:PROBE_ROWS] if cut else a for a in outs])
                if cut and not all(a.shape and a.shape[0] == rows for a in outs):
                    ref = None
                error = None if ref is None else relative_error(low, ref)
                if error is None or error >= LOCAL_ERROR:
                    error = relative_error(low, floats(cell(*inputs)))
        except _FAILS:
            return None
        return error

    def grad_overflow(self, cell, inputs) -> bool:
        """``grad_overflows`` of a leaf of the user's own (False where it cannot run)."""
        try:
            with self.under_probe(cell):  # its gradient's forward is no cell to record
                return grad_overflows(cell, inputs)
        except _FAILS:
            return False
