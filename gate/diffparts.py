"""The parts of a candidate's diff beside its figures: the checks whose result changed, the
limits that changed, the cells kept in fp32, and the per-layer error where both reports
have it (naming the cell whose own share of the error grew most)."""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional

from amptool.documents.diff import CheckChange, KeptDiff, LayerDiff, LayersDiff, LimitChange
from amptool.documents.layers import LayerRow
from amptool.documents.parity import CandidateResult


NETWORK_ROWS = ("input", "network")
"""The types of the per-layer rows of the network's own input and output, which no cell
computes: never the cell that grew most."""


def check_changes(old: CandidateResult, now: CandidateResult) -> List[CheckChange]:
    """Each check (of each output, matched by position, and of the task metric) whose result
    differs: passed, failed, or not applied (n/a, or no such limit)."""
    changes = []
    groups = list(zip(old.outputs, now.outputs))
    if old.task or now.task:
        groups.append((old.task, now.task))  # type: ignore[arg-type]  # either may be None
    for a, b in groups:
        before = {c.metric: c for c in (a.checks if a else [])}
        after = {c.metric: c for c in (b.checks if b else [])}
        name = (b or a).name
        for metric in list(after) + [m for m in before if m not in after]:
            was, now_ = before.get(metric), after.get(metric)
            passed_then = was.passed if was else None
            passed_now = now_.passed if now_ else None
            if passed_then == passed_now:
                continue
            shown = now_ or was
            assert shown is not None
            changes.append(CheckChange(name, metric, passed_then, passed_now, str(shown.limit),
                                       shown.value))
    return changes


def limit_changes(old: CandidateResult, now: CandidateResult) -> List[LimitChange]:
    """Each limit an output (matched by position) was held to that differs."""
    changes = []
    for a, b in zip(old.outputs, now.outputs):
        before, after = _limits(a.thresholds), _limits(b.thresholds)
        changes += [LimitChange(b.name, key, before.get(key), after.get(key))
                    for key in after if before.get(key) != after.get(key)]
    return changes


def _limits(thresholds) -> dict:
    if dataclasses.is_dataclass(thresholds) and not isinstance(thresholds, type):
        return dataclasses.asdict(thresholds)
    return dict(thresholds or {})


def kept_cells(cand: Optional[CandidateResult]) -> Optional[List[str]]:
    """The cells the candidate's policy keeps in fp32, as its report records them (the
    deployment settings', else the policy's); None where it records none."""
    dep = cand.deployment if cand else None
    if dep is None:
        return None
    settings = dep.settings
    kept = dep.kept_fp32 if dep.kept_fp32 is not None else \
        settings.kept_fp32 if settings is not None else None
    return None if kept is None else [c.path or "(network)" for c in kept]


def kept_diff(old: Optional[CandidateResult], now: Optional[CandidateResult]) \
        -> Optional[KeptDiff]:
    """The kept cells of both sides; None where neither records them."""
    before, after = kept_cells(old), kept_cells(now)
    if before is None and after is None:
        return None
    was, is_ = set(before or ()), set(after or ())
    added = [c for c in after or () if c not in was] if before is not None else []
    removed = [c for c in before or () if c not in is_] if after is not None else []
    return KeptDiff(before, after, added, removed)


def _error(cosine) -> Optional[float]:
    """1 - cosine (NaN for a NaN cosine), None where there is none."""
    if cosine is None or isinstance(cosine, bool):
        return None
    try:
        return 1.0 - float(cosine)
    except (TypeError, ValueError):
        return None


def own_share(row: LayerRow) -> Optional[float]:
    """A cell's own share of its error: its error minus the error its input had (the
    network's rows, which have no cell input: their error)."""
    error = _error(row.cosine)
    inherited = _error(row.in_cosine)
    if error is None:
        return None
    return error - inherited if inherited is not None else error


def layers_diff(old: CandidateResult, now: CandidateResult) -> Optional[LayersDiff]:
    """The cells both per-layer sections probed, their error in each, the cell whose own
    share grew most; None unless both reports have a per-layer section."""
    if old.per_layer is None or now.per_layer is None:
        return None
    before = {r.path: r for r in old.per_layer.rows}
    after = [r.path for r in now.per_layer.rows]
    probed = set(after)
    rows: List[LayerDiff] = []
    growths: list = []
    for row in now.per_layer.rows:
        was = before.get(row.path)
        if was is None:
            continue
        a, b = own_share(was), own_share(row)
        growth = b - a if a is not None and b is not None else None
        rows.append(LayerDiff(row.path, row.type, was.dtype, row.dtype, _error(was.cosine),
                              _error(row.cosine), growth))
        if growth is not None and row.type not in NETWORK_ROWS:
            growths.append((_grown(growth, a, b), len(growths), row.path))
    grown = [g for g in growths if g[0] > 0]
    most = max(grown, key=lambda g: (g[0], -g[1]))[2] if grown else None
    return LayersDiff(rows, most, old.per_layer.first_flagged, now.per_layer.first_flagged,
                      [p for p in before if p not in probed],
                      [p for p in after if p not in before])


def _grown(growth: float, before: Optional[float], after: Optional[float]) -> float:
    """``growth`` to rank by: a share turned NaN is the largest growth of all."""
    if math.isnan(growth):
        return math.inf if after is not None and math.isnan(after) and not (
            before is not None and math.isnan(before)) else 0.0
    return growth
