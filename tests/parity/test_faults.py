"""Planted faults: each must fail the gate (exit 1) and name the right culprit.

And the healthy counterparts must pass, so the gate is shown to be right both ways.
"""
from __future__ import annotations

import json

import pytest

from .conftest import error_line as _error_line
from .conftest import parity_cli as _parity

pytestmark = pytest.mark.slow  # trains or exports real networks


def test_fp16_range_overflow_is_caught_at_the_planted_cell(trap, tmp_path):
    """trapmlp's 'norm' squares activations past 65504 in fp16: output collapses."""
    report = tmp_path / "trap.json"
    result = _parity(trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 96, "--per-layer",
                     "--layer-samples", 8, "--json-out", report)
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert "cosine" in line and "first diverging cell 'norm'" in line and "born there" in line
    assert "fp32_cells" in line  # the fix names the policy knob
    cand = json.loads(report.read_text())["candidates"][0]
    layer = cand["per_layer"]
    assert layer["first_flagged"] == "norm" and layer["origin"] == "born"
    rows = {r["path"]: r for r in layer["rows"]}
    assert rows["relu1"]["cosine"] > 0.999 and not rows["relu1"]["flagged"]
    assert rows["norm"]["dtype"] == "float16" and rows["fc3"]["flagged"]
    assert cand["culprit"]["where"] == "norm" and cand["weights"]["mismatched"] == []


def test_the_same_trap_network_passes_in_fp32(trap):
    """Eager checkpoint (fp32) against its fp32 MindIR: well within the fp32 limits."""
    result = _parity(trap["run"], trap["mindir_fp32"], "--samples", 96)
    assert result.exit_code == 0, result.output
    assert "max_abs" in result.output and "PASS" in result.output


def test_corrupted_fp16_weight_is_named(simplecnn, corrupted_fp16, tmp_path):
    report = tmp_path / "corrupt.json"
    result = _parity(simplecnn["mindir_fp32"], corrupted_fp16, "--samples", 64, "--per-layer",
                     "--layer-samples", 4, "--json-out", report)
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert "weight conv.weight of cell 'conv'" in line and "re-export" in line
    cand = json.loads(report.read_text())["candidates"][0]
    assert [w["name"] for w in cand["weights"]["mismatched"]] == ["conv.weight"]
    assert cand["per_layer"]["first_flagged"] == "conv"
    assert cand["per_layer"]["origin"] == "born"


def test_corrupted_weight_fails_even_without_localization(simplecnn, corrupted_fp16):
    """The verdict alone catches it: no per-layer pass runs with --no-localize."""
    result = _parity(simplecnn["mindir_fp32"], corrupted_fp16, "--samples", 64, "--no-localize")
    assert result.exit_code == 1
    line = _error_line(result)
    assert "parity failed for simplecnn_fp16.mindir" in line and "culprit" not in line


def test_different_input_normalization_is_named(simplecnn, renormalized_fp16, tmp_path):
    report = tmp_path / "renorm.json"
    result = _parity(simplecnn["mindir_fp32"], renormalized_fp16, "--samples", 64,
                     "--per-layer", "--layer-samples", 4, "--json-out", report)
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert "input normalization differs from the reference's (mean 0 vs" in line
    cand = json.loads(report.read_text())["candidates"][0]
    assert cand["culprit"]["kind"] == "preprocess"
    assert cand["per_layer"]["first_flagged"] == "(input)"
    assert cand["per_layer"]["origin"] == "input"


def test_healthy_trained_simplecnn_passes_every_format(simplecnn, tmp_path):
    cands = [v for k, v in simplecnn.items() if k not in ("run", "mindir_fp32")]
    report = tmp_path / "ok.json"
    result = _parity(simplecnn["run"], simplecnn["mindir_fp32"], *cands, "--samples", 128,
                     "--per-layer", "--layer-samples", 4, "--json-out", report)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["passed"] and len(data["candidates"]) == 1 + len(cands)
    for cand in data["candidates"]:
        assert cand["culprit"] is None and cand["weights"]["mismatched"] == []
        assert cand["per_layer"]["first_flagged"] is None
        limits = {row["metric"] for row in cand["outputs"][0]["checks"]}
        if cand["precision"] == "fp32":
            assert "max_abs_scaled" in limits  # the strict fp32 pair
        assert {"cosine", "top1_agree_clear", "acc_drop_clear", "nonfinite"} <= limits


def test_healthy_seeded_sample_models_pass(seeded_export):
    """LeNet-5, the BatchNorm ResNet and the LayerNorm/softmax transformer, fp16 vs fp32, on
    16 samples (a single top-1 flip that is no near-tie fails the limit, as on 64)."""
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    for name in ("lenet5", "resnet", "transformer"):
        paths = seeded_export(name)
        report = parity(ParityConfig(reference=paths["mindir_fp32"],
                                     candidates=(paths["mindir_fp16"],), samples=16,
                                     per_layer=True, layer_samples=4))
        cand = report.candidates[0]
        assert report.passed, (name, cand.outputs[0].checks)
        assert cand.per_layer.first_flagged is None, name
        kept = {r.path: r.dtype for r in cand.per_layer.rows}
        if name == "resnet":
            assert kept["stem.1"] == "float32" and kept["stem.0"] == "float16"
        if name == "transformer":
            assert kept["blocks.0.norm1"] == "float32" \
                and kept["blocks.0.attn.softmax"] == "float16"
