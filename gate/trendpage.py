"""``amptool ledger trend``'s page: one self-contained HTML file in the report's style (its
shell, tables and inline SVG charts): the drift verdict first, then one chart per figure of
each series over the records, a PASS or FAIL dot at each, the drift window marked.
"""
from __future__ import annotations

import math
from typing import List

from amptool.files.fileio import write_text
from amptool.gate.trend import Drift, Series, Trend
from amptool.report import page as hp
from amptool.report import svgchart as sc

LINE, PASS, FAIL, MARK = "#8c959f", "#1a7f37", "#cf222e", "#8250df"
TABLE_ROWS = 50
"""The latest records listed under the charts."""


def write_trend_page(path, trend: Trend) -> None:
    """Render ``trend`` and write it to ``path`` all at once."""
    write_text(path, render(trend))


def render(trend: Trend) -> str:
    worst = trend.worst
    if worst is not None:
        line = worst.line()
        fix = "find where it began with amptool ledger show, or give the budget room"
    else:
        line = f"{len(trend.records)} records, {len(trend.series)} series" + (
            f"; every drift within its budget over the last {trend.window} records"
            if trend.drifts else "; no --max-drift budget given")
        fix = None
    sections = ([drift_section(trend)] if trend.drifts else []) + series_sections(trend) + [
        records_section(trend)]
    top = f'<div class="topline">{hp.h("amptool ledger trend · " + trend.ledger)}</div>'
    body = [top, hp.verdict_banner(trend.passed, line, fix), hp.cards(_cards(trend)),
            hp.contents(sections)] + sections
    return hp.page("amptool ledger trend", body)


def _cards(trend: Trend) -> list:
    recs = trend.records
    failed = sum(not r.passed for r in recs)
    return [("records", hp.number(len(recs))), ("failed records", hp.number(failed)),
            ("series", hp.number(len({s.title for s in trend.series}))),
            ("drifts past budget", hp.number(sum(d.exceeded for d in trend.drifts)))]


def drift_section(trend: Trend) -> str:
    rows, bad = [], []
    for d in sorted(trend.drifts, key=lambda d: not d.exceeded):
        rows.append([hp.Cell(hp.verdict_badge(not d.exceeded)), d.series.title, d.series.figure,
                     hp.number(d.start), hp.number(d.end), _amount(d), d.budget.text,
                     d.records, "yes" if d.all_passed else "no"])
        bad.append(d.exceeded)
    table = hp.table(["", "series", "figure", "start", "end", "worse by", "budget", "records",
                      "every record passed"], rows,
                     ["", "", "", "num", "num", "num", "", "num", ""], bad)
    note = hp.note("start and end are a least-squares line's through the last "
                   f"{trend.window} records of each series: a drift of many small steps shows "
                   "even though each step passed its own check.")
    return hp.section("Drift", [table, note], "drift")


def _amount(d: Drift) -> str:
    return f"{d.share * 100:+.3g}%" if d.budget.relative else f"{d.worse_by:+.3g}"


def series_sections(trend: Trend) -> List[str]:
    """A section per artefact kind and output, a chart per figure."""
    by_title: dict = {}
    for s in trend.series:
        by_title.setdefault(s.title, []).append(s)
    window = {(d.series.title, d.series.figure): d for d in trend.drifts}
    return [hp.section(title, [chart(s, window.get((title, s.figure)), trend.window)
                               for s in group], f"series-{i}")
            for i, (title, group) in enumerate(by_title.items())]


def chart(series: Series, drift, window: int) -> str:
    """One figure over the records: a grey line, a green dot at each passing record, a red
    one at each failing; the drift window's first record marked."""
    pts = series.points
    labels = tuple(p.where for p in pts)
    pairs = [(i, p.value) for i, p in enumerate(pts)]
    drawn = sc.thin(pairs)  # spikes kept
    if len(drawn) < len(pts):  # and every failing record
        drawn = sorted(set(drawn) | {pairs[i] for i, p in enumerate(pts) if not p.passed},
                       key=lambda xy: xy[0])
    line = sc.Series("", tuple(drawn), LINE, "line")
    marks: tuple = ()
    if drift is not None and len(pts) > 1:
        first = max(0, len(pts) - window)
        color = FAIL if drift.exceeded else MARK
        marks = (sc.Rule(first, f"last {len(pts) - first}: {_amount(drift)}", color),)
    parts = [line]
    for name, color, passed in (("PASS", PASS, True), ("FAIL", FAIL, False)):
        dots = tuple((i, v) for i, v in drawn if pts[i].passed == passed)
        if dots:
            parts.append(sc.Series(name, dots, color, "points"))
    positive = [p.value for p in pts if math.isfinite(p.value)]
    log_y = bool(positive) and min(positive) > 0 and max(positive) / min(positive) > 100
    svg = sc.render(sc.Chart("record (commit or label)", series.figure, tuple(parts),
                             log_y=log_y, marks=marks, labels=labels, height=280))
    caption = (f"{series.figure} of {series.title} over {len(pts)} records "
               f"({sum(not p.passed for p in pts)} failed)")
    return f"<h3>{hp.h(series.figure)}</h3>" + hp.figure(series.figure, svg, caption)


def records_section(trend: Trend) -> str:
    recs = trend.records[-TABLE_ROWS:][::-1]
    rows = [[r.id, r.recorded_at[:19].replace("T", " "), r.where, r.branch, r.model, r.format,
             r.precision, hp.Cell(hp.verdict_badge(r.passed, r.verdict.endswith("*"))),
             r.sha256[:12], r.artefact] for r in recs]
    table = hp.table(["id", "recorded (UTC)", "commit", "branch", "model", "format",
                      "precision", "verdict", "sha256", "artefact"], rows,
                     ["num", "", "path", "", "", "", "", "", "path", "path"],
                     [not r.passed for r in recs])
    more = len(trend.records) - len(recs)
    parts = [table] + ([hp.note(f"and {more} earlier records (amptool ledger show lists "
                                "them)")] if more > 0 else [])
    return hp.section("Records, latest first", parts, "records")
