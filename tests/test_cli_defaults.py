"""Every default ``--help`` shows comes from one source: a config dataclass field's default
(``options.default_of``) or, for a threshold, the limits' default table
(``limits.default_text``); no help text types a ``[default: …]`` of its own."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, Optional

import pytest
import typer
from typer.testing import CliRunner

from amptool.artefact.keys import ENV_VAR
from amptool.cli import app
from amptool.console import options as opt
from amptool.convert.ckpt import CkptConfig
from amptool.convert.explain import PolicyConfig
from amptool.convert.search import SearchConfig
from amptool.export.api import ExportConfig
from amptool.parity.config import ParityConfig
from amptool.pipeline import PipelineConfig
from amptool.stats.limits import Thresholds
from amptool.stats.limits import default_text as limit_default
from amptool.train.config import LaunchOptions, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
CLI_SOURCES = [ROOT / "src" / "amptool" / "console" / "options.py",
               ROOT / "src" / "amptool" / "cli.py"] + [
    ROOT / stage / "cli.py" for stage in ("train", "export", "parity", "convert")]
HELPERS = {"shown"}
"""Functions of options.py allowed to write ``[default:``: the one formatter."""

CONFIGS = {
    "train": (TrainConfig, LaunchOptions),
    "run": (PipelineConfig, TrainConfig),
    "export": (ExportConfig,),
    "inspect": (),
    "info": (),
    "parity": (ParityConfig,),
    "convert policy": (PolicyConfig,),
    "convert ckpt": (CkptConfig,),
    "convert search": (SearchConfig,),
    "diff": (),
    "ledger show": (),
    "ledger trend": (),
    "verify": (),
}
"""Each command and the config dataclasses its options fill (the first holding a field wins)."""
FIELD = {"model_arg": ("model_args",), "fmt": ("formats", "format"),
         "fp32_type": ("fp32_types",), "fp32_cell": ("fp32_cells",), "fp16_cell": ("fp16_cells",)}
"""Parameter names that differ from their field's (the command's config has one of them)."""
LIMITS = {f.name for f in Thresholds.__dataclass_fields__.values()}
OTHER = {("inspect", "key_env"): f"{ENV_VAR} when set"}
"""Defaults that are no config field: the constant the command reads."""
SHOWN = re.compile(r"\\\[default: ([^\]]*)\]")


def typed_defaults(source: str, filename: str = "<source>") -> list:
    """``file:line`` of every string literal holding ``default:`` outside ``HELPERS`` and
    docstrings."""
    tree = ast.parse(source, filename)
    allowed = {id(node) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
               and fn.name in HELPERS for node in ast.walk(fn)}
    allowed |= {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr)}
    return [f"{filename}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and "default:" in node.value and id(node) not in allowed]


def test_no_help_text_types_a_default():
    found = [hit for path in CLI_SOURCES
             for hit in typed_defaults(path.read_text(encoding="utf-8"),
                                       str(path.relative_to(ROOT)))]
    assert not found, ("a help text types its default; use options.default_of / defaulted "
                       f"(config field) or options.shown(limits.default_text(...)): {found}")


def test_the_scan_catches_a_planted_typed_default():
    planted = ('import typer\n'
               'def shown(text):\n    return f"\\\\[default: {text}]"\n'
               'def cmd(n: int = typer.Option(None, help="Samples. \\\\[default: 32]")):\n'
               '    pass\n')
    assert typed_defaults(planted, "planted.py") == ["planted.py:4"]


def commands(group=None, path: str = "") -> Iterator[tuple]:
    """(``convert ckpt``-style path, click command) for every leaf command."""
    group = group or typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        full = f"{path} {name}".strip()
        if getattr(command, "commands", None):
            yield from commands(command, full)
        else:
            yield full, command


def _field(name: str, configs: tuple) -> Optional[tuple]:
    return next(((cls, field) for cls in configs for field in FIELD.get(name, (name,))
                 if field in cls.__dataclass_fields__), None)


def _same(given, default) -> bool:
    """A click default equals a field's: a list as a tuple, a path or a number as text."""
    def norm(value):
        return tuple(value) if isinstance(value, (list, tuple)) else str(value)

    return norm(given) == norm(default)


def default_problems(path: str, command) -> list:
    """Where ``command``'s options disagree with their one source of defaults."""
    problems = []
    for param in command.params:
        if param.param_type_name != "option" or param.is_flag or param.required:
            continue
        shown = SHOWN.findall(param.help or "")
        where = f"amptool {path} --{param.name.replace('_', '-')}"
        expected = _expected(path, param.name)
        if expected is None:
            if shown:
                problems.append(f"{where}: shows {shown} but has no config field or limit")
            continue
        if shown != ([expected] if param.default is None else []):
            problems.append(f"{where}: shows {shown}, its source says {expected!r}")
        found = _field(param.name, CONFIGS[path])
        if param.default is not None and found and not _same(param.default, opt.value_of(*found)):
            problems.append(f"{where}: defaults to {param.default!r}, "
                            f"{found[0].__name__}.{found[1]} to {opt.value_of(*found)!r}")
    return problems


def _expected(path: str, name: str) -> Optional[str]:
    """The default text ``name`` should show, from its source; None: it has none."""
    if (path, name) in OTHER:
        return OTHER[(path, name)]
    if name in LIMITS and path in ("parity", "convert search", "verify"):
        return limit_default(name, path == "convert search")
    found = _field(name, CONFIGS[path])
    if found is None:
        return None
    try:
        return opt.default_text(*found)
    except ValueError:  # a None default nothing describes: nothing to show
        return None


COMMANDS = dict(commands())


def test_every_command_is_mapped_to_its_configs():
    assert set(COMMANDS) == set(CONFIGS)


@pytest.mark.parametrize("path", sorted(CONFIGS))
def test_help_shows_the_dataclass_defaults(path):
    assert not default_problems(path, COMMANDS[path])


def test_a_drifted_default_is_caught():
    command = typer.main.get_command(app).commands["train"]
    epochs = next(p for p in command.params if p.name == "epochs")
    kept = epochs.help
    try:
        epochs.help = kept.replace(opt.default_of(TrainConfig, "epochs"), opt.shown("7"))
        assert default_problems("train", command) == [
            "amptool train --epochs: shows ['7'], its source says '5'"]
    finally:
        epochs.help = kept


def test_rendered_help_shows_the_brackets():
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    assert "Total training epochs. A resumed run continues up to it. [default: 5]" in result.output
    assert "\\[default" not in result.output


def test_reading_the_defaults_keeps_help_light():
    """The stages' config modules the help reads its defaults from import no numpy (nor
    MindSpore) at module level."""
    import subprocess
    import sys

    code = ("import sys; from amptool.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['convert', 'search', '--help']); "
            "assert r.exit_code == 0, r.output; "
            "heavy = {'numpy', 'mindspore'} & set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
