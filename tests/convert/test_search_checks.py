"""The search's config mistakes are refused by its library entry: the Python API gets the
line the command prints, before any work."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from amptool.api import search
from amptool.cli import app
from amptool.convert.search import SearchConfig
from amptool.errors import UsageError

runner = CliRunner()


@pytest.mark.parametrize("args, fields", [
    (["--max-metric-drop", "0.1"], {"threshold_flags": {"max_metric_drop": 0.1}}),
    (["--max-metric-drop", "off"], {"threshold_flags": {"max_metric_drop": None}}),
    (["--metric", "nofile"], {"metric": "nofile"}),
    (["--plot", "{tmp}/missing/p.png"], {"plot": "{tmp}/missing/p.png"}),
    (["--plot", "{tmp}"], {"plot": "{tmp}"}),
    (["--range-safety", "1.5"], {"range_safety": 1.5}),
    (["--range-safety", "0"], {"range_safety": 0}),
])
def test_the_api_gets_the_commands_error(tmp_path, args, fields):
    out = tmp_path / "policy.toml"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    fields = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v
              for k, v in fields.items()}
    result = runner.invoke(app, ["convert", "search", "--ckpt", str(tmp_path / "none.ckpt"),
                                 "--model", "simplecnn", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    with pytest.raises(UsageError) as err:
        search(SearchConfig(ckpt=str(tmp_path / "none.ckpt"), model="simplecnn", out=str(out),
                            **fields))
    assert lines == [f"amptool: error: {err.value}"]
    assert not out.exists()


@pytest.mark.parametrize("fields, needle", [
    ({"threshold_table": {"min_cosine": "high"}},
     "threshold_table: threshold min_cosine must be a number or off, got 'high'"),
    ({"threshold_table": {"outputs": {"0": {"max_metric_drop": 0.1}}}},
     "max_metric_drop applies to the whole candidate"),
    ({"threshold_flags": {"min_cosine_typo": 0.9}}, "flags: unknown threshold(s) min_cosine_typo"),
    ({"range_safety": True}, "--range-safety must be a share in (0, 1] or 'off' (got True)"),
])
def test_the_api_checks_what_the_command_parses(tmp_path, fields, needle):
    with pytest.raises(UsageError) as err:
        search(SearchConfig(ckpt=str(tmp_path / "none.ckpt"), model="simplecnn",
                            out=str(tmp_path / "p.toml"), **fields))
    assert needle in str(err.value) and "\n" not in str(err.value)
