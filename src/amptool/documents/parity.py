"""The parity report as types: ``ParityReport`` with its reference (``ReportSide``), inputs
(``ReportInputs``) and one ``CandidateResult`` per candidate, each output's ``OutputResult``
with its ``OutputMetrics`` and ``Check`` rows. ``ParityReport.to_dict()`` is the JSON of
``amptool parity --json``/``--json-out`` and parity.json; ``from_dict`` reads the comparison's
dict at its boundary (``compare.parity``), refusing a key no type names.

Metrics are typed one field per figure, absent from the JSON while None: which figures an
output has depends on what it is (top-1, accuracy and their intervals only for class logits
with labels; the task figures only on the task metric), and no figure is ever written as
null, so the absent keys of today's JSON stay absent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from amptool.documents.figures import CI_SUFFIX, OutputMetrics, breaches, finding_text
from amptool.documents.door import (ADDED_FIELD, Document, Door, Real, from_json, optional_key,
                                    to_json)
from amptool.documents.layers import LayerReport, WeightsCheck
from amptool.documents.manifest import Deployment as DeploymentSettings
from amptool.documents.manifest import FileFacts, KeptCell
from amptool.stats.limits import Thresholds

PARITY_REPORT_VERSION = 1
"""The ``schema_version`` of the parity report this release writes and the newest it reads."""


@dataclass(frozen=True)
class Check(Document):
    """One limit checked on one output (or the task metric)."""

    metric: str
    """The metric bounded."""
    value: Any
    """Its value (None where the output has no such figure)."""
    limit: str
    """The limit, as ``>= 0.999``."""
    passed: Optional[bool]
    """Within the limit; None when it does not apply (``note`` says why)."""
    note: Optional[str] = optional_key()
    """Why the limit does not apply."""
    ci: Optional[List[Real]] = optional_key(follows="samples")
    """A counted figure's 95 % interval."""
    samples: Optional[int] = optional_key()
    """A counted figure's samples."""
    resolution: Optional[Real] = optional_key(follows="samples")
    """One sample's share: the finest step the figure can take."""
    under_resolved: Optional[bool] = optional_key()
    """True when the limit's budget is below one sample."""


@dataclass(frozen=True)
class OutputResult(Document):
    """One output of a candidate, as judged."""

    name: str
    """The output's name."""
    metrics: OutputMetrics
    """Its figures."""
    checks: List[Check]
    """The limits checked."""
    passed: bool
    """Every check passed."""
    thresholds: Thresholds
    """The limits it was held to."""


@dataclass(frozen=True)
class TaskResult(Document):
    """The task metric (``--metric``) judged on a candidate."""

    name: str
    """``task``."""
    spec: str
    """The metric, ``path/file.py:fn``."""
    metrics: OutputMetrics
    """``task_ref``, ``task_cand``, ``task_drop`` (and its interval over counted samples)."""
    checks: List[Check]
    """The drop budget checked, when set."""
    passed: bool
    """Every check passed."""


@dataclass(frozen=True)
class Finding(Document):
    """A note on the inputs, the reference or the gate itself."""

    kind: str
    """preprocess, degenerate_reference, fp16_emulated, under_resolved, not_localized, ..."""
    where: str
    """What it is about."""
    message: str
    """What was found."""
    fix: str
    """What to do about it."""


@dataclass(frozen=True)
class Culprit(Document):
    """The most specific explanation of a failed candidate."""

    kind: str
    """preprocess, weights or layer."""
    where: str
    """The input, the cell of the weight, or the first diverging cell."""
    message: str
    """What went wrong."""
    fix: str
    """What to do about it."""
    origin: Optional[str] = optional_key()
    """A layer culprit's origin: born there, inherited or input."""


@dataclass(frozen=True)
class ArtefactCulprit(Document):
    """A failed candidate's culprit, with the candidate it explains."""

    kind: str
    """preprocess, weights or layer."""
    where: str
    """The input, the cell of the weight, or the first diverging cell."""
    message: str
    """What went wrong."""
    fix: str
    """What to do about it."""
    artefact: str
    """The candidate."""
    origin: Optional[str] = optional_key()
    """A layer culprit's origin."""


@dataclass(frozen=True)
class Emulation(Document):
    """An fp16 candidate run with its kept cells in fp16 (its deployment settings ignored)."""

    weights: Any
    """Where its weights came from."""
    outputs: List[OutputResult]
    """Each output judged as the candidate's are."""


@dataclass(frozen=True)
class Deployment(Document):
    """An fp16 candidate's deployment settings and how it fares without them."""

    settings: Optional[DeploymentSettings]
    """The manifest's ``deployment`` section; None where it records none."""
    kept_fp32: Optional[List[KeptCell]]
    """The cells its policy keeps in fp32 (None: not found)."""
    emulated: Optional[Emulation]
    """The run without the settings (None: not emulated)."""
    depends: Optional[bool]
    """Whether its verdict depends on the kept cells."""
    message: Optional[str]
    """What the emulation found, or why there is none."""


@dataclass(frozen=True)
class CandidateResult(Document):
    """One candidate's verdict and everything it was judged on."""

    path: str
    """The artefact (or checkpoint)."""
    format: str
    """Its format."""
    precision: Optional[str]
    """fp32 or fp16; None when unknown."""
    kind: str
    """artefact or checkpoint."""
    passed: bool
    """Every output (and the task metric) within its limits."""
    thresholds: Thresholds
    """The candidate's limits."""
    outputs: List[OutputResult]
    """Each output's verdict."""
    task: Optional[TaskResult]
    """The task metric's verdict (with ``--metric``)."""
    findings: List[Finding]
    """Notes on the inputs, the reference and the gate."""
    fp16_faithful: Optional[bool]
    """Whether an fp16 candidate really computes in fp16 here (None: not fp16)."""
    caveat: Optional[str]
    """Why the verdict says nothing of fp16 safety, or None."""
    per_layer: Optional[LayerReport]
    """With ``--per-layer``, or for a failed candidate localized by itself: each cell's
    error along the depth."""
    weights: Optional[WeightsCheck]
    """The stored-weights check (with ``per_layer``)."""
    culprit: Optional[Culprit]
    """For a failed candidate: the most specific explanation, or None."""
    deployment: Optional[Deployment]
    """With ``--emulate-settings``, for an fp16 artefact."""
    files: Optional[List[FileFacts]] = optional_key()
    """Every file of the candidate as checked (path, size, sha256), the main file first:
    the bytes the verdict is about (absent from reports written before it was recorded)."""

    def checked_groups(self) -> list:
        """The outputs, then the task metric (each with name, metrics and checks)."""
        return list(self.outputs) + ([self.task] if self.task else [])


@dataclass(frozen=True)
class ReportSide(Document):
    """The reference a parity check compared against."""

    path: str
    """Its file."""
    kind: str
    """artefact, checkpoint or golden."""
    format: str
    """MINDIR, ONNX, AIR, CKPT, ..."""
    precision: Optional[str]
    """fp32 or fp16; None when unknown."""
    model: Any
    """The model reference, where known."""
    preprocess: Optional[Dict[str, Any]]
    """How its inputs were prepared; None for inputs fed as they are."""
    policy: Optional[Dict[str, Any]]
    """Its precision policy, where known."""


@dataclass(frozen=True)
class ReportInputs(Document):
    """The inputs every candidate was judged on."""

    description: str
    """Where they came from."""
    samples: int
    """How many."""
    labels: bool
    """Whether labels were found."""
    targets: Optional[List[str]] = field(metadata=ADDED_FIELD)
    """The target arrays fed to the task metric."""
    labels_from: Optional[str] = field(metadata=ADDED_FIELD)
    """Where the labels came from; None without labels."""


@dataclass(frozen=True)
class ParityReport(Document):
    """A parity verdict: ``passed`` and one entry per candidate, with every metric."""

    passed: bool
    """Every candidate passed."""
    reference: ReportSide
    """The reference side."""
    inputs: ReportInputs
    """The inputs compared on."""
    candidates: List[CandidateResult]
    """One entry per candidate."""
    golden_saved: Optional[str]
    """The ``--save-outputs`` file; None without."""
    device: str
    """Where the check ran."""
    seconds: Real
    """How long it took."""
    schema_version: Optional[int] = optional_key()
    """The version of this layout (``PARITY_REPORT_VERSION``)."""

    @classmethod
    def from_dict(cls, report: dict) -> "ParityReport":
        return from_json(cls, report, "parity report")

    def to_dict(self) -> dict:
        """The whole report, as ``amptool parity --json-out`` writes it."""
        return to_json(self)

    @property
    def samples(self) -> int:
        """Inputs every candidate was judged on."""
        return self.inputs.samples

    @property
    def reference_accuracy(self) -> Optional[Real]:
        """The reference's top-1 accuracy on the labels (None without labels or candidates)."""
        return next((o.metrics.ref_acc for c in self.candidates for o in c.outputs
                     if o.metrics.ref_acc is not None), None)

    def candidate(self, path: str) -> Optional[CandidateResult]:
        """The candidate at ``path`` (None: no such candidate)."""
        return next((c for c in self.candidates if c.path == path), None)

    def culprits(self) -> List[ArtefactCulprit]:
        """Each failed candidate's culprit, with the candidate's path as ``artefact``."""
        return [ArtefactCulprit(c.culprit.kind, c.culprit.where, c.culprit.message,
                                c.culprit.fix, c.path, c.culprit.origin)
                for c in self.candidates if c.culprit]

    def verdict(self, path: str):
        """The ``CandidateVerdict`` on the candidate at ``path`` (None: no such candidate)."""
        cand = self.candidate(path)
        return None if cand is None else candidate_verdict(cand)


@dataclass(frozen=True)
class Drop(Document):
    """The checked accuracy drop of a candidate (else its top-1 agreement) with its 95 %
    interval and the samples counted."""

    metric: str
    """``acc_drop_clear`` or ``top1_agree_clear``."""
    value: Any
    """Its value."""
    ci: Optional[List[Real]]
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
    logits_accuracy: Optional[Real] = None
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
    def accuracy(self) -> Optional[Real]:
        """The candidate's top-1 accuracy on the labels (None without labels or logits)."""
        return self.metrics.cand_acc if self.metrics.cand_acc is not None \
            else self.logits_accuracy

    @property
    def cosine(self) -> Optional[Real]:
        """The lowest cosine over the outputs (NaN where an output holds NaN/Inf)."""
        from amptool.stats.judge import lowest_cosine

        return lowest_cosine([m.cosine for m in self._all_metrics()])

    @property
    def max_abs(self) -> Optional[Real]:
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


PARITY_REPORT = Door(ParityReport, "parity report",
                     "write it again with 'amptool parity ... --json-out FILE'",
                     PARITY_REPORT_VERSION, "amptool parity report", "parity-report.schema.json")
"""The parity report's door (``--json-out``, ``--json``, parity.json)."""
