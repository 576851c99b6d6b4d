"""``amptool diff``'s table: the two reports, then per candidate each output's figures side
by side with their change, noise and result, the checks and limits that changed, the kept
fp32 cells and the per-layer error; the verdict line last."""
from __future__ import annotations

from typing import List, Optional

from amptool.documents.diff import CandidateDiff, DiffReport, DiffSide, FigureDiff, LayersDiff
from amptool.documents.figures import fmt

LAYER_ROWS = 8
"""Cells of the per-layer part shown: those whose own share of the error moved most."""


def verdict_word(passed: Optional[bool]) -> str:
    return "-" if passed is None else "PASS" if passed else "FAIL"


def format_diff(report: DiffReport) -> str:
    """The whole table, the verdict line last."""
    lines = [_side_line("base", report.base), _side_line("new ", report.new)]
    lines += [f"note: {note}" for note in report.notes]
    for cand in report.candidates:
        lines.append("")
        lines += candidate_lines(cand)
    lines += ["", report.verdict_line()]
    return "\n".join(lines)


def _side_line(label: str, side: DiffSide) -> str:
    model = f"{side.model}, " if side.model else ""
    return (f"{label}  {side.path}: {model}{side.inputs}: "
            f"{'PASSED' if side.passed else 'FAILED'}")


def number(value, digits: int = 6) -> str:
    """A figure in ``digits`` significant digits (NaN/Inf as such, '-' when absent)."""
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return f"{value:.{digits}g}"
    return fmt(value)


def figure_text(f: FigureDiff, value) -> str:
    """A value of ``f``: a cosine with the digits that tell fp16 from fp32 apart."""
    return number(value, 10 if f.figure == "cosine" else 6)


def regression_text(where: str, f: FigureDiff) -> str:
    """The line of a regressed figure."""
    return (f"{where}: {f.figure} {figure_text(f, f.base)} -> {figure_text(f, f.new)}, "
            f"worse beyond its noise ({number(f.noise, 3)})")


def change_text(f: FigureDiff) -> str:
    if f.change is None:
        return "-"
    if f.change == 0:
        return "0"
    text = number(f.change, 4)
    return text if text.startswith("-") or text in ("nan", "inf") else f"+{text}"


def ci_text(ci) -> str:
    return f"{ci[0]:.3g}..{ci[1]:.3g}" if ci and len(ci) == 2 else "-"


def candidate_lines(cand: CandidateDiff) -> List[str]:
    what = f"{cand.name} ({cand.format} {cand.precision or '?'})"
    if cand.base_path is None or cand.new_path is None:
        side = "NEW" if cand.base_path is None else "BASE"
        passed = cand.new_passed if cand.base_path is None else cand.base_passed
        return [f"candidate  {what}: only in {side} ({verdict_word(passed)})"]
    lines = [f"candidate  {what}: {verdict_word(cand.base_passed)} -> "
             f"{verdict_word(cand.new_passed)}",
             f"    {'output':<10} {'figure':<17} {'base':>12} {'new':>12} {'change':>11} "
             f"{'noise':>9}  result"]
    for out in cand.outputs:
        for f in out.figures:
            result = f.status.upper() if f.status == "regressed" else f.status
            if f.base_ci or f.new_ci:
                result += f" [95% CI {ci_text(f.base_ci)} -> {ci_text(f.new_ci)}]"
            lines.append(f"    {out.name[:10]:<10} {f.figure:<17} {figure_text(f, f.base):>12} "
                         f"{figure_text(f, f.new):>12} {change_text(f):>11} "
                         f"{number(f.noise, 3):>9}  {result}")
    for c in cand.checks:
        lines.append(f"  check {c.output} {c.metric}: {_check_word(c.base)} -> "
                     f"{_check_word(c.new)} ({fmt(c.value)}, limit {c.limit})")
    for lim in cand.limits:
        lines.append(f"  limit {lim.output} {lim.limit}: {_limit(lim.base)} -> "
                     f"{_limit(lim.new)}")
    lines += kept_lines(cand)
    if cand.layers is not None:
        lines += layer_lines(cand.layers)
    return lines


def _check_word(passed: Optional[bool]) -> str:
    return "n/a" if passed is None else "pass" if passed else "FAIL"


def _limit(value) -> str:
    return "off" if value is None else fmt(value)


def kept_lines(cand: CandidateDiff) -> List[str]:
    kept = cand.kept
    if kept is None:
        return []
    if kept.base is None or kept.new is None:
        side = "BASE" if kept.base is None else "NEW"
        return [f"  kept fp32: not recorded in {side}"]
    if not kept.added and not kept.removed:
        return [f"  kept fp32: the same ({', '.join(kept.new) or 'none'})"]
    parts = ([f"now kept: {', '.join(kept.added)}"] if kept.added else []) + \
        ([f"no longer kept: {', '.join(kept.removed)}"] if kept.removed else [])
    return ["  kept fp32: " + "; ".join(parts)]


def layer_lines(layers: LayersDiff) -> List[str]:
    """The per-layer part: the cells whose own share moved most, in execution order."""
    moved = sorted(range(len(layers.rows)),
                   key=lambda i: -abs(_number(layers.rows[i].growth)))[:LAYER_ROWS]
    most = layers.grew_most
    head = f"grew most: {most}" if most else "no cell's own error grew"
    lines = [f"  per-layer (1 - cosine vs fp32, {len(layers.rows)} cells in both): {head}"
             + (f"; first below the limit: {layers.base_first_flagged or 'none'} -> "
                f"{layers.new_first_flagged or 'none'}"
                if layers.base_first_flagged != layers.new_first_flagged else ""),
             f"    {'cell':<28} {'dtype':<17} {'base':>11} {'new':>11} {'own growth':>11}"]
    for i in sorted(moved):
        row = layers.rows[i]
        dtype = row.new_dtype if row.base_dtype == row.new_dtype else \
            f"{row.base_dtype}->{row.new_dtype}"
        note = "  << grew most" if row.cell == most else ""
        lines.append(f"    {row.cell[:28]:<28} {dtype[:17]:<17} {number(row.base_error, 4):>11} "
                     f"{number(row.new_error, 4):>11} {number(row.growth, 4):>11}{note}")
    rest = len(layers.rows) - len(moved)
    if rest > 0:
        lines.append(f"    ({rest} more cells moved less)")
    return lines


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return float("inf") if number != number else number


SHOWN = {"": "the table above", "quiet": "the table amptool diff prints without -q",
         "json": "the regressions of the JSON printed"}
"""Where the regressions are, by what the command printed (its mode)."""


def failure_fix(report: DiffReport, mode: str = "", shown: str = "") -> str:
    """What to do about a regressed diff whose command printed in ``mode`` ("" the table,
    "quiet" its last line, "json" the document); ``shown``: where its figures are instead
    (a file)."""
    if report.regressions and report.regressions[0].kind == "missing":
        return "check NEW's candidates, or set missing_candidates = false in [regression]"
    return (f"see {shown or SHOWN[mode]}; if the change is meant, give the budget room in the "
            "config file's [regression] table")
