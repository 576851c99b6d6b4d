"""Resolve ``--model``: a built-in sample name or ``path/to/file.py:factory``."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from amptool.errors import UsageError


def model_names() -> list[str]:
    from .models import REGISTRY

    return sorted(REGISTRY)


def resolve_model(name: str):
    """Return a ``ModelSpec`` for a registry name or a ``file.py:factory`` reference."""
    from amptool.device import import_mindspore

    import_mindspore()
    from .models import REGISTRY, ModelSpec

    if name in REGISTRY:
        return REGISTRY[name]
    if ":" not in name or not name.split(":", 1)[0].endswith(".py"):
        raise UsageError(f"unknown model '{name}'",
                         f"use one of {', '.join(sorted(REGISTRY))} or path/to/file.py:factory")
    path_text, factory_name = name.rsplit(":", 1)
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"model file {path} does not exist", "check the path before ':factory'")
    module_name = f"amptool_user_model_{abs(hash(str(path.resolve())))}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise UsageError(f"model file {path} failed to import: {type(exc).__name__}: {exc}",
                         "fix the error in that file") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"model file {path} has no callable '{factory_name}'",
                         "name a function that returns an nn.Cell after the ':'")
    probe = _call_factory(factory, path, factory_name)
    input_shape = getattr(probe, "input_shape", getattr(factory, "input_shape", None))
    num_classes = getattr(probe, "num_classes", getattr(factory, "num_classes", None))
    if not _is_shape(input_shape) or not isinstance(num_classes, int) or num_classes < 2:
        raise UsageError(f"model {name} does not declare input_shape (C, H, W) and num_classes",
                         "set both as attributes of the returned cell or of the factory")

    def build(num_classes=num_classes):
        return _call_factory(factory, path, factory_name)

    return ModelSpec(name, build, tuple(int(v) for v in input_shape), num_classes,
                     f"user model {factory_name} from {path}")


def _is_shape(value) -> bool:
    return (isinstance(value, (tuple, list)) and len(value) == 3
            and all(isinstance(v, int) and v > 0 for v in value))


def _call_factory(factory, path, factory_name):
    from mindspore import nn

    try:
        cell = factory()
    except Exception as exc:
        raise UsageError(f"{path}:{factory_name}() raised {type(exc).__name__}: {exc}",
                         "fix the factory") from None
    if not isinstance(cell, nn.Cell):
        raise UsageError(f"{path}:{factory_name}() returned {type(cell).__name__}, not an nn.Cell",
                         "return a mindspore.nn.Cell from the factory")
    return cell
