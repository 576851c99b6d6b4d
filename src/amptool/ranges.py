"""The range pass: what each cell's fp32 values mean for fp16, and where fp16 first breaks.

One eager fp32 forward pass over a few batches records, for every cell (blocks included:
a block's own ``construct`` holds operations, such as a residual or branch sum, that no
leaf covers), the largest |value| of its input and output and the share of its nonzero
outputs below fp16's smallest normal number. Cells whose outputs reach a safety fraction
of fp16's largest value, or live mostly among fp16's subnormals, are the cells to keep in
fp32. ``first_overflow`` runs the same input through the fp32 network and the network
under a low-precision policy and names the first cell whose low-precision output is not
finite while its fp32 output is.

Forward hooks fire only in PyNative mode; both functions switch to it and back.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

FP16_MAX = 65504.0
"""Largest finite float16."""
FP16_TINY = 2.0 ** -14
"""Smallest normal float16 (6.1e-5): below it fp16 keeps fewer significant bits."""
SAFETY = 0.5
"""Default share of FP16_MAX an fp32 output may reach before its cell is kept in fp32."""
SUBNORMAL_SHARE = 0.5
"""Default share of nonzero outputs below FP16_TINY that makes a cell a candidate."""


def magnitudes(values: np.ndarray) -> tuple:
    """(largest |value| (inf when one is not finite), number of nonzero values below
    FP16_TINY, number of nonzero values) of an fp32 tensor's values."""
    mag = np.abs(np.asarray(values, dtype=np.float64).ravel())
    if not np.all(np.isfinite(mag)):
        top = float("inf")
    else:
        top = float(mag.max()) if mag.size else 0.0
    nonzero = mag[mag > 0]
    return top, int(np.count_nonzero(nonzero < FP16_TINY)), int(nonzero.size)


def fp16_risk(out_max: float, subnormal: float, safety: float = SAFETY,
              subnormal_share: float = SUBNORMAL_SHARE) -> Optional[str]:
    """"overflow" when fp32 values reach ``safety`` x 65504 (or are not finite), "subnormal"
    when most nonzero values are below fp16's smallest normal, else None."""
    if not np.isfinite(out_max) or out_max >= safety * FP16_MAX:
        return "overflow"
    if subnormal > subnormal_share:
        return "subnormal"
    return None


@dataclass(frozen=True)
class CellRange:
    """One cell's fp32 magnitudes over the range pass."""

    path: str
    type: str
    out_max: float
    """Largest |output| (inf or nan when the fp32 output itself is not finite)."""
    in_max: Optional[float]
    """Largest |first input| (None when the cell took no tensor)."""
    subnormal: float
    """Share of nonzero |output| values below FP16_TINY."""

    def to_dict(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def _pynative():
    import mindspore as ms

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=previous)


def _tensors(value) -> list:
    import mindspore as ms

    if isinstance(value, ms.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _floats(value) -> Optional[np.ndarray]:
    arrays = [t.asnumpy().ravel() for t in _tensors(value)]
    arrays = [a.astype(np.float64) for a in arrays if np.issubdtype(a.dtype, np.floating)]
    return np.concatenate(arrays) if arrays else None


class _Hooks:
    """Forward hooks on every cell of ``net`` (the root is ''), calling ``record(path,
    cell, inputs, output)`` in execution order; removed on ``close``."""

    def __init__(self, net, record):
        self.handles = []
        for path, cell in net.cells_and_names():
            self.handles.append(cell.register_forward_hook(self._hook(path, record)))

    @staticmethod
    def _hook(path, record):
        def hook(cell, inputs, output):
            record(path, cell, inputs, output)
        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def measure_ranges(net, batches: list) -> list:
    """``CellRange`` of every cell of the fp32 network ``net`` over ``batches`` (each a list
    of numpy arrays, one per network input), in execution order."""
    import mindspore as ms

    stats: dict = {}
    types: dict = {}

    def record(path, cell, inputs, output):
        out = _floats(output)
        if out is None:
            return
        first_in = _floats(_tensors(inputs)[:1])
        top, tiny, nonzero = magnitudes(out)
        row = stats.setdefault(path, [0.0, None, 0, 0])
        row[0] = max(row[0], top)
        if first_in is not None and first_in.size:
            in_top = magnitudes(first_in)[0]
            row[1] = in_top if row[1] is None else max(row[1], in_top)
        row[2] += tiny
        row[3] += nonzero
        types[path] = type(cell).__name__

    was_training = net.training
    net.set_train(False)
    hooks = _Hooks(net, record)
    try:
        with _pynative():
            for batch in batches:
                net(*[ms.Tensor(a) for a in batch])
    finally:
        hooks.close()
        net.set_train(was_training)
    return [CellRange(path, types[path], row[0], row[1], row[2] / row[3] if row[3] else 0.0)
            for path, row in stats.items()]


def range_candidates(ranges: list, safety: float = SAFETY,
                     subnormal_share: float = SUBNORMAL_SHARE) -> list:
    """The cells to keep in fp32: outputs at or above ``safety`` x 65504 (or not finite in
    fp32 either), or mostly subnormal in fp16; the network itself and cells inside another
    candidate are left out (keeping a block keeps what it holds)."""
    found = [r for r in ranges
             if r.path and fp16_risk(r.out_max, r.subnormal, safety, subnormal_share)]
    outer = [r.path for r in found]
    return [r for r in found
            if not any(r.path.startswith(o + ".") for o in outer if o != r.path)]


def first_overflow(fp32_net, low_net, low_runnable, inputs: list) -> Optional[dict]:
    """The first cell (in execution order) whose output under the low-precision policy is
    not finite while its fp32 output is. ``fp32_net`` and ``low_net`` are two builds of the
    same network with the same weights; ``low_runnable`` is ``low_net`` under the policy
    (``apply_policy`` keeps cell objects, so hooks set on ``low_net`` see its cells).
    Returns {path, type, fp32_max, input_finite} or None when nothing overflows."""
    import mindspore as ms

    fp32_out: dict = {}
    low_rows: list = []

    def keep_fp32(path, cell, inputs, output):
        out = _floats(output)
        if out is not None and path not in fp32_out:
            fp32_out[path] = out

    def keep_low(path, cell, inputs, output):
        out = _floats(output)
        if out is None:
            return
        first_in = _floats(_tensors(inputs)[:1])
        low_rows.append((path, type(cell).__name__, bool(np.all(np.isfinite(out))),
                         first_in is None or bool(np.all(np.isfinite(first_in)))))

    tensors = [ms.Tensor(a) for a in inputs]
    for net, runnable, record in ((fp32_net, fp32_net, keep_fp32),
                                  (low_net, low_runnable, keep_low)):
        hooks = _Hooks(net, record)
        was_training = runnable.training
        runnable.set_train(False)
        try:
            with _pynative():
                runnable(*tensors)
        finally:
            hooks.close()
            runnable.set_train(was_training)
    for path, kind, finite, input_finite in low_rows:
        ref = fp32_out.get(path)
        if finite or ref is None or not np.all(np.isfinite(ref)):
            continue
        return {"path": path or "(network)", "type": kind,
                "fp32_max": float(np.abs(ref).max()) if ref.size else 0.0,
                "input_finite": input_finite}
    return None
