"""ONNX: written with ``mindspore.onnx.export`` (opset 11), checked with ``onnx.checker``.

Same writer functions as ``mindir.py``. Needs the ``onnx`` extra (onnx + onnxruntime).
"""
from __future__ import annotations

import re
from pathlib import Path

from amptool.artefact.common import first_line
from amptool.artefact.onnx import require_onnx
from amptool.errors import UsageError

_UNSUPPORTED = re.compile(r"Exporting (\S+) operator is not yet supported")


def check_available(device: str) -> None:
    require_onnx()


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False) -> None:
    """Export ``net`` to ``path``; inputs are named input0.., outputs output0.."""
    import mindspore as ms

    onnx = require_onnx()
    if key is not None:
        raise UsageError("ONNX artefacts cannot be encrypted", "encrypt MINDIR only")
    names = [f"input{i}" for i in range(len(inputs))]
    axes = {name: {0: "batch"} for name in names} if dynamic_batch else None
    try:
        ms.onnx.export(net, *inputs, file_name=str(path), input_names=names, dynamic_axes=axes)
    except RuntimeError as exc:
        match = _UNSUPPORTED.search(str(exc))
        if match:
            raise UsageError(f"MindSpore cannot convert operator {match.group(1)} to ONNX",
                             "export MINDIR instead, or replace that operator in the model") from None
        raise
    if not Path(path).is_file():
        raise UsageError(f"MindSpore did not write {path}", "check free disk space and retry")
    model = onnx.load(str(path))
    _rename_outputs(model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise UsageError(f"the exported ONNX graph fails onnx.checker ({first_line(exc)})",
                         "export MINDIR instead") from None
    onnx.save(model, str(path))


def _rename_outputs(model) -> None:
    """MindSpore names outputs after internal nodes; call them output0, output1, ..."""
    for i, out in enumerate(model.graph.output):
        old, new = out.name, f"output{i}"
        if old == new:
            continue
        for node in model.graph.node:
            for j, name in enumerate(node.output):
                if name == old:
                    node.output[j] = new
            for j, name in enumerate(node.input):
                if name == old:
                    node.input[j] = new
        out.name = new
