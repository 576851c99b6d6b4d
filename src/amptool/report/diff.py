"""Two parity reports compared, in HTML: the diff section (``diff_section``), and the diff
page that holds it (``amptool diff --report diff.html``), one self-contained page in
report.html's style. ``amptool run --baseline`` puts the same section in its report.html.

The section: the diff's verdict and its line, the two reports, the regressions, then every
candidate's figures side by side with their change, noise and result, the checks, limits
and kept fp32 cells that changed, and the per-layer error of both reports on one chart (the
cell whose own share grew most marked)."""
from __future__ import annotations

import time
from typing import List

from amptool import __version__
from amptool.documents.diff import CandidateDiff, DiffReport, LayersDiff
from amptool.files.fileio import write_text
from amptool.report import page as hp
from amptool.report import svgchart as sc

BLUE, RED, PURPLE = "#1f6feb", "#cf222e", "#8250df"
STATUS = {"regressed": "fail", "improved": "pass", "within noise": "info", "unchanged": "info",
          "only in base": "warn", "only in new": "warn"}
"""The badge of each figure's result."""


def write_diff_page(path, report: DiffReport) -> None:
    """Render the diff page of ``report`` and write it to ``path`` all at once."""
    write_text(path, render_diff(report))


def render_diff(report: DiffReport) -> str:
    """The whole HTML document: the verdict banner, the key figures, the diff section."""
    sections = [diff_section(report)]
    top = (f"amptool diff · base {_base(report.base.path)} · new {_base(report.new.path)}")
    body = [f'<div class="topline">{hp.h(top)}</div>',
            hp.verdict_banner(report.passed, report.verdict_line(), None if report.passed
                              else "see the regressions below; give the budget room in the "
                                   "config file's [regression] table if the change is meant"),
            hp.cards([("regressions", str(len(report.regressions))),
                      ("figures improved", str(report.improved)),
                      ("candidates", str(len(report.candidates))),
                      ("samples", hp.number(report.new.samples))]),
            hp.contents(sections)] + sections
    body.append(f"<footer>Written by amptool {hp.h(__version__)} on "
                f"{hp.h(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}; one file, "
                "no network needed.</footer>")
    return hp.page(f"amptool diff: {'PASS' if report.passed else 'FAIL'}", body)


def _base(path: str) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1] or str(path)


def diff_section(report: DiffReport) -> str:
    """The diff section, the one both pages show: the verdict line, the two reports, the
    regressions, then each candidate (its per-layer error where both reports have it)."""
    verdict = (hp.badge("no regression", "pass") if report.passed
               else hp.badge(f"REGRESSED ({len(report.regressions)})", "fail"))
    sides = hp.table(["", "report", "model", "inputs", "verdict"], [
        [label, hp.Cell(f"<code>{hp.h(side.path)}</code>"), side.model, side.inputs,
         hp.Cell(hp.verdict_badge(side.passed))]
        for label, side in (("base", report.base), ("new", report.new))],
        ["", "path", "", "", ""])
    parts = [f'<p class="diff-verdict">{verdict} {hp.h(report.verdict_line())}</p>', sides]
    parts += [hp.note(n) for n in report.notes]
    if report.regressions:
        parts.append(hp.table(["regression", "candidate", "what"], [
            [r.kind, r.candidate, r.message] for r in report.regressions], None,
            [True] * len(report.regressions)))
    parts += [candidate_part(c) for c in report.candidates]
    return hp.section("Diff against the base report", parts, "diff")


def candidate_part(cand: CandidateDiff) -> str:
    """One candidate: its verdicts, figures, changed checks and limits, kept cells."""
    head = (f"<h3>{hp.h(cand.name)} ({hp.h(cand.format)} {hp.h(cand.precision)}) "
            f"{hp.verdict_badge(cand.base_passed)} → {hp.verdict_badge(cand.new_passed)}</h3>")
    if cand.base_path is None or cand.new_path is None:
        return head + hp.note(f"only in {'NEW' if cand.base_path is None else 'BASE'}",
                              warn=cand.new_path is None)
    rows, bad = [], []
    for out in cand.outputs:
        for f in out.figures:
            digits = 10 if f.figure == "cosine" else 7  # the digits fp16 moves
            rows.append([out.name, f.figure, hp.number(f.base, digits), hp.number(f.new, digits),
                         hp.number(f.change, 3), hp.number(f.noise, 3),
                         f"{hp.ci_text(f.base_ci)} → {hp.ci_text(f.new_ci)}"
                         if f.base_ci or f.new_ci else "-",
                         hp.Cell(hp.badge(f.status, STATUS[f.status]))])
            bad.append(f.status == "regressed")
    parts = [head, hp.table(["output", "figure", "base", "new", "change", "noise",
                             "95% CI base → new", "result"], rows,
                            ["", "", "num", "num", "num", "num", "num", ""], bad)]
    parts += _changes(cand)
    if cand.layers:
        parts.append(layers_part(cand.name, cand.layers))
    return "".join(parts)


def _changes(cand: CandidateDiff) -> List[str]:
    parts = []
    if cand.checks:
        parts.append(hp.table(["output", "check", "base", "new", "value", "limit"], [
            [c.output, c.metric, hp.Cell(hp.verdict_badge(c.base)),
             hp.Cell(hp.verdict_badge(c.new)), hp.number(c.value, 7), c.limit]
            for c in cand.checks], None, [c.new is False for c in cand.checks]))
    if cand.limits:
        parts.append(hp.note("Limits changed: " + "; ".join(
            f"{lim.output} {lim.limit} {_limit(lim.base)} → {_limit(lim.new)}"
            for lim in cand.limits)))
    kept = cand.kept
    if kept is not None and kept.base is not None and kept.new is not None:
        words = ([f"now kept in fp32: {', '.join(kept.added)}"] if kept.added else []) + \
            ([f"no longer kept: {', '.join(kept.removed)}"] if kept.removed else [])
        parts.append(hp.note("Kept fp32 cells: " + ("; ".join(words) if words else
                                                    f"the same ({', '.join(kept.new) or 'none'})"),
                             warn=bool(kept.removed)))
    elif kept is not None:
        parts.append(hp.note(f"Kept fp32 cells: not recorded in "
                             f"{'BASE' if kept.base is None else 'NEW'}"))
    return parts


def _limit(value) -> str:
    return "off" if value is None else hp.number(value)


def layers_part(name: str, layers: LayersDiff) -> str:
    """Both reports' per-layer error on one log chart, the cell that grew most marked, and
    the table of every cell."""
    rows = layers.rows
    cells = tuple(r.cell for r in rows)
    values = [hp.as_float(v) for r in rows for v in (r.base_error, r.new_error)]
    positive = [v for v in values if sc.finite(v) and v > 0]
    floor = min(positive + [1e-3]) / 10

    def shown(v):
        v = hp.as_float(v)
        return float("nan") if v is None else max(v, floor) if sc.finite(v) else v

    series = (sc.Series("base", tuple((i, shown(r.base_error)) for i, r in enumerate(rows)),
                        BLUE, "dots"),
              sc.Series("new", tuple((i, shown(r.new_error)) for i, r in enumerate(rows)),
                        RED, "dots"))
    marks = (sc.Rule(cells.index(layers.grew_most), f"grew most: {layers.grew_most}",
                     PURPLE),) if layers.grew_most in cells else ()
    chart = sc.Chart("cell, in execution order", "1 - cosine vs fp32 (log)", series,
                     log_y=True, marks=marks, labels=cells, height=320)
    caption = (f"{name}: each cell's output error against fp32 in both reports; the mark: "
               "the cell whose own share of the error (its error minus its input's) grew "
               f"most. Zero is drawn at {floor:.1g}.")
    table = hp.table(["cell", "type", "dtype base → new", "base", "new", "own growth"], [
        [hp.Cell(f"<code>{hp.h(r.cell)}</code>"), r.type, f"{r.base_dtype} → {r.new_dtype}",
         hp.number(r.base_error), hp.number(r.new_error), hp.number(r.growth)] for r in rows],
        ["path", "", "", "num", "num", "num"], [r.cell == layers.grew_most for r in rows])
    return (hp.figure(f"per-layer diff {name}", sc.render(chart), caption)
            + f"<details><summary>Cells of {hp.h(name)}</summary>{table}</details>")
