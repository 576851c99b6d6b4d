"""``amptool run --baseline``: a baseline that cannot be read is refused before anything is
trained (one line, exit 2, no output folder), through the command line and the Python API;
the run's config file takes the ``[regression]`` budget. No network is trained here (the
runs held to a baseline: test_run_baseline.py)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from amptool.cli import app


def _run(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist"),
    ("{not json", "is not valid JSON"),
    (json.dumps({"schema_version": 99, "passed": True}),
     "field 'schema_version' is 99, newer than amptool"),
    (json.dumps({"schema_version": 1, "passed": True}), "field 'reference' is missing"),
    ("folder", "is a folder without parity.json"),
])
def test_an_unreadable_baseline_is_refused_before_training(tmp_path, content, expected):
    base = tmp_path / "base.json"
    if content == "folder":
        base = tmp_path / "main"
        base.mkdir()
    elif content is not None:
        base.write_text(content)
    out = tmp_path / "run"
    result = _run("--epochs", 1, "--out", out, "--baseline", base)
    assert result.exit_code == 2, result.output
    line = _one_line(result)
    assert line.startswith("amptool: error: ") and expected in line and str(base) in line
    assert "== train" not in result.output and not out.exists()  # nothing trained, no folder


def test_every_mistake_is_named_at_once(tmp_path):
    result = _run("--epochs", 0, "--out", tmp_path / "run", "--baseline", tmp_path / "no.json")
    assert result.exit_code == 2
    line = _one_line(result)
    assert "epochs must be >= 1" in line and "--baseline" in line and "does not exist" in line


def test_the_python_api_refuses_it_before_training(tmp_path):
    import amptool
    from amptool.errors import UsageError

    out = tmp_path / "run"
    with pytest.raises(UsageError, match="--baseline .*no.json does not exist"):
        amptool.run(amptool.PipelineConfig(train=amptool.TrainConfig(epochs=1), out=str(out),
                                           baseline=str(tmp_path / "no.json")))
    assert not out.exists()


def test_the_run_config_file_takes_the_regression_budget(tmp_path):
    from amptool.errors import UsageError
    from amptool.pipelineconfig import PipelineConfig
    from amptool.stats.regression import RegressionBudget

    config = tmp_path / "run.toml"
    config.write_text('epochs = 1\nbaseline = "runs/main"\n[regression]\nerror_growth = 0.5\n'
                      'nonfinite_allowance = "off"\n')
    cfg = PipelineConfig.from_file(config)
    assert cfg.baseline == "runs/main" and cfg.train is not None and cfg.train.epochs == 1
    assert cfg.regression == RegressionBudget(error_growth=0.5, nonfinite_allowance=None)
    assert PipelineConfig.from_file(config, baseline="runs/release").baseline == "runs/release"
    assert PipelineConfig.from_file(None).regression == RegressionBudget()
    config.write_text("[regression]\nerror_grow = 0.5\nrate_allowance = -1\n")
    with pytest.raises(UsageError) as err:
        PipelineConfig.from_file(config)
    assert str(config) in str(err.value) and "[regression] unknown key 'error_grow'" in \
        str(err.value) and "rate_allowance must be a number >= 0" in str(err.value)
    result = _run("--config", config, "--out", tmp_path / "run")  # one line, nothing trained
    assert result.exit_code == 2 and "error_grow" in _one_line(result)
    assert not (tmp_path / "run").exists()
