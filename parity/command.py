"""``amptool parity`` once its config is built: the check run, the files it asked for
written (JSON, JUnit XML, the per-layer chart, report.html), the table or the verdict
printed, and exit 1 on a breach."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.parity.compare import parity
from amptool.parity.config import ParityConfig
from amptool.parity.plot import write_plot
from amptool.parity.report import (ParityReport, failure_fix, failure_line, format_table,
                                   resolution_warnings, write_junit, write_report_json)
from amptool.report.html import ReportPage, write_report


def check(cfg: ParityConfig, json_out: Optional[Path], junit: Optional[Path],
          plot: Optional[Path], mode: str = "", html: Optional[Path] = None) -> None:
    """Run the check ``cfg`` asks for and ``emit_report`` its report; on a host other than
    node 0, say that its ranks are done (node 0 writes the report)."""
    result = parity(cfg)
    if result is None:  # a host other than node 0: its ranks are done
        typer.echo(f"node {cfg.node_rank}: its {cfg.workers} rank(s) compared their shards; "
                   "node 0 merges them into the report")
        return
    emit_report(result, json_out, junit, plot, mode, html)


def emit_report(report: ParityReport, json_out, junit, plot, mode: str = "",
                html=None) -> None:
    """Write the requested files (``html``: the HTML report), print the table (only its
    verdict line with mode "quiet", the report as JSON with mode "json"), then exit 1 if
    parity failed."""
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
        opt.print_json(report.to_dict())
    else:
        text = format_table(report)
        typer.echo(text.splitlines()[-1] if mode == "quiet" else text)
        if mode == "quiet":  # the table's notes are not shown: say it on stderr
            for line in resolution_warnings(report):
                typer.echo(f"amptool: {line}", err=True)
    if not report.passed:
        raise CheckFailed(failure_line(report), failure_fix(report))
