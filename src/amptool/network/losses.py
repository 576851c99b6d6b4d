"""Training losses: what ``--loss`` names, the targets it takes, and the cell that computes it.

``--loss`` is a built-in name (``BUILTINS``), ``path/to/file.py:factory`` or an importable
``package.module:factory``. A factory is called with no arguments and returns an ``nn.Cell``
or a function; it takes the network's outputs, then the targets, and returns a scalar (all
outputs, or only the first when it takes one fewer argument than outputs + targets allow).
A factory (or what it returns) may declare ``targets``: the names of the data arrays it
takes, in order (default: ``y``, or ``y0, y1, ...``). A built-in takes the first output and
one target. Every loss computes in fp32: float outputs are cast to fp32 before it, whatever
the AMP level.

Without ``--loss`` a run trains with ``cross-entropy`` when the model's first output is
class logits and its one target holds integer labels (``default_loss``), and asks for
``--loss`` otherwise.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from amptool.errors import UsageError, first_line
from amptool.network.trust import trust_file
from amptool.network.usercode import import_module, import_user_file
from amptool.runtime.device import execution_mode

DEFAULT = "cross-entropy"
IGNORE_INDEX = -100
"""``token-cross-entropy``'s default ignored target (``token-cross-entropy:N`` sets another)."""
BUILTINS = {
    "cross-entropy": "class logits (N, C) and integer labels (N,)",
    "token-cross-entropy": "token logits (N, T, V) and integer tokens (N, T); targets equal "
                           "to the ignore index (-100) count for nothing",
    "mse": "mean squared error, outputs and float targets of the same shape",
    "l1": "mean absolute error, outputs and float targets of the same shape",
    "smooth-l1": "Huber loss with beta 1, outputs and float targets of the same shape",
    "bce": "multi-label binary cross-entropy on logits, targets in [0, 1] of the outputs' shape",
}
INTEGER_TARGETS = ("cross-entropy", "token-cross-entropy")
LOSS_HELP = ("cross-entropy, token-cross-entropy[:IGNORE], mse, l1, smooth-l1, bce, "
             "path/to/file.py:factory or package.module:factory")
FIX = ("pass --loss NAME (" + ", ".join(BUILTINS) + ") or a factory path/to/file.py:fn "
       "returning a function of (outputs..., targets...) -> scalar")


@dataclass(frozen=True)
class LossSpec:
    """A resolved ``--loss``."""

    name: str
    """As given: a built-in name (``token-cross-entropy:N`` included) or a factory reference."""
    kind: str
    """The built-in's name, or ``factory``."""
    targets: tuple = ("y",)
    """Names of the data arrays the loss takes, in order (declared, or y / y0, y1, ...)."""
    declared: bool = False
    """Whether ``targets`` was declared by the factory (else the data's y arrays decide)."""
    ignore_index: int = IGNORE_INDEX
    factory: Optional[Callable] = field(default=None, repr=False, compare=False)
    file: Optional[str] = None
    """The Python file of a ``path/to/file.py:factory`` loss."""

    @property
    def classifier(self) -> bool:
        """Class cross-entropy on integer labels: accuracy applies to the first output."""
        return self.kind == "cross-entropy"

    def target_dtype(self, stored: np.dtype) -> np.dtype:
        """The dtype a target stored as ``stored`` is fed in: int32 for the cross-entropies,
        float32 for the other built-ins; a factory's: float32 for floats, int32 else."""
        if self.kind in INTEGER_TARGETS:
            return np.dtype(np.int32)
        if self.kind != "factory" or np.issubdtype(stored, np.floating):
            return np.dtype(np.float32)
        return np.dtype(np.int32)

    def describe(self) -> dict:
        """What run.json and the manifests record."""
        return {"name": self.name, "kind": self.kind, "targets": list(self.targets),
                "classifier": self.classifier,
                **({"ignore_index": self.ignore_index}
                   if self.kind == "token-cross-entropy" else {})}


def task_record(record) -> Optional[dict]:
    """The loss facts a run.json or manifest records (name, kind, targets, classifier,
    ignore_index), without where its code is kept; None when there is none."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return None
    keep = ("name", "kind", "targets", "classifier", "ignore_index")
    return {k: record[k] for k in keep if k in record}


def loss_from_record(record) -> Optional[LossSpec]:
    """The ``LossSpec`` a recorded loss (``task_record``) stands for, to read its targets
    with: its code is neither imported nor run. None without a record."""
    facts = task_record(record)
    if facts is None:
        return None
    targets = facts.get("targets") or ["y"]
    return LossSpec(str(facts.get("name", facts["kind"])), facts["kind"], tuple(targets),
                    facts["kind"] == "factory",
                    int(facts.get("ignore_index", IGNORE_INDEX)))


def parse_builtin(name: str) -> Optional[tuple]:
    """(kind, ignore index) of a built-in name, or None when ``name`` is not one."""
    low = name.strip().lower()
    if low in BUILTINS:
        return low, IGNORE_INDEX
    kind, sep, arg = low.partition(":")
    if kind == "token-cross-entropy" and sep:
        try:
            return kind, int(arg)
        except ValueError:
            raise UsageError(f"--loss {name}: the ignore index after ':' must be an integer",
                             "write token-cross-entropy or token-cross-entropy:-100") from None
    return None


def resolve_loss(name: Optional[str]) -> Optional[LossSpec]:
    """The ``LossSpec`` of ``--loss`` (None: not given, see ``default_loss``). A factory file
    named here is the user's own: it runs, and is remembered as trusted."""
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise UsageError(f"loss must be a name or path/to/file.py:factory (got {name!r})", FIX)
    builtin = parse_builtin(name)
    if builtin is not None:
        return LossSpec(name, builtin[0], ignore_index=builtin[1])
    if ":" not in name:
        raise UsageError(f"unknown loss '{name}'", FIX)
    where, _, factory_name = name.rpartition(":")
    is_file = where.endswith(".py")
    if is_file:
        if Path(where).is_file():
            trust_file(where, "--loss")
        module = import_user_file(Path(where), "loss", "':factory'")
    else:
        module = import_module(where, "loss")
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"loss {where} has no callable '{factory_name}'", FIX)
    targets = getattr(factory, "targets", None)
    if targets is not None:
        targets = _check_targets(targets, name)
    return LossSpec(name, "factory", targets or ("y",), targets is not None, factory=factory,
                    file=str(Path(where).resolve()) if is_file else None)


def _check_targets(targets, name: str) -> tuple:
    if isinstance(targets, str):
        targets = (targets,)
    if (not isinstance(targets, (list, tuple)) or not targets
            or not all(isinstance(t, str) and t.isidentifier() for t in targets)):
        raise UsageError(f"loss {name} declares targets {targets!r}",
                         "declare targets as a list of array names, e.g. ['y_box', 'y_cls']")
    return tuple(targets)


def default_loss(num_classes: Optional[int], targets: list, model: str,
                 data: str) -> LossSpec:
    """Without ``--loss``: cross-entropy when the model's first output is class logits and the
    data's one target holds integer labels; else a UsageError asking for ``--loss``."""
    one = targets[0] if len(targets) == 1 else None
    if num_classes and one is not None and (one.ndim == 1 or one.shape[1:] == (1,)) \
            and np.issubdtype(one.dtype, np.integer):
        return LossSpec(DEFAULT, DEFAULT)
    what = ", ".join(f"{t.dtype} {list(t.shape[1:])}" for t in targets)
    if num_classes:
        problem = (f"{data} gives targets of {what} per sample, not one integer class label "
                   f"for model {model}: no default loss fits")
    else:
        problem = (f"model {model} has no class-logits output (and {data} gives targets of "
                   f"{what} per sample): no default loss fits")
    raise UsageError(problem, FIX)


def build_loss(spec: LossSpec, outputs: int = 1):
    """The loss as a cell ``loss(outputs, targets) -> scalar`` (two tuples: the network's
    ``outputs`` outputs and the targets), outputs cast to fp32 first; a factory's errors and
    an argument count that fits neither all outputs nor the first are one line."""
    from mindspore import nn

    first_only = True
    if spec.kind == "factory":
        assert spec.factory is not None  # a factory reference is loaded with its function
        try:
            fn = spec.factory()
        except Exception as exc:
            raise UsageError(f"loss {spec.name}() raised {type(exc).__name__}: "
                             f"{first_line(exc)}", "fix the loss factory") from None
        if not callable(fn):
            raise UsageError(f"loss {spec.name}() returned {type(fn).__name__}, not a cell or "
                             "function", FIX)
        first_only = _first_only(fn, spec, outputs)
    else:
        fn = {"cross-entropy": lambda: nn.CrossEntropyLoss(),
              "token-cross-entropy": lambda: nn.CrossEntropyLoss(ignore_index=spec.ignore_index),
              "mse": nn.MSELoss, "l1": nn.L1Loss,
              "smooth-l1": lambda: nn.SmoothL1Loss(beta=1.0, reduction="mean"),
              "bce": nn.BCEWithLogitsLoss}[spec.kind]()
    return _loss_cell_class()(fn, first_only, spec.kind == "token-cross-entropy")


def _first_only(fn, spec: LossSpec, outputs: int) -> bool:
    """Whether a factory's loss takes only the first output (it takes one fewer argument
    than all outputs and the targets)."""
    arity = loss_arity(fn)
    n = len(spec.targets)
    if arity is None or arity[0] <= outputs + n <= arity[1]:
        return False
    if outputs > 1 and arity[0] <= 1 + n <= arity[1]:
        return True
    takes = f"{arity[0]}" if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
    raise UsageError(f"loss {spec.name} takes {takes} argument(s), but the network gives "
                     f"{outputs} output(s) and the loss {n} target(s) ({', '.join(spec.targets)})",
                     "make it take the outputs, then the targets (declare `targets` on the "
                     "factory to name them)")


@functools.lru_cache(maxsize=None)
def _loss_cell_class():
    """One class for the process: MindSpore's compile caches key on the class's id, which a
    class made per call and collected could hand to another."""
    import mindspore as ms
    from mindspore import nn, ops

    class Fp32Loss(nn.Cell):
        """``fn`` on the network's outputs cast to fp32, then the targets."""

        takes_tuples = True

        def __init__(self, fn, first_only: bool, token: bool):
            super().__init__()
            self.fn = fn
            self.first_only = first_only
            self.token = token

        def construct(self, outs, ys):
            cast = ()
            for out in outs:
                if out.dtype == ms.float16 or out.dtype == ms.bfloat16:
                    out = ops.cast(out, ms.float32)
                cast = cast + (out,)
            if self.token:  # (N, T, V) logits and (N, T) tokens as (N*T, V) and (N*T,)
                logits = cast[0]
                return self.fn(logits.reshape(-1, logits.shape[-1]), ys[0].reshape(-1))
            args = (cast[0],) + ys if self.first_only else cast + ys
            return self.fn(*args)

    return Fp32Loss


def loss_arity(fn) -> Optional[tuple]:
    """(least, most) positional arguments ``fn`` (a function or a cell) takes; None: any."""
    target = fn.construct if hasattr(fn, "construct") and hasattr(fn, "cells") else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    least = sum(1 for p in positional if p.default is p.empty)
    return least, len(positional)


def check_shapes(spec: LossSpec, outputs: list, targets: list, names: tuple) -> None:
    """A built-in's targets against the network's first output (rows left out): one line
    naming the arrays when they cannot fit."""
    if spec.kind in ("cross-entropy", "factory"):
        return
    out, y = outputs[0], targets[0]
    row_out, row_y = list(out.shape[1:]), list(y.shape[1:])
    if spec.kind == "token-cross-entropy":
        ok = out.ndim == 3 and row_y == row_out[:1]
        want = "outputs (N, T, V) and targets (N, T)"
    else:
        ok = row_y == row_out
        want = "targets of the first output's shape"
    if not ok:
        fits = ["N", *(row_out[:1] if out.ndim == 3 else row_out)]
        raise UsageError(f"loss {spec.name} takes {want}: the network's first output is "
                         f"{['N', *row_out]}, target {names[0]} is {['N', *row_y]}",
                         f"store {names[0]} as {fits}, or pass the --loss that fits them")


def probe_loss(spec: LossSpec, loss_cell, outputs: list, targets: list, names: tuple) -> float:
    """Run the loss once on a few rows' fp32 outputs and targets (eagerly, and compiled for a
    factory's, as the training step compiles it): its value, or one line saying why the
    loss does not take (outputs, targets) and return a scalar."""
    import mindspore as ms

    check_shapes(spec, outputs, targets, names)
    outs = tuple(ms.Tensor(np.asarray(o, np.float32)) for o in outputs)
    ys = tuple(ms.Tensor(np.asarray(y)) for y in targets)
    shapes = (f"outputs {', '.join(str(list(o.shape)) for o in outputs)}, targets "
              f"{', '.join(f'{n} {list(y.shape)} {y.dtype}' for n, y in zip(names, targets))}")
    value: Any = None
    for graph in ((False, True) if spec.kind == "factory" else (False,)):
        try:
            with execution_mode(graph=graph):
                value = loss_cell(outs, ys)
        except Exception as exc:
            mode = "compiled (GRAPH_MODE)" if graph else "run"
            raise UsageError(f"loss {spec.name} fails when {mode} on the network's {shapes}: "
                             f"{type(exc).__name__}: {first_line(exc)}",
                             "make it take the outputs, then the targets, and return a scalar "
                             "(MindSpore operations only)") from None
    array = np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)
    if array.size != 1 or not np.issubdtype(array.dtype, np.floating):
        raise UsageError(f"loss {spec.name} returns {array.dtype} of shape {list(array.shape)} "
                         f"on the network's {shapes}, not a float scalar",
                         "return the mean (or sum) of the loss over the batch")
    return float(array.reshape(-1)[0])
