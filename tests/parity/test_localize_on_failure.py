"""A failing candidate is localized by itself (no ``--per-layer``), on its failing samples;
one that cannot be (no manifest names its network) says why; ``--no-localize`` turns it off;
a passing candidate is not localized."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from .conftest import error_line as _error_line
from .conftest import parity_cli as _parity

pytestmark = pytest.mark.slow  # exports and runs real networks


def test_a_failing_candidate_is_localized_without_per_layer(trap, tmp_path):
    report = tmp_path / "trap.json"
    result = _parity(trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 96,
                     "--json-out", report)
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert "culprit: first diverging cell 'norm' (L2Normalize" in line and "born there" in line
    assert line.endswith(f"keep 'norm' in fp32: add it to the policy's fp32_cells; see {report}")
    assert "add --per-layer" not in line
    cand = json.loads(report.read_text())["candidates"][0]
    assert cand["per_layer"]["first_flagged"] == "norm" and cand["culprit"]["where"] == "norm"
    assert cand["per_layer"]["samples"] == 32  # --layer-samples' default, all failing ones
    html = (tmp_path / "trap.html").read_text()  # beside --json-out
    assert "Per-layer error along the depth" in html and "culprit: norm (born)" in html


def test_no_localize_turns_it_off(trap, tmp_path):
    report = tmp_path / "trap.json"
    result = _parity(trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 96,
                     "--no-localize", "--json-out", report)
    assert result.exit_code == 1, result.output
    assert _error_line(result).endswith("see the table above (add --per-layer to localize); "
                                        f"see {report}")
    cand = json.loads(report.read_text())["candidates"][0]
    assert cand["per_layer"] is None and cand["culprit"] is None


def test_without_manifests_it_says_why_it_could_not_localize(trap, tmp_path):
    """Artefacts copied without their manifests (as from another tool) run on ready inputs:
    nothing names their network, so the line says so and how to name it; naming it with
    --model localizes them."""
    for key in ("mindir_fp32", "mindir_fp16"):
        shutil.copyfile(trap[key], tmp_path / trap[key].rsplit("/", 1)[-1])
    fp32, fp16 = tmp_path / "trapmlp_fp32.mindir", tmp_path / "trapmlp_fp16.mindir"
    rng = np.random.default_rng(0)  # binary pictures, normalized as the digits' manifest says
    x = ((rng.random((64, 1, 28, 28)) > 0.7).astype(np.float32) - 0.3056) / 0.3249
    np.savez(tmp_path / "inputs.npz", x=x)
    result = _parity(fp32, fp16, "--inputs", tmp_path / "inputs.npz")
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert f"not localized: no manifest names the model of {fp16}" in line, line
    assert line.endswith("pass --model NAME or path/to/file.py:factory")
    named = _parity(fp32, fp16, "--inputs", tmp_path / "inputs.npz", "--model", "trapmlp")
    assert named.exit_code == 1, named.output
    assert "culprit: first diverging cell 'norm'" in _error_line(named)


def test_a_passing_candidate_is_not_localized(simplecnn, tmp_path):
    report = tmp_path / "ok.json"
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 64,
                     "--json-out", report)
    assert result.exit_code == 0, result.output
    cand = json.loads(report.read_text())["candidates"][0]
    assert cand["per_layer"] is None and cand["weights"] is None
