"""The public Python API: one call per stage, each taking its config dataclass (``verify``
its artefact and where its checks are) and returning a typed result: dataclasses read by
attribute (frozen, but for the export's ``ExportReport`` and ``ExportResult`` and the
checkpoint conversion's ``CkptReport``), with ``to_dict()``, the JSON its command prints
with ``--json`` (``export --json`` prints the list under ``ExportReport.to_dict()``'s
``artefacts``); the documents among them pass ``amptool.documents.door``.

``from amptool import train, export, parity, search, convert_checkpoint, run, diff,
verify``: each name is the stage's one entry, the function its command calls too (``train``
is ``amptool.train.run.run_training``, ``convert_checkpoint(cfg: CkptConfig) -> CkptReport``
is ``amptool.convert.ckpt.convert_checkpoint``). The calls never print or exit: failures raise
``amptool.errors.AmpToolError`` (``CheckFailed`` for a diverged run); a parity breach is a
report whose ``passed`` is False.

For a training loop of one's own: ``AmpStep`` (the step ``amptool train`` runs:
``step(*inputs, *targets) -> StepResult``), ``find_fp32_cells`` (the ``--policy auto`` range
pass over one's batches) and ``find_overflow`` (forward-overflow forensics on one batch).
"""
from __future__ import annotations

from amptool.convert.ckpt import CkptReport, convert_checkpoint
from amptool.convert.config import CkptConfig, SearchConfig
from amptool.convert.result import SearchResult
from amptool.convert.search import search_policy
from amptool.documents.parity import ParityReport
from amptool.documents.training import TrainSummary
from amptool.documents.diff import DiffReport
from amptool.export.api import ExportReport, ExportResult
from amptool.export.api import export as export_artefacts
from amptool.export.config import ExportConfig
from amptool.gate.diff import diff
from amptool.gate.diffconfig import DiffConfig
from amptool.gate.verify import Verification, verify
from amptool.parity.compare import parity as check_parity
from amptool.parity.config import ParityConfig
from amptool.pipeline import PipelineResult, run_pipeline
from amptool.pipelineconfig import PipelineConfig
from amptool.train.ampstep import AmpStep, RangePass, StepResult, find_fp32_cells, find_overflow
from amptool.train.config import LaunchOptions, TrainConfig
from amptool.train.run import run_training

train = run_training
"""``train(cfg: TrainConfig, on_event=None, explicit=(), launch=None) -> TrainSummary``
(``amptool.train.run.run_training``)."""
export = export_artefacts
"""``export(cfg: ExportConfig) -> ExportReport`` (``amptool.export.api.export``)."""
parity = check_parity
"""``parity(cfg: ParityConfig) -> ParityReport`` (``amptool.parity.compare.parity``)."""
search = search_policy
"""``search(cfg: SearchConfig, on_event=None) -> SearchResult``: find the cells that must
stay fp32 for the fp16 network to pass; write the policy."""
run = run_pipeline
"""``run(cfg: PipelineConfig, on_event=None) -> PipelineResult``: train, export fp32/fp16
MINDIR (+ ONNX), check parity."""
# ``diff(cfg: DiffConfig) -> DiffReport`` (``amptool.gate.diff.diff``): two parity reports
# compared; a regression is a report whose ``passed`` is False. ``verify(artefact, ledger=,
# report=) -> Verification`` (``amptool.gate.verify.verify``): whether those bytes passed.

__all__ = ["AmpStep", "CkptConfig", "CkptReport", "DiffConfig", "DiffReport", "ExportConfig",
           "ExportReport", "ExportResult",
           "LaunchOptions", "ParityConfig", "ParityReport", "PipelineConfig", "PipelineResult",
           "RangePass", "SearchConfig", "SearchResult", "StepResult", "TrainConfig", "TrainSummary",
           "Verification", "convert_checkpoint", "diff", "export", "find_fp32_cells",
           "find_overflow", "parity", "run", "search", "train", "verify"]
