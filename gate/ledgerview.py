"""The ledger's records and trends as text (``format_records``, ``format_trend``) and the
trend as JSON (``trend_dict``), read from their types."""
from __future__ import annotations

import math
from typing import List, Optional

from amptool.documents.figures import fmt
from amptool.gate.trend import Trend
from amptool.ledger.record import LedgerRecord


def lowest_cosine(rec: LedgerRecord) -> Optional[float]:
    """The lowest cosine over the record's outputs (NaN first: it failed)."""
    values = [v for v in (o.figure("cosine") for o in rec.outputs) if v is not None]
    return next((v for v in values if v != v), min(values)) if values else None


def highest(rec: LedgerRecord, name: str) -> Optional[float]:
    values = [v for v in (o.figure(name) for o in rec.outputs) if v is not None]
    return max(values) if values else None


def format_records(records: List[LedgerRecord], total: int, ledger: str) -> str:
    """A table of ``records``, a line per record, then each failed one's breaches."""
    shown = f"the {len(records)} that match" if len(records) != total else "all"
    lines = [f"ledger {ledger}: {total} records; {shown} shown, oldest first"]
    if not records:
        return lines[0]
    header = (f"{'id':>6}  {'recorded (UTC)':<16}  {'commit':<16}  {'model':<16} "
              f"{'format':<6} {'prec':<4} {'verdict':<7} {'cosine':>11} {'p999_scaled':>11}  "
              f"{'sha256':<12}  artefact")
    lines += ["", header]
    for r in records:
        lines.append(
            f"{r.id:>6}  {r.recorded_at[:16].replace('T', ' '):<16}  {_cut(r.where, 16):<16}  "
            f"{_cut(r.model or '-', 16):<16} {r.format:<6} {r.precision or '-':<4} "
            f"{r.verdict:<7} {_cosine(lowest_cosine(r)):>11} "
            f"{fmt(highest(r, 'p999_abs_scaled')):>11}  {r.sha256[:12]:<12}  {r.artefact}")
    failed = [r for r in records if not r.passed]
    if failed:
        lines.append("")
        lines += [f"FAIL #{r.id} {r.where}: {r.failure()}" for r in failed]
    return "\n".join(lines)


def _cosine(value: Optional[float]) -> str:
    """A cosine to 9 digits: 0.9999999 and 1 apart."""
    return fmt(value) if value is None or not math.isfinite(value) else f"{value:.9g}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def format_trend(trend: Trend) -> str:
    """Each series' figures (first, last, lowest, highest) and each drift checked."""
    titles = list(dict.fromkeys(s.title for s in trend.series))
    lines = [f"ledger {trend.ledger}: {len(trend.records)} records, {len(titles)} series"]
    for title in titles:
        group = [s for s in trend.series if s.title == title]
        pts = max((s.points for s in group), key=len)
        failed = sum(not p.passed for p in pts)
        lines += ["", f"{title}: {len(pts)} records ({pts[0].where} .. {pts[-1].where}), "
                      f"{failed} failed"]
        for s in group:
            values = [p.value for p in s.points if math.isfinite(p.value)]
            low, high = (min(values), max(values)) if values else (None, None)
            show = _cosine if s.figure == "cosine" else fmt
            lines.append(f"  {s.figure:<18} first {show(s.points[0].value):>11}  "
                         f"last {show(s.points[-1].value):>11}  lowest {show(low):>11}  "
                         f"highest {show(high):>11}")
    if trend.budgets and not trend.drifts:
        lines += ["", "drift: no series has two records with the figures budgeted yet"]
    if trend.drifts:
        lines += ["", f"drift along a line through the last {trend.window} records of each "
                      "series:"]
        for d in sorted(trend.drifts, key=lambda d: not d.exceeded):
            lines.append(f"  {'FAIL' if d.exceeded else 'ok  '} {d.line()}")
        worst = trend.worst
        lines.append("drift " + ("FAILED: " + worst.line() if worst else
                                 f"within budget: {len(trend.drifts)} checked"))
    return "\n".join(lines)


def trend_dict(trend: Trend) -> dict:
    """``ledger trend --json``: the series with their points, the drifts checked."""
    return {
        "ledger": trend.ledger, "records": len(trend.records), "window": trend.window,
        "passed": trend.passed,
        "series": [{"model": s.model, "format": s.format, "precision": s.precision,
                    "output": s.output, "figure": s.figure,
                    "points": [{"record": p.record, "where": p.where, "value": p.value,
                                "passed": p.passed} for p in s.points]}
                   for s in trend.series],
        "drifts": [{"series": d.series.title, "figure": d.series.figure,
                    "budget": d.budget.text, "records": d.records, "start": d.start,
                    "end": d.end, "worse_by": d.worse_by, "share": d.share,
                    "exceeded": d.exceeded, "all_passed": d.all_passed}
                   for d in trend.drifts]}
