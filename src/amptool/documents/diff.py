"""Two parity reports compared, as types: ``DiffReport`` (``amptool diff --json``) with the two
reports it read (``DiffSide``), one ``CandidateDiff`` per candidate (each output's figures
side by side, ``FigureDiff``; the checks whose result changed, ``CheckChange``; the limits
that changed, ``LimitChange``; the kept fp32 cells, ``KeptDiff``; the per-layer error,
``LayersDiff``) and the ``Regression``s that fail it, worst first.

A figure is a number, or the string ``nan``/``inf``/``-inf`` in the JSON (``Real``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Literal, Optional

from amptool.documents.door import Document, Door, Real, from_json, optional_key, to_json
from amptool.stats.regression import RegressionBudget

DIFF_VERSION = 1
"""The ``schema_version`` of the diff document this release writes."""

Status = Literal["unchanged", "within noise", "improved", "regressed", "only in base",
                 "only in new"]


@dataclass(frozen=True)
class DiffSide(Document):
    """One of the two parity reports compared."""

    path: str
    """The report read (a parity.json, or the one in a run folder)."""
    passed: bool
    """Its verdict."""
    model: Any
    """The model its reference is, where recorded."""
    reference: str
    """Its reference's file."""
    inputs: str
    """Where its inputs came from."""
    samples: int
    """Inputs its candidates were judged on."""


@dataclass(frozen=True)
class FigureDiff(Document):
    """One figure of one output, in both reports."""

    figure: str
    """cosine, p999_abs_scaled, max_abs_scaled, top1_agree_clear, acc_drop_clear, nonfinite
    or task_drop."""
    base: Optional[Real]
    """BASE's value; null where BASE has no such figure."""
    new: Optional[Real]
    """NEW's value; null where NEW has no such figure."""
    change: Optional[Real]
    """NEW minus BASE; null where either is missing."""
    noise: Optional[Real]
    """How far the figure may move in the direction it moved without telling anything (its
    sampling noise or resolution); null where not judged."""
    status: Status
    """unchanged, within noise, improved, regressed (worse beyond noise and budget), or only
    in one report."""
    base_ci: Optional[List[float]] = optional_key()
    """BASE's 95 % interval of a counted figure."""
    new_ci: Optional[List[float]] = optional_key()
    """NEW's 95 % interval of a counted figure."""


@dataclass(frozen=True)
class OutputDiff(Document):
    """One output (or ``task``, the task metric) of a candidate."""

    name: str
    """The output's name (matched by position; NEW's name)."""
    figures: List[FigureDiff]
    """Its figures side by side."""


@dataclass(frozen=True)
class CheckChange(Document):
    """A check whose result differs between the reports."""

    output: str
    """The output (or ``task``)."""
    metric: str
    """The metric bounded."""
    base: Optional[bool]
    """Passed in BASE; null where it did not apply or was not checked."""
    new: Optional[bool]
    """Passed in NEW; null where it did not apply or was not checked."""
    limit: str
    """The limit in NEW (BASE's where NEW does not check it)."""
    value: Optional[Real]
    """NEW's value (BASE's where NEW does not check it)."""


@dataclass(frozen=True)
class LimitChange(Document):
    """A limit one output was held to that differs between the reports."""

    output: str
    """The output."""
    limit: str
    """The limit's name (``amptool.stats.limits.Thresholds``)."""
    base: Any
    """BASE's value (null: off)."""
    new: Any
    """NEW's value (null: off)."""


@dataclass(frozen=True)
class KeptDiff(Document):
    """The cells the candidate's policy keeps in fp32, in both reports."""

    base: Optional[List[str]]
    """BASE's kept cells; null where BASE records none (no ``deployment`` section)."""
    new: Optional[List[str]]
    """NEW's kept cells; null where NEW records none."""
    added: List[str]
    """Kept in NEW, not in BASE."""
    removed: List[str]
    """Kept in BASE, no longer in NEW."""


@dataclass(frozen=True)
class LayerDiff(Document):
    """One cell of the per-layer sections, in both reports: its error is 1 - cosine of its
    output against fp32; its own share, that minus the error its input already had."""

    cell: str
    """The cell's path (``(input)``, ``(output)`` for the network's own rows)."""
    type: str
    """Its class."""
    base_dtype: str
    """The dtype it computes in, in BASE."""
    new_dtype: str
    """The dtype it computes in, in NEW."""
    base_error: Optional[Real]
    """Its error in BASE."""
    new_error: Optional[Real]
    """Its error in NEW."""
    growth: Optional[Real]
    """How much its own share of the error grew (NEW minus BASE)."""


@dataclass(frozen=True)
class LayersDiff(Document):
    """The per-layer sections (``--per-layer``, or a failed candidate localized by itself)
    where both reports have them."""

    rows: List[LayerDiff]
    """The cells both reports probed, in NEW's execution order."""
    grew_most: Optional[str]
    """The cell whose own share of the error grew most; null when none grew."""
    base_first_flagged: Optional[str]
    """BASE's first cell below its cell cosine limit."""
    new_first_flagged: Optional[str]
    """NEW's first cell below its cell cosine limit."""
    only_base: List[str]
    """Cells only BASE probed."""
    only_new: List[str]
    """Cells only NEW probed."""


@dataclass(frozen=True)
class CandidateDiff(Document):
    """One candidate, matched across the reports by its format, precision and file name
    (else by format and precision alone when one candidate of each report has them)."""

    name: str
    """Its file name (NEW's where both have it)."""
    format: str
    """Its format."""
    precision: Optional[str]
    """fp32 or fp16; null when unknown."""
    base_path: Optional[str]
    """Its path in BASE; null: only NEW has it."""
    new_path: Optional[str]
    """Its path in NEW; null: only BASE has it."""
    base_passed: Optional[bool]
    """BASE's verdict on it; null where BASE lacks it."""
    new_passed: Optional[bool]
    """NEW's verdict on it; null where NEW lacks it."""
    outputs: List[OutputDiff]
    """Each output's figures (and ``task``'s), in NEW's order."""
    checks: List[CheckChange]
    """The checks whose result changed."""
    limits: List[LimitChange]
    """The limits that changed."""
    kept: Optional[KeptDiff]
    """Its kept fp32 cells; null where neither report records them."""
    layers: Optional[LayersDiff]
    """The per-layer error; null unless both reports have it."""


@dataclass(frozen=True)
class Regression(Document):
    """One way NEW is worse than BASE beyond noise and budget."""

    candidate: str
    """The candidate's file name."""
    output: Optional[str]
    """The output (or ``task``); null for the candidate as a whole."""
    kind: Literal["check", "figure", "missing"]
    """A check that passed and fails, a figure worse beyond its noise, or a candidate NEW
    lacks."""
    what: str
    """The metric or figure."""
    message: str
    """One line saying it."""


@dataclass(frozen=True)
class DiffReport(Document):
    """Two parity reports of one model on the same inputs compared: ``passed`` unless NEW
    regressed."""

    schema_version: int
    """The version of this layout (``DIFF_VERSION``)."""
    passed: bool
    """No regression."""
    base: DiffSide
    """The report compared against."""
    new: DiffSide
    """The report judged."""
    budget: RegressionBudget
    """The regression budget applied."""
    candidates: List[CandidateDiff]
    """Every candidate of either report."""
    regressions: List[Regression]
    """Every regression, worst first: checks that now fail, candidates NEW lacks, then
    figures by how far beyond their noise."""
    notes: List[str]
    """What else differs between the reports (their preprocessing, verdicts)."""

    @classmethod
    def from_dict(cls, data: dict) -> "DiffReport":
        return from_json(cls, data, "diff report")

    def to_dict(self) -> dict:
        """The document ``amptool diff --json`` prints."""
        return to_json(self)

    @property
    def improved(self) -> int:
        """Figures better beyond their noise."""
        return sum(f.status == "improved" for c in self.candidates for o in c.outputs
                   for f in o.figures)

    def verdict_line(self) -> str:
        """The one line saying the result: the worst regression, or that there is none."""
        count = len(self.regressions)
        if count:
            more = f" (and {count - 1} more)" if count > 1 else ""
            return f"diff REGRESSED: {self.regressions[0].message}{more}"
        both = sum(c.base_path is not None and c.new_path is not None
                   for c in self.candidates)
        return (f"diff: no regression ({both} candidate{'s' * (both != 1)} in both reports, "
                f"{self.improved} figure{'s' * (self.improved != 1)} improved)")


DIFF = Door(DiffReport, "diff report", "write it again with 'amptool diff BASE NEW --json'",
            DIFF_VERSION, "amptool diff report", "diff.schema.json")
