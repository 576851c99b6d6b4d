"""A graph as the precision audit sees it, whatever its format: nodes with the cell they
belong to, every tensor's dtype, the stored weights and the graph's inputs and outputs.

``amptool.artefact.audit.mindir`` and ``amptool.artefact.audit.onnx`` read a file into a
``DtypeGraph``; ``amptool.artefact.audit.rules`` checks it. Cells are named by their path in
the network (``layer1.conv1``; '' is the network itself), read from the scope MindSpore gives
each node (``Default/net-Net/layer1-ResidualBlock/conv1-Conv2d/Conv2D-op0``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

FLOATS = ("float16", "bfloat16", "float32", "float64")
"""Floating-point dtypes, narrowest first."""
STRUCTURAL = frozenset({"Constant", "Load", "MakeTuple", "TupleGetItem", "UpdateState",
                        "Depend", "Return", "make_tuple", "tuple_getitem", "Identity",
                        "MakeList", "ListGetItem", "Switch", "Partial", "call"})
"""Operators that move or sequence values without computing on them."""
MIXED_OK = frozenset({"Cast", "CastLike", "Resize", "Upsample", "Pow", "BatchNormalization",
                      "LayerNormalization", "Dropout", "QuantizeLinear", "DequantizeLinear",
                      "RoiAlign", "Range"})
"""ONNX operators whose float inputs may differ in dtype (a scale, a ratio, an exponent)."""
WRAPPER = "net-CastOutputs"
"""The scope component of the wrapper amptool traces a network in (its outputs cast)."""


@dataclass
class Node:
    """One operator of the graph."""

    name: str
    """What the audit calls it: its scope (MindIR) or its node name (ONNX)."""
    op: str
    """Its operator: Conv2D, MatMul, Cast, ..."""
    inputs: List[str]
    """The names of the tensors it reads."""
    outputs: List[str]
    """The names of the tensors it writes."""
    cell: Optional[str] = None
    """The path of the cell it belongs to; None where the graph does not say."""
    target: Optional[str] = None
    """A Cast's target dtype."""
    amp_cast: bool = False
    """A Cast that mixed precision inserted at a cell's input (its scope names that cell)."""
    scope_cell: Optional[str] = None
    """The cell its scope names, trusted or not (a cast written in code may carry the
    scope of wherever its function was first compiled)."""


@dataclass
class DtypeGraph:
    """What the audit reads of one artefact."""

    format: str
    """MINDIR or ONNX."""
    nodes: List[Node] = field(default_factory=list)
    """In the graph's order (producers before their consumers)."""
    dtypes: Dict[str, str] = field(default_factory=dict)
    """Tensor name -> the dtype the graph records for it (or the audit derives, ONNX)."""
    declared: Dict[str, str] = field(default_factory=dict)
    """Tensor name -> a dtype the graph declares for it apart from how it is computed
    (ONNX ``value_info``), checked against ``dtypes``."""
    weights: List[Tuple[str, str, str]] = field(default_factory=list)
    """(name, dtype, owning cell's path) of every stored floating-point parameter."""
    inputs: List[Tuple[str, str]] = field(default_factory=list)
    """(name, dtype) of the graph's inputs."""
    outputs: List[Tuple[str, str]] = field(default_factory=list)
    """(name, dtype) of the graph's outputs."""

    def producers(self) -> Dict[str, Node]:
        """Tensor name -> the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs}


def cell_path(components: List[str], wrapped: bool) -> str:
    """The cell path of a scope's cell components (``Default`` and the operator left out):
    ``["net-Net", "layer1-ResidualBlock"]`` -> ``layer1`` when ``wrapped`` (the network
    traced inside amptool's output wrapper, whose child is ``net``)."""
    parts = list(components)
    while parts and parts[0] == WRAPPER:
        parts.pop(0)
    if wrapped and parts and parts[0].startswith("net-"):
        parts.pop(0)
    return ".".join(p.rsplit("-", 1)[0] for p in parts)


def scope_cell(scope: str, wrapped: bool) -> Optional[str]:
    """The cell path of a MindSpore scope (``Default/net-Net/fc-Dense/MatMul-op0``, or an ONNX
    node named after it: ``3-Default/.../MatMul-op0``); None when it is no scope."""
    head, _, rest = scope.partition("/")
    if not rest or not (head == "Default" or head.endswith("-Default")):
        return None
    return cell_path(rest.split("/")[:-1], wrapped)


def owner(param: str) -> str:
    """The path of the cell holding the parameter named ``param`` ('' for the network)."""
    return param.rsplit(".", 1)[0] if "." in param else ""


def widest(dtypes) -> Optional[str]:
    """The widest floating-point dtype of ``dtypes`` (None when there is none)."""
    found = [d for d in dtypes if d in FLOATS]
    return max(found, key=FLOATS.index) if found else None
