"""A parity candidate's ``--per-layer`` sections as types: ``LayerReport`` (each cell's error
along the depth, ``LayerRow``) and ``WeightsCheck`` (the stored weights compared with the
reference's, ``WeightMismatch``); parts of ``amptool.documents.parity.CandidateResult``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from amptool.documents.door import Document, Real


@dataclass(frozen=True)
class LayerRow(Document):
    """One cell's output (or the network's input or output) against fp32."""

    path: str
    """The cell's path; ``(input)`` and ``(output)`` for the network's own rows."""
    type: str
    """The cell's class (``input``, ``network`` for the network's rows)."""
    dtype: str
    """The dtype the cell computes in on the candidate's side."""
    cosine: Optional[Real]
    """Cosine of its output to fp32 (None where the shapes differ)."""
    rel_l2: Optional[Real]
    """Relative L2 error of its output."""
    max_rel: Optional[Real]
    """Largest relative error."""
    max_abs: Optional[Real]
    """Largest absolute error."""
    nonfinite: int
    """NaN/Inf elements in its output."""
    ref_absmax: Optional[Real]
    """The largest magnitude of its fp32 output."""
    subnormal: Optional[Real]
    """Share of its nonzero fp32 outputs that are fp16-subnormal."""
    fp16_risk: Optional[str]
    """overflow or subnormal where fp16 cannot hold its fp32 output; None otherwise."""
    in_cosine: Optional[Real]
    """Cosine of its input to fp32: the error it inherited."""
    flagged: bool
    """Its cosine is below the limit."""
    origin: Optional[str]
    """For a flagged cell: born, inherited or input."""


@dataclass(frozen=True)
class LayerReport(Document):
    """Per-layer localization of one candidate."""

    model: Any
    """The model the cells were probed on, as its manifest records it."""
    policy: str
    """The candidate's policy, as ``Policy.describe()`` words it (fp32 without one)."""
    samples: int
    """Inputs probed."""
    min_cosine: Real
    """The cell cosine below which a cell is flagged."""
    rows: List[LayerRow]
    """Every probed cell, in execution order."""
    first_flagged: Optional[str]
    """The first flagged cell's path; None when none is."""
    origin: Optional[str]
    """That cell's origin; None when none is flagged."""


@dataclass(frozen=True)
class WeightMismatch(Document):
    """A stored weight of the candidate that differs from the reference's."""

    name: str
    """The parameter's name."""
    mismatched: int
    """Elements off by more than the candidate dtype's rounding."""
    size: int
    """Its elements."""
    max_abs: Real
    """The largest finite difference (inf where the shapes differ)."""
    note: str
    """The shapes, where they differ."""
    cell: str
    """The cell holding it."""


@dataclass(frozen=True)
class WeightsCheck(Document):
    """The candidate's stored weights against the reference's."""

    reference: str
    """Where the reference's weights came from."""
    candidate: str
    """Where the candidate's came from."""
    mismatched: List[WeightMismatch]
    """The weights that differ."""
