"""What every command shares: its common options, one-line errors with documented exit codes,
JSON output and TTY detection.

Every error becomes one line on stderr and an exit code (see errors.py):
``amptool: error: <problem>; <fix>`` (exit 2 for usage errors, 1 for failed checks) and,
for a bug, ``amptool: internal error: <Type>: <message>; set AMPTOOL_DEBUG=1 for the
traceback`` (exit 3).
"""
from __future__ import annotations

import copy
import dataclasses
import errno
import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional, Sequence

import typer
import typer.core

from amptool.errors import DEBUG_ENV, AmpToolError, UsageError, debugging, network_error
from amptool.files.configfile import SHOWN
from amptool.files.fileio import jsonable
from amptool.network.trust import trust_folder
from amptool.runtime.device import quiet_framework_logs

try:  # newer typer releases vendor click: their errors are not the click package's
    from typer._click import exceptions as cli_errors
except ImportError:  # pragma: no cover - older typer on the click package
    from click import exceptions as cli_errors  # type: ignore[no-redef]  # the same API

NO_ARGS_IS_HELP = getattr(cli_errors, "NoArgsIsHelpError", ())
"""Raised for a group called without a command (click >= 8.2); help is shown."""

INTERNAL_EXIT = 3
"""Exit code of an unexpected exception (a bug in amptool or a library it calls)."""
INTERRUPTED_EXIT = 130
"""Exit code of a command stopped by Ctrl+C or SIGTERM (its staged files are removed)."""

MODEL_HELP = ("Sample name (simplecnn, lenet5, resnet, transformer, trapmlp, textcls, "
              "causallm, detector), path/to/file.py:factory or package.module:factory.")
DATA_HELP = (
    "digits, synthetic, tokens, sequences, boxes (NAME:N for their first N samples), "
    "mnist:DIR, imagefolder:DIR or npz:FILE.")
DEVICE_HELP = "auto, CPU, GPU or Ascend."
LEVEL_HELP = ("AMP level: O0 fp32, O1 white-list ops fp16, O2 fp16 except BatchNorm/LayerNorm, "
              "O3 all fp16.")

ModelOption = Annotated[Optional[str], typer.Option(help=MODEL_HELP)]
DataOption = Annotated[Optional[str], typer.Option(help=DATA_HELP)]
DeviceOption = Annotated[Optional[str], typer.Option(help=DEVICE_HELP)]
AmpLevelOption = Annotated[Optional[str], typer.Option("--amp-level", help=LEVEL_HELP)]
OutOption = Annotated[Optional[Path], typer.Option("--out", help="Output folder.")]
PolicyOutOption = Annotated[Optional[Path], typer.Option(
    "--out", help="Write the policy to this file (.toml, .yaml or .json).")]
QuietOption = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print only the result, no progress lines.")]
JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print the result as JSON on stdout (and nothing else there).")]


def shown(text: str) -> str:
    """``\\[default: TEXT]``, the one way a help text states a default (the backslash keeps
    rich from taking the brackets for markup)."""
    return f"\\[default: {text}]"


ModelArgOption = Annotated[Optional[List[str]], typer.Option(
    "--model-arg", help="KEY=VALUE keyword argument for the model factory (repeatable); values "
    "are read as int, float, bool or text, e.g. --model-arg num_classes=10.")]
InputSpecOption = Annotated[Optional[str], typer.Option(
    "--input-spec", help="The model's inputs when it declares none: NAME:SHAPE:DTYPE[:LOW..HIGH] "
    "joined by commas, -1 for a dynamic dimension, e.g. ids:-1x128:int32:0..30522.")]
PolicyFileOption = Annotated[Optional[Path], typer.Option(
    "--policy", help="Precision policy file (TOML/YAML/JSON) over --amp-level, or 'auto': a "
    "range pass on the first batches keeps in fp32 the cells whose values fp16 cannot hold "
    "or that break computing in fp16 (written to policy.auto.toml in --out).")]
RangeSafetyOption = Annotated[Optional[float], typer.Option(
    help="With --policy auto: the share of fp16's largest value (65504) a cell's fp32 output "
    "or input may reach before the cell is kept in fp32, in (0, 1].")]
LossOption = Annotated[Optional[str], typer.Option(
    help="cross-entropy, token-cross-entropy[:IGNORE], mse, l1, smooth-l1, bce, "
    "path/to/file.py:factory or package.module:factory (a function of the outputs, then the "
    "targets, returning a scalar; computed in fp32).")]
TrainMetricOption = Annotated[Optional[str], typer.Option(
    help="Task metric path/to/file.py:fn (fn(outputs, targets) -> float, higher is better) "
    "scored on the held-out split each epoch; picks best.")]
EpochsOption = Annotated[Optional[int], typer.Option(help="Total training epochs.")]
BatchSizeOption = Annotated[Optional[int], typer.Option(help="Training batch size (per worker).")]
SeedOption = Annotated[Optional[int], typer.Option(help="Seed for weights and data order.")]
ConfigOption = Annotated[Optional[Path], typer.Option(
    help="YAML/TOML/JSON file of these options (snake_case keys); flags override it.")]
TrustModelOption = Annotated[Optional[List[Path]], typer.Option(
    "--trust-model", metavar="FOLDER", help="Trust the model code FOLDER keeps (FOLDER/model/"
    "*.py, in a run or artefact folder made elsewhere): remembered by sha256 in your trust "
    "store, so a record naming it runs. Repeatable.")]
ShardWorkersOption = Annotated[Optional[int], typer.Option(
    "--workers", help="Processes on this host (msrun, at most its cores) that each compare a "
                      "contiguous shard of the samples; their statistics merge into the "
                      "report one process makes.")]
LedgerOption = Annotated[Optional[str], typer.Option(
    "--ledger", metavar="URL", help="Append one record per candidate (its files' sha256, "
    "figures, limits, verdict, versions, git commit and branch) to this parity ledger: a path "
    "or sqlite:///PATH (an SQLite file, made when missing) or "
    "postgresql+psycopg://USER@HOST/DB.")]
LabelOption = Annotated[Optional[str], typer.Option(
    "--label", help="A name for the ledger's records (a release, a CI job); the git commit and "
    "branch are recorded too inside a checkout.")]
ReportOption = Annotated[Optional[str], typer.Option(
    "--report", metavar="PATH|off", help="Write the HTML report to PATH: one self-contained "
    "file, readable offline (verdict, charts, tables); 'off' writes none.")]


def consent(folders: Optional[List[Path]]) -> None:
    """Record the user's ``--trust-model`` consent before the command reads any record."""
    for folder in folders or ():
        trust_folder(folder)


def noted(option: Any, note: str) -> Any:
    """The shared ``option`` with a command's own note (its default, say) after the help."""
    info = copy.copy(option.__metadata__[0])
    info.help = f"{info.help} {note}"
    return Annotated[option.__origin__, info]


def about(option: Any, what: str) -> Any:
    """The shared --quiet or --json ``option`` naming what the command prints."""
    info = copy.copy(option.__metadata__[0])
    info.help = info.help.replace("the result", what)
    return Annotated[option.__origin__, info]


def value_of(config: type, name: str) -> Any:
    """The default of field ``name`` of the ``config`` dataclass (a factory's value)."""
    field = _field(config, name)
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise ValueError(f"{config.__name__}.{name} has no default")


def default_text(config: type, name: str) -> str:
    """How the default of ``config``'s field ``name`` reads: the text a field decided at run
    time shows (``config.decided_later``), else its value (on/off, numbers as %g, a tuple's
    items joined by commas)."""
    field = _field(config, name)
    if SHOWN in field.metadata:
        return field.metadata[SHOWN]
    value = value_of(config, name)
    if value is None:
        raise ValueError(f"{config.__name__}.{name} defaults to None: describe it with "
                         "config.decided_later")
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value)
    return str(value)


def default_of(config: type, name: str) -> str:
    """``\\[default: …]`` for ``config``'s field ``name``, e.g. ``default_of(TrainConfig,
    "epochs")`` gives ``\\[default: 5]``."""
    return shown(default_text(config, name))


def defaulted(option: Any, config: type, name: str) -> Any:
    """The shared ``option`` showing the default of ``config``'s field ``name``, which the
    command applies when the flag is not given (the option itself stays None-defaulted, so
    a config file's value is not hidden by it)."""
    return noted(option, default_of(config, name))


def _field(config: type, name: str) -> dataclasses.Field:
    found = {f.name: f for f in dataclasses.fields(config)}
    if name not in found:
        raise ValueError(f"{config.__name__} has no field {name!r}")
    return found[name]


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"amptool: error: {message}", err=True)
    raise typer.Exit(code)


def report_internal(exc: BaseException) -> int:
    """Report an unexpected exception in one line and return exit code 3; with
    AMPTOOL_DEBUG=1 re-raise it (traceback) instead."""
    if debugging():
        raise exc
    text = " ".join(str(exc).split()) or "(no message)"
    typer.echo(f"amptool: internal error: {type(exc).__name__}: {text}; "
               f"set {DEBUG_ENV}=1 for the traceback", err=True)
    return INTERNAL_EXIT


def handle_errors(func: Callable) -> Callable:
    """Turn amptool's errors into one stderr line and the documented exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        quiet_framework_logs()  # failures come as one line of ours, not MindSpore's log
        try:
            return func(*args, **kwargs)
        except AmpToolError as exc:
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", INTERRUPTED_EXIT)
        except (typer.Exit, typer.Abort, cli_errors.ClickException):
            raise
        except OSError as exc:  # disk full, permissions, a path that vanished
            fail(os_error_line(exc))
        except Exception as exc:  # a network MindSpore cannot compile, else a bug
            mistake = None if debugging() else network_error(exc)
            if mistake is not None:
                fail(str(mistake), mistake.exit_code)
            raise typer.Exit(report_internal(exc)) from exc

    return wrapper


def os_error_line(exc: OSError) -> str:
    """``cannot write PATH: No space left on device; <fix>`` from an OSError."""
    path = exc.filename or ""
    reason = exc.strerror or str(exc)
    fix = {errno.ENOSPC: "free some space or write elsewhere",
           errno.EDQUOT: "free some space or write elsewhere",
           errno.EFBIG: "raise the file size limit or write elsewhere",
           errno.EACCES: "check the permissions or choose another path",
           errno.EPERM: "check the permissions or choose another path",
           errno.EROFS: "choose a path on a writable file system"}.get(exc.errno or 0,
                                                                        "check the path")
    return f"{path}: {reason}; {fix}" if path else f"{reason}; {fix}"


def is_tty() -> bool:
    return sys.stdout.isatty()


def print_json(obj: Any) -> None:
    """What ``--json`` prints on every command: indented, sorted, NaN/Inf as strings."""
    typer.echo(json.dumps(jsonable(obj), indent=2, sort_keys=True, default=str))


def check_output_path(path: Optional[Path], what: str) -> None:
    """Refuse an output file (``what``: its flag) whose folder is missing or read-only, or
    which is a folder, so the mistake shows before any work rather than after it."""
    if path is None:
        return
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder", f"give a file path to {what}")
    if not parent.is_dir():
        raise UsageError(f"cannot write {what} {path}: folder {parent} does not exist",
                         f"create the folder first or give {what} another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {what} {path}: folder {parent} is not writable",
                         f"give {what} a path in a writable folder")


def report_file(value: Optional[str], default: Optional[Path],
                out: Optional[Path] = None) -> Optional[Path]:
    """The file ``--report`` names: None for 'off', ``default`` when not given (None: no
    report). Refused now, like any output path, when it cannot be written, unless its folder
    is ``out``, the output folder the command is yet to create."""
    if value is not None and value.strip().lower() == "off":
        return None
    path = Path(value) if value is not None else default
    if path is None:
        return None
    if out is None or path.parent.is_dir() or path.parent.resolve() != Path(out).resolve():
        check_output_path(path, "--report")
    return path


def usage_line(exc: cli_errors.UsageError, command: str = "amptool") -> str:
    """Click's usage error as ``<problem>; see '<command> --help'`` on one line (``command``
    when the error does not know its own)."""
    text = " ".join(exc.format_message().split())
    hint = re.match(r"(.*?)\.? \(?Did you mean (.*?)\?\)?$", text)
    if hint:
        text = f"{hint.group(1)} (did you mean {hint.group(2)}?)"
    text = text.rstrip(".")
    path = exc.ctx.command_path if exc.ctx is not None else command
    return f"{text}; see '{path} --help'"


class AmpToolGroup(typer.core.TyperGroup):
    """The root command group: click's own errors become amptool's one-line errors."""

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        try:
            code = super().main(args=args, prog_name="amptool", complete_var=complete_var,
                                standalone_mode=False, windows_expand_args=windows_expand_args,
                                **extra)
            code = code if type(code) is int else 0
        except NO_ARGS_IS_HELP as exc:
            code = self._show_help(exc)
        except cli_errors.UsageError as exc:
            command = self._command_path(sys.argv[1:] if args is None else args)
            typer.echo(f"amptool: error: {usage_line(exc, command)}", err=True)
            code = exc.exit_code
        except cli_errors.ClickException as exc:
            typer.echo(f"amptool: error: {' '.join(exc.format_message().split())}", err=True)
            code = exc.exit_code
        except typer.Abort:
            typer.echo("amptool: error: aborted", err=True)
            code = 1
        except typer.Exit as exc:
            code = exc.exit_code
        except AmpToolError as exc:
            typer.echo(f"amptool: error: {exc}", err=True)
            code = exc.exit_code
        except Exception as exc:  # noqa: BLE001 - raised outside a command: a bug
            code = report_internal(exc)
        if standalone_mode:
            sys.exit(code)
        return code

    def _command_path(self, args) -> str:
        """``amptool`` and the (sub)command names found in ``args``."""
        path, command = ["amptool"], self
        for arg in args:
            commands = getattr(command, "commands", None)
            if not commands:
                break
            if arg in commands:
                path.append(arg)
                command = commands[arg]
        return " ".join(path)

    def _show_help(self, exc: cli_errors.UsageError) -> int:
        # typer's rich help prints itself while the error is built; plain help does not.
        if not (typer.core.HAS_RICH and self.rich_markup_mode is not None):
            typer.echo(exc.format_message())
        return exc.exit_code
