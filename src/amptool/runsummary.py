"""What ``amptool run`` sums up (summary.json, ``amptool run --json``): ``PipelineSummary``
with the training's figures, one ``ArtefactRow`` per artefact and the parity verdict;
``Drop``, a candidate's checked accuracy drop, is parity's too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from amptool.jsontypes import from_json, optional_key, to_json
from amptool.parityreport import (
    CI_SUFFIX,
    ArtefactCulprit,
    CandidateResult,
    Culprit,
    Deployment,
    OutputMetrics,
    OutputResult,
    breaches,
    finding_text,
)


@dataclass(frozen=True)
class Drop:
    """The checked accuracy drop of a candidate (else its top-1 agreement) with its 95 %
    interval and the samples counted."""

    metric: str
    """``acc_drop_clear`` or ``top1_agree_clear``."""
    value: Any
    """Its value."""
    ci: Optional[List[float]]
    """Its 95 % interval, where computed."""
    samples: Optional[int]
    """The samples counted."""


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate's verdict and the figures of every output it was judged on."""

    path: str
    """The candidate."""
    passed: bool
    """Every output (and the task metric) within its limits."""
    caveat: Optional[str]
    """Why the verdict says nothing of fp16 safety (fp16 not exercised), or None."""
    culprit: Optional[Culprit]
    """The most specific explanation of a failure, or None."""
    metrics: OutputMetrics
    """The first output's metrics."""
    deployment: Optional[Deployment] = None
    """An fp16 candidate's deployment settings and the emulation without them; None for
    other candidates."""
    warnings: Tuple[str, ...] = ()
    """Lines saying a limit cannot be resolved by the samples counted (and the fix)."""
    logits_accuracy: Optional[float] = None
    """``cand_acc`` of the first output that has one (a detector's class logits are its
    second output)."""
    outputs: Tuple[OutputResult, ...] = ()
    """Every output as judged."""

    def _all_metrics(self) -> list:
        return [o.metrics for o in self.outputs] or [self.metrics]

    @property
    def drop(self) -> Optional[Drop]:
        """The checked accuracy drop with its 95 % interval and sample count, else the
        top-1 agreement's, of the first output that has one (None without class logits)."""
        for name in ("acc_drop_clear", "top1_agree_clear"):
            for m in self._all_metrics():
                if getattr(m, name) is not None:
                    return Drop(name, getattr(m, name), getattr(m, name + CI_SUFFIX),
                                m.counted)
        return None

    @property
    def accuracy(self) -> Optional[float]:
        """The candidate's top-1 accuracy on the labels (None without labels or logits)."""
        return self.metrics.cand_acc if self.metrics.cand_acc is not None \
            else self.logits_accuracy

    @property
    def cosine(self) -> Optional[float]:
        """The lowest cosine over the outputs (NaN where an output holds NaN/Inf)."""
        from amptool.judge import lowest_cosine

        return lowest_cosine([m.cosine for m in self._all_metrics()])

    @property
    def max_abs(self) -> Optional[float]:
        """The largest absolute error over the outputs."""
        values = [m.max_abs for m in self._all_metrics() if m.max_abs is not None]
        return max(values) if values else None

    @property
    def failed_outputs(self) -> list:
        """``(name, breaches)`` of each output that failed its checks."""
        return [(o.name, breaches(o)) for o in self.outputs if not o.passed]


def candidate_verdict(cand: CandidateResult) -> CandidateVerdict:
    """The verdict on one candidate of a report."""
    return CandidateVerdict(
        cand.path, cand.passed, cand.caveat, cand.culprit, cand.outputs[0].metrics,
        cand.deployment,
        tuple(finding_text(f) for f in cand.findings if f.kind == "under_resolved"),
        next((o.metrics.cand_acc for o in cand.outputs if o.metrics.cand_acc is not None),
             None),
        tuple(cand.outputs))


@dataclass(frozen=True)
class TrainFigures:
    """The training stage's figures (a ``TrainSummary``'s)."""

    val_acc: Optional[float]
    """Held-out accuracy at the end; None for a run scored otherwise."""
    best_acc: Optional[float]
    """Best held-out accuracy; None for a run scored otherwise."""
    loss: str
    """The loss's name."""
    steps: int
    """Optimizer steps."""
    overflow_steps: int
    """Steps skipped on an overflow."""
    loss_scale: float
    """The final loss scale."""
    policy: str
    """The policy, as ``Policy.describe()`` words it."""
    device: str
    """Where it trained."""
    seconds: float
    """How long it took."""
    score: Optional[str] = optional_key()
    """The score's name when it is not accuracy (the four score keys absent otherwise)."""
    val_score: Optional[float] = optional_key(follows="score")
    """The score after the last epoch."""
    best_score: Optional[float] = optional_key(follows="score")
    """The best score."""
    val_loss: Optional[float] = optional_key(follows="score")
    """The held-out loss after the last epoch."""


@dataclass(frozen=True)
class OutputRow:
    """One output of a candidate as judged."""

    name: str
    """The output's name."""
    passed: bool
    """Every check of it passed."""
    cosine: Optional[float]
    """Its cosine to the reference."""
    max_abs_scaled: Optional[float]
    """Its largest error over max(1, the reference's largest magnitude)."""
    breaches: List[str]
    """Its failed checks, as ``metric value (limit ...)`` texts."""


@dataclass(frozen=True)
class DeploymentRow:
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
class ArtefactRow:
    """One artefact and its verdict; the candidates' keys are absent from the reference's."""

    format: str
    """Its format."""
    precision: str
    """Its precision."""
    path: str
    """Its file."""
    size: int
    """Bytes of all its files."""
    size_ratio: Optional[float]
    """Its size over the fp32 artefact's of its format; None for the reference."""
    accuracy: Optional[float]
    """Top-1 accuracy on the labels; None without labels or logits."""
    verdict: str
    """reference, PASS or FAIL (``*``: a caveat)."""
    cosine: Optional[float] = optional_key(follows="outputs")
    """The lowest cosine over the outputs."""
    max_abs: Optional[float] = optional_key(follows="outputs")
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
class ParityFigures:
    """The parity stage's verdict."""

    passed: bool
    """Every candidate passed."""
    samples: int
    """Inputs compared on."""
    culprits: List[ArtefactCulprit]
    """Each failed candidate's culprit with its ``artefact``."""


@dataclass(frozen=True)
class PipelineSummary:
    """summary.json: what ``amptool run`` did."""

    schema_version: int
    """The version of this layout (``amptool.records.SUMMARY_VERSION``)."""
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
    seconds_by_stage: Dict[str, float]
    """Time of each stage."""
    warnings: List[str]
    """What was skipped on the way, one line each."""
    seconds: float
    """Time of the whole run."""

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PipelineSummary":
        return from_json(cls, data, "pipeline summary")
