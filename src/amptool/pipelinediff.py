"""``amptool run --baseline``: the run's parity report compared with a report of before (main's
run, the last release's) as ``amptool diff BASE NEW`` compares them, through the same code
(``amptool.gate.diffread.read_report``, ``amptool.gate.diff.compare_reports``), and the diff
written beside the run's reports (diff.json).

BASE is read, and held to its schema, before anything is trained (``read_baseline``); whether
it is of the run's model and inputs can only be known once parity has run
(``compare_with_baseline``), and a BASE that is not is then refused (``BaselineRefused``,
exit 2) with the run's own reports written.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from amptool.documents.diff import DIFF, DiffReport
from amptool.documents.parity import ParityReport
from amptool.errors import UsageError
from amptool.files.fileio import write_json
from amptool.gate.diff import compare_reports
from amptool.gate.diffread import read_report
from amptool.gate.difftext import failure_fix as regression_fix
from amptool.gate.difftext import format_diff
from amptool.parity.report import failure_fix, failure_line
from amptool.pipelineconfig import PipelineConfig

DIFF_NAME = "diff.json"
"""The diff against the baseline in the run's folder (``amptool diff --json``'s document)."""


class BaselineRefused(UsageError):
    """A baseline of another model, or judged on other inputs, than the run (exit 2).

    ``measured``: the pipeline's result, whose reports are written, so that nothing measured
    is lost: the command still writes report.html and prints its summary, then refuses."""

    measured: Any = None


@dataclass(frozen=True)
class Baseline:
    """The report ``--baseline`` names, read."""

    report: ParityReport
    """Its parity report, held to its type."""
    path: str
    """The file it was read from (a run folder's parity.json for a folder)."""


def read_baseline(cfg: PipelineConfig) -> Optional[Baseline]:
    """``cfg.baseline`` read as ``amptool diff`` reads BASE (None: no baseline); one
    UsageError for a path that is missing, unreadable, no parity report, or of a newer
    schema."""
    if cfg.baseline is None:
        return None
    report, path = read_report(cfg.baseline, "--baseline")
    return Baseline(report, path)


def compare_with_baseline(baseline: Optional[Baseline], report: ParityReport, cfg: PipelineConfig,
                          out: Path) -> Optional[DiffReport]:
    """The run's parity ``report`` (written to ``out``/parity.json) compared with
    ``baseline`` under ``cfg.regression``, written to ``out``/diff.json; None without a
    baseline (a diff.json an earlier run left there removed). ``BaselineRefused`` for a
    baseline of another model or inputs."""
    target = Path(out) / DIFF_NAME
    if baseline is None:
        target.unlink(missing_ok=True)
        return None
    try:
        diff = compare_reports(baseline.report, report, cfg.regression, baseline.path,
                               str(Path(out) / "parity.json"))
    except UsageError as exc:  # another model or other inputs: nothing to compare
        target.unlink(missing_ok=True)
        raise BaselineRefused(exc.problem, "give --baseline a report of this run's model on "
                                           "the same inputs (the same --model, --data and "
                                           "--samples)") from None
    write_json(target, DIFF.json(diff))
    return diff


def diff_text(diff: DiffReport, table: bool = True) -> str:
    """The diff as ``amptool diff`` prints it: the table, its verdict line last (``table``
    False: that line alone)."""
    text = format_diff(diff)
    return text if table else text.splitlines()[-1]


def run_failure(report: ParityReport, diff: Optional[DiffReport], out: str) -> Optional[tuple]:
    """(line, fix) of a run (its parity ``report``, its ``diff`` against the baseline, its
    folder ``out``) that failed; None for one that passed. Parity's failure comes first, the
    diff's worst regression after it when the diff regressed too; a diff that regressed
    alone is said as ``amptool diff`` says it. Either way the exit code is 1."""
    regressed = diff if diff is not None and not diff.passed else None
    if report.passed:
        if regressed is None:
            return None
        return regressed.verdict_line(), regression_fix(regressed, shown=str(Path(out) / DIFF_NAME))
    line, fix = failure_line(report), f"{failure_fix(report)}; see {Path(out) / 'parity.json'}"
    if regressed is not None:
        line, fix = f"{line}; {regressed.verdict_line()}", f"{fix} and {Path(out) / DIFF_NAME}"
    return line, fix
