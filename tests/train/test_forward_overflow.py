"""A network whose fp16 forward pass overflows (a block's own branch sum past 65504):
training names the cell and stops; ``--policy auto`` keeps it in fp32 from the start,
and export and parity reuse that policy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # trains real networks

PLANTED = f"{Path(__file__).resolve().parent.parent / 'planted_branches.py'}:build"
runner = CliRunner()


def test_forward_overflow_names_the_cell_and_stops(tmp_path):
    out = tmp_path / "o2"
    result = runner.invoke(app, ["train", "--model", PLANTED, "--epochs", "1", "--out", str(out),
                                 "-q"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error: the loss is not finite in "
                                                   "the forward pass (10 consecutive steps to "
                                                   "step 10): cell block (Branches) gives "
                                                   "non-finite float16 outputs"), lines
    assert 'fp32_cells = ["block"]' in lines[0] and "--policy auto" in lines[0]
    forensics = json.loads((out / "run.json").read_text())["forensics"]
    assert forensics["kind"] == "forward_overflow" and forensics["step"] == 10
    assert forensics["culprit"]["path"] == "block" and forensics["culprit"]["fp32_max"] > 65504
    assert not (out / "last.ckpt").exists()


def test_policy_auto_keeps_the_block_and_the_pipeline_passes(tmp_path, few_digits):
    out = tmp_path / "auto"
    result = runner.invoke(app, ["run", "--model", PLANTED, "--policy", "auto", "--epochs", "1",
                                 "--data", few_digits, "--onnx", "off", "--out", str(out),
                                 "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[:result.output.rindex("}") + 1])
    assert summary["passed"] and summary["train"]["overflow_steps"] < summary["train"]["steps"]
    run = json.loads((out / "train" / "run.json").read_text())
    assert [c["path"] for c in run["policy_auto"]["kept"]] == ["block"]
    assert list(run["policy"]["fp32_cells"]) == ["block"]
    policy_text = (out / "train" / "policy.auto.toml").read_text()
    assert "# fp32 cell block: Branches (planted_branches.py:" in policy_text
    assert "range pass: fp32 outputs up to" in policy_text
    manifest = json.loads(next((out / "export").glob("*fp16.mindir.json")).read_text())
    assert "block" in manifest["policy"]["fp32_cells"]


@pytest.mark.parametrize("level", ["O0", "O1"])
def test_policy_auto_needs_a_low_precision_level(level, tmp_path):
    result = runner.invoke(app, ["train", "--policy", "auto", "--amp-level", level, "--out",
                                 str(tmp_path / "x"), "-q"])
    assert result.exit_code == 2
    assert result.output.strip() == (f"amptool: error: --policy auto has nothing to keep in fp32 "
                                     f"at {level} (it keeps cells of an O2 or O3 network); use "
                                     f"--amp-level O2 or O3 with it")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2"])
def test_range_safety_outside_zero_one_is_refused(value, tmp_path):
    for command in ("train", "run"):
        result = runner.invoke(app, [command, "--policy", "auto", "--range-safety", value,
                                     "--out", str(tmp_path / command), "-q"])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            f"amptool: error: range safety must be a share in (0, 1] (got {float(value)})"), lines
        assert not (tmp_path / command).exists()


def test_auto_policy_of_a_healthy_sample_keeps_nothing_and_trapmlp_keeps_norm(tmp_path,
                                                                              few_digits,
                                                                              tiny_digits):
    """The range pass adds nothing to simplecnn's O2 policy; on trapmlp it keeps the norm
    (an overflow inside the cell) and the fp16 export of that run passes parity."""
    result = runner.invoke(app, ["train", "--policy", "auto", "--epochs", "1", "--data",
                                 tiny_digits, "--out", str(tmp_path / "cnn"), "-q"])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "cnn" / "run.json").read_text())
    assert run["policy_auto"]["kept"] == [] and list(run["policy"]["fp32_cells"]) == []
    out = tmp_path / "trap"
    result = runner.invoke(app, ["run", "--model", "trapmlp", "--policy", "auto", "--epochs", "1",
                                 "--data", few_digits, "--onnx", "off", "--out", str(out),
                                 "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "train" / "run.json").read_text())
    assert [c["path"] for c in run["policy_auto"]["kept"]] == ["norm"]
    assert "computing alone in fp16" in (out / "train" / "policy.auto.toml").read_text()
    # the fp16 artefact carries the settings that keep norm fp32, and parity's emulation of
    # a runtime ignoring them shows the model depends on them (informational: passed above)
    summary = json.loads(result.output[:result.output.rindex("}") + 1])
    fp16 = next(r for r in summary["artefacts"] if r["precision"] == "fp16")
    assert fp16["deployment"]["needed"] and fp16["deployment"]["kept_fp32"] == ["norm"]
    assert fp16["deployment"]["files"] == ["trapmlp_fp16.mindir.lite.ini",
                                           "trapmlp_fp16.mindir.atc.txt"]
    assert fp16["deployment"]["depends"] is True
    assert all((out / "export" / name).is_file() for name in fp16["deployment"]["files"])
    from amptool.documents.summary import PipelineSummary
    from amptool.pipeline import PipelineResult, format_summary

    typed = PipelineSummary.from_dict(summary)
    table = format_summary(PipelineResult(typed.passed, typed)).splitlines()
    assert ("deployment MINDIR fp16: keeps norm in fp32; deploy with "
            "trapmlp_fp16.mindir.lite.ini, trapmlp_fp16.mindir.atc.txt") in table
    assert f"  {fp16['deployment']['message']}" in table


def test_auto_policy_measures_batch_normalization_as_the_step_computes_it(tmp_path,
                                                                         few_digits):
    """Through a fresh BatchNorm's running statistics the planted network passes 65504;
    on the batch's statistics, as its training step computes, it does not: the range pass
    keeps nothing and the run trains."""
    import numpy as np

    from amptool.data.dataset import load_model_data
    from amptool.network.models import resolve_model
    from amptool.precision.ranges import measure_ranges, range_candidates

    model = PLANTED.replace(":build", ":normalized")
    spec = resolve_model(model)
    x = load_model_data("digits", spec).train_inputs(np.arange(64))
    inference = range_candidates(measure_ranges(spec.build(), [x]))
    assert [r.path for r in inference] == ["grow", "head"]
    out = tmp_path / "bn"
    result = runner.invoke(app, ["train", "--model", model, "--policy", "auto", "--epochs", "1",
                                 "--data", few_digits, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert run["policy_auto"]["kept"] == [] and list(run["policy"]["fp32_cells"]) == []
