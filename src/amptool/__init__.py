"""amptool: mixed-precision training, FP16 export and parity gates for MindSpore.

The public API is imported on first use, so ``import amptool`` (and ``amptool --help``)
imports neither numpy nor MindSpore: ``from amptool import train, export, parity, search,
run, convert_checkpoint, diff, verify`` are the stages' entry functions (``amptool.api``);
the configs (``TrainConfig``, ``ExportConfig``, ..., ``DiffConfig``) come from their config
modules, without the engine; ``AmpStep``, ``find_fp32_cells``, ``find_overflow`` serve a
training loop of one's own.

``train``, ``export`` and ``parity`` are also the names of the stage packages
(``amptool.train`` is the folder ``train/``). Python binds a package on its parent when it
first loads it (``amptool.train = <package>``); this module keeps those three names bound
to the entry functions instead, so ``from amptool import train`` is the function whatever
was imported before; the package's modules stay reachable through it, so
``import amptool.train.config as c`` and ``from amptool.train.config import TrainConfig``
both work.
"""
import functools as _functools
import os as _os
import sys as _sys
import types as _types
from typing import TYPE_CHECKING, Any as _Any

# MindSpore logs plugin-probe warnings (no Ascend/GPU libraries) at import; keep them to
# errors unless the user asked for more.
_os.environ.setdefault("GLOG_v", "3")
# Protobuf picks its implementation once per process, at its first import. MindSpore asks
# for the pure-python one (it sets this variable at its import) because protobuf's default
# upb parser refuses a message past 2 GiB: a .ckpt is one such message. onnx imports
# protobuf too; whichever came first used to decide whether a big checkpoint could be read.
# Ask for it here, before anything amptool imports can load protobuf (a user's own choice
# stands; ``amptool.network.checkpoint`` refuses a checkpoint its parser cannot take).
_os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

__version__ = "0.1.0"

_CONFIGS = {"TrainConfig": "amptool.train.config", "LaunchOptions": "amptool.train.config",
            "ExportConfig": "amptool.export.config", "ParityConfig": "amptool.parity.config",
            "PipelineConfig": "amptool.pipelineconfig", "SearchConfig": "amptool.convert.config",
            "CkptConfig": "amptool.convert.config", "DiffConfig": "amptool.gate.diffconfig"}
"""The configs, each from its module: neither numpy nor MindSpore is imported for them."""
_ENGINE = ("AmpStep", "CkptReport", "DiffReport", "ExportReport", "ExportResult",
           "ParityReport", "PipelineResult", "RangePass", "SearchResult", "StepResult",
           "TrainSummary", "Verification", "convert_checkpoint", "diff", "export",
           "find_fp32_cells", "find_overflow", "parity", "run", "search", "train", "verify")
"""The entries and results, from ``amptool.api`` (which imports the engine)."""
_STAGE_ENTRIES = ("export", "parity", "train")
"""The entry functions named like a stage package."""

__all__ = sorted([*_CONFIGS, *_ENGINE])

if TYPE_CHECKING:  # what a type checker reads for ``from amptool import ...``
    from amptool.api import AmpStep as AmpStep
    from amptool.api import CkptConfig as CkptConfig
    from amptool.api import CkptReport as CkptReport
    from amptool.api import DiffConfig as DiffConfig
    from amptool.api import DiffReport as DiffReport
    from amptool.api import ExportConfig as ExportConfig
    from amptool.api import ExportReport as ExportReport
    from amptool.api import ExportResult as ExportResult
    from amptool.api import LaunchOptions as LaunchOptions
    from amptool.api import ParityConfig as ParityConfig
    from amptool.api import ParityReport as ParityReport
    from amptool.api import PipelineConfig as PipelineConfig
    from amptool.api import PipelineResult as PipelineResult
    from amptool.api import RangePass as RangePass
    from amptool.api import SearchConfig as SearchConfig
    from amptool.api import SearchResult as SearchResult
    from amptool.api import StepResult as StepResult
    from amptool.api import TrainConfig as TrainConfig
    from amptool.api import TrainSummary as TrainSummary
    from amptool.api import Verification as Verification
    from amptool.api import convert_checkpoint as convert_checkpoint
    from amptool.api import diff as diff
    from amptool.api import export as export
    from amptool.api import find_fp32_cells as find_fp32_cells
    from amptool.api import find_overflow as find_overflow
    from amptool.api import parity as parity
    from amptool.api import run as run
    from amptool.api import search as search
    from amptool.api import train as train
    from amptool.api import verify as verify


def __getattr__(name: str) -> _Any:
    if name in _CONFIGS or name in _ENGINE:
        import importlib

        value = getattr(importlib.import_module(_CONFIGS.get(name, "amptool.api")), name)
        if name in _STAGE_ENTRIES:
            value = _Entry(name, value)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'amptool' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(list(globals()) + __all__)


class _Entry:
    """A stage's entry function where the stage package's name stands (``amptool.train``):
    calling it runs the stage; a name it does not have is the package's, so the package's
    modules stay reachable through it (``import amptool.train.config as c``)."""

    def __init__(self, stage: str, function: _Any) -> None:
        _functools.update_wrapper(self, function)  # name, docstring, signature (__wrapped__)
        self._package = f"amptool.{stage}"
        self._function = function

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        return self._function(*args, **kwargs)

    def __getattr__(self, name: str) -> _Any:
        if name.startswith("_"):  # not the package's modules (nor this object half-made)
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module(self._package), name)

    def __repr__(self) -> str:
        return f"<amptool entry {self._function.__module__}.{self._function.__name__}>"


class _Package(_types.ModuleType):
    """``amptool`` itself: a stage package loading does not rebind ``train``, ``export``
    or ``parity`` (the entry functions) to itself."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name in _STAGE_ENTRIES and isinstance(value, _types.ModuleType):
            return  # the import system binding amptool.<stage> as it loads the package
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
