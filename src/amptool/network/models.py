"""Model references and input signatures.

``--model`` is a sample name, ``path/to/file.py:factory`` or an importable
``package.module:factory`` (e.g. ``mindcv.models.resnet:resnet18``); ``--model-arg KEY=VALUE``
passes keyword arguments to the factory. A reference resolves to a ``ModelSpec``: how to
build the network and what it takes (an input signature) and gives (class logits width).

The signature comes from ``--input-spec``, else the network's (or factory's)
``input_signature``, else the image shorthand ``input_shape`` (C, H, W). The class count
is declared (``num_classes``) or read from one eager forward pass on the signature.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from amptool.errors import UsageError, first_line
from amptool.network.signature import InputSpec, format_signature, image_signature, parse_signature
from amptool.network.trust import trust_file, user_reference, vet_recorded
from amptool.network.usercode import call_factory, import_module, import_user_file, parse_model_args
from amptool.runtime.device import execution_mode, import_mindspore
from amptool.samples import NAMES


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model reference."""

    name: str
    """The reference as given: a sample name, path/to/file.py:factory or package.module:factory."""
    factory: Callable
    """Called with no arguments, returns a fresh ``nn.Cell``."""
    inputs: tuple
    """The input signature: one ``InputSpec`` per input, in call order."""
    num_classes: Optional[int]
    """Width of the class-logits output (the first output); None when it is not a classifier."""
    summary: str = ""
    """One line saying what the network is."""
    args: dict = field(default_factory=dict)
    """Keyword arguments given to the factory."""
    input_spec: Optional[str] = None
    """The ``--input-spec`` text the signature came from, if any."""
    file: Optional[str] = None
    """The Python file the factory comes from, for a ``path/to/file.py:factory`` reference."""
    class_logits: Optional[tuple] = None
    """The outputs (indices) that are class logits, as the model declares them
    (``class_logits`` on the cell or factory); None: undeclared (the first output, when
    ``num_classes`` says it is class logits)."""
    named_by: Optional[str] = None
    """Where the signature's input names come from (``--input-spec``, ``input_signature``),
    when they are the construct's own: checked against its parameters when probed."""

    def build(self):
        return self.factory()

    @property
    def input_shape(self) -> Optional[tuple]:
        """(C, H, W) for an image classifier (one float input of rank 4), else None."""
        if len(self.inputs) == 1 and self.inputs[0].is_float and len(self.inputs[0].shape) == 4:
            return tuple(self.inputs[0].shape[1:])
        return None

    def reference(self) -> dict:
        """What rebuilds this model: written into run.json and every manifest."""
        return {"model": self.name, "model_args": dict(self.args), "input_spec": self.input_spec}

    def describe(self) -> dict:
        return {"name": self.name, "spec": self.name, "args": dict(self.args),
                "input_spec": self.input_spec, "inputs": [i.to_dict() for i in self.inputs],
                "input_shape": list(self.input_shape) if self.input_shape else None,
                "num_classes": self.num_classes,
                **({"class_logits": list(self.class_logits)}
                   if self.class_logits is not None else {})}


def model_names() -> list[str]:
    return sorted(NAMES)


def check_reference(name) -> None:
    """Refuse a ``--model`` that is neither a sample nor a ``:factory`` reference, before
    anything (MindSpore included) is loaded."""
    if isinstance(name, str) and ":" not in name and name not in model_names():
        raise UsageError(f"unknown model '{name}'",
                         f"use one of {', '.join(model_names())}, path/to/file.py:factory "
                         "or package.module:factory")


def sample_spec(name: str) -> ModelSpec:
    from amptool.samples.models import SAMPLES

    cls, input_shape, num_classes, summary = SAMPLES[name]
    inputs = (parse_signature(input_shape, "sample")
              if isinstance(input_shape, str) else image_signature(input_shape))
    logits = getattr(cls, "class_logits", None)
    return ModelSpec(name, _sample_factory(cls, num_classes), inputs, num_classes, summary,
                     class_logits=tuple(logits) if logits is not None else None)


def _sample_factory(cls, num_classes: Optional[int]):
    """A sample's class with its class count (a sample without one keeps its own defaults)."""
    return functools.partial(cls, num_classes=num_classes) if num_classes else cls


def resolve_model(name, args: Optional[dict] = None, input_spec: Optional[str] = None,
                  probe: bool = True, signature: bool = True) -> ModelSpec:
    """The ``ModelSpec`` of a reference, its factory arguments and an optional signature.

    ``name`` may also be a mapping as ``ModelSpec.reference()`` writes it. The network is
    built once and run on two example rows, which checks that it fits its signature and
    reads its output widths; ``probe=False`` (for a caller that only builds the network
    again, from a reference checked where it was recorded) skips that run: the spec's
    ``num_classes`` and ``class_logits`` are then only what the model declares, and its
    first ``build()`` hands out the network built here (never run). ``signature=False``
    (with ``probe=False``, for a caller that reads the network's structure alone) accepts a
    model that declares no input signature: its ``inputs`` are then empty.
    """
    if isinstance(name, dict):
        if name.get("recorded_in"):  # read from a file, not given by the user
            name = vet_recorded(name)
        return resolve_model(name["model"], name.get("model_args"), name.get("input_spec"),
                             probe, signature)

    import_mindspore()
    from amptool.samples.models import SAMPLES

    args = dict(args or {})
    if name in SAMPLES and not args and not input_spec:
        return sample_spec(name)
    factory, where, file = _find_factory(name, SAMPLES)
    net = call_factory(factory, where, args)
    default = sample_spec(name).inputs if name in SAMPLES else None
    inputs = _signature(net, factory, input_spec, name, default, required=signature or probe)
    num_classes = _declared(net, factory, "num_classes")
    if num_classes is not None and (isinstance(num_classes, bool)
                                    or not isinstance(num_classes, int) or num_classes < 2):
        raise UsageError(f"model {name} declares num_classes {num_classes!r}",
                         "declare a whole number >= 2 (the width of its class logits)")
    build = functools.partial(call_factory, factory, where, args)
    declared = _declared(net, factory, "class_logits")
    spec = ModelSpec(name, _BuiltOnce(net, build), inputs, num_classes, f"{where}", args,
                     input_spec, file, tuple(declared) if isinstance(declared, list) else declared,
                     "--input-spec" if input_spec else "input_signature"
                     if _declared(net, factory, "input_signature") is not None else None)
    if not probe:
        return spec
    return dataclasses.replace(probed(spec, net)[0], factory=build)


def probed(spec: ModelSpec, net) -> tuple:
    """(``spec`` with what one eager forward of ``net`` on two example rows says, its
    outputs): the declared ``class_logits`` checked against the outputs, and ``num_classes``
    read from the class logits' width (or checked against it when declared). ``net`` is a
    network of ``spec``: the one ``resolve_model(probe=False)`` built, or one holding a
    checkpoint's weights."""
    outs = eager_outputs(net, [item.example(2) for item in spec.inputs], spec.name, spec.inputs)
    logits = _class_logits(spec.class_logits, len(outs), spec.name)
    if spec.named_by:
        _check_names(net, spec.inputs, spec.name, spec.named_by)
    width = _width(outs[0]) if logits is None or 0 in logits else None
    num_classes = spec.num_classes
    if logits is not None and 0 not in logits:
        num_classes = None
    elif num_classes is None:
        num_classes = width
    elif width is not None and width != num_classes:
        raise UsageError(f"model {spec.name} declares num_classes {num_classes} but its first "
                         f"output has {width} columns", "declare the width its head really has")
    return dataclasses.replace(spec, num_classes=num_classes, class_logits=logits), outs


class _BuiltOnce:
    """A model factory whose first call hands out ``net``, a network it already built; later
    calls build anew."""

    def __init__(self, net, build: Callable):
        self._net, self._build = net, build

    def __call__(self):
        net, self._net = self._net, None
        return net if net is not None else self._build()


def _find_factory(name: str, samples: dict) -> tuple:
    if name in samples:
        cls, _, num_classes, _ = samples[name]
        return _sample_factory(cls, num_classes), f"sample {name}", None
    check_reference(name)
    where, factory_name = name.rsplit(":", 1)
    is_file = where.endswith(".py")
    if is_file and Path(where).is_file():  # named by the user, or vetted: theirs to run
        trust_file(where, "--model")
    module = _import_file(Path(where)) if is_file else import_module(where)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"model {where} has no callable '{factory_name}'",
                         "name a function that returns an nn.Cell after the ':'")
    return factory, f"{where}:{factory_name}", str(Path(where).resolve()) if is_file else None


def _import_file(path: Path):
    return import_user_file(path, "model", "':factory'")


def _declared(probe, factory, attr: str):
    return getattr(probe, attr, getattr(factory, attr, None))


def _signature(probe, factory, input_spec: Optional[str], name: str, default=None,
               required: bool = True) -> tuple:
    if input_spec:
        return parse_signature(input_spec, "--input-spec")
    declared = _declared(probe, factory, "input_signature")
    if declared is not None:
        return parse_signature(declared, f"input_signature of {name}")
    shape = _declared(probe, factory, "input_shape")
    if shape is not None:
        return image_signature(shape, name)
    if default is not None:
        return default
    if not required:
        return ()
    raise UsageError(f"model {name} declares no input signature",
                     "pass --input-spec NAME:SHAPE:DTYPE (e.g. x:-1x3x32x32:float32), or set "
                     "input_shape (C, H, W) or input_signature on the cell or factory")


def _check_names(net, inputs: tuple, name: str, where: str) -> None:
    """Named inputs must be the construct's parameters, in its order (inputs are fed by
    position, so a swapped pair would otherwise run silently)."""
    import inspect

    try:
        params = list(inspect.signature(net.construct).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return
    expected = [p.name for p in params][:len(inputs)]
    given = [i.name for i in inputs]
    if given == expected:
        return
    order = " (the same names in another order)" if sorted(given) == sorted(expected) else ""
    raise UsageError(f"{where} names the inputs of model {name} {', '.join(given)}{order}, "
                     f"but its construct takes {', '.join(expected)}",
                     f"name them {', '.join(expected)}, in that order")


def _width(first) -> Optional[int]:
    """The width of a (batch, classes) output, from an eager forward pass."""
    return int(first.shape[1]) if first.ndim == 2 and first.shape[1] > 1 else None


def _class_logits(declared, outputs: int, name: str) -> Optional[tuple]:
    """A model's declared ``class_logits`` (output indices) checked against its outputs."""
    if declared is None:
        return None
    if isinstance(declared, int) and not isinstance(declared, bool):
        declared = (declared,)
    ok = isinstance(declared, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < outputs for i in declared)
    if not ok:
        raise UsageError(f"model {name} declares class_logits {declared!r}, but it has "
                         f"{outputs} output(s)", "declare the indices of its outputs that are "
                         f"class logits (0..{outputs - 1}), e.g. class_logits = (1,)")
    return tuple(declared)


def eager_outputs(net, arrays: list, name: str, inputs: tuple) -> list:
    """``net`` on numpy arrays in PyNative mode; a network that does not accept the
    signature becomes one error naming what it expected."""
    import mindspore as ms

    was_training = net.training
    try:
        net.set_train(False)
        with execution_mode(graph=False):
            out = net(*[ms.Tensor(a) for a in arrays])
    except Exception as exc:
        layer = failing_layer(net, exc)
        where = (f"layer {layer[0]} ({layer[1]}) fails" if layer and layer[0]
                 else f"{type(exc).__name__} in its own construct" if layer
                 else type(exc).__name__)
        raise UsageError(f"model {name} does not fit its inputs {format_signature(inputs)}: "
                         f"{where}: {first_line(exc).rstrip('.')}",
                         f"fix that layer, or give the inputs its construct expects "
                         f"({_construct_params(net)})") from None
    finally:
        net.set_train(was_training)
    return [o.asnumpy() for o in flat_outputs(out)]


def flat_outputs(out) -> tuple:
    """A network's outputs as one flat tuple, nested tuples and lists unrolled depth-first
    (the order MindIR and ONNX export give them in): a detector's ``(boxes, (p3, p4, p5))``
    is four outputs. Runs in GRAPH_MODE too (the training step and the loss call it)."""
    if isinstance(out, (tuple, list)):
        flat = ()
        for item in out:
            flat = flat + flat_outputs(item)
        return flat
    return (out,)


def failing_layer(net, exc: BaseException) -> Optional[tuple]:
    """(path, class name) of the innermost cell of ``net`` whose code raised ``exc`` in an
    eager forward pass ("" is the network itself), or None when no cell's code did."""
    names = {id(cell): path for path, cell in net.cells_and_names()}
    found, tb = None, exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and id(owner) in names:
            found = (names[id(owner)], type(owner).__name__)
        tb = tb.tb_next
    return found


def _construct_params(net) -> str:
    import inspect

    try:
        params = list(inspect.signature(net.construct).parameters)
    except (TypeError, ValueError):
        return "see its construct"
    return "construct(" + ", ".join(params) + ")"


__all__ = ["InputSpec", "ModelSpec", "model_names", "parse_model_args", "resolve_model",
           "eager_outputs", "sample_spec", "user_reference"]
