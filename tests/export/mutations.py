"""Planted precision faults in real exported graphs: each mutation edits one node's dtype or
one Cast's target in a copy of a MindIR or ONNX file amptool wrote, as a later tool or an
exporter bug would, and names what it did. The audit must find every one."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List

FP16, FP32 = 10, 1  # TensorProto codes (MindIR and ONNX alike)
TYPE_ID = {FP16: 42, FP32: 43}  # MindSpore's type ids, as a MindIR Cast's target
NAMES = {FP16: "float16", FP32: "float32"}


@dataclass(frozen=True)
class Mutation:
    """One planted fault: ``apply(model)`` edits a parsed model in place."""

    label: str
    """What it does: ``demote node ... of kept cell norm``."""
    kind: str
    """demotion or promotion."""
    apply: Callable


def write_mutant(source: Path, folder: Path, mutation: Mutation) -> Path:
    """A copy of the artefact ``source`` (its manifest and provenance with it) in ``folder``
    with ``mutation`` applied; returns the mutated file."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    model = _load(source)
    mutation.apply(model)
    target.write_bytes(model.SerializeToString())
    manifest = source.with_name(source.name + ".json")
    if manifest.is_file():
        shutil.copyfile(manifest, folder / manifest.name)
    return target


def _load(path: Path):
    if path.suffix == ".onnx":
        import onnx

        return onnx.load(str(path))
    from mindspore.train import mind_ir_pb2

    model = mind_ir_pb2.ModelProto()
    model.ParseFromString(path.read_bytes())
    return model


# -- MindIR ----------------------------------------------------------------------------------

def _op(node) -> str:
    return node.op_type[5:].rsplit(":", 1)[0] if node.op_type.startswith("REF::") else node.op_type


def _recorded(node):
    """The TensorProto in which a MindIR node records its (first) output's dtype: its
    ``shape`` attribute's tensor, or its first tuple element's (BatchNorm, LayerNorm)."""
    for attr in node.attribute:
        if attr.name == "shape" and attr.tensors:
            return attr.tensors[0]
        if attr.name == "shape" and attr.values and attr.values[0].tensors:
            return attr.values[0].tensors[0]
    return None


def _mindir_cell(node) -> str:
    """The cell path of a MindIR node's scope (amptool's wrapper and network left out)."""
    parts = node.domain.split("/")[1:-1]
    while parts and parts[0] == "net-CastOutputs":
        parts.pop(0)
    return ".".join(p.rsplit("-", 1)[0] for p in parts[1:])


def mindir_mutations(model, kept: List[str]) -> List[Mutation]:
    """A demotion for each compute node of a kept cell (its output recorded float16), a
    promotion for each compute node of an fp16 leaf cell (float32), and each mixed-precision
    Cast at a cell's input retargeted to the other precision."""
    found = []
    structural = {"Constant", "Load", "MakeTuple", "TupleGetItem", "UpdateState", "Depend"}
    constants = {}
    for node in model.graph.node:
        if node.op_type == "Constant":
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None and value.i in (42, 43):
                constants.setdefault(value.i, node.output[0])
    for index, node in enumerate(model.graph.node):
        op, recorded, cell = _op(node), _recorded(node), _mindir_cell(node)
        if op in structural or recorded is None or not node.domain.startswith("Default/net-"):
            continue
        inside = any(cell == k or cell.startswith(k + ".") for k in kept)
        dtype = recorded.data_type
        if op == "Cast":
            if not node.name.split(":")[1].startswith("C_") or dtype not in (FP16, FP32):
                continue
            other = FP16 if dtype == FP32 else FP32
            if TYPE_ID[other] in constants:
                found.append(Mutation(
                    f"retarget Cast {node.domain} into {cell or 'the network'} to "
                    f"{NAMES[other]}", "demotion" if other == FP16 else "promotion",
                    _retarget_mindir(index, constants[TYPE_ID[other]], other)))
        elif inside and dtype == FP32:
            found.append(Mutation(f"demote {op} {node.domain} of kept cell {cell}", "demotion",
                                  _set_mindir(index, FP16)))
        elif not inside and dtype == FP16 and cell:
            found.append(Mutation(f"promote {op} {node.domain} of fp16 cell {cell}",
                                  "promotion", _set_mindir(index, FP32)))
    return found


def _set_mindir(index: int, dtype: int):
    def apply(model):
        _recorded(model.graph.node[index]).data_type = dtype
    return apply


def _retarget_mindir(index: int, constant: str, dtype: int):
    """The Cast reads the other dtype constant and records that dtype: a consistent edit."""
    def apply(model):
        node = model.graph.node[index]
        node.input[1] = constant
        _recorded(node).data_type = dtype
    return apply


# -- ONNX ------------------------------------------------------------------------------------

def onnx_mutations(model, kept: List[str]) -> List[Mutation]:
    """Each Cast's target flipped between float16 and float32, each weight stored in the
    other precision (its values converted), and a node of each weighted cell declared
    (``value_info``) in the other precision."""
    found = []
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Cast":
            continue
        to = next(a for a in node.attribute if a.name == "to")
        if to.i in (FP16, FP32):
            other = FP16 if to.i == FP32 else FP32
            found.append(Mutation(f"retarget Cast {node.name} to {NAMES[other]}",
                                  "demotion" if other == FP16 else "promotion",
                                  _retarget_onnx(index, other)))
    for index, tensor in enumerate(model.graph.initializer):
        cell = tensor.name.rsplit(".", 1)[0] if "." in tensor.name else None
        if cell is None or "/" in tensor.name or tensor.data_type not in (FP16, FP32):
            continue
        other = FP16 if tensor.data_type == FP32 else FP32
        found.append(Mutation(f"store weight {tensor.name} in {NAMES[other]}",
                              "demotion" if other == FP16 else "promotion",
                              _restore_onnx(index, other)))
    return found


def _retarget_onnx(index: int, dtype: int):
    def apply(model):
        next(a for a in model.graph.node[index].attribute if a.name == "to").i = dtype
    return apply


def _restore_onnx(index: int, dtype: int):
    def apply(model):
        from onnx import numpy_helper

        tensor = model.graph.initializer[index]
        array = numpy_helper.to_array(tensor).astype(NAMES[dtype])
        tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    return apply


def declare_onnx(model, node_index: int, dtype: int) -> Mutation:
    """A ``value_info`` declaring the output of node ``node_index`` in ``dtype``."""
    node = model.graph.node[node_index]

    def apply(model):
        from onnx import helper

        model.graph.value_info.append(
            helper.make_tensor_value_info(model.graph.node[node_index].output[0], dtype, None))
    return Mutation(f"declare {node.op_type} {node.name} in {NAMES[dtype]}",
                    "demotion" if dtype == FP16 else "promotion", apply)
