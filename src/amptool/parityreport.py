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

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from amptool.artefact.manifest import Deployment as DeploymentSettings
from amptool.artefact.manifest import KeptCell
from amptool.jsontypes import from_json, optional_key, to_json
from amptool.layerreport import LayerReport, WeightsCheck
from amptool.limits import Thresholds

CI_SUFFIX = "_ci"
"""A metric's 95 % interval is reported beside it (``<metric>_ci``), not as a row."""


@dataclass(frozen=True)
class OutputMetrics:
    """Every figure computed on one output (or the task metric); ``*_ci``: a 95 % interval."""

    max_abs: Optional[float] = optional_key()
    """Largest absolute error."""
    max_abs_scaled: Optional[float] = optional_key()
    """``max_abs`` over max(1, the reference's largest magnitude)."""
    p999_abs_scaled: Optional[float] = optional_key()
    """The 99.9th percentile of the absolute error, scaled as ``max_abs_scaled``."""
    ref_absmax: Optional[float] = optional_key()
    """The reference's largest magnitude."""
    max_rel: Optional[float] = optional_key()
    """Largest relative error."""
    mean_abs: Optional[float] = optional_key()
    """Mean absolute error."""
    rmse: Optional[float] = optional_key()
    """Root mean square error."""
    cosine: Optional[float] = optional_key()
    """Cosine of the flattened outputs (NaN with NaN/Inf)."""
    rel_l2: Optional[float] = optional_key()
    """L2 norm of the error over the reference's."""
    outside_frac: Optional[float] = optional_key()
    """Share of elements outside atol + rtol * |reference|."""
    nonfinite: Optional[int] = optional_key()
    """NaN/Inf elements in the candidate's output."""
    top1_agree: Optional[float] = optional_key()
    """Share of samples whose top-1 class agrees (class logits)."""
    top1_agree_clear: Optional[float] = optional_key()
    """``top1_agree`` with near-tie flips counted as agreeing."""
    near_tie_flips: Optional[int] = optional_key()
    """Disagreements that are near ties."""
    tie_tol: Optional[float] = optional_key()
    """The margin below which a flip is a near tie."""
    counted: Optional[int] = optional_key()
    """Samples counted in the rates."""
    top1_agree_clear_ci: Optional[List[float]] = optional_key()
    """``top1_agree_clear``'s interval."""
    ref_acc: Optional[float] = optional_key()
    """The reference's top-1 accuracy on the labels."""
    cand_acc: Optional[float] = optional_key()
    """The candidate's top-1 accuracy on the labels."""
    acc_drop: Optional[float] = optional_key()
    """``ref_acc - cand_acc``."""
    acc_drop_ci: Optional[List[float]] = optional_key()
    """``acc_drop``'s interval."""
    acc_drop_clear: Optional[float] = optional_key()
    """The accuracy drop with near-tie flips left out."""
    acc_drop_clear_ci: Optional[List[float]] = optional_key()
    """``acc_drop_clear``'s interval."""
    task_ref: Optional[float] = optional_key()
    """The task metric on the reference's outputs."""
    task_cand: Optional[float] = optional_key()
    """The task metric on the candidate's outputs."""
    task_drop: Optional[float] = optional_key()
    """``task_ref - task_cand``."""
    task_drop_ci: Optional[List[float]] = optional_key()
    """``task_drop``'s interval, when the metric is a rate over the samples."""

    def figures(self) -> dict:
        """The figures present, by name, in the order of the fields."""
        return to_json(self)


@dataclass(frozen=True)
class Check:
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
    ci: Optional[List[float]] = optional_key(follows="samples")
    """A counted figure's 95 % interval."""
    samples: Optional[int] = optional_key()
    """A counted figure's samples."""
    resolution: Optional[float] = optional_key(follows="samples")
    """One sample's share: the finest step the figure can take."""
    under_resolved: Optional[bool] = optional_key()
    """True when the limit's budget is below one sample."""


@dataclass(frozen=True)
class OutputResult:
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
class TaskResult:
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
class Finding:
    """A note on the inputs, the reference or the gate itself."""

    kind: str
    """preprocess, degenerate_reference, fp16_emulated, under_resolved, ..."""
    where: str
    """What it is about."""
    message: str
    """What was found."""
    fix: str
    """What to do about it."""


@dataclass(frozen=True)
class Culprit:
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
class ArtefactCulprit:
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
class Emulation:
    """An fp16 candidate run with its kept cells in fp16 (its deployment settings ignored)."""

    weights: Any
    """Where its weights came from."""
    outputs: List[OutputResult]
    """Each output judged as the candidate's are."""


@dataclass(frozen=True)
class Deployment:
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
class CandidateResult:
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
    """With ``--per-layer``: each cell's error along the depth."""
    weights: Optional[WeightsCheck]
    """The stored-weights check (with ``--per-layer``)."""
    culprit: Optional[Culprit]
    """For a failed candidate: the most specific explanation, or None."""
    deployment: Optional[Deployment]
    """With ``--emulate-settings``, for an fp16 artefact."""

    def checked_groups(self) -> list:
        """The outputs, then the task metric (each with name, metrics and checks)."""
        return list(self.outputs) + ([self.task] if self.task else [])


@dataclass(frozen=True)
class ReportSide:
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
class ReportInputs:
    """The inputs every candidate was judged on."""

    description: str
    """Where they came from."""
    samples: int
    """How many."""
    labels: bool
    """Whether labels were found."""
    targets: List[str]
    """The target arrays fed to the task metric."""
    labels_from: Optional[str]
    """Where the labels came from; None without labels."""


@dataclass(frozen=True)
class ParityReport:
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
    seconds: float
    """How long it took."""
    schema_version: Optional[int] = optional_key()
    """The version of this layout (``amptool.records.PARITY_REPORT_VERSION``)."""

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
    def reference_accuracy(self) -> Optional[float]:
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
        from .runsummary import candidate_verdict

        cand = self.candidate(path)
        return None if cand is None else candidate_verdict(cand)


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.7g}"
    return str(value)


def finding_text(finding: Finding) -> str:
    """A finding's message; with its fix where the finding is about the gate itself."""
    if finding.kind == "under_resolved":
        return f"{finding.message}; {finding.fix}"
    return finding.message


def breaches(group) -> list:
    """The failed checks of one output (or the task metric) as ``metric value (limit ...)``."""
    return [f"{r.metric} {fmt(r.value)} (limit {r.limit})" for r in group.checks
            if r.passed is False]
