"""The public Python API: one call per stage, each taking its config dataclass and
returning a typed result with ``to_dict()``.

``from amptool import train, export, parity, search, convert_checkpoint, run`` (the first
three are the stage packages themselves, callable). The calls never print or exit:
failures raise ``amptool.errors.AmpToolError`` (``CheckFailed`` for a diverged run); a
parity breach is a report whose ``passed`` is False.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import amptool.export
import amptool.parity
import amptool.train
from amptool.convert.ckpt import CkptConfig, CkptReport
from amptool.convert.search import SearchConfig, SearchResult
from amptool.export.api import ExportConfig, ExportReport, ExportResult
from amptool.parity.compare import ParityReport
from amptool.parity.config import ParityConfig
from amptool.pipeline import PipelineConfig
from amptool.train.config import LaunchOptions, TrainConfig
from amptool.train.summary import TrainSummary

Callback = Optional[Callable[[dict], None]]

train = amptool.train
"""``train(cfg: TrainConfig, on_event=None, explicit=(), launch=None) -> TrainSummary``."""
export = amptool.export
"""``export(cfg: ExportConfig) -> ExportReport``."""
parity = amptool.parity
"""``parity(cfg: ParityConfig) -> ParityReport``."""

__all__ = ["CkptConfig", "CkptReport", "ExportConfig", "ExportReport", "ExportResult",
           "LaunchOptions", "ParityConfig", "ParityReport", "PipelineConfig", "PipelineResult",
           "SearchConfig", "SearchResult", "TrainConfig", "TrainSummary", "convert_checkpoint",
           "export", "parity", "run", "search", "train"]


@dataclass
class PipelineResult:
    """What ``amptool run`` reports: training, artefacts and the parity verdict."""

    passed: bool
    summary: dict = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.summary)


def search(cfg: SearchConfig, on_event: Callback = None) -> SearchResult:
    """Find the cells that must stay fp32 for the fp16 network to pass; write the policy."""
    from amptool.convert.search import search_policy

    return search_policy(cfg, on_event=on_event)


def convert_checkpoint(cfg: CkptConfig) -> CkptReport:
    """Convert a checkpoint's float entries to fp16 or fp32."""
    from amptool.convert.ckpt import convert_checkpoint as convert

    return convert(cfg)


def run(cfg: PipelineConfig, on_event: Callback = None) -> PipelineResult:
    """Train, export fp32/fp16 MINDIR (+ ONNX), check parity."""
    from amptool.pipeline import run_pipeline

    summary = run_pipeline(cfg, on_event=on_event)
    return PipelineResult(summary["passed"], summary)
