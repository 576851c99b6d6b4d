"""ONNX: written with ``mindspore.onnx.export`` (opset 11), checked with ``onnx.checker``
and run in onnxruntime before it counts as written.

Same writer functions as ``mindir.py``. Needs the ``onnx`` extra (onnx + onnxruntime).
``write`` rewrites the network it is given (``onnx_compat``): pass an export-only copy.
"""
from __future__ import annotations

import re
from pathlib import Path

from amptool.artefact.files import ONNX_DATA_SUFFIX
from amptool.artefact.onnx import require_onnx
from amptool.errors import UsageError, first_line
from amptool.files.protowire import delimited_head, without_tensor_bytes
from amptool.network.models import flat_outputs
from amptool.runtime.device import execution_mode, release_compiled

from .onnx_check import (OnnxUnsupported, cast_mixed_inputs, check_executes, drop_noop_casts,
                         rename_outputs, unpromote_scalars)
from .onnx_compat import rewrite_for_onnx
from .onnx_locate import locate_operator
from .split import mindspore_limit, onnx_apart_bytes

_UNSUPPORTED = re.compile(r"Exporting (\S+) operator is not yet supported"
                          r"|the (\S+) operator in your model is not support")

__all__ = ["OnnxUnsupported", "check_available", "write"]


def check_available(device: str) -> None:
    require_onnx()


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False,
          release=None, entries: dict | None = None):
    """Export ``net`` to ``path`` (in a folder of its own: weights past 1 GiB, where a MINDIR
    is split too, go to ``<name>.onnx.data`` beside it); inputs are named input0..,
    outputs output0..; ``entries`` (the provenance) go into ``metadata_props``; returns
    (``path``, None): the manifest's facts are read from the file. ``release``, when given,
    is called once MindSpore has written the file: what follows (the outputs' names, the
    weights moved apart, the checks) reads the file, not the network."""
    import mindspore.onnx.onnx_export as onnx_export

    onnx = require_onnx()
    if key is not None:
        raise UsageError("ONNX artefacts cannot be encrypted", "encrypt MINDIR only")
    path = Path(path)
    reference = _reference(net, inputs)
    rewrite_for_onnx(net)
    with mindspore_limit(onnx_export, "PROTO_LIMIT_SIZE", onnx_apart_bytes()):
        _export(net, inputs, path, dynamic_batch)
    if release is not None:  # the network's weights go before the file's are loaded
        release()
        release_compiled(graph=False)
    model, spans = _read_lean(path)  # the graph without its weights' bytes
    rename_outputs(model)
    unpromote_scalars(model)
    cast_mixed_inputs(model)
    drop_noop_casts(model)
    for name, value in (entries or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = name, value
    if spans is None:  # weights written apart: the graph alone is the file
        pack_external_data(model, path)
        onnx.save(model, str(path))
    else:
        _write_lean(model, spans, path)
    try:
        onnx.checker.check_model(str(path))  # by path: external data and > 2 GiB checked too
    except onnx.checker.ValidationError as exc:
        raise OnnxUnsupported(f"the exported ONNX graph fails onnx.checker ({first_line(exc)})",
                              "export MINDIR instead") from None
    check_executes(path, reference)
    return path, None


GRAPH, INITIALIZER, RAW_DATA = 7, 5, 9
"""Field numbers: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data."""


def _read_lean(path: Path) -> tuple:
    """(the model at ``path`` with its initializers' raw bytes left out, the (start, end) of
    each initializer field in the file); spans None when the weights are external data (the
    file is then the graph alone, read whole). Parsing a one-file model whole under the
    pure-python protobuf amptool selects costs about five times the file; this reads only
    the fields' keys and lengths, and parses what is not weight bytes."""
    import mmap

    import onnx
    from onnx import TensorProto

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        lean, tensors = without_tensor_bytes(data, GRAPH, INITIALIZER, RAW_DATA)
    model = onnx.ModelProto()
    model.ParseFromString(lean)
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        return onnx.load(str(path), load_external_data=False), None
    return model, [(start, end) for start, end, _ in tensors]


def _write_lean(model, spans: list, path: Path) -> None:
    """Write ``model`` (its initializers without their bytes) to ``path``, its initializers
    copied whole from the file's ``spans`` in their place: the graph's other fields first,
    then the initializers (protobuf reads fields in any order)."""
    import os

    if len(model.graph.initializer) != len(spans):
        raise RuntimeError("the ONNX graph's initializers changed while it was rewritten")
    graph = type(model.graph)()
    graph.CopyFrom(model.graph)
    del graph.initializer[:]
    rest = type(model)()
    rest.CopyFrom(model)
    rest.ClearField("graph")
    graph_bytes = graph.SerializeToString()
    tmp = path.with_name(path.name + ".lean")
    with open(path, "rb") as src, open(tmp, "wb") as out:
        out.write(rest.SerializeToString())
        out.write(delimited_head(GRAPH, len(graph_bytes) + sum(b - a for a, b in spans)))
        out.write(graph_bytes)
        for start, end in spans:
            src.seek(start)
            _copy_exactly(src, out, end - start, path)
    os.replace(tmp, path)


def pack_external_data(model, path: Path, align: int = 4096) -> Path | None:
    """Move the weights MindSpore wrote apart (one file a parameter, named after it) into
    ``<name>.onnx.data`` beside ``path``, each at an offset aligned for memory mapping, and
    point the graph at it; each source file is removed once copied. None when the graph
    holds its weights itself."""
    import shutil

    from onnx import TensorProto

    external = [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    if not external:
        return None
    folder = path.parent.resolve()
    target = path.with_name(path.name + ONNX_DATA_SUFFIX)
    infos = [{e.key: e.value for e in t.external_data} for t in external]
    users: dict = {}
    for info in infos:
        src = (folder / info["location"]).resolve()
        if folder not in src.parents or not src.is_file():
            raise OnnxUnsupported(f"MindSpore's ONNX exporter named external data "
                                  f"{info['location']!r} that is not a file beside the graph",
                                  "export MINDIR instead")
        users[src] = users.get(src, 0) + 1
    with open(target, "wb") as out:
        for tensor, info in zip(external, infos):
            src = (folder / info["location"]).resolve()
            out.write(bytes(-out.tell() % align))
            start = out.tell()
            with open(src, "rb") as fh:
                fh.seek(int(info.get("offset", 0)))
                if "length" in info:
                    _copy_exactly(fh, out, int(info["length"]), src)
                else:
                    shutil.copyfileobj(fh, out, 1 << 24)
            del tensor.external_data[:]
            for key, value in (("location", target.name), ("offset", str(start)),
                               ("length", str(out.tell() - start))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            users[src] -= 1
            if not users[src]:
                src.unlink()
    return target


def _copy_exactly(src, out, length: int, name) -> None:
    left = length
    while left:
        chunk = src.read(min(left, 1 << 24))
        if not chunk:
            raise OnnxUnsupported(f"MindSpore's external data file {name} is short",
                                  "export MINDIR instead")
        out.write(chunk)
        left -= len(chunk)


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
    if not Path(path).is_file():  # its exporter logs an I/O error and removes the file
        raise UsageError(f"MindSpore's ONNX exporter could not write {Path(path).name} (an "
                         "I/O error it logs and does not raise)",
                         "check free space and write permission in the output folder")


def _in_converter(exc: BaseException) -> bool:
    """Whether ``exc`` came from MindSpore's graph-to-ONNX conversion (not its compile)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_get_onnx_func_graph_proto":
            return True
        tb = tb.tb_next
    return False


def _unsupported(net, op: str) -> OnnxUnsupported:
    if getattr(net, "wraps_network", False):  # cast_outputs' wrapper: name the user's cells
        net = net.net
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
    tensors = [ms.Tensor(a) for a in arrays]
    try:  # one batch: run eagerly, not worth a graph compile of its own
        with execution_mode(graph=False):
            out = net(*tensors)
    except Exception:  # a network that runs in GRAPH_MODE only computes it there
        out = net(*tensors)
    return arrays, [o.asnumpy() for o in flat_outputs(out)]
