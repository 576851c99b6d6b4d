"""``amptool parity`` once its config is built: the check run, the files it asked for
written (JSON, JUnit XML, the per-layer chart, report.html), the table or the verdict
printed with a last line naming where the result is, the ledger's records counted, and
exit 1 on a breach (2 when the ledger could not take what was measured)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import typer

from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.ledger.url import LedgerError, ledger_url, shown
from amptool.parity.compare import parity
from amptool.parity.config import ParityConfig
from amptool.parity.plot import write_plot
from amptool.parity.report import (ParityReport, failure_fix, failure_line, format_table,
                                   report_json, resolution_warnings, write_junit,
                                   write_report_json)
from amptool.report.html import ReportPage, write_report


def check(cfg: ParityConfig, json_out: Optional[Path], junit: Optional[Path],
          plot: Optional[Path], mode: str = "", html: Optional[Path] = None) -> None:
    """Run the check ``cfg`` asks for and ``emit_report`` its report; on a host other than
    node 0, say that its ranks are done (node 0 writes the report)."""
    result, unrecorded = measured(cfg)
    if result is None:  # a host other than node 0: its ranks are done
        typer.echo(f"node {cfg.node_rank}: its {cfg.workers} rank(s) compared their shards; "
                   "node 0 merges them into the report")
        return
    notes = [] if unrecorded or not cfg.ledger else [
        f"ledger: {len(result.candidates)} record(s) appended to {shown(ledger_url(cfg.ledger))}"]
    emit_report(result, json_out, junit, plot, mode, html, notes, unrecorded)


def measured(cfg: ParityConfig) -> tuple:
    """(the report of ``parity(cfg)``, None; or, where ``cfg.ledger`` could not take it, the
    report and the ``LedgerError``): what was measured is never lost."""
    try:
        return parity(cfg), None
    except LedgerError as exc:
        if exc.measured is None:
            raise
        return exc.measured, exc


def emit_report(report: ParityReport, json_out, junit, plot, mode: str = "",
                html=None, notes: Sequence[str] = (),
                unrecorded: Optional[LedgerError] = None) -> None:
    """Write the requested files (``html``: the HTML report), print the table (only its
    verdict line with mode "quiet", the report as JSON with mode "json") and then ``notes``
    and where the result is (not with "quiet" or "json"), then exit 2 with ``unrecorded``
    (the ledger that did not take the report), else 1 if parity failed."""
    if json_out is not None:
        write_report_json(str(json_out), report)
    if junit is not None:
        write_junit(str(junit), report)
    if plot is not None:
        write_plot(str(plot), report)
    if html is not None:
        passed = report.passed
        write_report(html, ReportPage(
            "parity", passed, format_table(report).splitlines()[-1] if passed
            else failure_line(report), None if passed else failure_fix(report), parity=report,
            seconds={"parity": report.seconds}))
    if mode == "json":
        opt.print_json(report_json(report))
    else:
        text = format_table(report)
        typer.echo(text.splitlines()[-1] if mode == "quiet" else text)
        for line in notes if mode != "quiet" else ():
            typer.echo(line)
        if mode == "quiet":  # the table's notes are not shown: say it on stderr
            for line in resolution_warnings(report):
                typer.echo(f"amptool: {line}", err=True)
        else:
            typer.echo(written_line([json_out, html, junit, plot]))
    if unrecorded is not None:  # the ledger's failure decides the exit code
        raise unrecorded
    if not report.passed:
        fix = failure_fix(report)
        kept = json_out if json_out is not None else html
        raise CheckFailed(failure_line(report), fix + (f"; see {kept}" if kept else ""))


def written_line(paths: list) -> str:
    """Where the result is: the files written (None: not asked for), or how to keep it."""
    written = [str(p) for p in paths if p is not None]
    if written:
        return f"report: {', '.join(written)}"
    return ("report: none written (--json-out FILE.json writes it, with FILE.html beside it; "
            "--junit FILE.xml for CI)")
