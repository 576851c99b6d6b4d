"""The checks of the precision audit, on a ``DtypeGraph`` and the policy its artefact was
built under (``AuditPolicy``). Each finding names the node and the cell.

Errors (the graph contradicts its policy, or itself):

- ``demoted``: a node of a cell kept in fp32 computes in, or reads, a lower precision;
  a cast mixed precision put at a kept cell's input targets a lower precision.
- ``promoted``: a node of a low-precision cell computes in fp32 though nothing it reads is
  fp32 (a node that reads a kept cell's fp32 output follows it, as type promotion does); a
  cast mixed precision put at such a cell's input targets fp32.
- ``weight``: a parameter stored in another dtype than its cell computes in.
- ``io``: a floating-point input or output of another dtype than the artefact declares.
- ``flow``: a node whose dtype does not follow from what it reads (a MindIR node recording
  another dtype than its inputs', an ONNX node reading two float dtypes, a Cast recording
  another dtype than its target, a declared ``value_info`` the graph does not compute).

Notes (the graph does what its policy says, with a cast that achieves nothing or loses
precision on the way):

- ``cast_noop``: a Cast to the dtype its input already has.
- ``round_trip``: a Cast undoing the Cast that feeds it: float32 -> float16 -> float32 rounds
  the value to float16 on its way, float16 -> float32 -> float16 does nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .graph import FLOATS, MIXED_OK, STRUCTURAL, DtypeGraph, Node, widest

ERRORS = ("demoted", "promoted", "weight", "io", "flow")
NOTES = ("cast_noop", "round_trip")
SHORT = {"float16": "fp16", "float32": "fp32", "float64": "fp64", "bfloat16": "bf16"}


@dataclass(frozen=True)
class AuditPolicy:
    """What an artefact declares of its precision."""

    precision: str
    """fp32 or fp16: what the graph computes in."""
    io_dtype: str
    """fp32 or fp16: its floating-point inputs and outputs."""
    kept: Tuple[str, ...] = ()
    """The paths of the cells an fp16 graph keeps in fp32 ('' for the whole network)."""

    def dtype_of(self, cell: str) -> str:
        """The dtype the cell at path ``cell`` computes in."""
        if self.precision == "fp32":
            return "float32"
        kept = any(k == "" or cell == k or cell.startswith(k + ".") for k in self.kept)
        return "float32" if kept else "float16"

    def io(self) -> str:
        return "float16" if self.io_dtype == "fp16" else "float32"

    def label(self, cell: str) -> str:
        """``cell conv1 (kept in fp32)``, ``cell fc1 (fp16)``, ``the network (fp32)``."""
        name = f"cell {cell}" if cell else "the network"
        if self.precision == "fp16" and self.dtype_of(cell) == "float32":
            return f"{name} (kept in fp32)"
        return f"{name} ({SHORT[self.dtype_of(cell)]})"


@dataclass(frozen=True)
class Finding:
    """One thing the audit found."""

    kind: str
    """demoted, promoted, weight, io, flow (errors); cast_noop, round_trip (notes)."""
    node: str
    """The node (its scope or name), the weight or the input/output it is about."""
    cell: Optional[str]
    """The path of the cell it belongs to; None where the graph does not say."""
    text: str
    """One line saying what is wrong, naming the node and the cell."""

    @property
    def error(self) -> bool:
        return self.kind in ERRORS


def check(graph: DtypeGraph, policy: Optional[AuditPolicy]) -> List[Finding]:
    """Every finding on ``graph``; the policy's checks are left out without a policy."""
    found: List[Finding] = []
    producers = graph.producers()
    parents = _parents(graph)
    for node in graph.nodes:
        if node.op == "Cast":
            found += _cast(graph, node, producers, policy)
        elif node.op not in STRUCTURAL:
            found += _flow(graph, node)
            if policy is not None and node.cell is not None:
                found += _compute(graph, node, policy, node.cell in parents)
    for name, dtype in graph.declared.items():
        computed = graph.dtypes.get(name)
        if computed in FLOATS and dtype in FLOATS and computed != dtype:
            who = producers.get(name)
            found.append(Finding("flow", who.name if who else name, who.cell if who else None,
                                 f"{name} is declared {dtype} but computed in {computed}"
                                 + (f" by node {who.name}" if who else "")))
    if policy is not None:
        found += _weights(graph, policy) + _io(graph, policy)
    return found


def _parents(graph: DtypeGraph) -> set:
    """The paths of the cells that hold other cells the graph names."""
    cells = {n.cell for n in graph.nodes if n.cell is not None} | {w[2] for w in graph.weights}
    parents: set = set()
    for cell in cells:
        parts = cell.split(".") if cell else []
        parents.update(".".join(parts[:i]) for i in range(len(parts)))
    return parents


def _floats(graph: DtypeGraph, node: Node) -> List[str]:
    return [d for d in (graph.dtypes.get(n) for n in node.inputs if n) if d in FLOATS]


def _out(graph: DtypeGraph, node: Node) -> Optional[str]:
    return graph.dtypes.get(node.outputs[0]) if node.outputs else None


def _flow(graph: DtypeGraph, node: Node) -> List[Finding]:
    """A node whose dtype does not follow from its inputs."""
    ins, out = _floats(graph, node), _out(graph, node)
    if graph.format == "ONNX":
        if len(set(ins)) > 1 and node.op not in MIXED_OK:
            return [Finding("flow", node.name, node.cell,
                            f"node {node.name} ({node.op}) reads {' and '.join(sorted(set(ins)))}"
                            " with no Cast between them")]
        return []
    if ins and out in FLOATS and out != widest(ins):
        return [Finding("flow", node.name, node.cell,
                        f"node {node.name} ({node.op}) records {out} but reads "
                        f"{widest(ins)}, with no Cast between them")]
    return []


def _compute(graph: DtypeGraph, node: Node, policy: AuditPolicy,
             parent: bool) -> List[Finding]:
    """A node of a cell computing in another precision than its cell. A node written in the
    construct of a low-precision cell that holds other cells (``parent``) follows type
    promotion when it reads a kept cell's fp32 output: it computes in fp32 then."""
    ins, out = _floats(graph, node), _out(graph, node)
    if not ins or out not in FLOATS:
        return []
    cell = node.cell or ""
    want = policy.dtype_of(cell)
    where = f"node {node.name} ({node.op}) of {policy.label(cell)}"
    if want == "float32":
        low = [d for d in ins if d != "float32"]
        if out != "float32":
            return [Finding("demoted", node.name, cell, f"{where} computes in {out}")]
        if low:
            return [Finding("demoted", node.name, cell, f"{where} reads {low[0]} input")]
        return []
    if out == want or (parent and out == "float32" and "float32" in ins):
        return []
    return [Finding("promoted", node.name, cell, f"{where} computes in {out}")]


def _cast(graph: DtypeGraph, node: Node, producers: dict,
          policy: Optional[AuditPolicy]) -> List[Finding]:
    found = []
    target, out = node.target, _out(graph, node)
    source = graph.dtypes.get(node.inputs[0]) if node.inputs else None
    if graph.format == "MINDIR" and target in FLOATS and out in FLOATS and out != target:
        found.append(Finding("flow", node.name, node.cell,
                             f"Cast {node.name} targets {target} but records {out}"))
    if policy is not None and node.amp_cast and node.cell is not None and target in FLOATS:
        want = policy.dtype_of(node.cell)
        if target != want:
            kind = "demoted" if want == "float32" else "promoted"
            found.append(Finding(kind, node.name, node.cell,
                                 f"Cast {node.name} into {policy.label(node.cell)} targets "
                                 f"{target}"))
    if target in FLOATS and source == target:
        found.append(Finding("cast_noop", node.name, node.cell,
                             f"Cast {node.name} casts {source} to {target}: it does nothing"))
    feeder = producers.get(node.inputs[0]) if node.inputs else None
    if feeder is not None and feeder.op == "Cast" and target in FLOATS:
        first = graph.dtypes.get(feeder.inputs[0]) if feeder.inputs else None
        middle = feeder.target
        if (first == target and middle in FLOATS and middle != target
                and not _policy_rounds(feeder, policy)):
            effect = ("rounds it to " + middle if FLOATS.index(middle) < FLOATS.index(target)
                      else "does nothing")
            found.append(Finding("round_trip", node.name, node.cell,
                                 f"Casts {feeder.name} and {node.name} take {first} to "
                                 f"{middle} and back: {effect}"))
    return found


def _policy_rounds(cast: Node, policy: Optional[AuditPolicy]) -> bool:
    """Whether ``cast`` is the cast at the input of a low-precision cell that its policy
    asks for (the cell computes on, and hands on, low-precision values): a round trip
    through it is the policy's, not a wasted pair of casts."""
    if policy is None or cast.target not in FLOATS:
        return False
    cell = cast.cell if cast.amp_cast else cast.scope_cell
    return cell is not None and policy.dtype_of(cell) == cast.target != "float32"


def _weights(graph: DtypeGraph, policy: AuditPolicy) -> List[Finding]:
    found = []
    for name, dtype, cell in graph.weights:
        want = policy.dtype_of(cell)
        if dtype != want:
            kind = "demoted" if FLOATS.index(dtype) < FLOATS.index(want) else "promoted"
            found.append(Finding("weight", name, cell,
                                 f"weight {name} of {policy.label(cell)} is stored in {dtype} "
                                 f"({kind})"))
    return found


def _io(graph: DtypeGraph, policy: AuditPolicy) -> List[Finding]:
    found, want = [], policy.io()
    for kind, rows in (("input", graph.inputs), ("output", graph.outputs)):
        for i, (name, dtype) in enumerate(rows):
            if dtype in FLOATS and dtype != want:
                found.append(Finding("io", name, None,
                                     f"{kind} {i} ({name}) is {dtype}, the artefact declares "
                                     f"{policy.io_dtype} inputs and outputs"))
    return found
