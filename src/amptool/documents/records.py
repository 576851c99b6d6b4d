"""The JSON records the stages write for other tools and stages to read, as types (see
``amptool.documents.door``): the training run's ``run.json`` (``RunRecord``, read by export, parity
and convert through ``RunDir``), the parity report (``ParityReportRecord``: ``amptool parity
--json``/``--json-out``, ``parity.json``) and ``amptool run``'s ``summary.json``
(``SummaryRecord``), and the meta of a golden outputs file (``GoldenMeta``: ``amptool parity
--save-outputs``, read back by ``--load-outputs``). The manifest's types are in
``amptool.documents.manifest``.

Each carries ``schema_version``; a record without one was written before it existed (version
0), and may lack the ``ADDED_FIELD`` keys. Nested sections whose keys vary with the check (a
report's metrics, limits, findings) are typed as objects of any keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from amptool.documents.door import ADDED_FIELD, Door, Real
from amptool.documents.manifest import FileFacts, ModelRecord, PolicyRecord, Preprocess, Task

RUN_VERSION = 1
"""The ``schema_version`` of run.json this release writes and the newest it reads."""
PARITY_REPORT_VERSION = 1
"""The ``schema_version`` of the parity report this release writes."""
SUMMARY_VERSION = 1
"""The ``schema_version`` of summary.json this release writes."""
GOLDEN_VERSION = 1
"""The ``schema_version`` of a golden outputs file's meta this release writes and reads."""
RUN_DOOR = Door("run record", "train again into that folder to rewrite it", RUN_VERSION)
GOLDEN_DOOR = Door("golden outputs file",
                   "make it with 'amptool parity REFERENCE --save-outputs FILE'", GOLDEN_VERSION)


# -- run.json --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunConfig:
    """The run's ``TrainConfig`` (every config-file key); the keys named here are the ones
    other stages read."""

    model: str
    """The model reference: a sample's name, ``file.py:factory`` or ``package.module:factory``."""
    model_args: Optional[Dict[str, Any]] = None
    """Keyword arguments given to the factory."""
    input_spec: Optional[str] = None
    """The ``--input-spec`` given."""


@dataclass(frozen=True)
class RunData:
    """The data the run trained on."""

    preprocess: Optional[Preprocess]
    """How images became model inputs; null for inputs fed as they are."""
    source: str = field(metadata=ADDED_FIELD)
    """The ``--data`` spec."""
    train_samples: int = field(metadata=ADDED_FIELD)
    """Samples in the training split."""
    val_samples: int = field(metadata=ADDED_FIELD)
    """Samples in the held-out split."""
    val_fraction: float = field(metadata=ADDED_FIELD)
    """The held-out fraction."""
    skipped_files: int = field(metadata=ADDED_FIELD)
    """Image files skipped as unreadable."""
    augment: List[str] = field(metadata=ADDED_FIELD)
    """The training-only augmentations."""


@dataclass(frozen=True)
class LossRecord(Task):
    """The run's loss."""

    file: Optional[str] = None
    """A ``file.py:factory`` loss: the copy of its file kept in the run folder."""
    sha256: Optional[str] = None
    """A ``file.py:factory`` loss: the hex digest of that copy."""


@dataclass(frozen=True)
class RunRecord:
    """run.json: the record of a training run in its ``--out`` folder."""

    schema_version: int = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from records written before it existed."""
    config: RunConfig
    """The run's settings."""
    policy: PolicyRecord
    """The precision policy it trained with."""
    data: RunData
    """The data it trained on."""
    model: ModelRecord = field(metadata=ADDED_FIELD)
    """The model reference and the copy of its code kept in ``model/``."""
    loss: LossRecord = field(metadata=ADDED_FIELD)
    """The loss (a file's copy kept with the run)."""
    metric: Optional[Dict[str, Any]] = field(metadata=ADDED_FIELD)
    """The task metric (``name``; a file's copy kept with the run); null without one."""
    loss_scale: Dict[str, Any] = field(metadata=ADDED_FIELD)
    """The loss scale settings (kind, init, factor, window)."""
    versions: Dict[str, str] = field(metadata=ADDED_FIELD)
    """amptool, MindSpore, numpy and Python versions."""
    device: str = field(metadata=ADDED_FIELD)
    """The device it trained on."""
    seed: int = field(metadata=ADDED_FIELD)
    """The random seed."""
    workers: int = field(metadata=ADDED_FIELD)
    """Worker processes."""
    policy_auto: Optional[Dict[str, Any]] = None
    """With ``--policy auto``: the cells the range pass kept in fp32 and its policy file."""
    summary: Optional[Dict[str, Any]] = None
    """The ``TrainSummary`` of a finished run (absent while it runs)."""
    forensics: Any = None
    """What was found about a diverged run."""


# -- the parity report -----------------------------------------------------------------------

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
    """fp32 or fp16; null when unknown."""
    model: Any
    """The model reference, where known."""
    preprocess: Optional[Dict[str, Any]]
    """How its inputs were prepared; null for inputs fed as they are."""
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
    targets: List[str] = field(metadata=ADDED_FIELD)
    """The target arrays fed to the task metric."""
    labels_from: Optional[str] = field(metadata=ADDED_FIELD)
    """Where the labels came from; null without labels."""


@dataclass(frozen=True)
class Check:
    """One limit checked on one output."""

    metric: str
    """The metric bounded."""
    value: Any
    """Its value (a number, or null where it could not be computed)."""
    limit: Any
    """The limit it was held to."""
    passed: Optional[bool]
    """Within the limit; null when the limit does not apply (``note`` says why)."""
    note: Optional[str] = None
    """Why the limit does not apply."""


@dataclass(frozen=True)
class OutputVerdict:
    """One output of a candidate, as judged."""

    name: str
    """The output's name."""
    metrics: Dict[str, Any]
    """Every figure computed (cosine, max_abs, ...; ``<metric>_ci``: a 95 % interval)."""
    checks: List[Check]
    """The limits checked (a counted figure's row also has ci, samples, resolution and
    under_resolved)."""
    passed: bool
    """Every check passed."""
    thresholds: Dict[str, Any]
    """The limits the output was held to."""


@dataclass(frozen=True)
class CandidateReport:
    """One candidate's verdict."""

    path: str
    """The artefact."""
    format: str
    """Its format."""
    precision: Optional[str]
    """Its precision; null when unknown."""
    kind: str
    """artefact or checkpoint."""
    passed: bool
    """Every output (and the task metric) within its limits."""
    thresholds: Dict[str, Any]
    """The limits the candidate was held to."""
    outputs: List[OutputVerdict]
    """Each output's verdict."""
    task: Optional[Dict[str, Any]]
    """With ``--metric``: spec, metrics, checks; null without."""
    findings: List[Dict[str, Any]]
    """Notes on the inputs and the reference (``kind`` and what it found)."""
    fp16_faithful: Any
    """Whether an fp16 candidate really computes in fp16 here."""
    caveat: Optional[str]
    """Why the verdict says nothing of fp16 safety; null when it does."""
    per_layer: Optional[Dict[str, Any]]
    """With ``--per-layer``: rows, first_flagged, origin, min_cosine, policy, samples."""
    weights: Optional[Dict[str, Any]]
    """The stored-weights check (with ``--per-layer``)."""
    culprit: Optional[Dict[str, Any]]
    """For a failed candidate: kind, where, message, fix."""
    deployment: Optional[Dict[str, Any]]
    """With ``--emulate-settings``: the candidate run ignoring its deployment settings."""
    files: Optional[List[FileFacts]] = None
    """Every file of the candidate as checked (path, size, sha256), the main file first:
    the bytes the verdict is about."""


@dataclass(frozen=True)
class ParityReportRecord:
    """The parity report: ``amptool parity --json-out FILE`` (and ``--json``), parity.json."""

    schema_version: int = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from reports written before it existed."""
    passed: bool
    """The verdict: every candidate passed."""
    reference: ReportSide
    """The reference side."""
    inputs: ReportInputs
    """The inputs compared on."""
    candidates: List[CandidateReport]
    """One entry per candidate."""
    golden_saved: Optional[str]
    """The ``--save-outputs`` file; null without."""
    device: str
    """Where the check ran."""
    seconds: Real
    """How long it took."""


# -- summary.json ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainFigures:
    """The training stage's figures."""

    val_acc: Optional[Real]
    """Held-out accuracy at the end; null for a task without one."""
    best_acc: Optional[Real]
    """Best held-out accuracy; null for a task without one."""
    steps: int
    """Optimizer steps."""
    overflow_steps: int
    """Steps skipped on an overflow."""
    loss_scale: Optional[Real]
    """The final loss scale."""
    policy: str
    """The policy, as ``level/dtype``."""
    device: str
    """Where it trained."""
    seconds: Real
    """How long it took."""


@dataclass(frozen=True)
class ArtefactRow:
    """One artefact of the pipeline and its verdict."""

    format: str
    """Its format."""
    precision: str
    """Its precision."""
    path: str
    """Its file."""
    size: int
    """Bytes of all its files."""
    size_ratio: Optional[Real]
    """Its size over the fp32 artefact's of its format; null for the reference."""
    accuracy: Optional[Real]
    """Top-1 accuracy on the labels; null without labels or logits."""
    verdict: str
    """reference, PASS or FAIL (``*``: a caveat)."""
    cosine: Optional[Real] = None
    """The lowest cosine over the outputs (candidates only)."""
    max_abs: Optional[Real] = None
    """The largest absolute error over the outputs (candidates only)."""
    caveat: Optional[str] = None
    """Why the verdict says nothing of fp16 safety (candidates only)."""
    drop: Optional[Dict[str, Any]] = None
    """The checked accuracy drop with its interval (candidates only)."""
    warnings: Optional[List[str]] = None
    """Limits the samples cannot resolve (candidates only)."""
    outputs: Optional[List[Dict[str, Any]]] = None
    """Each output's verdict: name, passed, cosine, max_abs_scaled, breaches."""
    deployment: Optional[Dict[str, Any]] = None
    """Its deployment settings and what ignoring them does."""


@dataclass(frozen=True)
class ParitySummary:
    """The parity stage's verdict."""

    passed: bool
    """Every candidate passed."""
    samples: int
    """Inputs compared on."""
    culprits: List[Dict[str, Any]]
    """Each failed candidate's culprit (kind, where, message, fix, artefact)."""


@dataclass(frozen=True)
class SummaryRecord:
    """summary.json: what ``amptool run`` did (printed by ``amptool run --json``)."""

    schema_version: int = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from summaries written before it existed."""
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
    parity: ParitySummary
    """The parity stage."""
    seconds_by_stage: Dict[str, Real]
    """Time of each stage."""
    warnings: List[str] = field(metadata=ADDED_FIELD)
    """What was skipped on the way, one line each."""
    seconds: Real = field(metadata=ADDED_FIELD)
    """Time of the whole run."""


# -- golden outputs --------------------------------------------------------------------------

@dataclass(frozen=True)
class GoldenMeta:
    """The ``meta`` entry of a golden outputs file (.npz): what the stored reference was."""

    schema_version: int = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from files written before it existed."""
    reference: str
    """The reference's file."""
    format: str
    """Its format."""
    precision: Optional[str]
    """Its precision; null when unknown."""
    preprocess: Optional[Dict[str, Any]]
    """How the stored inputs were prepared; null for inputs fed as they are."""
    description: str
    """Where the inputs came from."""
    inputs_meta: List[Dict[str, Any]]
    """The reference's inputs (name, shape, dtype); one stored array ``input_<i>`` each."""
    outputs_meta: List[Dict[str, Any]]
    """The reference's outputs; one stored array ``output_<i>`` each."""
    model: Any = field(metadata=ADDED_FIELD)
    """The model reference, where known (vetted before any of its code runs)."""
    num_classes: Optional[int] = field(metadata=ADDED_FIELD)
    """Classes of a classifier; null when unknown."""
    task: Optional[Dict[str, Any]] = field(metadata=ADDED_FIELD)
    """The training run's loss; null when unknown."""
    class_logits: Optional[List[int]] = field(metadata=ADDED_FIELD)
    """The outputs the model declares as class logits; null without a declaration."""
    target_names: List[str] = field(metadata=ADDED_FIELD)
    """Names of the stored target arrays ``target_<i>``."""
    labels_from: Optional[str] = field(metadata=ADDED_FIELD)
    """The target the labels were taken from; null without labels."""
