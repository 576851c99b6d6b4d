"""What ``amptool run`` sums up (summary.json, ``amptool run --json``): ``PipelineSummary``
with the training's figures, one ``ArtefactRow`` per artefact and the parity verdict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from amptool.documents.door import (ADDED_FIELD, Document, Door, Real, from_json, optional_key,
                                    to_json)
from amptool.documents.parity import ArtefactCulprit, Drop

SUMMARY_VERSION = 1
"""The ``schema_version`` of summary.json this release writes and the newest it reads."""


@dataclass(frozen=True)
class TrainFigures(Document):
    """The training stage's figures (a ``TrainSummary``'s)."""

    val_acc: Optional[Real]
    """Held-out accuracy at the end; None for a run scored otherwise."""
    best_acc: Optional[Real]
    """Best held-out accuracy; None for a run scored otherwise."""
    loss: str
    """The loss's name."""
    steps: int
    """Optimizer steps."""
    overflow_steps: int
    """Steps skipped on an overflow."""
    loss_scale: Real
    """The final loss scale."""
    policy: str
    """The policy, as ``Policy.describe()`` words it."""
    device: str
    """Where it trained."""
    seconds: Real
    """How long it took."""
    score: Optional[str] = optional_key()
    """The score's name when it is not accuracy (the four score keys absent otherwise)."""
    val_score: Optional[Real] = optional_key(follows="score")
    """The score after the last epoch."""
    best_score: Optional[Real] = optional_key(follows="score")
    """The best score."""
    val_loss: Optional[Real] = optional_key(follows="score")
    """The held-out loss after the last epoch."""


@dataclass(frozen=True)
class OutputRow(Document):
    """One output of a candidate as judged."""

    name: str
    """The output's name."""
    passed: bool
    """Every check of it passed."""
    cosine: Optional[Real]
    """Its cosine to the reference."""
    max_abs_scaled: Optional[Real]
    """Its largest error over max(1, the reference's largest magnitude)."""
    breaches: List[str]
    """Its failed checks, as ``metric value (limit ...)`` texts."""


@dataclass(frozen=True)
class DeploymentRow(Document):
    """An artefact's deployment settings and what ignoring them does."""

    needed: Optional[bool]
    """Whether the runtime must keep cells in fp32."""
    files: List[str]
    """The settings files written beside it."""
    kept_fp32: List[str]
    """The cells kept in fp32."""
    depends: Optional[bool]
    """Whether its verdict depends on the kept cells (with ``--emulate-settings``)."""
    message: Optional[str]
    """What running it without its settings does."""


@dataclass(frozen=True)
class ArtefactRow(Document):
    """One artefact and its verdict; the candidates' keys are absent from the reference's."""

    format: str
    """Its format."""
    precision: str
    """Its precision."""
    path: str
    """Its file."""
    size: int
    """Bytes of all its files."""
    size_ratio: Optional[Real]
    """Its size over the fp32 artefact's of its format; None for the reference."""
    accuracy: Optional[Real]
    """Top-1 accuracy on the labels; None without labels or logits."""
    verdict: str
    """reference, PASS or FAIL (``*``: a caveat)."""
    cosine: Optional[Real] = optional_key(follows="outputs")
    """The lowest cosine over the outputs."""
    max_abs: Optional[Real] = optional_key(follows="outputs")
    """The largest absolute error over the outputs."""
    caveat: Optional[str] = optional_key(follows="outputs")
    """Why the verdict says nothing of fp16 safety."""
    drop: Optional[Drop] = optional_key(follows="outputs")
    """The checked accuracy drop with its interval."""
    warnings: Optional[List[str]] = optional_key(follows="outputs")
    """Limits the samples cannot resolve."""
    outputs: Optional[List[OutputRow]] = optional_key()
    """Each output's verdict (candidates only)."""
    deployment: Optional[DeploymentRow] = optional_key()
    """Its deployment settings, where its manifest records them."""


@dataclass(frozen=True)
class ParityFigures(Document):
    """The parity stage's verdict."""

    passed: bool
    """Every candidate passed."""
    samples: int
    """Inputs compared on."""
    culprits: List[ArtefactCulprit]
    """Each failed candidate's culprit with its ``artefact``."""


@dataclass(frozen=True)
class PipelineSummary(Document):
    """summary.json: what ``amptool run`` did."""

    schema_version: Optional[int] = field(metadata=ADDED_FIELD)
    """The version of this layout (``SUMMARY_VERSION``); absent from summaries written before
    it existed."""
    passed: bool
    """The parity verdict."""
    config: Dict[str, Any]
    """The pipeline's ``PipelineConfig`` with its training config."""
    out: str
    """The output folder."""
    train: TrainFigures
    """The training stage."""
    artefacts: List[ArtefactRow]
    """One row per artefact, the reference first."""
    parity: ParityFigures
    """The parity stage."""
    seconds_by_stage: Dict[str, Real]
    """Time of each stage."""
    warnings: Optional[List[str]] = field(metadata=ADDED_FIELD)
    """What was skipped on the way, one line each."""
    seconds: Optional[Real] = field(metadata=ADDED_FIELD)
    """Time of the whole run."""

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PipelineSummary":
        return from_json(cls, data, "pipeline summary")


SUMMARY = Door(PipelineSummary, "summary", "run 'amptool run' again to rewrite it",
               SUMMARY_VERSION, "amptool run summary.json", "summary.schema.json")
"""summary.json's door (``amptool run --json`` prints the same document)."""
