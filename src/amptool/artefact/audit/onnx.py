"""An ONNX file as a ``DtypeGraph``: read without its initializers' bytes.

An ONNX graph records dtypes only where tensors enter it (inputs, initializers, constants)
and at its Casts; every other tensor's dtype follows from the operators' type rules, which
the reader applies in the graph's order. ``value_info`` and the graph outputs' declared
types are kept apart (``declared``) and checked against what the graph computes.

MindSpore's ONNX exporter names some nodes after their scope (``5-Default/net-Net/norm-
LayerNorm/...``) and others by a number and operator only (``3Conv``); the latter belong to
the cell whose weights they read (``conv1.weight``), or to no known cell. A Cast's name is
not trusted to name its cell: the exporter names a cast written in code after wherever its
function was first compiled.
"""
from __future__ import annotations

from typing import List, Optional

from amptool.artefact.common import PROTO_DTYPES, is_weight, require_graph_io, unreadable
from amptool.artefact.onnx import require_onnx
from amptool.errors import UsageError, first_line
from amptool.files.protowire import without_tensor_bytes

from .graph import DtypeGraph, Node, owner, scope_cell, widest

GRAPH, INITIALIZER, RAW_DATA = 7, 5, 9
"""Field numbers: ``ModelProto.graph``, ``GraphProto.initializer``, ``TensorProto.raw_data``."""
NOT_FLOAT = {"Shape": "int64", "Size": "int64", "NonZero": "int64", "ArgMax": "int64",
             "ArgMin": "int64", "Equal": "bool", "Greater": "bool", "Less": "bool",
             "GreaterOrEqual": "bool", "LessOrEqual": "bool", "Not": "bool", "And": "bool",
             "Or": "bool", "Xor": "bool", "IsNaN": "bool", "IsInf": "bool"}
"""Operators whose output is never a float, whatever they read."""
FROM_INPUT = {"Where": 1, "CastLike": 1, "OneHot": 2}
"""Operators whose output has the dtype of another input than the first."""


def read(path, wrapped: bool = True) -> DtypeGraph:
    """The graph of the ONNX file at ``path``; ``wrapped`` as in ``audit.mindir.read``."""
    model = _lean_model(path)
    graph = DtypeGraph("ONNX")
    params = set()
    for tensor in model.graph.initializer:
        dtype = PROTO_DTYPES.get(tensor.data_type, "unknown")
        graph.dtypes[tensor.name] = dtype
        if _parameter(tensor.name) and is_weight(dtype, list(tensor.dims)):
            graph.weights.append((tensor.name, dtype, owner(tensor.name)))
            params.add(tensor.name)
    for value in model.graph.input:
        if value.name not in graph.dtypes:
            graph.dtypes[value.name] = _elem(value)
            graph.inputs.append((value.name, graph.dtypes[value.name]))
    for value in model.graph.value_info:
        graph.declared[value.name] = _elem(value)
    cast_from: dict = {}  # a Cast's output -> what it read
    for node in model.graph.node:
        graph.nodes.append(_node(graph, node, params, wrapped, cast_from))
    for value in model.graph.output:
        graph.declared[value.name] = _elem(value)
        graph.outputs.append((value.name, _elem(value)))
    return graph


def _lean_model(path):
    """The ``ModelProto`` at ``path`` with its initializers' raw bytes left out."""
    import mmap
    from pathlib import Path

    onnx = require_onnx()
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise UsageError(f"ONNX file {path} does not exist or is empty", "check the path")
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            lean, _ = without_tensor_bytes(data, GRAPH, INITIALIZER, RAW_DATA)
        model = onnx.ModelProto()
        model.ParseFromString(lean)
    except Exception as exc:  # protobuf's DecodeError, a WireError
        raise unreadable(path, "ONNX", first_line(exc)) from None
    return require_graph_io(model, path, "ONNX")


def _parameter(name: str) -> bool:
    """Whether an initializer is a network's parameter (``fc.weight``), not a constant the
    exporter made (named after a node's scope)."""
    return "/" not in name and not name.split("-", 1)[0].isdigit()


def _elem(value) -> str:
    return PROTO_DTYPES.get(value.type.tensor_type.elem_type, "unknown")


def _node(graph: DtypeGraph, node, params: set, wrapped: bool, cast_from: dict) -> Node:
    from onnx import helper

    attrs = {a.name: a for a in node.attribute}
    item = Node(node.name or node.output[0], node.op_type, list(node.input), list(node.output))
    ins = [graph.dtypes.get(name) for name in node.input if name]
    dtypes: List[Optional[str]]
    if node.op_type == "Cast":
        item.target = PROTO_DTYPES.get(helper.get_attribute_value(attrs["to"]), "unknown")
        dtypes = [item.target]
    elif node.op_type == "Constant" and "value" in attrs:
        dtypes = [PROTO_DTYPES.get(attrs["value"].t.data_type, "unknown")]
    elif node.op_type == "ConstantOfShape":
        dtypes = [PROTO_DTYPES.get(attrs["value"].t.data_type, "unknown")
                  if "value" in attrs else "float32"]
    elif node.op_type in NOT_FLOAT:
        dtypes = [NOT_FLOAT[node.op_type]]
    elif node.op_type in ("TopK", "MaxPool"):
        dtypes = [ins[0] if ins else None, "int64"]
    elif node.op_type == "Concat":
        dtypes = [widest(ins) or (ins[0] if ins else None)]
    else:
        at = FROM_INPUT.get(node.op_type, 0)
        source = node.input[at] if len(node.input) > at else ""
        dtypes = [graph.dtypes.get(source)]
    for i, out in enumerate(node.output):
        dtype = dtypes[min(i, len(dtypes) - 1)]
        if out and dtype is not None:
            graph.dtypes[out] = dtype
    item.scope_cell = scope_cell(node.name, wrapped)
    if node.op_type == "Cast":
        if node.input:
            cast_from[node.output[0]] = node.input[0]
        if node.input and node.input[0] in params:  # a weight cast: the weight's cell
            item.cell = owner(node.input[0])
    elif node.op_type != "Constant":
        item.cell = item.scope_cell
        if item.cell is None:
            read = (cast_from.get(name, name) for name in node.input)  # through a Cast
            item.cell = next((owner(name) for name in read if name in params), None)
    return item
