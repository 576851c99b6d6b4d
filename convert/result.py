"""What the fp32-cell search returns: ``SearchResult`` with its trials (``Trial``) and the
graph-mode confirmation of the policy found (``Confirmation``); ``to_dict`` is
``amptool convert search --json``'s document (``SEARCH``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

from amptool.documents.events import Event
from amptool.documents.figures import OutputMetrics
from amptool.documents.door import Document, Door, Real, from_json, optional_key, to_json
from amptool.precision.policy import Policy
from amptool.stats.limits import Thresholds

SEARCH_VERSION = 1
"""The ``schema_version`` of ``amptool convert search --json``'s document."""


@dataclass(frozen=True)
class TrialOutput(OutputMetrics):
    """One output of a trial with several: its figures, name and verdict."""

    name: Optional[str] = optional_key()
    """The output's name (``output<i>``)."""
    passed: Optional[bool] = optional_key()
    """It is within its limits."""


@dataclass(frozen=True)
class TrialMetrics(OutputMetrics):
    """A trial's figures against the fp32 reference, parity's metrics: the output's own; with
    several outputs the worst over them (lowest cosine, largest ``max_abs``), the class
    logits' counted figures, every failed check and each output's figures."""

    failed: Optional[List[str]] = optional_key()
    """With several outputs: each failed check, as ``output<i> <check>``."""
    outputs: Optional[List[TrialOutput]] = optional_key()
    """With several outputs: each one's figures."""

    @classmethod
    def from_dict(cls, data: dict) -> "TrialMetrics":
        return from_json(cls, data, "trial metrics")


@dataclass(frozen=True)
class SearchLimits(Thresholds, Document):
    """The limits trials were held to: the first output's, and each output's when there are
    several."""

    outputs: Optional[List[Thresholds]] = optional_key()
    """Each output's limits, with several outputs."""


@dataclass(frozen=True)
class Trial(Document):
    """One network the search ran: which cells it kept in fp32 and how it fared."""

    trial: int
    """Its number, from 1."""
    phase: str
    """all-fp16, all-fp32, or the search step that asked for it."""
    fp32: List[str]
    """The cells it kept in fp32 beyond the base, in the network's order."""
    metrics: TrialMetrics
    """Its figures against the fp32 reference."""
    passed: bool
    """Every output (and the task metric) within its limits."""


@dataclass(frozen=True)
class SearchStart(Event):
    """The search's progress event before its first trial: what it searches."""

    kind: ClassVar[str] = "start"
    model: str
    """The model's name."""
    candidates: List[str]
    """The cells the search could keep, in the order the forward calls them."""
    base: str
    """The base policy, as ``Policy.describe()`` words it."""
    base_kept: List[str]
    """The cells the base policy keeps in fp32."""
    samples: int
    """Held-out samples in the batch every trial runs."""
    device: str
    """Where it runs."""
    ckpt: str
    """The checkpoint searched on."""
    ranged: List[Dict[str, Any]]
    """The range pass's cells, kept before any trial (``SearchResult.ranges``)."""
    safety: Optional[Real]
    """The range pass's share of fp16's largest value; None: no range pass."""
    classifier: bool
    """Whether the first output is judged as class logits."""
    thresholds: SearchLimits
    """The limits trials are held to."""


@dataclass(frozen=True)
class TrialRun(Event):
    """The search's progress event after each trial (``to_dict``: the trial's keys)."""

    kind: ClassVar[str] = "trial"
    result: Trial
    """The trial and how it fared."""

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, **to_json(self.result)}


SearchEvent = Union[SearchStart, TrialRun]
"""What ``search`` hands its ``on_event``."""


@dataclass(frozen=True)
class Confirmation(Document):
    """The policy found, run on a fresh network compiled in graph mode."""

    passed: bool
    """It passes the limits there too."""
    metrics: TrialMetrics
    """Its figures, as a trial's."""
    mode: str
    """The execution mode it ran in (graph)."""


@dataclass(frozen=True)
class SearchResult(Document):
    """What a search found and what it cost."""

    policy: Policy
    """The policy found (written to ``out``)."""
    kept: List[str]
    """The cells it keeps in fp32 beyond the base (the range pass's first)."""
    base_kept: List[str]
    """The cells the base policy keeps in fp32."""
    candidates: List[str]
    """The cells the search could keep, in the order the forward calls them."""
    trials: Tuple[Trial, ...]
    """Every trial run, in order."""
    params_fp16: Real
    """Share of the float parameters left in the low dtype."""
    flops_fp16: Real
    """Share of the leaf cells' FLOPs left in the low dtype."""
    confirm: Confirmation
    """The graph-mode confirmation of ``policy``."""
    seconds: Real
    """How long the search took."""
    out: str
    """The policy file written."""
    model: str
    """The model's name."""
    samples: int
    """Held-out samples in the batch every trial ran."""
    ranges: List[Dict[str, Any]]
    """The range pass's cells (kept before any trial), with their fp32 magnitudes (each an
    ``amptool.precision.ranges.CellRange``'s dict: that module loads numpy, which
    ``amptool --help``, reading ``SearchConfig``'s defaults, must not)."""
    device: str
    """Where it ran."""
    ckpt: str
    """The checkpoint searched on."""
    base: str
    """The base policy, as ``Policy.describe()`` words it."""
    kept_where: Dict[str, str]
    """Each kept cell's place in the source (``file:line``)."""
    classifier: bool
    """Whether the first output was judged as class logits."""
    thresholds: SearchLimits
    """The limits trials were held to."""
    metric: Optional[str]
    """The task metric (``path/file.py:fn``), or None."""

    n_trials: int = 0
    """Trials run (the length of ``trials``)."""
    brute_force_trials: int = 0
    """Trials that keeping each candidate cell alone would take."""
    range_kept: List[str] = dataclasses.field(default_factory=list)
    """The cells the range pass kept before any trial."""
    trials_saved: int = 0
    """``brute_force_trials`` less ``n_trials``."""
    schema_version: int = SEARCH_VERSION
    """The version of this layout."""

    def __post_init__(self) -> None:  # the figures computed from the others, never given
        derived = {"n_trials": len(self.trials), "brute_force_trials": len(self.candidates),
                   "range_kept": [r["path"] for r in self.ranges],
                   "trials_saved": len(self.candidates) - len(self.trials)}
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict) -> "SearchResult":
        return from_json(cls, data, "search result")


SEARCH = Door(SearchResult, "search result", "run 'amptool convert search --json' again",
              SEARCH_VERSION, "amptool convert search result", "search-result.schema.json")
"""``amptool convert search --json``'s document."""
