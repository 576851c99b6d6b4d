"""Applying a precision policy to a network: the cell rewriting every stage shares.

O2/O3 policies are applied at cell level the way MindSpore's own ``auto_mixed_precision``
does (``to_float`` flags plus an output cast around each kept cell), so paths and
parameter names of the network stay valid; O1 is MindSpore's operator-level white list.
"""
from __future__ import annotations

from .errors import UsageError
from .policy import Policy


def cell_paths(net) -> dict:
    """Path -> cell for every sub-cell, in definition order (the root is '')."""
    return {name: cell for name, cell in net.cells_and_names()}


def _ms_cell_type_names() -> set:
    from mindspore import nn

    return {name for name in dir(nn) if isinstance(getattr(nn, name), type)}


def resolve_fp32_cells(net, policy: Policy) -> dict:
    """Path -> cell of every cell the policy keeps in fp32 (outermost first).

    Raises one UsageError listing every unknown path and type.
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
    kept = {}
    for path, cell in paths.items():
        if path == "" or path in forced16:
            continue
        if any(path.startswith(k + ".") for k in kept):
            continue  # inside a cell already kept
        if (isinstance(cell, black) or type(cell).__name__ in policy.fp32_types
                or path in policy.fp32_cells):
            kept[path] = cell
    return kept


def ms_dtype(policy: Policy):
    import mindspore as ms

    return ms.float16 if policy.dtype == "float16" else ms.bfloat16


def _make_wrappers():
    import mindspore as ms
    from mindspore import nn, ops

    class KeepFP32(nn.Cell):
        """Runs a cell in fp32 and casts its output back to the compute dtype."""

        def __init__(self, cell, dtype):
            super().__init__(auto_prefix=False)
            self.cell = cell.to_float(ms.float32)
            self.dtype = dtype

        def construct(self, *args):
            return ops.cast(self.cell(*args), self.dtype)

    class OutputFP32(nn.Cell):
        """Casts a low-precision network's output to fp32."""

        def __init__(self, net):
            super().__init__(auto_prefix=False)
            self.net = net

        def construct(self, *args):
            return ops.cast(self.net(*args), ms.float32)

    return KeepFP32, OutputFP32


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
    KeepFP32, OutputFP32 = _make_wrappers()
    net.to_float(dtype)
    paths = cell_paths(net)
    for path in policy.fp16_cells:
        paths[path].to_float(dtype)
    for path, cell in kept.items():
        replace_cell(paths, path, KeepFP32(cell, dtype))
    return OutputFP32(net)


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
        in_kept = any(path == k or path.startswith(k + ".") for k in kept)
        if policy.level == "O1":
            import mindspore as ms
            dtype = low if isinstance(cell, tuple(ms.amp.get_white_list())) else "float32"
        else:
            dtype = "float32" if in_kept else low
        nparams = sum(int(p.size) for p in cell.get_parameters(expand=False))
        rows.append((path, type(cell).__name__, dtype, nparams))
    return rows
