"""amptool: mixed-precision training, FP16 export and parity gates for MindSpore.

The public API is imported lazily, so ``import amptool`` (and ``amptool --help``) stays
free of MindSpore: ``from amptool import train, export, parity, search, convert_checkpoint``,
and ``AmpStep``, ``find_fp32_cells``, ``find_overflow`` for a training loop of one's own.
"""
import os as _os
from typing import Any as _Any

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

_API = ("AmpStep", "CkptConfig", "CkptReport", "DiffConfig", "DiffReport", "ExportConfig",
        "ExportReport", "ExportResult",
        "LaunchOptions", "ParityConfig", "ParityReport", "PipelineConfig", "PipelineResult",
        "RangePass", "SearchConfig", "SearchResult", "StepResult", "TrainConfig", "TrainSummary",
        "convert_checkpoint", "diff", "export", "find_fp32_cells", "find_overflow", "parity",
        "run", "search", "train")


def __getattr__(name: str) -> _Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module("amptool.api"), name)
    raise AttributeError(f"module 'amptool' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
