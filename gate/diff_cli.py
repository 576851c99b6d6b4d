"""``amptool diff``: two reports into a config, one library call, the table (or JSON, or a
page), exit 1 on a regression."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from amptool.console import options as opt
from amptool.gate.diffconfig import DiffConfig

REPORT_HELP = ("a parity report (parity.json, 'amptool parity --json-out'), or an 'amptool "
               "run --out' folder holding one (or its summary.json)")
BaseArgument = Annotated[str, typer.Argument(
    metavar="BASE", help=f"The report compared against (main's, the last release's): "
                         f"{REPORT_HELP}.")]
NewArgument = Annotated[str, typer.Argument(
    metavar="NEW", help="The report judged, given as BASE is.")]
ConfigOption = Annotated[Optional[Path], typer.Option(
    help="The YAML/TOML/JSON config file of 'amptool parity --config': its \\[regression] "
         "table sets the budget (its other keys are parity's).")]


def diff_command(
    base: BaseArgument,
    new: NewArgument,
    config: ConfigOption = None,
    report: opt.noted(opt.ReportOption, "Without it: no page.") = None,
    quiet: opt.about(opt.QuietOption, "the verdict line") = False,
    as_json: opt.about(opt.JsonOption, "the diff (its schema: diff.schema.json)") = False,
) -> None:
    """Compare two parity reports of one model: each candidate's figures side by side; exit 1
    when NEW is worse beyond a figure's noise and the budget, or a check that passed fails."""
    html = opt.report_file(report, None)
    cfg = DiffConfig.from_file(config, base, new)
    from amptool.gate.diffcommand import compare

    compare(cfg, html, "json" if as_json else "quiet" if quiet else "")


def register(app: typer.Typer) -> None:
    app.command("diff")(opt.handle_errors(diff_command))
