"""What a finished training run reports: ``TrainSummary``, the summary of run.json, of the
``end`` event and of ``amptool train --json``, read by the pipeline and the HTML report."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from amptool.documents.door import Document, Real, from_json, optional_key, to_json


@dataclass(frozen=True)
class TrainSummary(Document):
    """What a finished run reports (``to_dict``: the ``summary`` of run.json and of the
    ``end`` event, and ``amptool train --json``)."""

    val_acc: Optional[Real]
    """Held-out accuracy after the last epoch (None when the run is scored otherwise: see
    ``score``, ``val_score``, ``best_score``, ``val_loss``)."""
    best_acc: Optional[Real]
    """The best held-out accuracy over the epochs (-1.0 before any; None when the run is
    scored otherwise)."""
    steps: int
    """Optimizer steps taken."""
    overflow_steps: int
    """Steps skipped on an overflow."""
    loss_scale: Real
    """The loss scale at the end."""
    samples_per_s: Real
    """Training throughput."""
    final_loss: Real
    """The training loss of the last step."""
    epochs: int
    """Epochs the run was asked for."""
    workers: int
    """Worker processes."""
    seconds: Real
    """How long it took."""
    out: str
    """The run folder."""
    model: str
    """The model's name."""
    policy: str
    """The policy the run trained under, as ``Policy.describe()`` words it."""
    device: str
    """The device the run trained on."""
    weights_sha256: str
    """sha256 over the trained parameters (``weights_digest``)."""
    loss: str
    """The loss's name."""
    score: Optional[str] = optional_key()
    """The held-out score's name when it is not accuracy (``metric``, ``neg_val_loss``);
    the four score keys are absent for a run scored by accuracy."""
    val_score: Optional[Real] = optional_key(follows="score")
    """The score after the last epoch."""
    best_score: Optional[Real] = optional_key(follows="score")
    """The best score over the epochs."""
    val_loss: Optional[Real] = optional_key(follows="score")
    """The held-out loss after the last epoch."""
    first_batch_tries: Optional[int] = optional_key()
    """Attempts the first batch took to find a loss scale without overflow, where counted."""
    already_finished: Optional[bool] = optional_key()
    """True when a resumed run had nothing left to train."""
    nodes: Optional[int] = optional_key()
    """Hosts a data-parallel run took (only a run launched across workers has the keys
    ``nodes``, ``global_batch``, ``logs`` and ``ranks_identical``)."""
    global_batch: Optional[int] = optional_key(follows="nodes")
    """Samples per step over all workers."""
    logs: Optional[str] = optional_key(follows="nodes")
    """The folder of the workers' logs."""
    ranks_identical: Optional[bool] = optional_key(follows="nodes")
    """Whether every rank ended with the same weights (their sha256 agree)."""

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainSummary":
        return from_json(cls, data, "training summary")
