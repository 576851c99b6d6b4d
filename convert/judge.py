"""How a search trial is judged: parity's limits for what the network's first output is
(class logits, or any other task's scale-aware error bound), and the user's task metric."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from amptool.metrics import (
    Thresholds,
    check_metrics,
    compute_metrics,
    passed,
    resolve_thresholds,
)

def judge(ref, out, labels, th: Thresholds, logits: bool = True,
          task: Optional["TaskCheck"] = None) -> tuple[bool, dict]:
    """(passed, metrics) of one trial's first output: top-1 and accuracy only on class
    logits (``logits``), the error metrics always, and the task metric's drop with one."""
    metrics = compute_metrics(ref, out, labels if logits else None, atol=th.atol, rtol=th.rtol,
                              logits=logits)
    ok = passed(check_metrics(metrics, th))
    if task is not None:
        metrics.update(task.judge(out))
        ok = ok and (th.max_metric_drop is None or metrics["task_drop"] <= th.max_metric_drop
                     + 1e-12)
    return ok, metrics


@dataclass
class TaskCheck:
    """A ``--metric`` on the search batch: the fp32 reference's value, once."""

    spec: str
    fn: Callable
    targets: object
    ref_value: float = 0.0

    @classmethod
    def load(cls, spec: str, ref, targets) -> "TaskCheck":
        from amptool.taskmetric import evaluate, load_metric

        check = cls(spec, load_metric(spec), targets)
        check.ref_value = evaluate(check.fn, spec, [ref], targets, "reference")
        return check

    def judge(self, out) -> dict:
        from amptool.taskmetric import evaluate

        value = evaluate(self.fn, self.spec, [out], self.targets, "candidate")
        return {"task_ref": self.ref_value, "task_cand": value,
                "task_drop": self.ref_value - value}


def search_thresholds(cfg, classifier: bool) -> Thresholds:
    """The limits a search (``cfg``: its ``SearchConfig``) holds its trials to."""
    if cfg.thresholds is not None:
        return cfg.thresholds
    return resolve_thresholds("fp32", "fp16", cfg.threshold_table, cfg.threshold_flags,
                              output=(0, "output0"), logits=classifier)
