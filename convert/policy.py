"""Precision policy: which cells compute in fp16 and which stay fp32.

A policy is data: base level O0-O3, a low-precision dtype, cells kept in fp32 by type
name or by path, and cells forced to the low dtype by path. The built-in levels are
policies with empty lists. O2/O3 policies are applied at cell level the way MindSpore's
own ``auto_mixed_precision`` does (``to_float`` flags plus an output cast around each
kept cell), so paths and parameter names of the network stay valid; O1 is MindSpore's
operator-level white list and takes no cell lists.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from amptool.errors import DeviceError, UsageError

LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = ("float16", "bfloat16")
_DTYPE_ALIASES = {"fp16": "float16", "float16": "float16", "half": "float16",
                  "bf16": "bfloat16", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class Policy:
    """A precision policy."""

    level: str = "O2"
    """Base AMP level: O0 fp32, O1 white-list ops in low precision, O2 all but the
    black-list cells (BatchNorm, LayerNorm), O3 everything."""
    dtype: str = "float16"
    """Low-precision dtype: float16, or bfloat16 where the device supports it."""
    fp32_types: tuple = ()
    """Cell class names kept in fp32 in addition to the level's black list."""
    fp32_cells: tuple = ()
    """Cell paths (as in ``cells_and_names``) kept in fp32."""
    fp16_cells: tuple = ()
    """Cell paths forced to the low dtype even if a type rule keeps them fp32."""

    @property
    def low_precision(self) -> bool:
        return self.level != "O0"

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items()}

    def to_toml(self) -> str:
        lines = ["# amptool precision policy"]
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"

    def to_text(self, fmt: str = "toml") -> str:
        """The policy as a TOML, YAML or JSON document (``load_policy`` reads all three)."""
        if fmt == "toml":
            return self.to_toml()
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if fmt in ("yaml", "yml"):
            import yaml

            return "# amptool precision policy\n" + yaml.safe_dump(self.to_dict(), sort_keys=False)
        raise UsageError(f"unknown policy file format '{fmt}'", "use .toml, .yaml, .yml or .json")

    def describe(self) -> str:
        extra = []
        if self.fp32_types:
            extra.append("fp32 types " + ",".join(self.fp32_types))
        if self.fp32_cells:
            extra.append("fp32 cells " + ",".join(self.fp32_cells))
        if self.fp16_cells:
            extra.append("fp16 cells " + ",".join(self.fp16_cells))
        if self.level == "O0":
            return "O0/float32"
        return f"{self.level}/{self.dtype}" + (f" ({'; '.join(extra)})" if extra else "")


def make_policy(level: str = "O2", dtype: str = "float16", fp32_types=(), fp32_cells=(),
                fp16_cells=()) -> Policy:
    """Validate and build a policy; every problem is reported in one error."""
    errors = []
    lvl = str(level).upper()
    if lvl not in LEVELS:
        errors.append(f"unknown level '{level}' (use one of {', '.join(LEVELS)})")
    dt = _DTYPE_ALIASES.get(str(dtype).lower())
    if dt is None:
        errors.append(f"unknown dtype '{dtype}' (use float16 or bfloat16)")
    lists = {}
    for name, value in (("fp32_types", fp32_types), ("fp32_cells", fp32_cells),
                        ("fp16_cells", fp16_cells)):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            errors.append(f"{name} must be a list of strings")
            value = ()
        lists[name] = tuple(value)
    if lvl in ("O0", "O1") and any(lists.values()):
        errors.append(f"level {lvl} takes no cell lists (O1 casts operators, not cells; "
                      "keep cells in fp32 with an O2 or O3 policy)")
    if errors:
        raise UsageError("bad precision policy: " + "; ".join(errors),
                         "fix the policy file or options")
    return Policy(lvl, dt, **lists)


_POLICY_KEYS = {f.name for f in dataclasses.fields(Policy)}


def policy_from_dict(data: dict, source: str = "policy") -> Policy:
    unknown = sorted(set(data) - _POLICY_KEYS)
    if unknown:
        raise UsageError(f"{source}: unknown key(s) {', '.join(unknown)}",
                         f"known keys: {', '.join(sorted(_POLICY_KEYS))}")
    try:
        return make_policy(**data)
    except UsageError as exc:
        raise UsageError(f"{source}: {exc.problem}", exc.fix) from None


def load_policy(path: str | Path) -> Policy:
    """Read a policy from a TOML, YAML or JSON file.

    A run.json or export manifest (a mapping with a ``policy`` mapping inside) is
    accepted too: its recorded policy is returned.
    """
    from amptool.config import read_config_file

    data = read_config_file(path)
    if isinstance(data.get("policy"), dict):
        data = data["policy"]
    return policy_from_dict(data, source=f"policy file {path}")


def policy_format(path: str | Path) -> str:
    """'toml', 'yaml' or 'json' from a policy file's extension."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in ("toml", "json", "yaml", "yml"):
        return "yaml" if suffix == "yml" else suffix
    raise UsageError(f"policy file {path} has an unknown extension '.{suffix}'",
                     "name it .toml, .yaml, .yml or .json")


def save_policy(policy: Policy, path: str | Path, force: bool = False) -> Path:
    """Write ``policy`` atomically in the format its extension names."""
    from amptool.fileio import write_text

    path = Path(path)
    text = policy.to_text(policy_format(path))
    if path.exists() and not force:
        raise UsageError(f"{path} already exists", "pass --force to overwrite it")
    if not path.parent.is_dir():
        raise UsageError(f"folder {path.parent} does not exist", "create it or choose another path")
    write_text(path, text)
    return path


def check_dtype_on_device(policy: Policy, device: str) -> None:
    if policy.low_precision and policy.dtype == "bfloat16" and device == "CPU":
        raise DeviceError("bfloat16 is not supported on CPU (MindSpore's CPU MatMul/Conv2D "
                          "kernels lack bf16)", "use dtype float16 on CPU, or run on Ascend")


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


def _ms_dtype(policy: Policy):
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
    import mindspore as ms

    if policy.level == "O0":
        return net
    dtype = _ms_dtype(policy)
    if policy.level == "O1":
        return _rewrite_o1(net, dtype)
    kept = resolve_fp32_cells(net, policy)
    KeepFP32, OutputFP32 = _make_wrappers()
    net.to_float(dtype)
    paths = cell_paths(net)
    for path in policy.fp16_cells:
        paths[path].to_float(dtype)
    for path, cell in kept.items():
        parent_path, _, child = path.rpartition(".")
        parent = paths[parent_path]
        parent._cells[child] = KeepFP32(cell, dtype)
        if isinstance(parent, ms.nn.SequentialCell):
            parent.cell_list = list(parent.cells())
    return OutputFP32(net)


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
