"""The threshold options of the commands that judge parity (``parity``, ``convert search``,
``verify``): each limit's flag, its help and its default from the limits' table, and
``with_limits``, which gives a command the shared ones as one mapping."""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Annotated, Any, Callable, Optional

import typer

from amptool.console.options import shown
from amptool.stats.limits import default_text as limit_default

LIMIT = "a number, or 'off' to disable"


def _limit(what: str, name: str, fp16_only: bool = False) -> Any:
    text = f"{what} ({LIMIT}). {shown(limit_default(name, fp16_only))}"
    return Annotated[Optional[str], typer.Option(help=text)]


LIMIT_HELP = {"min_cosine": "Least cosine similarity", "min_top1": "Least top-1 agreement",
              "max_acc_drop": "Largest accuracy drop as a fraction",
              "max_abs": "Largest absolute error", "max_rel": "Largest relative error",
              "max_outside": "Largest fraction of elements outside atol + rtol*|ref|",
              "max_p999_abs_scaled": "Largest 99.9th percentile of |c - r| / max(1, max|ref|) "
                                     "over an output's elements"}
LIMIT_OPTIONS = {name: _limit(what, name) for name, what in LIMIT_HELP.items()}
"""The threshold options parity, the search and verify share, in the order they are listed."""
FP16_LIMIT_OPTIONS = {name: _limit(what, name, fp16_only=True)
                      for name, what in LIMIT_HELP.items()}
"""The same, their defaults the fp16 pair's alone (the search holds only fp16 to them)."""


# threshold flags past LIMIT_OPTIONS: parity's, and verify's (which holds records to them)
MaxAbsScaledOption = Annotated[Optional[str], typer.Option(
    "--max-abs-scaled",
    help="Largest max|c - r| / max(1, max|ref|): absolute error in units of the reference's "
         f"largest magnitude (a number or 'off'). {shown(limit_default('max_abs_scaled'))}")]
MaxMetricDropOption = Annotated[Optional[str], typer.Option(
    "--max-metric-drop",
    help="Largest drop of the task metric (parity's --metric), reference minus candidate "
         "(a number or 'off'). "
         f"{shown(limit_default('max_metric_drop'))}")]
AtolOption = Annotated[Optional[str], typer.Option(
    help=f"Absolute tolerance of --max-outside. {shown(limit_default('atol'))}")]
RtolOption = Annotated[Optional[str], typer.Option(
    help=f"Relative tolerance of --max-outside. {shown(limit_default('rtol'))}")]
AllowNonfiniteOption = Annotated[bool, typer.Option(
    "--allow-nonfinite", help="Tolerate NaN/Inf in a candidate.")]


def with_limits(func: Callable, fp16_only: bool = False) -> Callable:
    """Give a command the threshold options of ``LIMIT_OPTIONS`` (``FP16_LIMIT_OPTIONS``
    with ``fp16_only``); ``func`` receives them as one ``limits`` mapping (flag name -> text
    given, or None) instead of seven parameters."""
    options = FP16_LIMIT_OPTIONS if fp16_only else LIMIT_OPTIONS
    hints = typing.get_type_hints(func, include_extras=True)  # in func's own module
    sig = inspect.signature(func)
    kept = [p.replace(annotation=hints.get(p.name, p.annotation))
            for p in sig.parameters.values() if p.name != "limits"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann)
             for name, ann in options.items()]

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        limits = {name: kwargs.pop(name, None) for name in options}
        return func(*args, limits=limits, **kwargs)

    # inspect.signature reads the attribute; functools.wraps' type does not declare it
    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=kept + extra)
    wrapper.__annotations__ = {**{p.name: p.annotation for p in kept}, **options}
    del wrapper.__wrapped__
    return wrapper
