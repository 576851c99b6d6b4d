"""``amptool verify``: a deploy job's last step, whether the artefact's exact bytes passed."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Optional

import typer

from amptool.artefact.files import hashed_files
from amptool.console import limitoptions as lim
from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.stats.limits import flag_overrides

ArtefactArg = Annotated[str, typer.Argument(
    metavar="ARTEFACT", help="The artefact to ship (.mindir, .onnx; a split one's graph "
    "file), its weight files beside it.")]
VerifyLedgerOption = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="The parity ledger the checks were recorded in: a path "
    "or sqlite:///PATH or postgresql+psycopg://USER@HOST/DB.")]
VerifyReportOption = Annotated[Optional[Path], typer.Option(
    "--report", metavar="PARITY.JSON", help="Instead of a ledger: a parity report "
    "(amptool parity --json-out, a run's parity.json).")]
GateConfigOption = Annotated[Optional[Path], typer.Option(
    "--config", help="A config file whose \\[thresholds] table (as amptool parity reads it) "
    "holds the limits the checks must have been no looser than; its other keys are ignored. "
    "Without it and the limit flags: parity's defaults.")]


def verify_command(artefact: ArtefactArg, ledger: VerifyLedgerOption = None,
                   report: VerifyReportOption = None, config: GateConfigOption = None,
                   as_json: opt.about(opt.JsonOption, "the answer") = False,
                   max_abs_scaled: lim.MaxAbsScaledOption = None,
                   max_metric_drop: lim.MaxMetricDropOption = None,
                   atol: lim.AtolOption = None, rtol: lim.RtolOption = None,
                   allow_nonfinite: opt.noted(lim.AllowNonfiniteOption,
                                              "A record that tolerated them counts.") = False,
                   limits: Optional[dict] = None) -> None:
    """Exit 0 only if these exact bytes passed parity under limits no looser than the gate's
    and no later check failed them; else exit 1 with the reason."""
    with ThreadPoolExecutor(max_workers=1) as pool:  # hashed while the check's code loads
        hashing = pool.submit(hashed_files, artefact)
        from amptool.gate.verify import verify

        flags = flag_overrides(**(limits or {}), max_abs_scaled=max_abs_scaled,
                               max_metric_drop=max_metric_drop, atol=atol, rtol=rtol,
                               allow_nonfinite=allow_nonfinite)
        found = verify(artefact, ledger, None if report is None else str(report),
                       None if config is None else str(config), flags, hashing)
    if as_json:
        opt.print_json(found.to_dict())
    elif found.passed:
        typer.echo(found.line)
    if not found.passed:
        raise CheckFailed(found.line, FIXES[found.reason])


FIXES = {"never tested": "check it with amptool parity --ledger before shipping it",
         "failed": "fix the artefact and check it again",
         "looser limits": "check it again under the gate's limits",
         "later failure": "find what changed with amptool ledger show --sha256 SHA256"}
"""What to do about each reason the answer is no."""


def register(app: typer.Typer) -> None:
    """``amptool verify`` on the root app."""
    app.command("verify")(opt.handle_errors(lim.with_limits(verify_command)))
