"""The verdict rules on real artefacts, each shown to catch a planted fault and to pass the
healthy case: the scaled error, near-tie flips, per-output thresholds, the fp16 ONNX label,
the task metric and the degenerate-reference note."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from .conftest import error_line as _error_line
from .conftest import parity_cli as _parity

pytestmark = pytest.mark.slow  # trains or exports real networks


def _cand(report_path: Path, index: int = 0) -> dict:
    return json.loads(report_path.read_text())["candidates"][index]


def _onnx(simplecnn):
    if "onnx_fp32" not in simplecnn:
        pytest.skip("onnx/onnxruntime are not installed")
    return simplecnn["onnx_fp32"], simplecnn["onnx_fp16"]


def _golden(simplecnn, tmp_path, n: int = 64) -> Path:
    golden = tmp_path / "golden.npz"
    made = _parity(simplecnn["mindir_fp32"], "--save-outputs", golden, "--samples", n)
    assert made.exit_code == 0, made.output
    return golden


def _rewrite(golden: Path, dst: Path, edit) -> Path:
    """A copy of a golden file whose stored reference outputs went through ``edit``."""
    with np.load(golden) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["output_0"] = edit(arrays["output_0"].copy())
    np.savez(dst, **arrays)
    return dst


def test_scaled_error_passes_fp32_formats_on_large_logits(simplecnn, tmp_path):
    """Inputs x300 push the logits into the thousands: fp32 ONNX vs fp32 MindIR differ by
    far more than 1e-4 absolute, yet by ~1e-7 of the output's size."""
    onnx_fp32, _ = _onnx(simplecnn)
    x = np.random.default_rng(0).uniform(0, 300, (48, 1, 28, 28)).astype(np.float32)
    big = tmp_path / "big.npz"
    np.savez(big, x=x)
    js = tmp_path / "big.json"
    ok = _parity(simplecnn["mindir_fp32"], onnx_fp32, "--inputs", big, "--json-out", js)
    assert ok.exit_code == 0, ok.output
    metrics = _cand(js)["outputs"][0]["metrics"]
    assert metrics["ref_absmax"] > 1000 and metrics["max_abs"] > 1e-4
    assert metrics["max_abs_scaled"] < 1e-5
    absolute = _parity(simplecnn["mindir_fp32"], onnx_fp32, "--inputs", big, "--max-abs", "1e-4")
    assert absolute.exit_code == 1 and "max_abs " in _error_line(absolute)


def test_scaled_error_catches_outputs_rounded_through_fp16(simplecnn, tmp_path):
    golden = _golden(simplecnn, tmp_path)
    ok = _parity("--load-outputs", golden, simplecnn["mindir_fp32"])
    assert ok.exit_code == 0, ok.output
    rounded = _rewrite(golden, tmp_path / "rounded.npz",
                       lambda out: out.astype(np.float16).astype(np.float32))
    bad = _parity("--load-outputs", rounded, simplecnn["mindir_fp32"])
    assert bad.exit_code == 1, bad.output
    line = _error_line(bad)
    assert "max_abs_scaled" in line and "cosine" not in line
    off = _parity("--load-outputs", rounded, simplecnn["mindir_fp32"], "--max-abs-scaled", "off")
    assert off.exit_code == 0, off.output


def _candidate_outputs(artefact: str, golden: Path) -> np.ndarray:
    from amptool.artefact.runners import load_runner

    with np.load(golden) as z:
        x = z["input_0"]
    return np.asarray(load_runner(artefact).run([x])[0], dtype=np.float32)


def _plant_flip(ref: np.ndarray, cand: np.ndarray, sample: int, lead: float) -> None:
    """Make the stored reference pick the candidate's runner-up on ``sample``, ahead of the
    candidate's choice by ``lead`` (the rest of that row: the candidate's own values)."""
    top, second = np.argsort(cand[sample])[::-1][:2]
    ref[sample] = cand[sample]
    ref[sample, second] = cand[sample, top] + lead


def test_near_tie_flip_passes_and_a_clear_flip_fails(simplecnn, tmp_path):
    golden = _golden(simplecnn, tmp_path)
    cand = _candidate_outputs(simplecnn["mindir_fp16"], golden)
    margins = np.sort(cand, axis=1)[:, -1] - np.sort(cand, axis=1)[:, -2]
    tight, clear = np.argsort(margins)[:2]

    def near_tie(out):
        _plant_flip(out, cand, tight, 1e-4)
        return out

    tied = _rewrite(golden, tmp_path / "tied.npz", near_tie)
    js = tmp_path / "tied.json"
    ok = _parity("--load-outputs", tied, simplecnn["mindir_fp16"], "--json-out", js)
    assert ok.exit_code == 0, ok.output
    metrics = _cand(js)["outputs"][0]["metrics"]
    assert metrics["top1_agree"] == pytest.approx(63 / 64)   # 0.984 < 0.99: failed before
    assert metrics["near_tie_flips"] == 1 and metrics["top1_agree_clear"] == 1.0

    def real_flip(out):
        _plant_flip(out, cand, tight, 1e-4)
        _plant_flip(out, cand, clear, 0.5)                   # a clear margin: a real fault
        return out

    flipped = _rewrite(golden, tmp_path / "flipped.npz", real_flip)
    bad = _parity("--load-outputs", flipped, simplecnn["mindir_fp16"], "--json-out", js)
    assert bad.exit_code == 1, bad.output
    line = _error_line(bad)
    assert "top1_agree_clear 0.984375 (limit >= 0.99)" in line
    assert _cand(js)["outputs"][0]["metrics"]["near_tie_flips"] == 1
    # 1 % of 64 samples is less than one: the gate allows no flip, and says so on either verdict
    luck = "min_top1 0.99 leaves 0.01 (1.00%) is below one sample in 64 (1.56%)"
    assert luck in line and "use --samples >= 100 or lower --min-top1 to 0.9843" in line
    row = next(r for r in _cand(js)["outputs"][0]["checks"] if r["metric"] == "top1_agree_clear")
    assert row["samples"] == 64 and row["ci"][0] < 63 / 64 < row["ci"][1] and row["under_resolved"]
    quiet = _parity("--load-outputs", tied, simplecnn["mindir_fp16"], "-q")
    assert quiet.exit_code == 0 and quiet.stdout.startswith("parity PASSED"), quiet.output
    assert quiet.stderr.startswith("amptool: warning: ") and luck in quiet.stderr
    assert "[95% CI " in ok.output and luck in ok.output


TWO_HEADS = '''
import mindspore.nn as nn


class TwoHeads(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.body = nn.Dense(28 * 28, 32)
        self.relu = nn.ReLU()
        self.cls = nn.Dense(32, 10)
        self.score = nn.Dense(32, 1)

    def construct(self, x):
        h = self.relu(self.body(self.flatten(x)))
        return self.cls(h), self.score(h)


def twoheads():
    net = TwoHeads()
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net
'''


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory):
    """A seeded two-output network (logits, one-column score) as fp32 ONNX, and a copy whose
    score head has a shifted bias (a fault in output 1 only)."""
    pytest.importorskip("onnx")
    import mindspore as ms
    import onnx
    from onnx import numpy_helper

    from amptool.artefact.files import file_facts
    from amptool.export.api import ExportConfig, export
    from amptool.files.fileio import sha256
    from amptool.network.models import resolve_model

    root = tmp_path_factory.mktemp("two_heads")
    (root / "two.py").write_text(TWO_HEADS)
    model = f"{root / 'two.py'}:twoheads"
    ms.set_seed(0)
    ms.save_checkpoint(resolve_model(model).build(), str(root / "two.ckpt"))
    results = export(ExportConfig(ckpt=str(root / "two.ckpt"), model=model,
                                  formats=("ONNX",), precision="fp32",
                                  out=str(root / "export"), force=True))
    good = Path(results[0].path)
    bad = root / "faulty" / good.name
    bad.parent.mkdir()
    graph = onnx.load(str(good))
    bias = next(t for t in graph.graph.initializer if t.name == "score.bias")
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, bias.name))
    onnx.save(graph, str(bad))
    manifest = json.loads(Path(str(good) + ".json").read_text())
    manifest.update(sha256=sha256(bad), file_size=bad.stat().st_size, files=file_facts(bad))
    Path(str(bad) + ".json").write_text(json.dumps(manifest))
    copy = root / "copy" / good.name
    copy.parent.mkdir()
    shutil.copyfile(good, copy)
    shutil.copyfile(str(good) + ".json", str(copy) + ".json")
    return {"ref": str(good), "same": str(copy), "faulty": str(bad)}


def test_per_output_thresholds_and_na_on_a_two_output_network(two_heads, tmp_path):
    js = tmp_path / "two.json"
    ok = _parity(two_heads["ref"], two_heads["same"], "--samples", 32, "--json-out", js)
    assert ok.exit_code == 0, ok.output
    logits, score = _cand(js)["outputs"]
    assert "top1_agree_clear" in logits["metrics"] and "acc_drop_clear" in logits["metrics"]
    na = {r["metric"]: r for r in score["checks"] if r["passed"] is None}
    assert set(na) == {"top1_agree_clear", "acc_drop_clear"}   # n/a, never a pass
    assert "n/a (not class logits" in ok.output
    bad = _parity(two_heads["ref"], two_heads["faulty"], "--samples", 32, "--json-out", js)
    assert bad.exit_code == 1, bad.output
    logits, score = _cand(js)["outputs"]
    assert logits["passed"] and not score["passed"]
    loose = tmp_path / "loose.toml"
    loose.write_text('[thresholds.outputs.1]\nmin_cosine = "off"\nmax_abs_scaled = "off"\n')
    excused = _parity(two_heads["ref"], two_heads["faulty"], "--samples", 32, "--config", loose)
    assert excused.exit_code == 0, excused.output
    by_name = tmp_path / "by_name.toml"
    by_name.write_text('[thresholds.outputs.output1]\nmax_abs_scaled = "off"\n'
                       'min_cosine = "off"\nmax_abs = 1.0\n')
    assert _parity(two_heads["ref"], two_heads["faulty"], "--samples", 32,
                   "--config", by_name).exit_code == 0
    typo = tmp_path / "typo.toml"
    typo.write_text("[thresholds.outputs.scores]\nmin_cosine = 0.5\n")
    wrong = _parity(two_heads["ref"], two_heads["same"], "--config", typo)
    assert wrong.exit_code == 2
    assert "no output is named or numbered scores" in _error_line(wrong)
    assert "0 (output0), 1 (output1)" in _error_line(wrong)


def test_fp16_onnx_pass_is_labelled_beside_the_mindir_fail(trap, tmp_path):
    """trapmlp's fp16 graph overflows in true fp16 (MindIR); onnxruntime's CPU provider
    computes it in fp32 and passes it: the label must say so and name the MindIR's FAIL."""
    pytest.importorskip("onnxruntime")
    from amptool.export.api import ExportConfig, export

    results = export(ExportConfig(run=trap["run"], formats=("ONNX",), precision="fp16",
                                  out=str(tmp_path / "onnx"), force=True))
    onnx_fp16 = results[0].path
    js, xml = tmp_path / "r.json", tmp_path / "r.xml"
    result = _parity(trap["mindir_fp32"], trap["mindir_fp16"], onnx_fp16, "--samples", 64,
                     "--json-out", js, "--junit", xml)
    assert result.exit_code == 1, result.output
    mindir, onnx = json.loads(js.read_text())["candidates"]
    assert not mindir["passed"] and mindir["fp16_faithful"] is True and mindir["caveat"] is None
    assert onnx["fp16_faithful"] is False
    assert "trapmlp_fp16.mindir (FAIL)" in onnx["caveat"]
    if onnx["passed"]:
        assert "(ONNX fp16): PASS (fp16 not exercised: see note)" in result.output
    suites = ET.parse(xml).getroot().findall("testsuite")
    props = {p.get("name"): p.get("value") for p in suites[1].iter("property")}
    assert props["fp16_faithful"] == "false"
    assert "parity failed for trapmlp_fp16.mindir" in _error_line(result)


METRIC = '''
def accuracy(outputs, labels):
    return float((outputs[0].argmax(axis=1) == labels).mean())
'''


def test_task_metric_gate(simplecnn, trap, tmp_path):
    path = tmp_path / "task.py"
    path.write_text(METRIC)
    spec = f"{path}:accuracy"
    js = tmp_path / "task.json"
    ok = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 64,
                 "--metric", spec, "--max-metric-drop", "0.02", "--json-out", js)
    assert ok.exit_code == 0, ok.output
    task = _cand(js)["task"]
    assert task["spec"] == spec and task["metrics"]["task_ref"] > 0.8
    assert task["checks"][0]["limit"] == "<= 0.02"
    bad = _parity(trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 64,
                  "--metric", spec, "--max-metric-drop", "0.02")
    assert bad.exit_code == 1
    assert "task_drop" in _error_line(bad)
    lonely = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                     "--max-metric-drop", "0.1")
    assert lonely.exit_code == 2 and "--max-metric-drop needs --metric" in _error_line(lonely)
    missing = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--metric",
                      f"{path}:top5")
    assert missing.exit_code == 2 and "has no function 'top5'" in _error_line(missing)


def test_degenerate_reference_is_noted(simplecnn, corrupted_fp16, tmp_path):
    same = tmp_path / "same.npz"
    np.savez(same, x=np.ones((16, 1, 28, 28), np.float32))   # one input, 16 times
    bad = _parity(simplecnn["mindir_fp32"], corrupted_fp16, "--inputs", same)
    assert bad.exit_code == 1
    line = _error_line(bad)
    assert "the reference gives the same output for every input" in line
    assert "verdict reflects untrained or degenerate outputs" in line
    js = tmp_path / "healthy.json"
    ok = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 32,
                 "--json-out", js)
    assert ok.exit_code == 0
    assert not [f for f in _cand(js)["findings"] if f["kind"] == "degenerate_reference"]


def test_plot_of_a_passing_model_stays_under_its_limits(simplecnn, tmp_path):
    pytest.importorskip("matplotlib")
    from amptool.parity.plot import rel_l2_bound

    png, js = tmp_path / "pass.png", tmp_path / "pass.json"
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 32,
                     "--layer-samples", 4, "--plot", png, "--json-out", js)
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    layer = _cand(js)["per_layer"]
    bound = rel_l2_bound(layer["min_cosine"])
    assert all(r["rel_l2"] < bound / 10 for r in layer["rows"])
    assert max(r["max_rel"] for r in layer["rows"]) > bound    # what the old chart drew
