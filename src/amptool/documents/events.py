"""Progress events: what a stage reports as it goes, handed to the ``on_event`` callback of
``train``, ``run`` and ``search``, one small frozen dataclass a kind.

A command line prints them (``amptool train``'s progress, ``amptool run``'s stage lines); the
library never does. Each has its ``kind`` and ``to_dict()``: ``{"kind": ..., **fields}``, the
line a data-parallel worker prints into its log (``amptool-event {json}``), which the launcher
reads back into the same type (``read_event``). A logged step's event is also its
metrics.jsonl line (``Step.record``).

Here, below the stages: the training stage emits most of them, the pipeline passes them on
and adds its own, and the root command line prints both; the fp32-cell search's two kinds
(``amptool.convert.result``) derive from ``Event`` too.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, List, Optional, Type, Union, cast, get_args

from amptool.documents.door import Document, Real, from_json, optional_key, to_json
from amptool.documents.training import TrainSummary


@dataclass(frozen=True)
class Event(Document):
    """A progress event: its ``kind`` and its fields."""

    kind: ClassVar[str] = ""
    """What happened: ``stage``, ``warning``, ``step``, ..."""

    def to_dict(self) -> Dict[str, Any]:
        """``{"kind": ..., **fields}``, as a worker's ``amptool-event`` line carries it."""
        return {"kind": self.kind, **to_json(self)}


@dataclass(frozen=True)
class Warned(Event):
    """Something the user should know that does not stop the command (printed on stderr)."""

    kind: ClassVar[str] = "warning"
    message: str
    """The warning, one line."""


@dataclass(frozen=True)
class Overwrite(Event):
    """The command replaces what a folder held (``--overwrite``, or a run stopped before its
    first checkpoint)."""

    kind: ClassVar[str] = "overwrite"
    out: str
    """The folder."""
    replaced: List[str]
    """The files replaced."""
    unfinished: bool = False
    """The run replaced had stopped before its first checkpoint: nothing trained was kept."""


@dataclass(frozen=True)
class Stage(Event):
    """``amptool run`` starts one of its stages."""

    kind: ClassVar[str] = "stage"
    stage: str
    """train, export or parity."""
    formats: Optional[List[str]] = optional_key()
    """The export's formats (the export stage only)."""


@dataclass(frozen=True)
class Launch(Event):
    """Data-parallel training starts its workers through msrun."""

    kind: ClassVar[str] = "launch"
    workers: int
    """Ranks over every node."""
    nodes: int
    """Hosts taking part."""
    port: int
    """msrun's port."""
    logs: str
    """The folder of the workers' logs."""


@dataclass(frozen=True)
class TrainStart(Event):
    """Training starts its first (or, resumed, its next) epoch."""

    kind: ClassVar[str] = "start"
    epochs: int
    """Total epochs."""
    start_epoch: int
    """Epochs already trained (a resumed run's)."""
    steps_per_epoch: int
    """Optimizer steps in one epoch."""
    device: str
    """Where it trains."""
    policy: str
    """The policy, as ``Policy.describe()`` words it."""
    loss_scale: str
    """dynamic, static or none."""


@dataclass(frozen=True)
class Step(Event):
    """A logged step: the first of an epoch, every ``--log-every``-th and the last."""

    kind: ClassVar[str] = "step"
    step: int
    """Optimizer steps so far."""
    epoch: int
    """The epoch, from 1."""
    loss: Real
    """The step's training loss."""
    loss_scale: Real
    """The loss scale after it."""
    overflow: bool
    """Its gradients overflowed (it was skipped)."""
    skipped: int
    """Steps skipped since the last logged one, this one included."""
    lr: Real
    """The learning rate."""
    samples_per_s: Optional[Real]
    """Throughput since the last logged step (None on an epoch's first)."""

    def record(self) -> Dict[str, Any]:
        """Its metrics.jsonl line: the fields, in order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Epoch(Event):
    """An epoch ended and was scored on the held-out split: by accuracy (``val_acc``,
    ``best_acc``), else by ``score`` (``val_score``, ``best_score``)."""

    kind: ClassVar[str] = "epoch"
    epoch: int
    """The epoch, from 1."""
    val_acc: Optional[Real] = optional_key()
    """Held-out accuracy (a run scored by accuracy)."""
    best_acc: Optional[Real] = optional_key(follows="val_acc")
    """The best held-out accuracy so far."""
    score: Optional[str] = optional_key()
    """The score's name when it is not accuracy (``metric``, ``neg_val_loss``)."""
    val_score: Optional[Real] = optional_key(follows="score")
    """The held-out score."""
    best_score: Optional[Real] = optional_key(follows="score")
    """The best held-out score so far."""
    val_loss: Optional[Real] = None
    """The held-out loss, where computed."""
    loss: Optional[Real] = None
    """The last logged step's training loss."""


@dataclass(frozen=True)
class Finished(Event):
    """A resumed run already holds every epoch asked for: nothing is trained."""

    kind: ClassVar[str] = "finished"
    epochs: int
    """The epochs it holds."""
    out: str
    """The run folder."""


@dataclass(frozen=True)
class TrainEnd(Event):
    """Training ended: its summary (as ``amptool train --json`` prints it)."""

    kind: ClassVar[str] = "end"
    summary: TrainSummary
    """What the run reports."""


TrainEvent = Union[Warned, Overwrite, Launch, TrainStart, Step, Epoch, Finished, TrainEnd]
"""What ``train`` hands its ``on_event``."""
PipelineEvent = Union[Stage, TrainEvent]
"""What ``run`` hands its ``on_event``: its stages and warnings, and training's events."""

TRAIN_KINDS: Dict[str, Type[Event]] = {kind.kind: kind for kind in get_args(TrainEvent)}
"""Each type of ``TrainEvent`` by its ``kind``."""


def read_event(data: Any) -> TrainEvent:
    """The training event a ``to_dict()`` gave (a worker's ``amptool-event`` line, parsed):
    a ValueError when it is not one."""
    kind = TRAIN_KINDS.get(str(data.get("kind"))) if isinstance(data, dict) else None
    if kind is None:
        raise ValueError(f"not a training event: {str(data)[:60]}")
    fields = {k: v for k, v in data.items() if k != "kind"}
    return cast(TrainEvent, from_json(kind, fields, f"{kind.kind} event"))
