"""One judge: what an output is, its limits, the drop check and the lowest cosine
(``amptool.stats.judge``); and parity and the policy search, each through its own path, giving
the same verdict on the same reference and candidate outputs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from amptool.stats.judge import (DROP_TOLERANCE, drop_within, judge_output, lowest_cosine,
                                 output_limits, output_role)
from amptool.stats.limits import NOT_LOGITS_MAX_ABS_SCALED

LOGITS = np.zeros((4, 10))


@pytest.mark.parametrize("index, ref, classifier, declared, classes, role", [
    (0, LOGITS, True, None, 10, (True, True, False)),
    (0, LOGITS, None, None, None, (True, True, False)),       # no loss recorded: a classifier
    (0, LOGITS, True, None, 5, (False, True, True)),          # not as wide as the classes
    (0, np.zeros((4, 1)), True, None, None, (True, True, True)),   # cannot be class logits
    (1, LOGITS, True, None, 10, (False, True, True)),         # logits are the first output
    (0, LOGITS, False, None, 10, (False, False, True)),       # a regression loss
    (1, LOGITS, False, (1,), None, (True, True, False)),      # declared, whatever the loss
    (0, LOGITS, True, (1,), None, (False, False, True)),
])
def test_output_role(index, ref, classifier, declared, classes, role):
    found = output_role(index, ref, classifier, declared, classes)
    assert (found.logits, found.classifier, found.bound_scaled) == role


def test_limits_follow_the_role():
    logits = output_limits(output_role(0, LOGITS, True), (0, "output0"), "fp32", "fp16")
    assert logits.min_top1 == 0.99 and logits.max_abs_scaled is None
    other = output_limits(output_role(1, LOGITS, True), (1, "output1"), "fp32", "fp16",
                          {"outputs": {"output1": {"min_cosine": 0.5}}})
    assert other.max_abs_scaled == NOT_LOGITS_MAX_ABS_SCALED and other.min_cosine == 0.5


def test_drop_budget_and_its_tolerance():
    assert drop_within(0.25, 0.25) and drop_within(0.25 + DROP_TOLERANCE / 2, 0.25)
    assert not drop_within(0.25 + 1e-9, 0.25)
    assert not drop_within(float("nan"), 1.0) and drop_within(float("nan"), None)


def test_lowest_cosine_puts_nan_first():
    assert lowest_cosine([0.9, 0.99]) == 0.9
    assert math.isnan(lowest_cosine([0.9, float("nan"), 0.5]))
    assert lowest_cosine([None]) is None and lowest_cosine([None, 0.7]) == 0.7


def test_a_failed_check_is_named():
    ref = np.eye(4, 10) * 3
    verdict = judge_output(ref, ref[:, ::-1].copy(), None, output_role(0, ref, True),
                           output_limits(output_role(0, ref, True), (0, "o"), "fp32", "fp16"))
    assert not verdict.passed and verdict.failed == ["cosine", "top1_agree_clear"]


# ------------------------------------------- parity and search judge alike

METRIC = '''
import numpy as np

def accuracy(outputs, labels):
    return float((np.argmax(outputs[0], axis=1) == labels).mean())
'''

RNG = np.random.default_rng(7)
N = 8
REF_LOGITS = (RNG.normal(size=(N, 10)) * 3).astype(np.float32)
LABELS = REF_LOGITS.argmax(axis=1)
REF_MAP = RNG.normal(size=(N, 4, 3)).astype(np.float32)
REF_NARROW = (RNG.normal(size=(N, 5)) * 3).astype(np.float32)
REF_BOX = RNG.normal(size=(N, 4)).astype(np.float32)


def _noisy(a, scale=1e-4):
    return (a + np.random.default_rng(1).normal(size=a.shape) * scale).astype(np.float32)


def _bumped(a, value):
    out = a.copy()
    out[0, int(np.argmin(a[0]))] += value  # the arg-max stays
    return out


def _flipped(a, rows):
    out = a.copy()
    for i in range(rows):
        j = int(np.argmin(out[i]))
        out[i, j] = out[i].max() + 1.0
    return out


def _nan(a):
    out = a.copy()
    out[1, 1] = np.nan
    return out


# name: (classifier, declared, classes, refs, cands, flags, table, metric)
CASES = {
    "logits": (True, None, 10, [REF_LOGITS], [_noisy(REF_LOGITS)], {}, {}, False),
    "logits and a map": (True, None, 10, [REF_LOGITS, REF_MAP],
                         [_noisy(REF_LOGITS), _bumped(REF_MAP.reshape(N, 12), 0.2).reshape(
                             N, 4, 3)], {}, {"outputs": {"1": {"min_cosine": 0.99}}}, False),
    "a map within a table's limits": (True, None, 10, [REF_LOGITS, REF_MAP],
                                      [_noisy(REF_LOGITS), _noisy(REF_MAP, 1e-3)], {},
                                      {"fp16_vs_fp32": {"min_cosine": 0.9999},
                                       "outputs": {"output1": {"min_cosine": 0.99}}}, False),
    "NaN": (True, None, 10, [REF_LOGITS, REF_MAP], [_nan(REF_LOGITS), _noisy(REF_MAP)], {}, {},
            False),
    "narrower than the classes": (True, None, 10, [REF_NARROW], [_bumped(REF_NARROW, 0.3)], {},
                                  {}, False),
    "regression": (False, None, None, [REF_NARROW], [_noisy(REF_NARROW, 1e-3)], {}, {}, False),
    "declared second output": (True, (1,), None, [REF_BOX, REF_LOGITS],
                               [_noisy(REF_BOX), _flipped(REF_LOGITS, 1)], {}, {}, False),
    "drop at the limit": (True, None, 10, [REF_LOGITS], [_flipped(REF_LOGITS, 2)],
                          {"max_metric_drop": 0.25, "max_acc_drop": None, "min_top1": None,
                           "min_cosine": None}, {}, True),
    "drop over the limit": (True, None, 10, [REF_LOGITS], [_flipped(REF_LOGITS, 3)],
                            {"max_metric_drop": 0.25, "max_acc_drop": None, "min_top1": None,
                             "min_cosine": None}, {}, True),
}


class _Fixed:
    """A runner giving fixed outputs."""

    def __init__(self, outs):
        self.outs = outs

    def run(self, arrays):
        return list(self.outs)

    def close(self):
        pass


def _side(path, precision, outs, classifier, declared, classes):
    from amptool.parity.sides import Side

    io = {"inputs": [{"name": "x", "shape": [-1, 3], "dtype": "Float32"}],
          "outputs": [{"name": f"output{i}", "shape": [-1, *o.shape[1:]], "dtype": "Float32"}
                      for i, o in enumerate(outs)]}
    task = {"kind": "builtin", "name": "loss", "classifier": classifier}
    return Side(path=path, kind="artefact", format="MINDIR", precision=precision, io=io,
                opener=lambda: _Fixed(outs), task=task,
                class_logits=list(declared) if declared is not None else None,
                num_classes=classes)


def _parity_view(case, tmp_path, monkeypatch, spec):
    """The verdict as ``amptool.parity`` gives it (its sides opened from fixed outputs)."""
    from amptool.parity import compare
    from amptool.parity.config import ParityConfig

    classifier, declared, classes, refs, cands, flags, table, _ = case
    sides = {"ref": _side("ref", "fp32", refs, classifier, declared, classes),
             "cand": _side("cand", "fp16", cands, classifier, declared, classes)}
    monkeypatch.setattr(compare, "open_side", lambda path, *_: sides[path])
    np.savez(tmp_path / "in.npz", x=np.zeros((N, 3), np.float32), y=LABELS)
    report = compare.parity(ParityConfig(reference="ref", candidates=("cand",),
                                         inputs=str(tmp_path / "in.npz"), device="CPU",
                                         thresholds=flags, file_thresholds=table, metric=spec,
                                         emulate_settings=False))
    cand = report.candidates[0]
    task = cand.task
    return {"passed": cand.passed, "cosine": report.verdict("cand").cosine,
            "outputs": [(o.passed, o.metrics.figures(), o.thresholds.to_dict())
                        for o in cand.outputs],
            "task": None if task is None else (task.metrics.task_drop, task.passed)}


def _search_view(case, spec):
    """The verdict as ``amptool convert search`` judges a trial."""
    from amptool.convert.judge import TaskCheck, judge, search_thresholds
    from amptool.convert.search import SearchConfig

    classifier, declared, classes, refs, cands, flags, table, _ = case
    cfg = SearchConfig(threshold_table=table, threshold_flags=flags, metric=spec)
    limits = search_thresholds(cfg, classifier, declared, classes)
    task = TaskCheck.load(spec, refs, LABELS) if spec else None
    ok, metrics = judge(refs, cands, LABELS, limits, task=task)
    shown = limits.to_dict(refs)
    th = shown["outputs"] if "outputs" in shown else [shown]
    if "outputs" in metrics:
        outputs = [(o["passed"], {k: v for k, v in o.items() if k not in ("name", "passed")},
                    t) for o, t in zip(metrics["outputs"], th)]
    else:
        own = {k: v for k, v in metrics.items() if not k.startswith("task_")}
        outputs = [(ok if task is None else None, own, th[0])]
    return {"passed": ok, "cosine": metrics["cosine"], "outputs": outputs,
            "task": None if task is None else (metrics["task_drop"], None)}


def _metric_spec(case, folder):
    if not case[-1]:
        return None
    (folder / "metric.py").write_text(METRIC)
    return f"{folder / 'metric.py'}:accuracy"


@pytest.mark.parametrize("name", list(CASES))
def test_parity_and_search_give_the_same_verdict(name, tmp_path, monkeypatch):
    case = CASES[name]
    spec = _metric_spec(case, tmp_path)
    parity = _parity_view(case, tmp_path, monkeypatch, spec)
    search = _search_view(case, spec)
    if parity["task"] is not None:  # search keeps no task row: its verdict is the whole one
        parity["task"] = (parity["task"][0], None)
    if search["outputs"][0][0] is None:
        parity["outputs"] = [(None, m, t) for _, m, t in parity["outputs"]]
    for (_, streamed, _), (_, whole, _) in zip(parity["outputs"], search["outputs"]):
        _assert_streamed(streamed, whole)
        streamed.update({k: whole[k] for k in STREAMED if k in whole})
    np.testing.assert_allclose(parity.pop("cosine"), search.pop("cosine"), rtol=1e-12)
    np.testing.assert_equal(search, parity)


STREAMED = ("p999_abs_scaled", "tie_tol", "cosine", "mean_abs", "rmse", "rel_l2")
"""Parity's figures streamed (``amptool.stats.stream``): the percentile's sketch and
correctly rounded sums; the search computes them on whole arrays."""


def _assert_streamed(streamed: dict, whole: dict) -> None:
    from amptool.stats.sketch import GRID

    assert streamed.keys() == whole.keys()
    p, q = streamed["p999_abs_scaled"], whole["p999_abs_scaled"]
    assert q <= p <= q * (1 + GRID.rel_bound) or (p != p and q != q), (p, q)
    if "tie_tol" in whole:
        t, u = streamed["tie_tol"], whole["tie_tol"]
        assert u / (1 + GRID.rel_bound) <= t <= u, (t, u)
    for key in ("cosine", "mean_abs", "rmse", "rel_l2"):
        np.testing.assert_allclose(streamed[key], whole[key], rtol=1e-12)


def test_the_cases_hold_passes_and_failures(tmp_path):
    """Each case's verdict is the one it is named for, so agreeing is no agreement on passes
    alone."""
    failing = {"logits and a map", "NaN", "narrower than the classes", "declared second output",
               "drop over the limit"}
    for name, case in CASES.items():
        assert _search_view(case, _metric_spec(case, tmp_path))["passed"] is (
            name not in failing), name
