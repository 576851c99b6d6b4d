"""The records a training run and a parity check leave for later commands, as types (see
``amptool.documents.door``): the training run's ``run.json`` (``RunRecord``, read by export,
parity and convert through ``RunDir``) and the meta of a golden outputs file (``GoldenMeta``:
``amptool parity --save-outputs``, read back by ``--load-outputs``). The other documents'
types: the manifest's in ``amptool.documents.manifest``, the parity report's in
``amptool.documents.parity``, summary.json's in ``amptool.documents.summary``.

Each carries ``schema_version``; a record without one was written before it existed (version
0), and may lack the ``ADDED_FIELD`` keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional

from amptool.documents.door import ADDED_FIELD, Document, Door, Real, optional_key
from amptool.documents.manifest import ModelRecord, PolicyRecord, Preprocess, Task, Tensor
from amptool.documents.training import TrainSummary

RUN_VERSION = 1
"""The ``schema_version`` of run.json this release writes and the newest it reads."""
GOLDEN_VERSION = 1
"""The ``schema_version`` of a golden outputs file's meta this release writes and reads."""


# -- run.json --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunData(Document):
    """The data the run trained on."""

    preprocess: Optional[Preprocess]
    """How images became model inputs; null for inputs fed as they are."""
    source: Optional[str] = field(metadata=ADDED_FIELD)
    """The ``--data`` spec."""
    train_samples: Optional[int] = field(metadata=ADDED_FIELD)
    """Samples in the training split."""
    val_samples: Optional[int] = field(metadata=ADDED_FIELD)
    """Samples in the held-out split."""
    val_fraction: Optional[Real] = field(metadata=ADDED_FIELD)
    """The held-out fraction."""
    skipped_files: Optional[int] = field(metadata=ADDED_FIELD)
    """Image files skipped as unreadable."""
    augment: Optional[List[str]] = field(metadata=ADDED_FIELD)
    """The training-only augmentations."""


@dataclass(frozen=True)
class LossRecord(Task):
    """The run's loss."""

    file: Optional[str] = optional_key()
    """A ``file.py:factory`` loss: the copy of its file kept in the run folder."""
    sha256: Optional[str] = optional_key()
    """A ``file.py:factory`` loss: the hex digest of that copy."""


@dataclass(frozen=True)
class MetricRecord(Document):
    """The run's task metric."""

    name: str
    """The ``--metric`` given: ``path/file.py:fn`` or ``package.module:fn``."""
    file: Optional[str] = optional_key()
    """A file's metric: the copy of its file kept in the run folder."""
    sha256: Optional[str] = optional_key()
    """A file's metric: the hex digest of that copy."""


@dataclass(frozen=True)
class LossScaleRecord(Document):
    """The run's loss scaling."""

    kind: str
    """dynamic, static or none."""
    init: Real
    """The first scale."""
    factor: int
    """A dynamic scale's factor up and down."""
    window: int
    """Clean steps before a dynamic scale grows."""


@dataclass(frozen=True)
class PolicyAuto(Document):
    """What the range pass of ``--policy auto`` found before the first step."""

    safety: Real
    """The share of fp16's largest value a cell's fp32 output or input may reach."""
    batches: int
    """Training batches it measured."""
    file: str
    """The policy file written beside run.json (the kept cells with their reasons)."""
    kept: List[Dict[str, Any]]
    """The cells it kept in fp32, each an ``amptool.precision.ranges.CellRange``'s dict (its
    fp32 magnitudes) with ``where`` it comes from in the source."""


@dataclass(frozen=True)
class Forensics(Document):
    """What was found about a diverged run."""

    kind: str
    """``forward_overflow``: the loss itself stopped being finite."""
    step: int
    """The step the run stopped at."""
    steps: int
    """Consecutive steps up to it whose forward pass overflowed."""
    culprit: Optional[Dict[str, Any]]
    """The first cell whose low-precision output is not finite while its fp32 output is
    (``path``, ``type``, ``fp32_max``, ...); null when no cell is."""


@dataclass(frozen=True)
class RunSettings:
    """The settings of run.json's ``config`` that the core reads, as the run recorded them
    (None: not recorded). ``config`` itself stays an open mapping: its type is the training
    stage's ``TrainConfig``, which no package below the stages can name, a second copy of it
    here would drift from it as training options come and go, and a run.json written before an
    option existed has to read as it is (``export --run`` of an older run)."""

    model: Optional[str] = None
    """The model reference (``--model``)."""
    model_args: Optional[Dict[str, Any]] = None
    """Its factory's keyword arguments."""
    input_spec: Optional[str] = None
    """The input signature given (``--input-spec``)."""
    data: Optional[str] = None
    """The ``--data`` spec."""
    optimizer: Optional[str] = None
    """adam, sgd or momentum."""
    lr: Optional[float] = None
    """The learning rate."""
    batch_size: Optional[int] = None
    """The per-worker batch size."""
    epochs: Optional[int] = None
    """The epochs asked for."""
    range_safety: Optional[float] = None
    """``--policy auto``'s share of fp16's largest value."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "RunSettings":
        return cls(**{f.name: config.get(f.name) for f in fields(cls)})

    def model_reference(self) -> Dict[str, Any]:
        """The model as ``resolve_model`` takes a reference: ``model``, ``model_args``,
        ``input_spec``."""
        return {"model": self.model, "model_args": self.model_args,
                "input_spec": self.input_spec}


@dataclass(frozen=True)
class RunRecord(Document):
    """run.json: the record of a training run in its ``--out`` folder."""

    schema_version: Optional[int] = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from records written before it existed."""
    config: Dict[str, Any]
    """The run's ``TrainConfig``: every config-file key (``model``, ``model_args``,
    ``input_spec``, ``optimizer``, ...), an open mapping (see ``RunSettings``, the keys the
    core reads)."""
    policy: PolicyRecord
    """The precision policy it trained with."""
    data: RunData
    """The data it trained on."""
    model: Optional[ModelRecord] = field(metadata=ADDED_FIELD)
    """The model reference and the copy of its code kept in ``model/``."""
    loss: Optional[LossRecord] = field(metadata=ADDED_FIELD)
    """The loss (a file's copy kept with the run)."""
    metric: Optional[MetricRecord] = field(metadata=ADDED_FIELD)
    """The task metric (a file's copy kept with the run); null without one."""
    loss_scale: Optional[LossScaleRecord] = field(metadata=ADDED_FIELD)
    """The loss scale settings."""
    versions: Optional[Dict[str, str]] = field(metadata=ADDED_FIELD)
    """amptool, MindSpore, numpy and Python versions."""
    device: Optional[str] = field(metadata=ADDED_FIELD)
    """The device it trained on."""
    seed: Optional[int] = field(metadata=ADDED_FIELD)
    """The random seed."""
    workers: Optional[int] = field(metadata=ADDED_FIELD)
    """Worker processes."""
    policy_auto: Optional[PolicyAuto] = optional_key()
    """With ``--policy auto``: the cells the range pass kept in fp32 and its policy file."""
    summary: Optional[TrainSummary] = optional_key()
    """The ``TrainSummary`` of a finished run (absent while it runs)."""
    forensics: Optional[Forensics] = optional_key()
    """What was found about a diverged run."""

    @property
    def settings(self) -> RunSettings:
        """The settings of ``config`` the core reads."""
        return RunSettings.of(self.config)


# -- golden outputs --------------------------------------------------------------------------

@dataclass(frozen=True)
class GoldenMeta(Document):
    """The ``meta`` entry of a golden outputs file (.npz): what the stored reference was."""

    schema_version: Optional[int] = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from files written before it existed."""
    reference: str
    """The reference's file."""
    format: str
    """Its format."""
    precision: Optional[str]
    """Its precision; null when unknown."""
    preprocess: Optional[Preprocess]
    """How the stored inputs were prepared; null for inputs fed as they are."""
    description: str
    """Where the inputs came from."""
    inputs_meta: List[Tensor]
    """The reference's inputs (name, shape, dtype); one stored array ``input_<i>`` each."""
    outputs_meta: List[Tensor]
    """The reference's outputs; one stored array ``output_<i>`` each."""
    model: Any = field(metadata=ADDED_FIELD)
    """The model reference, where known (vetted before any of its code runs)."""
    num_classes: Optional[int] = field(metadata=ADDED_FIELD)
    """Classes of a classifier; null when unknown."""
    task: Optional[Task] = field(metadata=ADDED_FIELD)
    """The training run's loss; null when unknown."""
    class_logits: Optional[List[int]] = field(metadata=ADDED_FIELD)
    """The outputs the model declares as class logits; null without a declaration."""
    target_names: Optional[List[str]] = field(metadata=ADDED_FIELD)
    """Names of the stored target arrays ``target_<i>``."""
    labels_from: Optional[str] = field(metadata=ADDED_FIELD)
    """The target the labels were taken from; null without labels."""


RUN = Door(RunRecord, "run record", "train again into that folder to rewrite it", RUN_VERSION,
           "amptool run.json", "run.schema.json")
"""run.json's door (``RunDir.read``)."""
GOLDEN = Door(GoldenMeta, "golden outputs file",
              "make it with 'amptool parity REFERENCE --save-outputs FILE'", GOLDEN_VERSION,
              "amptool golden outputs file: its meta entry", "golden-meta.schema.json")
"""A golden outputs file's meta door (``--load-outputs``)."""
