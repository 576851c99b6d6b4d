"""A MindIR file as a ``DtypeGraph``: read without its weights' bytes
(``amptool.artefact.mindir.read_graph``).

Every node records its output's dtype (its ``shape`` attribute: a tensor, or a tuple of
them) and its scope (``domain``: ``Default/net-Net/conv1-Conv2d/Conv2D-op0``). A Cast reads
its target as a constant holding MindSpore's type id. The casts mixed precision inserts at
a cell's input are named ``C_...`` and carry that cell's scope; a cast written in code
(``ops.cast``, ``Tensor.astype``) may carry the scope of wherever its function was first
compiled, so the audit trusts the scope of the former only.
"""
from __future__ import annotations

from amptool.artefact.common import PROTO_DTYPES, is_weight
from amptool.artefact.mindir import read_graph

from .graph import STRUCTURAL, DtypeGraph, Node, owner, scope_cell

TYPE_IDS = {42: "float16", 43: "float32", 44: "float64", 45: "bfloat16", 30: "bool",
            32: "int8", 33: "int16", 34: "int32", 35: "int64", 37: "uint8"}
"""MindSpore's type ids (``typing.type_to_type_id``), as a Cast's target holds them."""
TENSORS, TUPLE = 19, 20
"""``AttributeProto.type``: a tensor (list), a tuple."""


def read(path, key: bytes | None = None, wrapped: bool = True) -> DtypeGraph:
    """The graph of the MindIR at ``path`` (``key``: an encrypted one's); ``wrapped``: the
    network was traced in amptool's output wrapper, whose scope is left out of cell paths."""
    model = read_graph(path, key)
    graph = DtypeGraph("MINDIR")
    for param in model.graph.parameter:
        dtype = PROTO_DTYPES.get(param.data_type, "unknown")
        name = _short(param.name)
        graph.dtypes[param.name] = dtype
        if is_weight(dtype, list(param.dims)):
            graph.weights.append((name, dtype, owner(name)))
    graph.inputs = _io(model.graph.input, graph.dtypes)
    graphs = [model.graph, *model.functions]
    type_ids: dict = {}  # constant name -> the dtype it names
    for node in (n for sub in graphs for n in sub.node if n.op_type == "Constant"):
        _constant(graph, node, type_ids)
    for node in (n for sub in graphs for n in sub.node if n.op_type != "Constant"):
        _add(graph, node, wrapped, type_ids)
    graph.outputs = _io(model.graph.output, graph.dtypes)
    return graph


def _short(name: str) -> str:
    """A parameter's name without its graph's prefix: ``12_net:fc.weight`` -> ``fc.weight``."""
    return name.rsplit(":", 1)[-1]


def _local(name: str) -> str:
    """A node's name without its graph's prefix and index: ``12_net:C_CNode_61:1`` ->
    ``C_CNode_61``."""
    parts = name.split(":")
    return parts[1] if len(parts) > 2 else parts[-1]


def _io(values, dtypes: dict) -> list:
    rows = []
    for value in values:
        tensors = list(value.tensor)
        if not tensors and value.HasField("attr_info"):
            tensors = [v.tensors[0] for v in value.attr_info.values if v.tensors]
        for tensor in tensors:
            dtype = PROTO_DTYPES.get(tensor.data_type, "unknown")
            dtypes.setdefault(value.name, dtype)
            rows.append((value.name, dtype))
    return rows


def _add(graph: DtypeGraph, node, wrapped: bool, type_ids: dict) -> None:
    op = _op(node.op_type)
    dtype = _output_dtype(node)
    for out in node.output:
        if dtype is not None:
            graph.dtypes[out] = dtype
    item = Node(node.domain or node.name, op, list(node.input), list(node.output))
    if op == "Cast" and len(node.input) == 2:
        item.target = type_ids.get(node.input[1])
        item.amp_cast = _local(node.name).startswith("C_")
    item.scope_cell = scope_cell(node.domain, wrapped)
    if op not in STRUCTURAL and (op != "Cast" or item.amp_cast):
        item.cell = item.scope_cell
    graph.nodes.append(item)


def _op(op_type: str) -> str:
    """``REF::Conv2D:7`` -> ``Conv2D``."""
    if op_type.startswith("REF::"):
        return op_type[5:].rsplit(":", 1)[0]
    return op_type


def _constant(graph: DtypeGraph, node, type_ids: dict) -> None:
    """A constant tensor's dtype, or the dtype a constant type id names (a Cast's target)."""
    for attr in node.attribute:
        if attr.name != "value":
            continue
        if attr.type == TENSORS and attr.tensors:
            graph.dtypes[node.output[0]] = PROTO_DTYPES.get(attr.tensors[0].data_type, "unknown")
        elif attr.i in TYPE_IDS:
            type_ids[node.output[0]] = TYPE_IDS[attr.i]


def _output_dtype(node):
    """The dtype a node records for its (first) output; None for a monad or nothing."""
    for attr in node.attribute:
        if attr.name != "shape":
            continue
        if attr.type == TENSORS and attr.tensors:
            return PROTO_DTYPES.get(attr.tensors[0].data_type, "unknown")
        if attr.type == TUPLE and attr.values and attr.values[0].tensors:
            return PROTO_DTYPES.get(attr.values[0].tensors[0].data_type, "unknown")
    return None
