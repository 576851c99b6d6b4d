"""``amptool ledger show`` and ``amptool ledger trend``: the parity ledger's records as a
table, its figures over time (printed, and one HTML page), and the drift budgets."""
from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from amptool.console import options as opt
from amptool.errors import UsageError

LedgerArg = Annotated[str, typer.Option(
    "--ledger", metavar="URL", help="The parity ledger: a path or sqlite:///PATH (an SQLite "
    "file) or postgresql+psycopg://USER@HOST/DB.")]
ModelFilter = Annotated[Optional[str], typer.Option(help="Only records of this model reference.")]
FormatFilter = Annotated[Optional[str], typer.Option(
    "--format", help="Only records of this format (MINDIR, ONNX).")]
PrecisionFilter = Annotated[Optional[str], typer.Option(help="Only fp32 or fp16 records.")]
BranchFilter = Annotated[Optional[str], typer.Option(help="Only records made on this branch.")]
CommitFilter = Annotated[Optional[str], typer.Option(
    help="Only records of the commit starting so.")]
LabelFilter = Annotated[Optional[str], typer.Option(help="Only records of this --label.")]
ShaFilter = Annotated[Optional[str], typer.Option(
    "--sha256", help="Only records of the artefact whose main file's sha256 starts so.")]
VerdictFilter = Annotated[Optional[str], typer.Option(help="Only pass or only fail records.")]
LastShow = Annotated[int, typer.Option(help="The last N records that match; 0: all.")]
LastTrend = Annotated[int, typer.Option(help="Chart the last N records that match; 0: all.")]
FigureOption = Annotated[Optional[List[str]], typer.Option(
    "--figure", help="A figure to chart (repeatable); without it, those of cosine, "
    "p999_abs_scaled, max_abs_scaled, top1_agree_clear, acc_drop_clear, nonfinite and "
    "task_drop the records have.")]
MaxDriftOption = Annotated[Optional[List[str]], typer.Option(
    "--max-drift", metavar="FIGURE=AMOUNT[%]", help="Exit 1 when FIGURE worsens by more than "
    "AMOUNT (its own unit, or a percentage of its value at the window's start; of its gap "
    "to 1 for cosine and top-1) along a line fitted to the last --window records of a "
    "series, even though each record passed. Repeatable.")]
WindowOption = Annotated[int, typer.Option(help="Records a drift is measured over.")]

ledger_app = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="The parity ledger: every check's records, shown and charted "
                              "over time.")


@ledger_app.command("show")
@opt.handle_errors
def show_command(ledger: LedgerArg, model: ModelFilter = None, format: FormatFilter = None,
                 precision: PrecisionFilter = None, branch: BranchFilter = None,
                 commit: CommitFilter = None, label: LabelFilter = None,
                 sha256: ShaFilter = None, verdict: VerdictFilter = None, last: LastShow = 20,
                 as_json: opt.about(opt.JsonOption, "the records") = False) -> None:
    """List the ledger's records: when, where, what, the verdict and its figures."""
    check_filter(verdict, last)
    _engine().show(ledger, dict(model=model, format=format, precision=precision,
                                branch=branch, commit=commit, label=label, sha256=sha256,
                                verdict=verdict, last=last or None), as_json)


@ledger_app.command("trend")
@opt.handle_errors
def trend_command(ledger: LedgerArg, model: ModelFilter = None, format: FormatFilter = None,
                  precision: PrecisionFilter = None, branch: BranchFilter = None,
                  label: LabelFilter = None, figure: FigureOption = None,
                  max_drift: MaxDriftOption = None, window: WindowOption = 10,
                  last: LastTrend = 0,
                  report: opt.noted(opt.ReportOption, "Without it: no page.") = None,
                  as_json: opt.about(opt.JsonOption, "the series and drifts") = False) -> None:
    """Chart each figure over the records; exit 1 when one drifts past its --max-drift."""
    check_filter(None, last)
    html = opt.report_file(report, None)
    _engine().chart(ledger, dict(model=model, format=format, precision=precision,
                                 branch=branch, label=label, last=last or None),
                    figure or (), max_drift or (), window, html, as_json)


def check_filter(verdict: Optional[str], last: int) -> None:
    """One line for a filter the ledger cannot apply."""
    if verdict is not None and verdict.lower() not in ("pass", "fail"):
        raise UsageError(f"--verdict must be pass or fail (got {verdict!r})", "give pass or fail")
    if last < 0:
        raise UsageError(f"--last must be 0 or more (got {last})", "give a count, or 0 for all")


def _engine():
    """The ledger commands' work (SQLAlchemy, the charts), imported when one runs."""
    from amptool.gate import ledgercommand

    return ledgercommand


def register(app: typer.Typer) -> None:
    """``amptool ledger show`` and ``amptool ledger trend`` on the root app."""
    app.add_typer(ledger_app, name="ledger")
