"""``amptool diff BASE NEW``: two parity reports of one model on the same inputs compared,
candidate by candidate and figure by figure; ``diff(DiffConfig) -> DiffReport`` is the one
entry (``compare_reports`` takes two reports already read).

Candidates are matched by format, precision and file name (two runs of one pipeline name
their artefacts alike, in other folders), else by format and precision alone where each
report has one candidate of that kind left; outputs by position. What each figure's noise is,
and so when it has regressed: ``amptool.stats.regression``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from amptool.documents.diff import (DIFF_VERSION, CandidateDiff, DiffReport, DiffSide,
                                    FigureDiff, OutputDiff, Regression)
from amptool.documents.figures import CI_SUFFIX, fmt
from amptool.documents.parity import CandidateResult, ParityReport
from amptool.gate.diffconfig import DiffConfig
from amptool.gate.diffparts import check_changes, kept_diff, layers_diff, limit_changes
from amptool.gate.diffread import Source, check_same_subject, read_report, without_folders
from amptool.gate.difftext import regression_text
from amptool.stats.regression import (P999_RESOLUTION, Change, RegressionBudget, count_change,
                                      counted_change, error_change)

ERRORS = ("cosine", "p999_abs_scaled", "max_abs_scaled")
"""Error figures (``error_change``): 1 - cosine, the scaled 99.9th percentile and worst error."""
RATES = {"top1_agree_clear": False, "acc_drop_clear": True}
"""Counted figures (``counted_change``), True where higher is worse."""
FIGURES = ERRORS + tuple(RATES) + ("nonfinite",)
"""The figures of each output compared, in the order they are shown."""
TASK = "task_drop"
"""The task metric's figure (``--metric``), counted when it has an interval."""


def diff(cfg: DiffConfig) -> DiffReport:
    """Read BASE and NEW (parity reports, or run folders holding one), refuse two reports
    that are not of one model on the same inputs, and compare them under ``cfg.budget``."""
    base, base_path = read_report(cfg.base, "BASE")
    new, new_path = read_report(cfg.new, "NEW")
    return compare_reports(base, new, cfg.budget, base_path, new_path)


def compare_reports(base: Source, new: Source, budget: RegressionBudget = RegressionBudget(),
                    base_path: str = "BASE", new_path: str = "NEW") -> DiffReport:
    """``base`` and ``new`` (``ParityReport``s, or files as ``diff`` reads them) compared:
    every candidate's figures side by side, and the regressions beyond noise and
    ``budget`` (UsageError for two reports of different models or inputs)."""
    if not isinstance(base, ParityReport):
        base, base_path = read_report(base, "BASE")
    if not isinstance(new, ParityReport):
        new, new_path = read_report(new, "NEW")
    check_same_subject(base, new, base_path, new_path)
    candidates, found = [], []
    for old, now in match_candidates(base.candidates, new.candidates):
        cand, regressions = candidate_diff(old, now, budget, new.samples)
        candidates.append(cand)
        found += regressions
    ranked = [r for _, r in sorted(found, key=lambda pair: pair[0])]
    return DiffReport(DIFF_VERSION, not ranked, _side(base, base_path), _side(new, new_path),
                      budget, candidates, ranked, _notes(base, new))


def _side(report: ParityReport, path: str) -> DiffSide:
    return DiffSide(path, report.passed, report.reference.model, report.reference.path,
                    report.inputs.description, report.samples)


def file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def match_candidates(base: List[CandidateResult], new: List[CandidateResult]) -> list:
    """(BASE's, NEW's) candidate pairs, None where one report lacks it: by format, precision
    and file name, then by format and precision where each side has one such left; in NEW's
    order, BASE's own after."""
    def kind(c: CandidateResult) -> tuple:
        return c.format, c.precision

    left = list(base)
    pairs: List[list] = []
    for cand in new:
        twin = next((b for b in left if kind(b) == kind(cand)
                     and file_name(b.path) == file_name(cand.path)), None)
        if twin is not None:
            left.remove(twin)
        pairs.append([twin, cand])
    for pair in pairs:
        if pair[0] is not None:
            continue
        olds = [b for b in left if kind(b) == kind(pair[1])]
        news = [p for p in pairs if p[0] is None and kind(p[1]) == kind(pair[1])]
        if len(olds) == 1 and len(news) == 1:
            pair[0] = olds[0]
            left.remove(olds[0])
    return [tuple(p) for p in pairs] + [(b, None) for b in left]


def candidate_diff(old: Optional[CandidateResult], now: Optional[CandidateResult],
                   budget: RegressionBudget, samples: int) -> Tuple[CandidateDiff, list]:
    """One candidate compared, and its regressions, each with its rank (``_rank``)."""
    some = now or old
    assert some is not None
    name = file_name(some.path)
    cand = CandidateDiff(name, some.format, some.precision, old.path if old else None,
                         now.path if now else None, old.passed if old else None,
                         now.passed if now else None, [], [], [], kept_diff(old, now), None)
    if old is None or now is None:
        missing = [(_rank("missing"), Regression(name, None, "missing", "candidate",
                                                 f"{name}: checked in BASE, missing from NEW"))]
        return cand, missing if now is None and budget.missing_candidates else []
    several = len(now.outputs) > 1
    outputs, found = [], []
    for a, b in zip(old.outputs, now.outputs):
        figures = [figure_diff(f, a.metrics, b.metrics, budget, samples) for f in FIGURES]
        outputs.append(OutputDiff(b.name, [f for f in figures if f is not None]))
        found += _figure_regressions(name, b.name if several else None, outputs[-1])
    if old.task or now.task:
        task = figure_diff(TASK, old.task and old.task.metrics, now.task and now.task.metrics,
                           budget, samples)
        outputs.append(OutputDiff("task", [task] if task else []))
        found += _figure_regressions(name, "task", outputs[-1])
    checks = check_changes(old, now)
    if budget.check_flips:
        found += [(_rank("check"), Regression(name, c.output, "check", c.metric,
                                              _check_text(name, c, several)))
                  for c in checks if c.new is False]
    return CandidateDiff(cand.name, cand.format, cand.precision, cand.base_path, cand.new_path,
                         cand.base_passed, cand.new_passed, outputs, checks,
                         limit_changes(old, now), cand.kept, layers_diff(old, now)), found


def value(metrics, name: str) -> Optional[float]:
    """A figure of ``metrics`` as a float (NaN/Inf as the strings JSON holds read back);
    None where absent."""
    raw = getattr(metrics, name, None) if metrics is not None else None
    if raw is None or isinstance(raw, bool):
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def figure_diff(figure: str, old, now, budget: RegressionBudget,
                samples: int) -> Optional[FigureDiff]:
    """One figure in both reports' metrics (None where neither has it)."""
    a, b = value(old, figure), value(now, figure)
    if a is None and b is None:
        return None
    cis = {}
    if figure in RATES or figure == TASK:
        cis = {"base_ci": getattr(old, figure + CI_SUFFIX, None) if old else None,
               "new_ci": getattr(now, figure + CI_SUFFIX, None) if now else None}
    if a is None or b is None:
        return FigureDiff(figure, a, b, None, None, "only in new" if a is None else "only in base",
                          **cis)
    change = _judge(figure, a, b, cis, budget, samples)
    return FigureDiff(figure, a, b, b - a, change.noise, change.status, **cis)


def _judge(figure: str, a: float, b: float, cis: dict, budget: RegressionBudget,
           samples: int) -> Change:
    if figure == "cosine":  # as an error: 1 - cosine; its floor the scaled floor's square / 2
        return error_change(1.0 - a, 1.0 - b, 0.0, budget.error_floor ** 2 / 2,
                            budget.error_growth)
    if figure in ERRORS:
        rel = P999_RESOLUTION if figure == "p999_abs_scaled" else 0.0
        return error_change(a, b, rel, budget.error_floor, budget.error_growth)
    if figure == "nonfinite":
        return count_change(int(a), int(b), budget.nonfinite_allowance)
    if figure == TASK and not (cis["base_ci"] and cis["new_ci"]):
        return error_change(a, b, 0.0, 0.0, None) if budget.task_allowance is None else \
            _exact(a, b, budget.task_allowance)
    allowed = budget.task_allowance if figure == TASK else budget.rate_allowance
    return counted_change(a, b, cis["base_ci"], cis["new_ci"], samples,
                          RATES.get(figure, True), allowed)


def _exact(a: float, b: float, allowed: float) -> Change:
    """A figure without an interval nor a resolution (a task metric that is no rate)."""
    if b == a:
        return Change(0.0, "unchanged")
    if b < a:
        return Change(0.0, "improved")
    return Change(0.0, "regressed" if b - a > allowed else "within noise")


def _figure_regressions(name: str, output: Optional[str], out: OutputDiff) -> list:
    where = f"{name} {output}" if output else name
    return [(_rank("figure", f), Regression(name, out.name, "figure", f.figure,
                                            regression_text(where, f)))
            for f in out.figures if f.status == "regressed"]


def _check_text(name: str, change, several: bool) -> str:
    where = f"{name} {change.output}" if several or change.output == "task" else name
    was = {True: "passed", None: "was not checked"}[change.base]
    return (f"{where}: {change.metric} {was}, now fails ({fmt(change.value)}, limit "
            f"{change.limit})")


_KINDS = ("check", "missing", "figure")


def _rank(kind: str, figure: Optional[FigureDiff] = None) -> tuple:
    """Where a regression goes in the report: checks that now fail, then candidates NEW
    lacks, then figures, the one that moved most times its noise first (a figure turned
    NaN/Inf first of all); equal ones in the order found."""
    beyond = 0.0
    if figure is not None:
        a, b, noise = (float(v) if v is not None else 0.0
                       for v in (figure.base, figure.new, figure.noise))
        finite = math.isfinite(a) and math.isfinite(b)
        beyond = abs(b - a) / noise if finite and noise > 0 else math.inf
    return _KINDS.index(kind), -beyond


def _notes(base: ParityReport, new: ParityReport) -> list:
    notes = []
    if base.reference.preprocess != new.reference.preprocess:
        notes.append("the references' preprocessing differs (another training's data "
                     "statistics): the inputs fed differ although the data is the same")
    old_ref, new_ref = base.reference, new.reference
    if (old_ref.format, old_ref.precision) != (new_ref.format, new_ref.precision):
        notes.append(f"the references differ: {file_name(old_ref.path)} ({old_ref.format} "
                     f"{old_ref.precision}) in BASE, {file_name(new_ref.path)} "
                     f"({new_ref.format} {new_ref.precision}) in NEW")
    if base.passed != new.passed:
        notes.append(f"BASE {'passed' if base.passed else 'failed'} its gate, NEW "
                     f"{'passed' if new.passed else 'failed'} its own")
    if without_folders(base.device) != without_folders(new.device):
        notes.append(f"checked on {base.device} (BASE) and {new.device} (NEW)")
    return notes
