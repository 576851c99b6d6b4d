"""The ``amptool`` command line: thin typer commands over library functions.

Heavy imports (MindSpore, onnx) happen inside commands, so ``amptool --help`` is fast.
Every AmpToolError becomes one line on stderr and its exit code (see errors.py).
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

import typer

from .errors import AmpToolError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Mixed-precision training, FP16 export and parity gates for MindSpore.")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"amptool: error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(func: Callable) -> Callable:
    """Turn amptool's errors into one stderr line and the documented exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except AmpToolError as exc:
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper


def is_tty() -> bool:
    return sys.stdout.isatty()


@app.command()
@handle_errors
def info() -> None:
    """Show the MindSpore version, usable devices and which export formats work here."""
    from .hostinfo import host_info

    facts = host_info()
    typer.echo(f"amptool {facts['amptool']}  MindSpore {facts['mindspore']}  "
               f"Python {facts['python']}")
    typer.echo(f"devices usable here: {', '.join(facts['devices'])}")
    for fmt, (ok, why) in facts["formats"].items():
        typer.echo(f"export {fmt:<7} {'yes' if ok else 'no '}  {why}")


def _register_subcommands() -> None:
    from amptool.convert import cli as convert_cli
    from amptool.export import cli as export_cli
    from amptool.parity import cli as parity_cli
    from amptool.train import cli as train_cli

    for module in (train_cli, export_cli, parity_cli, convert_cli):
        module.register(app)


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
