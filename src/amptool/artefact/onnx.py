"""ONNX files: read with ``onnx`` (inputs, outputs, weights), run with onnxruntime.

Same reader functions as ``mindir.py``. Needs the ``onnx`` extra (onnx + onnxruntime).
"""
from __future__ import annotations

from pathlib import Path

from amptool.artefact import INSTALL_HINT
from amptool.artefact.common import PROTO_DTYPES, io_entry, is_weight, require_graph_io, unreadable
from amptool.errors import UsageError, first_line

FORMAT = "ONNX"
SUFFIX = ".onnx"


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


def is_encrypted(path) -> bool:
    return False


def read_model(path, external: bool = True):
    """The ONNX model at ``path``; ``external=False`` leaves weights kept in external data
    where they are (their tensors' names, types and shapes are read all the same)."""
    onnx = require_onnx()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"ONNX file {path} does not exist", "check the path")
    try:
        model = onnx.load(str(path), load_external_data=external)
    except Exception as exc:  # protobuf DecodeError and friends
        raise unreadable(path, "ONNX", first_line(exc)) from None
    return require_graph_io(model, path, "ONNX")


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
    model = read_model(path, external=False)  # no weight bytes are needed
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


def new_session(path):
    """An onnxruntime session on the CPU with its log quieted; onnxruntime's own error
    types propagate (callers turn them into one line)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options,
                                providers=["CPUExecutionProvider"])


def load_session(path):
    """An onnxruntime session on the CPU."""
    require_onnx()
    read_model(path, external=False)  # a clear error for a missing or corrupt graph file
    try:
        return new_session(path)
    except Exception as exc:
        raise UsageError(f"onnxruntime cannot load {path} ({first_line(exc)})",
                         "export it again") from None
