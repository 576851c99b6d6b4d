"""ONNX: written with ``mindspore.onnx.export`` (opset 11), checked with ``onnx.checker``
and run in onnxruntime before it counts as written.

Same writer functions as ``mindir.py``. Needs the ``onnx`` extra (onnx + onnxruntime).
``write`` rewrites the network it is given (``onnx_compat``): pass an export-only copy.
"""
from __future__ import annotations

import re
from pathlib import Path

from amptool.artefact.onnx import require_onnx
from amptool.errors import UsageError, first_line

from .onnx_check import OnnxUnsupported

_UNSUPPORTED = re.compile(r"Exporting (\S+) operator is not yet supported"
                          r"|the (\S+) operator in your model is not support")

__all__ = ["OnnxUnsupported", "check_available", "write"]


def check_available(device: str) -> None:
    require_onnx()


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False) -> None:
    """Export ``net`` to ``path``; inputs are named input0.., outputs output0.."""
    from .onnx_check import cast_mixed_inputs, check_runs, rename_outputs
    from .onnx_compat import rewrite_for_onnx

    onnx = require_onnx()
    if key is not None:
        raise UsageError("ONNX artefacts cannot be encrypted", "encrypt MINDIR only")
    reference = _reference(net, inputs)
    rewrite_for_onnx(net)
    _export(net, inputs, path, dynamic_batch)
    model = onnx.load(str(path))
    rename_outputs(model)
    cast_mixed_inputs(model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise OnnxUnsupported(f"the exported ONNX graph fails onnx.checker ({first_line(exc)})",
                              "export MINDIR instead") from None
    onnx.save(model, str(path))
    check_runs(path, reference)


def _export(net, inputs, path, dynamic_batch: bool) -> None:
    import mindspore as ms

    names = [f"input{i}" for i in range(len(inputs))]
    axes = {}  # every dimension traced as None: the batch, and any the signature leaves open
    for name, tensor in zip(names, inputs):
        open_dims = {i: "batch" if i == 0 else f"{name}_dim{i}"
                     for i, d in enumerate(tensor.shape) if d < 0}
        if open_dims:
            axes[name] = open_dims
    try:
        ms.onnx.export(net, *inputs, file_name=str(path), input_names=names,
                       dynamic_axes=axes or None)
    except RuntimeError as exc:
        match = _UNSUPPORTED.search(str(exc))
        if match:
            raise _unsupported(net, match.group(1) or match.group(2)) from None
        if not _in_converter(exc):  # the network did not compile: not an ONNX matter
            raise
        raise OnnxUnsupported(f"MindSpore's ONNX exporter failed ({first_line(exc)})",
                              "export MINDIR instead" + (", or export ONNX with a fixed batch"
                                                         if dynamic_batch else "")) from None
    if not Path(path).is_file():
        raise UsageError(f"MindSpore did not write {path}", "check free disk space and retry")


def _in_converter(exc: BaseException) -> bool:
    """Whether ``exc`` came from MindSpore's graph-to-ONNX conversion (not its compile)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_get_onnx_func_graph_proto":
            return True
        tb = tb.tb_next
    return False


def _unsupported(net, op: str) -> OnnxUnsupported:
    from .onnx_compat import locate_operator

    where = locate_operator(net, op)
    return OnnxUnsupported(f"MindSpore cannot convert operator {op} to ONNX"
                           + (f" (used in cell {where})" if where else ""),
                           "export MINDIR instead, or replace that operator in the model")


def _reference(net, inputs):
    """(inputs, outputs) of the fp32 network on a seeded batch (random floats, zero integer
    ids); None when the network or a float input is not fp32 (fp16 graphs are judged by
    the parity stage)."""
    import mindspore as ms
    import numpy as np

    low = (ms.float16, ms.bfloat16)
    if any(t.dtype in low for t in inputs) or any(p.dtype in low for p in net.get_parameters()):
        return None
    rng = np.random.default_rng(0)
    arrays = []
    for t in inputs:
        shape = [d if d > 0 else 2 for d in t.shape]
        if t.dtype == ms.float32:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        else:
            arrays.append(np.zeros(shape, ms.dtype_to_nptype(t.dtype)))
    out = net(*[ms.Tensor(a) for a in arrays])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return arrays, [o.asnumpy() for o in outs]
