"""``amptool diff`` refuses, in one line and exit 2, what is no parity report this release
reads, a folder without one and a bad budget: no trained network needed (the refusals of
reports of other models or inputs: test_diff.py, on real reports)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from amptool.cli import app


def _diff(*args):
    return CliRunner().invoke(app, ["diff", *map(str, args)])


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("content, expected", [
    ("{not json", "is not valid JSON"),
    (json.dumps([1, 2]), "is not a JSON object"),
    (json.dumps({"schema_version": 99, "passed": True}),
     "field 'schema_version' is 99, newer than amptool"),
    (json.dumps({"schema_version": 1, "passed": True}), "field 'reference' is missing"),
])
def test_a_file_that_is_no_readable_report_is_refused_in_one_line(tmp_path, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = _diff(bad, bad)
    assert result.exit_code == 2
    line = _one_line(result)
    assert line.startswith("amptool: error: ") and expected in line, line


def test_a_missing_report_a_folder_without_one_and_a_bad_config_are_refused(tmp_path):
    result = _diff(tmp_path / "none.json", tmp_path / "none.json")
    assert result.exit_code == 2 and "BASE" in _one_line(result) and "does not exist" in \
        _one_line(result)
    (tmp_path / "summary.json").write_text("{}")
    result = _diff(tmp_path, tmp_path)
    assert result.exit_code == 2
    assert "is a folder without parity.json (only summary.json)" in _one_line(result)
    config = tmp_path / "c.yaml"
    config.write_text("regression:\n  allowance: 1\n")
    result = _diff(tmp_path, tmp_path, "--config", config)
    assert result.exit_code == 2 and "unknown key 'allowance'" in _one_line(result)
