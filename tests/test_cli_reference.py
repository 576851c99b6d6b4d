"""The generated reference pages (docs/reference/cli.md, config.md, exit-codes.md) are what
``python tools/gen_reference.py`` writes from the code now."""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" /
                                                  "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reference", module)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@functools.lru_cache(maxsize=None)
def pages() -> dict:
    """Every generated page as the code gives it now, made once (at the first test that asks,
    not while the suite is collected)."""
    return gen.pages()


def test_every_committed_page_is_current():
    stale = [str(path) for path, text in pages().items()
             if not (ROOT / path).is_file() or (ROOT / path).read_text(encoding="utf-8") != text]
    assert not stale, f"stale: {', '.join(stale)}: run `{gen.COMMAND}` and commit them"


def test_every_option_of_every_command_is_in_the_cli_page():
    page = pages()[gen.REFERENCE / "cli.md"]
    for ctx, command in gen.walk(gen.root_command()):
        assert f"## {ctx.command_path}\n" in page or ctx.parent is None
        for param in command.params:
            for flag in param.opts if param.param_type_name == "option" else ():
                assert f"`{flag}`" in page, f"{ctx.command_path} {flag}"


def test_a_changed_help_makes_the_page_stale(monkeypatch):
    from amptool.cli import app

    command = typer.main.get_command(app)
    param = next(p for p in command.commands["train"].params if p.name == "epochs")
    param.help = param.help.replace("Total training epochs.", "Epochs in all.")
    monkeypatch.setattr(gen, "root_command", lambda: command)
    assert "Epochs in all." in gen.cli_page() and gen.cli_page() != pages()[gen.REFERENCE /
                                                                          "cli.md"]


def test_every_exit_code_in_use_is_documented():
    documented = gen.exit_codes()
    assert {0, 1, 2, 3, 130} <= set(documented)
    assert set(gen.raised_as()) <= set(documented)


def test_check_mode_names_a_stale_page(tmp_path, capsys, monkeypatch):
    for path, text in pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    (tmp_path / gen.REFERENCE / "config.md").write_text("old\n", encoding="utf-8")
    assert gen.stale(tmp_path) == [str(gen.REFERENCE / "config.md")]
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert f"config.md is stale: run `{gen.COMMAND}`" in capsys.readouterr().err


def _run_section_keys() -> tuple:
    """(the keys config.md says ``amptool run --config`` takes, the training keys it says
    are refused), read from the page."""
    import re

    page = pages()[gen.REFERENCE / "config.md"]
    section = page.split("## amptool run --config", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    listed, _, rest = section.partition("for its training: ")[2].partition(". Training's ")
    refused = rest.partition("(how `train`")[0]
    return (table + re.findall(r"`(\w+)`", listed), re.findall(r"`(\w+)`", refused))


def test_run_config_takes_exactly_the_keys_its_reference_lists(tmp_path):
    """Every key config.md lists for ``amptool run --config`` loads (its default written
    in a file), and every other training key, and an unknown one, is refused."""
    import dataclasses
    import json

    from amptool.errors import UsageError
    from amptool.pipeline import PipelineConfig
    from amptool.train.config import COMMAND_ONLY, LaunchOptions, TrainConfig

    taken, refused = _run_section_keys()
    train_side = {f.name: f for f in dataclasses.fields(TrainConfig) + dataclasses.fields(
        LaunchOptions)}
    own = {f.name: f for f in dataclasses.fields(PipelineConfig)}
    assert "model" in taken and "per_layer" in taken and "nodes" in refused
    assert set(taken) | set(refused) == (set(train_side) | set(own) | set(COMMAND_ONLY)) - {
        "train"}
    path = tmp_path / "run.json"
    for key in taken:
        field = own.get(key) or train_side[key]
        default = field.default if field.default is not dataclasses.MISSING else None
        path.write_text(json.dumps({key: list(default) if isinstance(default, tuple)
                                    else default}))
        PipelineConfig.from_file(str(path))  # accepted
    for key in [k for k in refused if k not in taken] + ["no_such_key"]:
        path.write_text(json.dumps({key: 1}))
        with pytest.raises(UsageError, match=f"unknown key.*{key}"):
            PipelineConfig.from_file(str(path))


def test_every_data_source_is_named_where_data_is_described():
    """The config reference's ``data`` row and ``--data``'s help name every source kind
    ``--data`` takes, and ``NAME:N`` for the bundled ones."""
    from amptool.console.options import DATA_HELP
    from amptool.data.sources import KINDS

    page = pages()[gen.REFERENCE / "config.md"]
    row = next(line for line in page.splitlines() if line.startswith("| `data` |"))
    for text in (row, DATA_HELP):
        assert all(kind in text for kind in KINDS) and "NAME:N" in text, text


def test_no_help_text_loses_a_bracketed_word_to_the_terminal():
    """``--help`` renders help texts as rich markup, where ``[thresholds]`` is a style tag
    and vanishes ("A config file whose  table"); such a word is written ``\\[thresholds]``
    (the reference page shows it as written)."""
    import re

    tag = re.compile(r"(?<!\\)\[[a-z#/@][^\[\]]*\]")  # rich's markup tag
    eaten = [f"{ctx.command_path} {param.name}: {tag.findall(param.help)}"
             for ctx, command in gen.walk(gen.root_command())
             for param in command.params if getattr(param, "help", None)
             and tag.search(param.help)]
    assert not eaten, "\n".join(eaten)
    assert tag.search("whose [thresholds] table") and not tag.search("whose \\[thresholds]")
