"""amptool: mixed-precision training, FP16 export and parity gates for MindSpore.

The public API is imported lazily, so ``import amptool`` (and ``amptool --help``) stays
free of MindSpore: ``from amptool import train, export, parity, search, convert_checkpoint``.
"""
import os as _os

# MindSpore logs plugin-probe warnings (no Ascend/GPU libraries) at import; keep them to
# errors unless the user asked for more.
_os.environ.setdefault("GLOG_v", "3")

__version__ = "0.1.0"

_API = ("CkptConfig", "CkptReport", "ExportConfig", "ExportReport", "ExportResult",
        "LaunchOptions", "ParityConfig", "ParityReport", "PipelineConfig", "PipelineResult",
        "SearchConfig", "SearchResult", "TrainConfig", "TrainSummary", "convert_checkpoint",
        "export", "parity", "run", "search", "train")


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("amptool.api"), name)
    raise AttributeError(f"module 'amptool' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
