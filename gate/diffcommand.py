"""``amptool diff`` once its config is built: the two reports compared, the page written
when asked, the table (or its verdict line, or the JSON) printed, and exit 1 on a
regression."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.gate.diff import diff
from amptool.gate.diffconfig import DiffConfig
from amptool.gate.difftext import failure_fix, format_diff
from amptool.report.diff import write_diff_page


def compare(cfg: DiffConfig, html: Optional[Path], mode: str = "") -> None:
    """Diff ``cfg``'s two reports; write ``html`` (None: no page); print the table (its last
    line with mode "quiet", the document with "json"); CheckFailed on a regression."""
    result = diff(cfg)
    if html is not None:
        write_diff_page(html, result)
    if mode == "json":
        opt.print_json(result.to_dict())
    else:
        text = format_diff(result)
        typer.echo(text.splitlines()[-1] if mode == "quiet" else text)
    if not result.passed:
        raise CheckFailed(result.verdict_line(), failure_fix(result, mode))
