"""Pieces shared by the format modules: dtype names, shape lists, native-log silencing."""
from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np

from amptool.errors import UsageError

# MindIR and ONNX share these TensorProto data type codes.
PROTO_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                13: "uint64", 16: "bfloat16", 17: "float64"}
FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


def np_dtype(name: str):
    if name == "bfloat16":
        raise ValueError("numpy has no bfloat16")
    return np.dtype(name)


def io_entry(name: str, shape, dtype: str) -> dict:
    """One input/output description: dynamic dims are -1."""
    return {"name": name, "shape": [int(d) if int(d) >= 0 else -1 for d in shape], "dtype": dtype}


def is_weight(dtype: str, shape) -> bool:
    """A stored tensor counts as a parameter when it is floating point and not a scalar."""
    return dtype in FLOAT_DTYPES and len(shape) >= 1


def unreadable(path, fmt: str, reason: str) -> UsageError:
    """The one error for a file that is not a readable ``fmt`` artefact."""
    article = "an" if fmt[0] in "AEIOU" else "a"
    return UsageError(f"{path} cannot be read as {fmt} ({reason})",
                      f"it is truncated or not {article} {fmt} file: export it again")


def require_graph_io(model, path, fmt: str):
    """``model`` when its graph declares inputs and outputs, else ``unreadable``."""
    if not model.graph.input or not model.graph.output:
        raise unreadable(path, fmt, "no graph inputs/outputs")
    return model


@contextlib.contextmanager
def quiet_native_stderr():
    """Hide MindSpore's C++ log lines (fd 2) for the duration; our own error says it better."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
