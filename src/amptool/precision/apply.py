"""Applying a precision policy to a network: the cell rewriting every stage shares.

O2/O3 policies are applied at cell level with MindSpore's ``to_float`` flags, so paths and
parameter names of the network stay valid; O1 is MindSpore's operator-level white list.

A cell kept in fp32 casts its inputs up and hands its fp32 output to its consumers as it
is: values beyond float16's range pass unharmed from one kept cell to the next. The cast
down happens at the input of each low-precision cell (its ``to_float`` flag) and the
network's output is cast to fp32. A cell whose sub-cells are all kept is kept itself, so
the operators of its own ``construct`` compute in fp32 too (every cell kept: the whole
network runs in fp32).

One exception: a kept cell whose output always lies within float16's range (Softmax,
Sigmoid, Tanh...) casts its output back to the low dtype, as that cast cannot overflow.
In graph mode an operator of a low-precision parent that takes both a kept cell's fp32
output and a float16 value follows type promotion (Add, Mul, Concat, Select: fp32) or,
for MatMul, BatchMatMul and Stack, refuses to compile; attention's softmax feeding a
MatMul is the common case, and the cast back keeps it compiling. In graph mode a
low-precision cell that holds other cells casts its inputs too: a kept cell's output
reaching another kept cell through such a cell's input arrives in the low dtype.
"""
from __future__ import annotations

from amptool.errors import UsageError
from amptool.network.models import flat_outputs
from amptool.precision.policy import Policy


def cell_paths(net) -> dict:
    """Path -> cell for every sub-cell, in definition order (the root is '')."""
    return {name: cell for name, cell in net.cells_and_names()}


def cell_origin(cell) -> str:
    """``Class (file.py:LINE)``: where the class of ``cell`` defines its ``construct``, so a
    kept cell maps to source (just the class where Python cannot tell)."""
    import inspect

    kind = type(cell).__name__
    try:
        func = type(cell).construct
        lines = inspect.getsourcelines(func)
        source = inspect.getsourcefile(func)
    except (TypeError, OSError, AttributeError):
        return kind
    from pathlib import Path

    return f"{kind} ({Path(source).name}:{lines[1]})" if source else kind


def cell_origins(net, paths) -> dict:
    """Path -> ``cell_origin`` for each of ``paths`` that names a cell of ``net``."""
    cells = cell_paths(net)
    return {p: cell_origin(cells[p]) for p in paths if p in cells}


def _ms_cell_type_names() -> set:
    from mindspore import nn

    return {name for name in dir(nn) if isinstance(getattr(nn, name), type)}


def within(path: str, outer: str) -> bool:
    """Whether the cell at ``path`` is the cell at ``outer`` or inside it ('' is the root)."""
    return outer == "" or path == outer or path.startswith(outer + ".")


def resolve_fp32_cells(net, policy: Policy) -> dict:
    """Path -> cell of every cell the policy keeps in fp32 (outermost first).

    A cell whose sub-cells are all kept is kept too (see ``close_kept``); the root is
    keyed ''. Raises one UsageError listing every unknown path and type.
    """
    import mindspore as ms

    paths = cell_paths(net)
    types_here = {type(c).__name__ for c in paths.values()}
    unknown_types = [t for t in policy.fp32_types
                     if t not in types_here and t not in _ms_cell_type_names()]
    unknown_paths = [p for p in policy.fp32_cells + policy.fp16_cells if p not in paths or p == ""]
    if unknown_types or unknown_paths:
        parts = []
        if unknown_paths:
            parts.append("unknown cell path(s) " + ", ".join(unknown_paths))
        if unknown_types:
            parts.append("unknown cell type(s) " + ", ".join(unknown_types))
        sample = ", ".join(p for p in list(paths)[1:8])
        raise UsageError("policy does not fit the network: " + "; ".join(parts),
                         f"use paths printed by 'amptool convert policy' (e.g. {sample})")
    if policy.level in ("O0", "O1"):
        return {}
    black = tuple(ms.amp.get_black_list()) if policy.level == "O2" else ()
    forced16 = set(policy.fp16_cells)
    kept: dict = {}
    for path, cell in paths.items():
        if path == "" or path in forced16:
            continue
        if any(path.startswith(k + ".") for k in kept):
            continue  # inside a cell already kept
        if (isinstance(cell, black) or type(cell).__name__ in policy.fp32_types
                or path in policy.fp32_cells):
            kept[path] = cell
    return close_kept(net, kept, forced16)


def close_kept(net, kept: dict, forced16=()) -> dict:
    """``kept`` (path -> cell) plus every cell whose sub-cells are all kept, outermost first.

    Such a cell's own ``construct`` then computes in fp32 as well; cells in ``forced16``
    are never added. The root, when added, is keyed ''.
    """
    paths = cell_paths(net)
    covered = {id(c) for cell in kept.values() for _, c in cell.cells_and_names()}
    for path in reversed(list(paths)):  # sub-cells before the cells holding them
        children = list(paths[path].cells())
        if children and path not in forced16 and all(id(c) in covered for c in children):
            covered.add(id(paths[path]))
    closed: dict = {}
    for path, cell in paths.items():
        if id(cell) in covered and not any(within(path, k) for k in closed):
            closed[path] = cell
    return closed


def ms_dtype(policy: Policy):
    import mindspore as ms

    return ms.float16 if policy.dtype == "float16" else ms.bfloat16


def set_precision(net, kept: dict, dtype) -> None:
    """Flag every cell of ``net`` to compute in ``dtype`` but the ``kept`` ones (fp32).

    A kept cell's output is not cast back: its consumers receive fp32, and a low-precision
    consumer casts it at its own input.
    """
    import mindspore as ms

    net.to_float(dtype)
    for cell in kept.values():
        cell.to_float(ms.float32)


def _bounded_output_types() -> tuple:
    from mindspore import nn

    return (nn.Softmax, nn.LogSoftmax, nn.Sigmoid, nn.Tanh, nn.HSigmoid, nn.Softsign)


def _cast_back(cell, dtype):
    from mindspore import nn, ops

    class CastBack(nn.Cell):
        """A kept cell whose output always fits the low dtype, with its output cast to it."""

        def __init__(self, inner):
            super().__init__(auto_prefix=False)
            self.cell = inner
            self.dtype = dtype

        def construct(self, *args):
            return ops.cast(self.cell(*args), self.dtype)

    return CastBack(cell)


def cast_outputs(net, dtype):
    """``net`` with each of its outputs cast to ``dtype`` (nested outputs unrolled into one
    flat tuple, as export writes them); ``dtype`` None unrolls them only."""
    from mindspore import nn, ops

    class CastOutputs(nn.Cell):
        """Casts every output of the network it wraps."""

        def __init__(self, inner):
            super().__init__(auto_prefix=False)
            self.net = inner
            self.wraps_network = True  # its cells are the network's, named under ``net``

        def construct(self, *args):
            out = self.net(*args)
            if dtype is None:
                return flat_outputs(out) if isinstance(out, (tuple, list)) else out
            if isinstance(out, (tuple, list)):  # several outputs: each one cast
                return tuple(ops.cast(o, dtype) for o in flat_outputs(out))
            return ops.cast(out, dtype)

    return CastOutputs(net)


def output_fp32(net):
    """``net`` with its outputs cast to fp32."""
    import mindspore as ms

    return cast_outputs(net, ms.float32)


_REWRITE_DIR: list = []


def _rewrite_o1(net, dtype):
    """MindSpore's O1 (operator white list, by rewrite) with its generated source kept
    in a private temp folder for the process's lifetime instead of the working folder."""
    import atexit
    import os
    import shutil
    import tempfile

    import mindspore as ms

    if not _REWRITE_DIR:
        _REWRITE_DIR.append(tempfile.mkdtemp(prefix="amptool-o1-"))
        atexit.register(shutil.rmtree, _REWRITE_DIR[0], True)
    cwd = os.getcwd()
    os.chdir(_REWRITE_DIR[0])
    try:
        return ms.amp.auto_mixed_precision(net, "O1", dtype)
    finally:
        os.chdir(cwd)


def apply_policy(net, policy: Policy):
    """Return ``net`` set up to compute under ``policy``; parameters stay as they are.

    The returned cell always produces fp32 outputs. Parameter names are unchanged.
    """

    if policy.level == "O0":
        return net
    dtype = ms_dtype(policy)
    if policy.level == "O1":
        return _rewrite_o1(net, dtype)
    kept = resolve_fp32_cells(net, policy)
    set_precision(net, kept, dtype)
    paths = cell_paths(net)
    bounded = _bounded_output_types()
    for path, cell in kept.items():
        if path and isinstance(cell, bounded):
            replace_cell(paths, path, _cast_back(cell, dtype))
    return output_fp32(net)


def replace_cell(paths: dict, path: str, new) -> None:
    """Put ``new`` where the cell at ``path`` was (``paths`` from ``cell_paths``)."""
    parent_path, _, child = path.rpartition(".")
    parent = paths[parent_path]
    parent._cells[child] = new
    if hasattr(parent, "cell_list"):  # SequentialCell keeps its own list of cells
        parent.cell_list = list(parent.cells())


def low_precision_params(net, policy: Policy) -> list:
    """Parameters that an fp16 artefact stores in the low dtype (all but kept cells')."""
    if policy.level == "O0":
        return []
    kept = resolve_fp32_cells(net, policy)
    kept_names = {p.name for cell in kept.values() for p in cell.get_parameters()}
    return [p for p in net.get_parameters()
            if p.name not in kept_names and p.dtype in _float_types()]


def _float_types():
    import mindspore as ms

    return (ms.float32, ms.float16, ms.bfloat16, ms.float64)


def cell_dtypes(net, policy: Policy) -> list:
    """(path, type name, dtype it computes in, parameter count) for each leaf cell."""
    kept = resolve_fp32_cells(net, policy)
    rows = []
    low = "float32" if policy.level == "O0" else policy.dtype
    for path, cell in cell_paths(net).items():
        if path == "" or list(cell.cells()):
            continue
        in_kept = any(within(path, k) for k in kept)
        if policy.level == "O1":
            import mindspore as ms
            dtype = low if isinstance(cell, tuple(ms.amp.get_white_list())) else "float32"
        else:
            dtype = "float32" if in_kept else low
        nparams = sum(int(p.size) for p in cell.get_parameters(expand=False))
        rows.append((path, type(cell).__name__, dtype, nparams))
    return rows
