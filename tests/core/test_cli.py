"""The command line's own errors: one stderr line, documented exit codes, no box, no traceback.

Nothing here trains or compiles a network: usage errors and output-path checks stop before
any MindSpore work.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from amptool.cli import app
from amptool.console.options import AmpToolGroup, handle_errors, print_json
from amptool.errors import CheckFailed, UsageError

runner = CliRunner()
USAGE_LINE = re.compile(r"^amptool: error: [^\n]+; see 'amptool( [a-z]+)* --help'\n$")
INTERNAL_LINE = re.compile(r"^amptool: internal error: [^\n]+; set AMPTOOL_DEBUG=1 for the "
                           r"traceback\n$")
COMMANDS = (["info"], ["run"], ["train"], ["export"], ["inspect"], ["parity"],
            ["convert", "policy"], ["convert", "ckpt"], ["convert", "search"])


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_usage_error(result, *fragments, command="amptool"):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == "", result.stdout
    assert USAGE_LINE.match(result.stderr), result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr
    assert result.stderr.rstrip().endswith(f"; see '{command} --help'"), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.mark.parametrize("args, fragments, command", [
    (["train", "--epochs", "abc"], ["Invalid value for '--epochs'"], "amptool train"),
    (["train", "--no-such-flag"], ["No such option: --no-such-flag"], "amptool train"),
    (["train", "--epochs"], ["'--epochs' requires an argument"], "amptool train"),
    (["inspect"], ["argument 'path'"], "amptool inspect"),
    (["export", "extra"], ["unexpected extra argument"], "amptool export"),
    (["trian"], ["No such command 'trian' (did you mean 'train'?)"], "amptool"),
    (["--no-such-flag"], ["No such option"], "amptool"),
    (["convert", "nope"], ["No such command 'nope'"], "amptool convert"),
    (["convert", "ckpt", "a.ckpt", "b.ckpt"], ["option '--to'"], "amptool convert ckpt"),
    (["convert", "ckpt", "a.ckpt", "b.ckpt", "--to"], ["requires an argument"],
     "amptool convert ckpt"),
    (["parity", "--samples", "many", "a", "b"], ["'--samples'"], "amptool parity"),
])
def test_click_usage_errors_are_one_line(args, fragments, command):
    assert_usage_error(invoke(*args), *fragments, command=command)


@pytest.mark.parametrize("args", [[], *COMMANDS, ["convert"]])
def test_help_still_works(args):
    result = invoke(*args, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage: amptool" in result.stdout and result.stderr == ""


@pytest.mark.parametrize("args", [[], ["convert"]])
def test_no_command_shows_help(args):
    result = invoke(*args)
    assert result.exit_code == 2 and "Usage: amptool" in result.stdout and result.stderr == ""


def _param(args, name):
    command = typer.main.get_command(app)
    for part in args:
        command = command.commands[part]
    return next((p for p in command.params if name in p.opts), None)


@pytest.mark.parametrize("args", COMMANDS)
def test_json_is_the_same_print_flag_everywhere(args):
    flag = _param(args, "--json")
    assert flag is not None and flag.is_flag, args
    assert flag.help.startswith("Print ") and "as JSON on stdout" in flag.help


def test_parity_writes_its_report_with_json_out():
    json_out = _param(["parity"], "--json-out")
    assert json_out is not None and not json_out.is_flag


@pytest.mark.parametrize("name", ["--min-cosine", "--min-top1", "--max-acc-drop", "--max-abs",
                                  "--max-rel", "--max-outside"])
def test_threshold_options_are_shared(name):
    """One description; the search's default is the fp16 pair's alone (it holds no fp32
    pair to a limit), parity's names both pairs where they differ."""
    parity, search = _param(["parity"], name).help, _param(["convert", "search"], name).help
    assert parity.split(" \\[default")[0] == search.split(" \\[default")[0]
    assert "fp32:" not in search
    from amptool.stats.limits import default_text

    key = name[2:].replace("-", "_")
    assert search.endswith(f"[default: {default_text(key, fp16_only=True)}]")
    assert parity.endswith(f"[default: {default_text(key)}]")


@pytest.mark.parametrize("name, text", [("--model", "path/to/file.py:factory"),
                                        ("--data", "npz:FILE"), ("--device", "auto, CPU")])
def test_model_data_device_share_their_help(name, text):
    for args in COMMANDS:
        option = _param(args, name)
        if option is not None:
            assert text in option.help, (args, option.help)


@pytest.mark.parametrize("flag, where", [("--json-out", "missing/r.json"),
                                         ("--junit", "missing/r.xml"),
                                         ("--plot", "missing/p.png"),
                                         ("--save-outputs", "missing/gold.npz")])
def test_parity_output_folders_are_checked_before_any_work(tmp_path, flag, where):
    # the artefacts do not exist either: the output check must come first
    result = invoke("parity", tmp_path / "a.mindir", tmp_path / "b.mindir", flag, tmp_path / where)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and f"cannot write {flag}" in result.stderr
    assert "does not exist; create the folder" in result.stderr


def test_parity_output_that_is_a_folder(tmp_path):
    result = invoke("parity", tmp_path / "a.mindir", tmp_path / "b.mindir", "--junit", tmp_path)
    assert result.exit_code == 2 and "is a folder" in result.stderr


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_parity_output_folder_not_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = invoke("parity", tmp_path / "a.mindir", "--json-out", locked / "r.json")
    assert result.exit_code == 2 and "not writable" in result.stderr


def test_parity_json_no_longer_takes_a_file(tmp_path):
    result = invoke("parity", tmp_path / "a.mindir", tmp_path / "b.mindir", "--json",
                    tmp_path / "r.json")
    assert result.exit_code == 2 and "--json-out" in result.stderr, result.output
    assert result.stderr.count("\n") == 1


def _toy_app(exc: BaseException) -> typer.Typer:
    toy = typer.Typer(cls=AmpToolGroup, add_completion=False, pretty_exceptions_enable=False)

    @toy.command()
    @handle_errors
    def boom() -> None:
        raise exc

    @toy.command()
    def other() -> None:
        """A second command, so the app stays a group."""

    return toy


def test_unexpected_exception_is_one_line_exit_3(monkeypatch):
    monkeypatch.delenv("AMPTOOL_DEBUG", raising=False)
    result = runner.invoke(_toy_app(RuntimeError("first\nsecond")), ["boom"])
    assert result.exit_code == 3 and result.stdout == ""
    assert INTERNAL_LINE.match(result.stderr), result.stderr
    assert "RuntimeError: first second;" in result.stderr


def test_amptool_debug_reraises(monkeypatch):
    monkeypatch.setenv("AMPTOOL_DEBUG", "1")
    result = runner.invoke(_toy_app(ZeroDivisionError("bad")), ["boom"])
    assert isinstance(result.exception, ZeroDivisionError)


@pytest.mark.parametrize("exc, code", [(UsageError("bad input", "fix it"), 2),
                                       (CheckFailed("parity failed", "see r.json"), 1)])
def test_amptool_errors_keep_their_codes(exc, code):
    result = runner.invoke(_toy_app(exc), ["boom"])
    assert result.exit_code == code and result.stderr == f"amptool: error: {exc}\n"


def test_print_json_writes_valid_json_for_nan(capsys):
    print_json({"b": float("nan"), "a": [1.5, float("inf")]})
    out = capsys.readouterr().out
    assert json.loads(out) == {"a": [1.5, "inf"], "b": "nan"}


def test_usage_errors_and_help_do_not_import_mindspore():
    code = ("import sys; from amptool.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['train', '--epochs', 'abc']); "
            "assert r.exit_code == 2, r.output; "
            "r = CliRunner().invoke(app, ['parity', '--help']); "
            "assert r.exit_code == 0, r.output; "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _console_script() -> list:
    script = Path(sys.executable).with_name("amptool")
    if script.is_file():
        return [str(script)]
    found = shutil.which("amptool")
    return [found] if found else [sys.executable, "-m", "amptool"]


def test_real_console_script_usage_error():
    done = subprocess.run(_console_script() + ["train", "--epochs", "abc"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert USAGE_LINE.match(done.stderr), done.stderr
    assert "'--epochs'" in done.stderr and "see 'amptool train --help'" in done.stderr
