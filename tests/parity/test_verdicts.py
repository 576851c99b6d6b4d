"""Verdict pieces on known data, no network: the task metric, n/a rows, the fp16 ONNX label,
degenerate-reference notes and the per-layer chart."""
from __future__ import annotations

import dataclasses
import math
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from amptool.documents.door import to_json
from amptool.errors import UsageError
from amptool.parity.candidate import label_fp16_fidelity, reference_notes
from amptool.parity.config import ParityConfig, validate
from amptool.parity.report import failure_line, format_table, junit_xml
from amptool.parity.task import evaluate, judge_task, load_metric
from amptool.stats.limits import FP16_VS_FP32
from amptool.stats.metrics import check_metrics, compute_metrics, passed

from .conftest import typed_report


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------- task metric

METRICS_PY = '''
import numpy as np

def accuracy(outputs, labels):
    return float((outputs[0].argmax(axis=1) == labels).mean())

def broken(outputs, labels):
    raise ValueError("no labels here\\nsecond line")

def text(outputs, labels):
    return "high"

def nan(outputs, labels):
    return float("nan")
'''


@pytest.fixture
def metric_file(tmp_path):
    path = tmp_path / "metrics.py"
    path.write_text(METRICS_PY)
    return path


def test_task_metric_passes_a_healthy_candidate_and_fails_a_drop(metric_file):
    spec = f"{metric_file}:accuracy"
    fn = load_metric(spec)
    labels = np.array([0, 1, 1, 0])
    ref = [np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 2.0], [3.0, 0.0]])]
    ref_value = evaluate(fn, spec, ref, labels, "reference")
    assert ref_value == 1.0
    same = judge_task(spec, fn, ref_value, ref, labels, 0.0)
    assert same.passed and same.metrics.task_drop == 0.0
    worse = [ref[0][:, ::-1].copy()]                     # planted: every prediction flipped
    bad = judge_task(spec, fn, ref_value, worse, labels, 0.25)
    assert not bad.passed and bad.metrics.task_drop == 1.0
    assert [to_json(c) for c in bad.checks] == [{"metric": "task_drop", "value": 1.0,
                                                 "limit": "<= 0.25", "passed": False}]
    assert judge_task(spec, fn, ref_value, worse, labels, None).passed   # budget off


def test_task_metric_nan_on_a_candidate_fails(metric_file):
    fn = load_metric(f"{metric_file}:nan")
    result = judge_task("m.py:nan", fn, 0.5, [np.zeros((2, 2))], None, 1.0)
    assert not result.passed and math.isnan(result.metrics.task_drop)


@pytest.mark.parametrize("spec,needle", [
    ("metrics.py", "--metric takes path/file.py:fn"),
    ("nowhere.py:acc", "metric file nowhere.py does not exist"),
    ("{dir}/metrics.py:missing", "has no function 'missing'"),
    ("{dir}/bad.py:fn", "failed to import: ZeroDivisionError: division by zero"),
])
def test_task_metric_load_errors(tmp_path, metric_file, spec, needle):
    (tmp_path / "bad.py").write_text("x = 1 / 0\n")
    with pytest.raises(UsageError) as err:
        load_metric(spec.format(dir=tmp_path))
    assert needle in _one_line(err)


@pytest.mark.parametrize("name,side,needle", [
    ("broken", "candidate", "raised ValueError: no labels here on the candidate's outputs"),
    ("text", "candidate", "returned str on the candidate's outputs, not a number"),
    ("nan", "reference", "returned nan on the reference's outputs"),
])
def test_task_metric_call_errors(metric_file, name, side, needle):
    spec = f"{metric_file}:{name}"
    with pytest.raises(UsageError) as err:
        evaluate(load_metric(spec), spec, [np.zeros((2, 2))], None, side)
    assert needle in _one_line(err)


def test_metric_budget_needs_a_metric():
    base = dict(reference="a.mindir", candidates=("b.mindir",))
    with pytest.raises(UsageError, match="--max-metric-drop needs --metric"):
        validate(ParityConfig(**base, thresholds={"max_metric_drop": 0.1}))
    with pytest.raises(UsageError, match="--max-metric-drop needs --metric"):
        validate(ParityConfig(**base, file_thresholds={"fp16_vs_fp32": {"max_metric_drop": 0}}))
    validate(ParityConfig(**base, metric="m.py:f", thresholds={"max_metric_drop": 0.1}))


# ---------------------------------------------------------------- reports

def _candidate(path, fmt, precision, ok, outputs, **extra) -> dict:
    return {"path": path, "format": fmt, "precision": precision, "kind": "artefact",
            "passed": ok, "outputs": outputs, "task": None, "findings": [],
            "fp16_faithful": None if precision == "fp32" else fmt != "ONNX", "caveat": None,
            "per_layer": None, "weights": None, "culprit": None, **extra}


def _output(name, ref, cand, labels=None) -> dict:
    metrics = compute_metrics(ref, cand, labels)
    rows = check_metrics(metrics, FP16_VS_FP32)
    return {"name": name, "metrics": metrics, "checks": rows, "passed": passed(rows)}


def _report(cands) -> dict:
    return {"passed": all(c["passed"] for c in cands), "seconds": 1.0, "candidates": cands,
            "reference": {"path": "ref_fp32.mindir", "format": "MINDIR", "precision": "fp32"},
            "inputs": {"description": "digits (4 samples)", "labels": True, "samples": 4}}


def test_fp16_onnx_results_are_labelled_and_name_the_faithful_check():
    logits = np.array([[2.0, 1.0], [0.0, 3.0]])
    bad = _output("output0", logits, -logits)
    good = _output("output0", logits, logits)
    results = [_candidate("x/m_fp16.mindir", "MINDIR", "fp16", False, [bad]),
               _candidate("x/m_fp16.onnx", "ONNX", "fp16", True, [good]),
               _candidate("x/m_fp32.onnx", "ONNX", "fp32", True, [good])]
    report = typed_report(_report(results))
    labelled = label_fp16_fidelity(report.candidates, "CPU")
    mindir, onnx, fp32 = labelled
    assert mindir.caveat is None and fp32.caveat is None and mindir is report.candidates[0]
    assert "no evidence that the graph is safe in fp16" in onnx.caveat
    assert "MindSpore (CPU): m_fp16.mindir (FAIL)" in onnx.caveat
    assert [f.kind for f in onnx.findings] == ["fp16_emulated"]
    assert not report.candidates[1].findings  # the results are frozen: a new one is made
    report = dataclasses.replace(report, candidates=labelled)
    table = format_table(report)
    assert "(ONNX fp16): PASS (fp16 not exercised: see note)" in table
    assert "parity FAILED (2/3 candidates" in table          # the MindIR fail is not hidden
    root = ET.fromstring(junit_xml(report))
    suite = root.findall("testsuite")[1]
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["fp16_faithful"] == "false"
    assert all(c.get("name").endswith("[fp16 not exercised]") for c in suite.iter("testcase"))
    assert "m_fp16.mindir (FAIL)" in suite.find("system-out").text


def test_na_rows_in_table_junit_and_failure_line():
    scores = np.array([[0.5], [1.5], [2.5], [3.5]])
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 2.0], [3.0, 0.0]])
    labels = np.array([0, 1, 1, 0])
    outputs = [_output("logits", logits, logits, labels), _output("score", scores, -scores, labels)]
    task = {"name": "task", "spec": "m.py:acc", "passed": False,
            "metrics": {"task_ref": 1.0, "task_cand": 0.5, "task_drop": 0.5},
            "checks": [{"metric": "task_drop", "value": 0.5, "limit": "<= 0.1", "passed": False}]}
    cand = _candidate("x/m_fp16.mindir", "MINDIR", "fp16", False, outputs, task=task)
    report = typed_report(_report([cand]))
    table = format_table(report)
    assert "top1_agree_clear            -  >= 0.99       n/a (not class logits" in table
    assert "task       task_drop" in table and "FAIL" in table
    line = failure_line(report)
    assert "task_drop 0.5 (limit <= 0.1)" in line and "cosine" in line
    assert "top1_agree_clear" not in line                    # n/a is no breach
    root = ET.fromstring(junit_xml(report))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["score.top1_agree_clear"].find("skipped") is not None
    assert cases["score.acc_drop_clear"].find("skipped") is not None
    assert cases["logits.top1_agree_clear"].find("skipped") is None
    assert cases["task.task_drop"].find("failure") is not None
    assert root.find("testsuite").get("skipped") == "2"


def test_degenerate_reference_notes_reach_the_failure_line():
    tiny = np.random.default_rng(0).standard_normal((8, 10)) * 1e-8
    notes = reference_notes([tiny, np.eye(8, 10)], ["logits", "aux"])
    assert [n.where for n in notes] == ["logits"]
    assert "verdict reflects untrained or degenerate outputs" in notes[0].message
    cand = _candidate("x/m_fp16.mindir", "MINDIR", "fp16", False,
                      [_output("logits", tiny, -tiny)], findings=[to_json(n) for n in notes])
    report = typed_report(_report([cand]))
    assert "note: output logits: the reference's outputs are near-constant" in failure_line(report)
    assert "  note: output logits" in format_table(report)


# ---------------------------------------------------------------- per-layer chart

def _layer_report(cosines: list, rel: list, flagged=None) -> dict:
    rows = [{"path": f"cell{i}", "type": "Dense", "dtype": "float16", "cosine": c,
             "rel_l2": r, "max_rel": 100.0, "max_abs": 1.0, "nonfinite": 0 if c == c else 3,
             "ref_absmax": 1.0, "subnormal": 0.0, "fp16_risk": None, "in_cosine": None,
             "flagged": flagged == i, "origin": "born" if flagged == i else None}
            for i, (c, r) in enumerate(zip(cosines, rel))]
    layer = {"model": None, "rows": rows, "min_cosine": 0.999, "policy": "O2/float16",
             "samples": 4,
             "first_flagged": None if flagged is None else f"cell{flagged}",
             "origin": None if flagged is None else "born"}
    return typed_report(_report([_candidate("x/m_fp16.mindir", "MINDIR", "fp16",
                                            flagged is None, [], per_layer=layer)]))


def test_plot_draws_each_metric_with_its_own_limit(tmp_path):
    pytest.importorskip("matplotlib")
    from amptool.parity.plot import rel_l2_bound, write_plot

    assert rel_l2_bound(0.999) == pytest.approx(0.0447, abs=1e-4)
    # an error within that bound keeps cosine above the limit, whatever its direction
    rng = np.random.default_rng(0)
    r = rng.standard_normal(1000)
    e = rng.standard_normal(1000)
    e *= 0.999 * rel_l2_bound(0.999) * np.linalg.norm(r) / np.linalg.norm(e)
    assert compute_metrics(r, r + e)["cosine"] >= 0.999
    healthy = tmp_path / "pass.png"
    write_plot(str(healthy), _layer_report([1.0, 0.9999999, 0.9999998], [0.0, 4e-4, 5e-4]))
    broken = tmp_path / "fail.png"
    write_plot(str(broken), _layer_report([1.0, 0.2, float("nan")], [0.0, 0.9, math.inf], 1))
    for png in (healthy, broken):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_the_weight_check_counts_each_wrong_element_whatever_the_chunk(chunk, monkeypatch):
    """An exact fp16 cast compares equal; three planted elements (one NaN) are counted and the
    largest finite error is the largest over the whole weight, chunk by chunk or at once; a
    shape that differs is listed as such."""
    from amptool.parity import weights

    monkeypatch.setattr(weights, "CHUNK", chunk)
    rng = np.random.default_rng(0)
    ref = {"a": rng.standard_normal((40, 25)).astype(np.float32),
           "b": rng.standard_normal(10).astype(np.float32), "c": np.ones(3, np.float32)}
    cand = {name: value.astype(np.float16) for name, value in ref.items()}
    assert weights.compare_weights(ref, cand, ["a", "b", "c"]) == []
    cand["a"] = cand["a"].copy()
    cand["a"][3, 4] += np.float16(0.5)
    cand["a"][39, 24] = np.float16(-8.0)
    cand["a"][20, 0] = np.nan
    cand["c"] = np.ones(4, np.float16)
    bad = weights.compare_weights(ref, cand, ["a", "b", "c", "absent"])
    assert [b["name"] for b in bad] == ["a", "c"]
    assert bad[0]["mismatched"] == 3 and bad[0]["size"] == 1000
    expected = abs(-8.0 - float(ref["a"][39, 24].astype(np.float16)))
    assert bad[0]["max_abs"] == pytest.approx(max(expected, 0.5), rel=1e-2)
    assert bad[1]["note"] == "shape (4,) vs (3,)"
