"""MindIR files: read with the proto (inputs, outputs, weights) or load with ``mindspore.load``.

``describe`` and ``read_weights`` parse the message without its parameters' raw bytes (the
fields are walked in the mapped file and the rest re-assembled for the parser), and
``read_weights`` copies each parameter's bytes out on its own: neither the file nor a parsed
copy of it is held whole (the pure-python protobuf a .ckpt needs copies every bytes field).

Every reader module (``mindir``, ``onnx``, ``air``) exposes the same functions:
``is_encrypted(path)``, ``describe(path, key=None)`` and ``read_weights(path, key=None)``.
"""
from __future__ import annotations

import contextlib
import mmap
from pathlib import Path

import numpy as np

from amptool.artefact.common import (PROTO_DTYPES, io_entry, is_weight, np_dtype,
                                     quiet_native_stderr, require_graph_io, unreadable)
from amptool.errors import UsageError, first_line
from amptool.files.protowire import WireError, without_tensor_bytes

FORMAT = "MINDIR"
SUFFIX = ".mindir"
ENC_MODE = "AES-GCM"


def is_encrypted(path) -> bool:
    from mindspore._c_expression import _is_cipher_file

    with quiet_native_stderr():
        return bool(_is_cipher_file(str(path)))


def _read_bytes(path, key: bytes | None) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"MindIR file {path} does not exist", "check the path")
    if not is_encrypted(path):
        return path.read_bytes()
    if key is None:
        raise UsageError(f"{path} is an encrypted MindIR",
                         "pass its key with --key-file or the AMPTOOL_MINDIR_KEY variable")
    from mindspore._c_expression import _decrypt

    with quiet_native_stderr():
        data = _decrypt(str(path), key, len(key), ENC_MODE)
    if not data:
        raise UsageError(f"cannot decrypt {path}: wrong key (or the file is corrupt)",
                         "pass the key the artefact was exported with")
    return data


def decrypted_bytes(path, key: bytes | None) -> bytes:
    """The file's bytes, decrypted with ``key`` when it is an encrypted MindIR; one line when
    it is missing, encrypted without a key, or the key is wrong."""
    return _read_bytes(path, key)


def read_model(path, key: bytes | None = None):
    """The MindIR ``ModelProto``, whole; one clear error for a corrupt or truncated file."""
    from google.protobuf.message import DecodeError
    from mindspore.train import mind_ir_pb2

    data = _read_bytes(path, key)
    model = mind_ir_pb2.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise unreadable(path, "MindIR", first_line(exc)) from None
    return require_graph_io(model, path, "MindIR")


GRAPH, PARAMETER, RAW_DATA = 7, 3, 9
"""Field numbers: ``ModelProto.graph``, ``GraphProto.parameter``, ``TensorProto.raw_data``."""


@contextlib.contextmanager
def _opened(path, key: bytes | None):
    """(buffer, file): the file mapped (only the pages the walk reads come in) and open for
    reading the weights' bytes straight into arrays, or the decrypted bytes of an encrypted
    one (file None)."""
    path = Path(path)
    if key is not None or not path.is_file() or path.stat().st_size == 0 or is_encrypted(path):
        yield _read_bytes(path, key), None  # decrypted, or refused in one line
        return
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        yield mapped, fh


def _copy_out(buf, fh, start: int, end: int) -> np.ndarray:
    """``buf[start:end]`` as a uint8 array of its own: read from the file (so that the
    mapped pages never count as this process's memory) or copied from the bytes."""
    if fh is None:
        return np.frombuffer(buf, np.uint8, end - start, start).copy()
    out = np.empty(end - start, np.uint8)
    fh.seek(start)
    if fh.readinto(out.data) != end - start:
        raise WireError("truncated parameter")
    return out


def _read_lean(path, key: bytes | None, weights: bool) -> tuple:
    """(``ModelProto`` without the parameters' raw data, {parameter index: raw bytes as a
    uint8 array} when ``weights``); neither the file nor its parsed copy is held whole."""
    from google.protobuf.message import DecodeError
    from mindspore.train import mind_ir_pb2

    raws = {}
    with _opened(path, key) as (buf, fh):
        try:
            lean, tensors = without_tensor_bytes(buf, GRAPH, PARAMETER, RAW_DATA)
            spans = [raw for _, _, raw in tensors]
            model = mind_ir_pb2.ModelProto()
            model.ParseFromString(lean)
        except (WireError, DecodeError, ValueError, RuntimeError) as exc:
            raise unreadable(path, "MindIR", first_line(exc)) from None
        if weights:
            for index, _, dtype, _, _ in _stored(model):
                span = spans[index] if index < len(spans) else None
                if span is not None and dtype != "bfloat16":
                    raws[index] = _copy_out(buf, fh, *span)
    return require_graph_io(model, path, "MindIR"), raws


def read_graph(path, key: bytes | None = None):
    """The MindIR ``ModelProto`` without its parameters' bytes (names, dtypes and shapes
    kept): the graph, read in about the time its nodes take, whatever the weights weigh."""
    model, _ = _read_lean(path, key, weights=False)
    return model


def _short(name: str) -> str:
    return name.rsplit(":", 1)[-1]


def _tensors(values) -> list:
    """One tensor description (or None) per graph input/output; a tuple output (several
    outputs) is described in ``attr_info`` and expands to one entry per element."""
    out = []
    for value in values:
        if value.tensor:
            out.append(value.tensor[0])
        elif value.HasField("attr_info") and value.attr_info.values:
            out.extend(v.tensors[0] if v.tensors else None for v in value.attr_info.values)
        else:
            out.append(None)
    return out


def _tensor_io(values, prefix: str) -> list:
    rows = []
    for i, tensor in enumerate(_tensors(values)):
        shape = list(tensor.dims) if tensor is not None else []
        dtype = PROTO_DTYPES.get(tensor.data_type, "unknown") if tensor is not None else "unknown"
        rows.append(io_entry(f"{prefix}{i}", shape, dtype))
    return rows


def _stored(model):
    """(index among the parameters, name, dtype, shape, tensor) of every stored
    floating-point parameter."""
    for index, param in enumerate(model.graph.parameter):
        dtype = PROTO_DTYPES.get(param.data_type, "unknown")
        shape = [int(d) for d in param.dims]
        if is_weight(dtype, shape):
            yield index, _short(param.name), dtype, shape, param


def describe(path, key: bytes | None = None) -> dict:
    """Inputs, outputs and stored weights (name -> (dtype, shape)) read from the file (its
    weights' bytes are not read)."""
    model, _ = _read_lean(path, key, weights=False)
    weights = {name: (dtype, shape) for _, name, dtype, shape, _ in _stored(model)}
    return {"format": FORMAT, "inputs": _tensor_io(model.graph.input, "input"),
            "outputs": _tensor_io(model.graph.output, "output"), "weights": weights,
            "producer": f"{model.producer_name} {model.model_version}".strip()}


def read_weights(path, key: bytes | None = None) -> dict:
    """name -> numpy array of every stored floating-point parameter (from the graph file, one
    parameter's bytes at a time, or from the ``<name>_variables/`` files a split graph
    names)."""
    model, raws = _read_lean(path, key, weights=True)
    out = {}
    for index, name, dtype, shape, param in _stored(model):
        if dtype == "bfloat16":
            continue
        raw = (external_bytes(path, param, name) if param.HasField("external_data")
               else raws.pop(index, b""))
        try:
            out[name] = np.frombuffer(raw, dtype=np_dtype(dtype)).reshape(shape)
        except ValueError:
            raise UsageError(f"{path} is corrupt: parameter {name} holds "
                             f"{len(raw)} bytes, not a {dtype} tensor of shape "
                             f"{list(shape)}", "export it again") from None
    return out


def external_bytes(path, param, name: str) -> bytes:
    """The bytes of a parameter a split MindIR keeps in its variables folder (read, not
    mapped: a data file is read-only and holds many parameters)."""
    ext = param.external_data
    folder = Path(path).resolve().parent
    source = (folder / ext.location).resolve()
    if folder not in source.parents or not source.is_file():
        raise UsageError(f"{path} names weights in {ext.location}, which is not beside it",
                         "keep the graph file and its _variables folder together, or export "
                         "it again")
    with open(source, "rb") as fh:
        fh.seek(ext.offset)
        raw = fh.read(ext.length)
    if len(raw) != ext.length:
        raise UsageError(f"{source} is truncated: parameter {name} needs {ext.length} bytes "
                         f"at {ext.offset}, {len(raw)} are there", "export it again")
    return raw


def load_graph(path, key: bytes | None = None):
    """An ``nn.GraphCell`` running the MindIR (decrypting it with ``key``)."""
    import mindspore as ms
    from mindspore import nn

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"MindIR file {path} does not exist", "check the path")
    encrypted = is_encrypted(path)
    if encrypted and key is None:
        raise UsageError(f"{path} is an encrypted MindIR",
                         "pass its key with --key-file or the AMPTOOL_MINDIR_KEY variable")
    key = key if encrypted else None
    kwargs = {"dec_key": key, "dec_mode": ENC_MODE} if key else {}
    try:
        with quiet_native_stderr():
            graph = ms.load(str(path), **kwargs)
    except (RuntimeError, ValueError) as exc:
        if key is not None:
            raise UsageError(f"cannot decrypt {path}: wrong key (or the file is corrupt)",
                             "pass the key the artefact was exported with") from None
        raise UsageError(f"{path} cannot be loaded as MindIR ({first_line(exc)})",
                         "it is truncated or not a MindIR file: export it again") from None
    return nn.GraphCell(graph)
