"""Weights as an artefact stores them, and a check that they are the reference's weights.

MindIR parameters are read from the file's protobuf (names are ``graph:param.path``), ONNX
initializers with ``onnx.numpy_helper``, checkpoints with MindSpore. An encrypted MindIR
cannot be read: its weights are then unknown (None).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

_MINDIR_DTYPES = {"FLOAT": np.float32, "FLOAT16": np.float16, "DOUBLE": np.float64,
                  "FLOAT64": np.float64, "INT32": np.int32, "INT64": np.int64,
                  "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "BOOL": np.bool_}


def read_mindir_weights(path: str | Path) -> Optional[dict]:
    """name -> array of every stored parameter; None when the file cannot be parsed."""
    from mindspore.train import mind_ir_pb2

    model = mind_ir_pb2.ModelProto()
    try:
        model.ParseFromString(Path(path).read_bytes())
    except Exception:  # encrypted or not a MindIR
        return None
    names = mind_ir_pb2.TensorProto.DataType
    weights = {}
    for tensor in model.graph.parameter:
        dtype = _MINDIR_DTYPES.get(names.Name(tensor.data_type))
        if dtype is None or not tensor.raw_data:
            continue
        name = tensor.name.split(":", 1)[-1]
        weights[name] = np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tuple(tensor.dims))
    return weights or None


def read_onnx_weights(path: str | Path) -> Optional[dict]:
    try:
        import onnx
        from onnx import numpy_helper
    except ModuleNotFoundError:
        return None
    try:
        model = onnx.load(str(path))
    except Exception:
        return None
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer} or None


def read_checkpoint_weights(path: str | Path) -> dict:
    from amptool.train.checkpoint import read_checkpoint

    return {name: param.asnumpy() for name, param in read_checkpoint(path).items()
            if hasattr(param, "asnumpy")}


def read_artefact_weights(path: str | Path, fmt: str, encrypted: bool = False) -> Optional[dict]:
    """The weights stored in an artefact, or None where they cannot be read."""
    if encrypted:
        return None
    if fmt == "MINDIR":
        return read_mindir_weights(path)
    if fmt == "ONNX":
        return read_onnx_weights(path)
    return None


def compare_weights(reference: dict, candidate: dict, names: list) -> list:
    """Parameters (in ``names`` order) whose candidate values are not the reference's.

    The reference value is first rounded to the candidate's dtype, so an exact fp16
    cast of fp32 weights compares equal; anything past half an fp16 ulp is a mismatch.
    """
    bad = []
    for name in names:
        if name not in reference or name not in candidate:
            continue
        ref, cand = reference[name], candidate[name]
        if ref.shape != cand.shape:
            bad.append({"name": name, "mismatched": int(cand.size), "size": int(cand.size),
                        "max_abs": float("inf"), "note": f"shape {cand.shape} vs {ref.shape}"})
            continue
        expected = ref.astype(cand.dtype).astype(np.float64)
        got = cand.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(got - expected)
            off = ~(diff <= 1e-3 * np.abs(expected) + 1e-7)
        count = int(off.sum())
        if count:
            finite = diff[np.isfinite(diff)]
            bad.append({"name": name, "mismatched": count, "size": int(cand.size),
                        "max_abs": float(finite.max()) if finite.size else float("inf"),
                        "note": ""})
    return bad
