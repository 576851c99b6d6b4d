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


def test_policy_auto_keeps_the_block_and_the_pipeline_passes(tmp_path):
    out = tmp_path / "auto"
    result = runner.invoke(app, ["run", "--model", PLANTED, "--policy", "auto", "--epochs", "1",
                                 "--onnx", "off", "--out", str(out), "--json"])
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
