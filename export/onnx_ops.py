"""Exportable equivalents, in graph-mode MindSpore, of operators the ONNX exporter lacks.

``onnx_compat`` rewrites a cell's method source so that these run in place of:

- ``~x`` (``LogicalNot`` on bool tensors): ``x == False``; other values keep ``~``;
- ``x.cumsum(axis)`` and ``ops.cumsum(x, axis)`` (``CumSum``): a product with a constant
  triangular matrix along ``axis``;
- ``ops.L2Normalize(axis, epsilon)(x)`` (``L2Normalize``):
  ``x / sqrt(max(sum(x * x, axis), epsilon))``, the operator's own formula;
- ``ops.interpolate(x, size=..., mode="bilinear")`` (``ResizeBilinearV2``): one constant
  interpolation matrix per spatial axis (bilinear interpolation is separable), for 4-D
  inputs and a given ``size``; other modes and arguments call ``ops.interpolate`` as
  written.

Each computes the same values as the operator it replaces (the tests compare them).
"""
from __future__ import annotations

import mindspore as ms
from mindspore import ops


def invert(x):
    """``~x``: logical not for bool tensors, as ``Equal`` (exportable)."""
    if isinstance(x, ms.Tensor):
        if x.dtype == ms.bool_:
            return ops.equal(x, False)
    return ~x


def _last_axis_order(rank, axis):
    """The permutation moving ``axis`` last, and the one moving it back."""
    forward = ()
    for i in range(rank):
        if i != axis:
            forward = forward + (i,)
    forward = forward + (axis,)
    back = ()
    for i in range(axis):
        back = back + (i,)
    back = back + (rank - 1,)
    for i in range(axis, rank - 1):
        back = back + (i,)
    return forward, back


def cumsum(x, axis=None, dtype=None):
    """``x.cumsum(axis, dtype)``: ``x`` moved so ``axis`` is last, times an upper-triangular
    matrix of ones (entry (j, i) is 1 where j <= i), moved back."""
    if axis is None:
        x = ops.reshape(x, (-1,))
        axis = 0
    result = x.dtype if dtype is None else dtype
    if result == ms.bool_:
        result = ms.int64
    work = result if result in (ms.float16, ms.float32, ms.float64) else ms.float32
    x = ops.cast(x, work)
    rank = len(x.shape)
    axis = axis % rank
    size = x.shape[axis]
    index = ops.arange(size)
    upper = ops.cast(ops.expand_dims(index, 1) <= ops.expand_dims(index, 0), work)
    forward, back = _last_axis_order(rank, axis)
    y = ops.matmul(ops.transpose(x, forward), upper)
    return ops.cast(ops.transpose(y, back), result)


def _linear_matrix(size_in, size_out, align_corners, dtype):
    """(size_out, size_in) weights of 1-D linear interpolation (clamped at the edges)."""
    out = ops.cast(ops.arange(size_out), ms.float32)
    if align_corners:
        if size_out > 1:
            source = out * ((size_in - 1) / (size_out - 1))
        else:
            source = out * 0.0
    else:
        source = ops.maximum((out + 0.5) * (size_in / size_out) - 0.5, 0.0)
    low = ops.floor(source)
    weight = source - low
    high = ops.minimum(low + 1.0, size_in - 1.0)
    columns = ops.expand_dims(ops.cast(ops.arange(size_in), ms.float32), 0)
    take_low = ops.cast(ops.equal(columns, ops.expand_dims(low, 1)), ms.float32)
    take_high = ops.cast(ops.equal(columns, ops.expand_dims(high, 1)), ms.float32)
    matrix = ops.expand_dims(1.0 - weight, 1) * take_low + ops.expand_dims(weight, 1) * take_high
    return ops.cast(matrix, dtype)


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """``ops.interpolate``; bilinear resizing of a 4-D input to a given ``size`` as two
    matrix products, everything else as ``ops.interpolate`` itself."""
    if mode == "bilinear" and size is not None and scale_factor is None and len(x.shape) == 4:
        if isinstance(size, int):
            size = (size, size)
        corners = align_corners is True
        height, width = x.shape[2], x.shape[3]
        across = ops.transpose(_linear_matrix(width, size[1], corners, x.dtype), (1, 0))
        down = ops.transpose(_linear_matrix(height, size[0], corners, x.dtype), (1, 0))
        y = ops.matmul(x, across)
        y = ops.matmul(ops.transpose(y, (0, 1, 3, 2)), down)
        return ops.transpose(y, (0, 1, 3, 2))
    return ops.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)


@ms.jit_class
class L2Normalize:
    """``ops.L2Normalize`` made in a method: ``x / sqrt(max(sum(x * x, axis), epsilon))``."""

    def __init__(self, axis=0, epsilon=1e-4):
        self.axis = axis
        self.epsilon = epsilon

    def __call__(self, x):
        squares = ops.sum(x * x, self.axis, keepdim=True)
        return x / ops.sqrt(ops.maximum(squares, self.epsilon))
