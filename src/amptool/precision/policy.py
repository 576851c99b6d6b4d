"""Precision policy: which cells compute in fp16 and which stay fp32.

A policy is data: base level O0-O3, a low-precision dtype, cells kept in fp32 by type
name or by path, and cells forced to the low dtype by path. The built-in levels are
policies with empty lists. ``amptool.precision.apply`` applies a policy to a network.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from amptool.errors import DeviceError, UsageError
from amptool.files.configfile import read_config_file
from amptool.files.fileio import write_text

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

    def to_toml(self, notes: Optional[dict] = None) -> str:
        lines = _header(notes)
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"

    def to_text(self, fmt: str = "toml", notes: Optional[dict] = None) -> str:
        """The policy as a TOML, YAML or JSON document (``load_policy`` reads all three);
        ``notes`` (cell path -> why and where) become comments in TOML and YAML."""
        if fmt == "toml":
            return self.to_toml(notes)
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if fmt in ("yaml", "yml"):
            import yaml

            return "\n".join(_header(notes)) + "\n" + yaml.safe_dump(self.to_dict(),
                                                                     sort_keys=False)
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
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            errors.append(f"{name} must be a list of strings")
            value = ()
        lists[name] = tuple(value)
    if lvl in ("O0", "O1") and any(lists.values()):
        errors.append(f"level {lvl} takes no cell lists (O1 casts operators, not cells; "
                      "keep cells in fp32 with an O2 or O3 policy)")
    if errors:
        raise UsageError("bad precision policy: " + "; ".join(errors),
                         "fix the policy file or options")
    assert dt is not None  # an unknown dtype is one of the errors
    return Policy(lvl, dt, **lists)


_POLICY_KEYS = {f.name for f in dataclasses.fields(Policy)}


def policy_from_dict(data: dict, source: str = "policy") -> Policy:
    """The policy ``data`` holds; its unknown keys and bad values in one error."""
    unknown = sorted(set(data) - _POLICY_KEYS)
    problems = [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
    fix = f"known keys: {', '.join(sorted(_POLICY_KEYS))}"
    try:
        policy = make_policy(**{k: v for k, v in data.items() if k in _POLICY_KEYS})
    except UsageError as exc:
        problems.append(exc.problem)
        fix = f"{fix}; {exc.fix}" if unknown else exc.fix
    if problems:
        raise UsageError(f"{source}: " + "; ".join(problems), fix)
    return policy


def load_policy(path: str | Path) -> Policy:
    """Read a policy from a TOML, YAML or JSON file.

    A run.json or export manifest (a mapping with a ``policy`` mapping inside) is
    accepted too: its recorded policy is returned.
    """
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


def _header(notes: Optional[dict]) -> list:
    lines = ["# amptool precision policy"]
    for path, note in (notes or {}).items():
        lines.append(f"# fp32 cell {path}: {note}")
    return lines


def save_policy(policy: Policy, path: str | Path, force: bool = False,
                notes: Optional[dict] = None) -> Path:
    """Write ``policy`` atomically in the format its extension names (``notes``: cell path
    -> comment, in TOML and YAML)."""
    path = Path(path)
    text = policy.to_text(policy_format(path), notes)
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


def policy_for(policy_file=None, level=None, base: Policy | None = None) -> Policy:
    """The one rule every stage uses: a policy file if given, else a level if given, else
    ``base`` (itself defaulting to O2)."""
    if policy_file:
        return load_policy(policy_file)
    if level:
        return make_policy(level)
    return base if base is not None else make_policy("O2")


def export_policy(policy: Policy) -> Policy:
    """The policy an FP16 graph is built with: cell-level, float16.

    O0 and O1 runs get O2's cell rule (BatchNorm/LayerNorm kept fp32): an O1 operator list
    does not say which stored weights may be fp16. A bfloat16 policy keeps its cell lists
    and exports float16.
    """
    if policy.level in ("O0", "O1"):
        return make_policy("O2")
    return dataclasses.replace(policy, dtype="float16")
