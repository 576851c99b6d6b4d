"""Model references: ``--model`` as a sample name or ``path/to/file.py:factory``.

A reference resolves to a ``ModelSpec``: how to build the network and what it expects
(input shape (C, H, W) and class count). Every stage resolves models here.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import UsageError


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model reference."""

    name: str
    """The reference as given: a sample name or path/to/file.py:factory."""
    factory: Callable
    """Called with no arguments, returns a fresh ``nn.Cell``."""
    input_shape: tuple
    """(C, H, W) of one input sample."""
    num_classes: int
    """Width of the class-logits output."""
    summary: str = ""
    """One line saying what the network is."""

    def build(self):
        return self.factory()


def model_names() -> list[str]:
    from amptool.samples.models import SAMPLES

    return sorted(SAMPLES)


def sample_spec(name: str) -> ModelSpec:
    from amptool.samples.models import SAMPLES

    cls, input_shape, num_classes, summary = SAMPLES[name]
    return ModelSpec(name, functools.partial(cls, num_classes=num_classes), tuple(input_shape),
                     num_classes, summary)


def resolve_model(name: str) -> ModelSpec:
    """The ``ModelSpec`` of a sample name or a ``file.py:factory`` reference."""
    from .device import import_mindspore

    import_mindspore()
    from amptool.samples.models import SAMPLES

    if name in SAMPLES:
        return sample_spec(name)
    if ":" not in name or not name.rsplit(":", 1)[0].endswith(".py"):
        raise UsageError(f"unknown model '{name}'",
                         f"use one of {', '.join(sorted(SAMPLES))} or path/to/file.py:factory")
    path_text, factory_name = name.rsplit(":", 1)
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"model file {path} does not exist", "check the path before ':factory'")
    factory = getattr(_import_file(path), factory_name, None)
    if not callable(factory):
        raise UsageError(f"model file {path} has no callable '{factory_name}'",
                         "name a function that returns an nn.Cell after the ':'")
    probe = _call_factory(factory, path, factory_name)
    input_shape = getattr(probe, "input_shape", getattr(factory, "input_shape", None))
    num_classes = getattr(probe, "num_classes", getattr(factory, "num_classes", None))
    if not _is_shape(input_shape) or not isinstance(num_classes, int) or num_classes < 2:
        raise UsageError(f"model {name} does not declare input_shape (C, H, W) and num_classes",
                         "set both as attributes of the returned cell or of the factory")
    build = functools.partial(_call_factory, factory, path, factory_name)
    return ModelSpec(name, build, tuple(int(v) for v in input_shape), num_classes,
                     f"user model {factory_name} from {path}")


def _import_file(path: Path):
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
    return module


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
