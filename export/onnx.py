"""ONNX: write with ``mindspore.onnx.export`` (opset 11), check with ``onnx.checker``.

Same functions as ``mindir.py``. Needs the ``onnx`` extra (onnx + onnxruntime).
"""
from __future__ import annotations

import re
from pathlib import Path

from amptool.errors import UsageError

from .common import PROTO_DTYPES, first_line, io_entry, is_weight

FORMAT = "ONNX"
SUFFIX = ".onnx"
INSTALL_HINT = "install the onnx extra: pip install 'amptool[onnx]'"
_UNSUPPORTED = re.compile(r"Exporting (\S+) operator is not yet supported")


def require_onnx():
    """Import onnx, or one line naming the extra to install."""
    try:
        import onnx
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "onnx"
        raise UsageError(f"ONNX needs the '{missing}' package, which is not installed",
                         INSTALL_HINT) from None
    return onnx


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


def is_encrypted(path) -> bool:
    return False


def read_model(path):
    onnx = require_onnx()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"ONNX file {path} does not exist", "check the path")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError and friends
        raise UsageError(f"{path} cannot be read as ONNX ({first_line(exc)})",
                         "it is truncated or not an ONNX file: export it again") from None
    if not model.graph.input or not model.graph.output:
        raise UsageError(f"{path} cannot be read as ONNX (no graph inputs/outputs)",
                         "it is truncated or not an ONNX file: export it again")
    return model


def _io(values, initializers) -> list:
    rows = []
    for value in values:
        if value.name in initializers:
            continue
        ttype = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim]
        rows.append(io_entry(value.name, shape, PROTO_DTYPES.get(ttype.elem_type, "unknown")))
    return rows


def describe(path, key: bytes | None = None) -> dict:
    model = read_model(path)
    inits = {t.name: t for t in model.graph.initializer}
    weights = {}
    for name, tensor in inits.items():
        dtype = PROTO_DTYPES.get(tensor.data_type, "unknown")
        shape = [int(d) for d in tensor.dims]
        if is_weight(dtype, shape):
            weights[name] = (dtype, shape)
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    return {"format": FORMAT, "inputs": _io(model.graph.input, inits),
            "outputs": _io(model.graph.output, inits), "weights": weights,
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "opset": opsets.get("ai.onnx")}


def read_weights(path, key: bytes | None = None) -> dict:
    from onnx import numpy_helper

    model = read_model(path)
    out = {}
    for tensor in model.graph.initializer:
        dtype = PROTO_DTYPES.get(tensor.data_type, "unknown")
        if is_weight(dtype, list(tensor.dims)) and dtype != "bfloat16":
            out[tensor.name] = numpy_helper.to_array(tensor)
    return out


def load_session(path):
    """An onnxruntime session on the CPU."""
    require_onnx()
    import onnxruntime as ort

    read_model(path)  # a clear error for a missing or corrupt file
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=options,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise UsageError(f"onnxruntime cannot load {path} ({first_line(exc)})",
                         "export it again") from None
