"""``amptool ledger show`` and ``amptool ledger trend`` once their options are checked: the
records read, the trend computed and charted, the drift budgets held."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import typer

from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.gate.ledgerview import format_records, format_trend, trend_dict
from amptool.gate.trend import DriftBudget, trend
from amptool.gate.trendpage import write_trend_page
from amptool.ledger.store import RecordFilter, open_ledger


def show(ledger: str, where: dict, as_json: bool) -> None:
    """Print the records of ``ledger`` that ``where`` (RecordFilter's fields) selects."""
    with open_ledger(ledger) as book:
        records = book.records(RecordFilter(**where))
        total, name = book.count(), book.name
    if as_json:
        opt.print_json([r.to_dict() for r in records])
        return
    typer.echo(format_records(records, total, name))


def chart(ledger: str, where: dict, figures: Sequence[str], drifts: Sequence[str],
          window: int, html: Optional[Path], as_json: bool) -> None:
    """Print (and with ``html`` draw) each figure over the selected records; CheckFailed when
    one drifts past its budget (``drifts``: ``FIGURE=AMOUNT[%]``)."""
    budgets = [DriftBudget.parse(text) for text in drifts]
    found = trend(ledger, RecordFilter(**where), figures, budgets, window)
    if html is not None:
        write_trend_page(html, found)
    if as_json:
        opt.print_json(trend_dict(found))
    else:
        typer.echo(format_trend(found))
    worst = found.worst
    if worst is not None:
        raise CheckFailed(worst.line(), "find where it began with amptool ledger show, or "
                                        "give the budget room")
