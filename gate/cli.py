"""The release gate's commands: registered on the root app by ``register``."""
from __future__ import annotations

import typer

from amptool.gate import diff_cli, ledger_cli, verify_cli


def register(app: typer.Typer) -> None:
    """Add the release gate's commands to ``app``."""
    diff_cli.register(app)
    ledger_cli.register(app)
    verify_cli.register(app)
