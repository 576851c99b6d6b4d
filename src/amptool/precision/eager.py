"""Running a network eagerly with a forward hook on every cell: the mode it runs in, the
hooks, the float tensors a hook sees, a cell computing in another dtype for a while, and
cells handing on recorded outputs instead of computing them (``replaying``).
Forward hooks fire only in PyNative mode; ``eager`` switches to it and back."""
from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np

from amptool.runtime.device import execution_mode


@contextlib.contextmanager
def eager(net, batch_stats: bool = False):
    """``net`` run eagerly (PyNative: forward hooks fire only there) in inference mode, its
    mode and the context's restored after. With ``batch_stats`` its batch normalizations
    normalize with the batch's own statistics, as a training step computes them, and get
    their running statistics back after; dropout stays off."""
    import mindspore as ms

    was_training = net.training
    norms = [c for _, c in net.cells_and_names() if isinstance(c, _batch_norms())] \
        if batch_stats else []
    saved = [(p, p.asnumpy().copy())  # asnumpy may share the parameter's memory
             for c in norms for p in c.get_parameters() if not p.requires_grad]
    with execution_mode(graph=False):
        net.set_train(False)
        for cell in norms:
            cell.set_train(True)
        try:
            yield
        finally:
            for param, value in saved:
                param.set_data(ms.Tensor(value))
            net.set_train(was_training)


def _batch_norms() -> tuple:
    """The batch normalization base classes: ``mindspore.nn``'s and ``mindspore.mint``'s."""
    from mindspore.nn.layer.normalization import _BatchNorm

    try:
        from mindspore.mint.nn.layer.normalization import _BatchNorm as _MintBatchNorm
    except ImportError:  # a MindSpore without mint
        return (_BatchNorm,)
    return (_BatchNorm, _MintBatchNorm)


def tensors(value) -> list:
    import mindspore as ms

    if isinstance(value, ms.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def float_arrays(value) -> list:
    """The floating-point tensors of ``value`` as numpy arrays, in their own dtype."""
    arrays = [t.asnumpy() for t in tensors(value)]
    return [a for a in arrays if np.issubdtype(a.dtype, np.floating)]


def floats(value) -> Optional[np.ndarray]:
    """The floating-point tensors of ``value`` as one flat float64 array (``flat64``)."""
    return flat64(float_arrays(value))


def flat64(arrays: list) -> Optional[np.ndarray]:
    """``arrays`` flattened into one float64 array (a single one without a second copy);
    None when there are none."""
    arrays = [a.ravel().astype(np.float64) for a in arrays]
    if len(arrays) < 2:
        return arrays[0] if arrays else None
    return np.concatenate(arrays)


class Hooks:
    """Forward hooks on every cell of ``net`` (the root is ''), calling ``record(path,
    cell, inputs, output)`` in execution order, and with ``enter`` forward pre-hooks calling
    ``enter(path, cell, inputs)`` as each cell is entered; removed on ``close``."""

    def __init__(self, net, record, enter=None):
        self.handles = []
        for path, cell in net.cells_and_names():
            if enter is not None:
                self.handles.append(cell.register_forward_pre_hook(self._enter(path, enter)))
            self.handles.append(cell.register_forward_hook(self._hook(path, record)))

    @staticmethod
    def _hook(path, record):
        def hook(cell, inputs, output):
            record(path, cell, inputs, output)
        return hook

    @staticmethod
    def _enter(path, enter):
        def hook(cell, inputs):
            enter(path, cell, inputs)
        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


_FLOAT_FLAGS = ("fp16", "fp32", "bf16")


@contextlib.contextmanager
def computing_in(cell, dtype):
    """``cell`` and what it holds computing in ``dtype`` (``to_float``) inside the block;
    each cell's own setting is put back after."""
    from mindspore._c_expression import Cell_, MixedPrecisionType

    missing = object()
    saved = [(c, dict(getattr(c, "_func_graph_flags", {})), c.mixed_precision_type,
              {k: c.__dict__.get(k, missing) for k in _FLOAT_FLAGS},
              c.__dict__.get("_cell_init_args", missing))
             for _, c in cell.cells_and_names()]
    cell.to_float(dtype)
    try:
        yield
    finally:
        for c, flags, mixed, attrs, init_args in saved:
            c._func_graph_flags = flags
            for key, value in attrs.items():
                if value is missing:
                    c.__dict__.pop(key, None)
                else:
                    c.__dict__[key] = value
            if init_args is not missing:
                c.__dict__["_cell_init_args"] = init_args
            c.mixed_precision_type = mixed
            Cell_.set_mixed_precision_type(c, MixedPrecisionType.NOTSET if mixed is None
                                           else mixed)


@contextlib.contextmanager
def replaying(calls: list, dtype, keep: frozenset = frozenset(), given: Optional[list] = None):
    """Inside the block, each cell of ``calls`` ((cell, output) in the order a construct
    called them) hands on its recorded outputs in turn instead of computing, its float32
    tensors cast to ``dtype`` (as the cell computing in ``dtype`` would hand them on) unless
    the cell's id is in ``keep``; a call past its recorded ones computes, and so does a call
    given a value that is not finite (the block's own arithmetic made it: a real run would
    carry it on). Constructs are put back after.

    With a list ``given``, a call hands on its recorded outputs whatever it is given, and
    what it was given is added to ``given``: the caller checks those values once the run is
    done (``all_finite``; a check per call would wait for each value to be computed) and,
    when one is not finite, runs again without ``given``."""
    import collections

    queues: dict = collections.OrderedDict()
    for cell, output in calls:
        queues.setdefault(id(cell), (cell, collections.deque()))[1].append(output)
    missing = object()
    saved = [(cell, cell.__dict__.get("construct", missing)) for cell, _ in queues.values()]
    for cell, queue in queues.values():
        cell.construct = _replay(cell, queue, None if id(cell) in keep else dtype, given)
    try:
        yield
    finally:
        for cell, construct in saved:
            if construct is missing:
                cell.__dict__.pop("construct", None)
            else:
                cell.__dict__["construct"] = construct


def _replay(cell, queue, dtype, given: Optional[list]):
    computes = type(cell).construct

    def construct(*args, **kwargs):
        if not queue:
            return computes(cell, *args, **kwargs)
        recorded = queue.popleft()
        if given is not None:
            given.append(args)
        elif not all_finite(args):  # the block's own arithmetic made what fp16 cannot hold
            return computes(cell, *args, **kwargs)  # (a mask's 0 * -inf): it goes on
        return _cast_floats(recorded, dtype)
    return construct


def all_finite(values) -> bool:
    """Whether every float16 or float32 tensor in ``values`` (nested tuples and lists
    included) is finite."""
    import mindspore as ms

    for value in values:
        if isinstance(value, (tuple, list)):
            if not all_finite(value):
                return False
        elif isinstance(value, ms.Tensor) and value.dtype in (ms.float16, ms.float32):
            if not np.isfinite(value.asnumpy()).all():
                return False
    return True


def _cast_floats(value, dtype):
    import mindspore as ms

    if dtype is not None and isinstance(value, ms.Tensor) and value.dtype == ms.float32:
        return value.astype(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    return value
