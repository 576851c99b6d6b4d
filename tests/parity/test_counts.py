"""A ``--metric`` that is a rate over the samples is judged like a count: its drop's interval
and the budget it can resolve (``amptool.stats.counts``)."""
import numpy as np

from amptool.documents.door import to_json
from amptool.parity.task import judge_task
from amptool.stats.counts import resolution_finding


def _accuracy(outputs, labels):
    return float((outputs[0].argmax(axis=1) == labels).mean())


def test_a_rate_metric_gets_an_interval_and_names_a_budget_below_one_sample():
    labels = np.arange(64) % 4
    ref = np.eye(4)[labels]
    cand = ref.copy()
    cand[0] = np.roll(cand[0], 1)                         # one sample lost: 1/64
    ref_value = _accuracy([ref], labels)
    task = judge_task("m.py:acc", _accuracy, ref_value, [cand], labels, 0.005, 64)
    assert task.metrics.task_drop == 1 / 64 and task.metrics.counted == 64
    lo, hi = task.metrics.task_drop_ci
    assert lo < 0 < 1 / 64 < hi
    row = task.checks[0]
    assert not row.passed and row.under_resolved and row.ci == [lo, hi]
    found = resolution_finding("task", to_json(row))
    assert found["fix"] == "use --samples >= 200 or raise --max-metric-drop to 0.0157 or more"
    # a metric that is no count over the samples (an error, a loss) gets neither
    neg_mae = judge_task("m.py:mae", lambda o, y: -float(np.abs(o[0]).mean()) * 0.37,
                         -0.1, [cand], labels, 0.005, 64)
    assert neg_mae.metrics.task_drop_ci is None and neg_mae.checks[0].ci is None
    assert "task_drop_ci" not in to_json(neg_mae.metrics) and "ci" not in to_json(neg_mae.checks[0])
