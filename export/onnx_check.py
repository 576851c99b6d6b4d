"""The ONNX graph after MindSpore wrote it: output names, mixed float inputs, a real run.

An ONNX artefact is accepted only when onnxruntime loads it and runs one batch of zeros
of its declared input shape; an fp32 graph must also reproduce the MindSpore network's
output on a seeded random batch.
"""
from __future__ import annotations

from amptool.artefact.onnx import new_session
from amptool.errors import UsageError, first_line

# Inputs (by position; None = all) that one type parameter T binds in opset 11.
_SHARED_T = {
    "Add": None, "Sub": None, "Mul": None, "Div": None, "Pow": None, "MatMul": None,
    "Gemm": None, "Max": None, "Min": None, "Sum": None, "Mean": None, "Concat": None,
    "Equal": None, "Less": None, "Greater": None, "PRelu": None, "Clip": None,
    "Conv": None, "BatchNormalization": None, "Where": (1, 2),
}
_FLOAT16 = 10  # TensorProto.FLOAT16
_FLOAT_RANK = {_FLOAT16: 1, 1: 2, 11: 3}  # float16 < float < double (TensorProto codes)

REL_BOUND = 1e-3
"""Export-time bound: max|onnx - mindspore| <= REL_BOUND * max(1, max|mindspore|)."""


class OnnxUnsupported(UsageError):
    """The network cannot be written as a runnable ONNX graph."""


def rename_outputs(model) -> None:
    """MindSpore names outputs after internal nodes; call them output0, output1, ..."""
    for i, out in enumerate(model.graph.output):
        old, new = out.name, f"output{i}"
        if old == new:
            continue
        for node in model.graph.node:
            for j, name in enumerate(node.output):
                if name == old:
                    node.output[j] = new
            for j, name in enumerate(node.input):
                if name == old:
                    node.input[j] = new
        out.name = new


def _value_types(model) -> dict:
    """Name -> TensorProto element type for every value whose type is known."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {t.name: t.data_type for t in model.graph.initializer}
    for value in list(inferred.graph.value_info) + list(inferred.graph.input):
        elem = value.type.tensor_type.elem_type
        if elem:
            types[value.name] = elem
    for node in model.graph.node:  # Constant outputs are typed by their value
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = attr.t.data_type
    return types


def _mixed_nodes(model, types: dict) -> list:
    """(node index, input positions to cast, target type) for nodes mixing float widths: a
    scalar constant takes the dtype of the tensors it meets (as a Python number does in
    MindSpore: ``x / 6.0`` stays float16), anything else the widest."""
    found = []
    scalars = _scalar_constants(model)
    for index, node in enumerate(model.graph.node):
        if node.op_type not in _SHARED_T:
            continue
        positions = _SHARED_T[node.op_type] or range(len(node.input))
        floats = {p: types[node.input[p]] for p in positions
                  if p < len(node.input) and node.input[p]
                  and types.get(node.input[p]) in _FLOAT_RANK}
        if len(set(floats.values())) < 2:
            continue
        tensors = {t for p, t in floats.items() if node.input[p] not in scalars}
        target = (tensors.pop() if len(tensors) == 1
                  else max(floats.values(), key=_FLOAT_RANK.__getitem__))
        found.append((index, [p for p, t in floats.items() if t != target], target))
    return found


def _scalar_constants(model) -> set:
    """Names of the initializers and Constant outputs holding one value."""
    import math

    names = {t.name for t in model.graph.initializer if math.prod(t.dims) <= 1}
    for node in model.graph.node:
        if node.op_type == "Constant":
            names.update(node.output[0] for a in node.attribute
                         if a.name == "value" and math.prod(a.t.dims) <= 1)
    return names


PROMOTED = "_promote_type_"
"""What MindSpore's ONNX converter puts in the name of a Cast it inserts to lift a tensor to
the dtype of another input (a scalar constant it made float32, as for ``x / 6.0``)."""


def unpromote_scalars(model) -> int:
    """Undo the converter's promotion of a float16 tensor to float32 where it only meets
    float32 scalar constants (MindSpore computes ``x / 6.0`` in x's float16): the node
    reads the tensor as it was, the scalars cast to float16. Returns how many nodes."""
    from onnx import helper

    producers = {out: node for node in model.graph.node for out in node.output}
    scalars = _scalar_constants(model)
    done = 0
    for node in list(model.graph.node):
        lifted = [i for i, name in enumerate(node.input) if PROMOTED in name
                  and name in producers and producers[name].op_type == "Cast"]
        others = [i for i in range(len(node.input)) if i not in lifted and node.input[i]]
        if not lifted or not all(node.input[i] in scalars for i in others):
            continue
        for i in lifted:
            node.input[i] = producers[node.input[i]].input[0]
        for i in others:
            name = f"{node.input[i]}_as{_FLOAT16}_{done}"
            cast = helper.make_node("Cast", [node.input[i]], [name], to=_FLOAT16,
                                    name=f"{name}_Cast")
            model.graph.node.insert(list(model.graph.node).index(node), cast)
            node.input[i] = name
        done += 1
    _drop_unused(model)
    return done


def drop_noop_casts(model) -> int:
    """Remove the Casts whose input already has their target dtype (MindSpore's converter
    writes some, around LayerNorm and a Python scalar's constant); returns how many."""
    if not any(node.op_type == "Cast" for node in model.graph.node):
        return 0
    types = _value_types(model)
    outputs = {o.name for o in model.graph.output}
    inputs = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    dropped = 0
    for node in list(model.graph.node):
        if node.op_type != "Cast" or len(node.input) != 1:
            continue
        source, out = node.input[0], node.output[0]
        to = next(a.i for a in node.attribute if a.name == "to")
        if types.get(source) != to:
            continue
        if out in outputs:
            if source in inputs or source in outputs:
                continue  # the graph's input (or another output) passed on: keep the Cast
            _rename(model, source, out)
        else:
            _rename(model, out, source)
        model.graph.node.remove(node)
        dropped += 1
    return dropped


def _rename(model, old: str, new: str) -> None:
    """Every node reading or writing ``old`` uses ``new`` instead."""
    for node in model.graph.node:
        for j, name in enumerate(node.input):
            if name == old:
                node.input[j] = new
        for j, name in enumerate(node.output):
            if name == old:
                node.output[j] = new


def _drop_unused(model) -> None:
    """Remove the Casts nothing reads any more."""
    while True:
        read = {name for node in model.graph.node for name in node.input}
        read |= {o.name for o in model.graph.output}
        dead = [n for n in model.graph.node if n.op_type == "Cast" and n.output[0] not in read]
        if not dead:
            return
        for node in dead:
            model.graph.node.remove(node)


def _has_float16(model) -> bool:
    """Whether any input, weight, constant or Cast of the graph is float16."""
    if any(t.data_type == _FLOAT16 for t in model.graph.initializer):
        return True
    if any(v.type.tensor_type.elem_type == _FLOAT16 for v in model.graph.input):
        return True
    for node in model.graph.node:
        for attr in node.attribute:
            if (attr.name == "to" and attr.i == _FLOAT16) or (
                    attr.name == "value" and attr.t.data_type == _FLOAT16):
                return True
    return False


def cast_mixed_inputs(model, max_passes: int = 20) -> int:
    """Insert a Cast to the widest float type before every node whose inputs mix float16 and
    float32 (MindSpore promotes such pairs); return how many Casts were inserted."""
    from onnx import helper

    inserted = 0
    if not _has_float16(model):
        return inserted
    for _ in range(max_passes):
        mixed = _mixed_nodes(model, _value_types(model))
        if not mixed:
            return inserted
        for index, positions, target in reversed(mixed):
            node = model.graph.node[index]
            for p in positions:
                name = f"{node.input[p]}_as{target}_{inserted}"
                cast = helper.make_node("Cast", [node.input[p]], [name], to=target,
                                        name=f"{name}_Cast")
                node.input[p] = name
                model.graph.node.insert(index, cast)
                inserted += 1
    raise OnnxUnsupported("the ONNX graph still mixes float16 and float32 inputs after "
                          f"{max_passes} passes of inserted Casts",
                          "export MINDIR instead, or export ONNX in fp32")


def _session(path):
    try:
        return new_session(path)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise OnnxUnsupported(f"onnxruntime cannot load the exported ONNX graph "
                              f"({first_line(exc)})", "export MINDIR instead") from None


_ORT_TYPES = {"tensor(float16)": "float16", "tensor(float)": "float32",
              "tensor(double)": "float64", "tensor(int32)": "int32", "tensor(int64)": "int64",
              "tensor(bool)": "bool", "tensor(uint8)": "uint8", "tensor(int8)": "int8"}


def _feed(session, batch: int, arrays=None) -> dict:
    """Zeros of each declared input (unknown dimensions = ``batch``), or ``arrays`` cast to
    the declared dtypes."""
    import numpy as np

    feed = {}
    for i, arg in enumerate(session.get_inputs()):
        shape = [d if isinstance(d, int) and d > 0 else batch for d in arg.shape]
        dtype = np.dtype(_ORT_TYPES.get(arg.type, "float32"))
        feed[arg.name] = np.zeros(shape, dtype) if arrays is None else arrays[i].astype(dtype)
    return feed


def check_executes(path, reference=None) -> None:
    """onnxruntime loads ``path`` and runs a batch of zeros; with ``reference`` (inputs,
    outputs of the MindSpore network) the ONNX outputs must match it within REL_BOUND."""
    session = _session(path)
    try:
        session.run(None, _feed(session, 1))
        if reference is None:
            return
        arrays, expected = reference
        got = session.run(None, _feed(session, arrays[0].shape[0], arrays))
    except Exception as exc:  # onnxruntime's own error types
        raise OnnxUnsupported(f"onnxruntime cannot run the exported ONNX graph "
                              f"({first_line(exc)})", "export MINDIR instead") from None
    compare_outputs(got, expected)


def compare_outputs(got: list, expected: list) -> None:
    import numpy as np

    for i, (a, b) in enumerate(zip(got, expected)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            raise OnnxUnsupported(f"the ONNX graph's output{i} has shape {list(a.shape)}, "
                                  f"MindSpore's {list(b.shape)}", "export MINDIR instead")
        finite = np.isfinite(b)
        diff = float(np.abs(a - b)[finite].max()) if finite.any() else 0.0
        bound = REL_BOUND * max(1.0, float(np.abs(b[finite]).max()) if finite.any() else 1.0)
        if diff > bound or not np.array_equal(np.isfinite(a), finite):
            raise OnnxUnsupported(f"the ONNX graph's output{i} differs from the MindSpore "
                                  f"network's by {diff:.3g} (bound {bound:.3g})",
                                  "export MINDIR instead")
