"""How a search trial is judged: parity's limits for what each of the network's outputs is
(class logits, or any other task's scale-aware error bounds), and the user's task metric."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from amptool.limits import Thresholds, resolve_thresholds
from amptool.metrics import check_metrics, compute_metrics, labels_fit, passed


def as_outputs(out) -> list:
    """A network's output(s) as a list of numpy arrays (nested tuples unrolled, as export
    and parity see them)."""
    from amptool.models import flat_outputs

    if isinstance(out, (list, tuple)):
        return [np.asarray(o.asnumpy() if hasattr(o, "asnumpy") else o)
                for o in flat_outputs(tuple(out))]
    return [np.asarray(out.asnumpy() if hasattr(out, "asnumpy") else out)]


def judge(ref, out, labels, th, logits: bool = True,
          task: Optional["TaskCheck"] = None) -> tuple[bool, dict]:
    """(passed, metrics) of one trial, every output judged: top-1 and accuracy only on
    class logits, the error metrics always, and the task metric's drop with one.

    ``ref``/``out``: one array, or a list with one array per output; ``th``: one
    ``Thresholds`` for a single output, or ``OutputLimits`` (what each output is and its
    limits). With several outputs the metrics are the worst over them (lowest cosine,
    largest ``max_abs``, every failed check) and ``outputs``, each output's own."""
    refs, outs = as_outputs(ref), as_outputs(out)
    limits = th if isinstance(th, OutputLimits) else OutputLimits.single(th, logits)
    per = []
    for i, (r, c) in enumerate(zip(refs, outs)):
        th_i, is_logits = limits.of(i, r)
        y = _labels_for(labels, r) if is_logits else None
        metrics = compute_metrics(r, c, y, atol=th_i.atol, rtol=th_i.rtol, logits=is_logits)
        rows = check_metrics(metrics, th_i)
        per.append({"name": f"output{i}", "passed": passed(rows), "metrics": metrics,
                    "failed": [row["metric"] for row in rows if row["passed"] is False]})
    ok = all(p["passed"] for p in per)
    if len(per) == 1:
        metrics = dict(per[0]["metrics"])
    else:
        logits = next((p["metrics"] for p in per if "top1_agree" in p["metrics"]), {})
        metrics = {**{k: v for k, v in logits.items() if k.startswith(COUNTED_KEYS)},
                   "cosine": _lowest([p["metrics"]["cosine"] for p in per]),
                   "max_abs": max(p["metrics"]["max_abs"] for p in per),
                   "nonfinite": sum(p["metrics"]["nonfinite"] for p in per),
                   "failed": [f"{p['name']} {m}" for p in per for m in p["failed"]],
                   "outputs": [{"name": p["name"], "passed": p["passed"], **p["metrics"]}
                               for p in per]}
    if task is not None:
        metrics.update(task.judge(outs))
        drop_limit = limits.of(0, refs[0])[0].max_metric_drop
        ok = ok and (drop_limit is None or metrics["task_drop"] <= drop_limit + 1e-12)
    return ok, metrics


COUNTED_KEYS = ("top1_", "near_tie", "tie_tol", "counted", "ref_acc", "cand_acc", "acc_drop")
"""The class-logits output's figures a trial with several outputs reports at its top."""


def _lowest(values: list) -> float:
    return next((v for v in values if v != v), min(values))  # NaN first: it fails


def _labels_for(labels, ref: np.ndarray):
    """The labels for these class logits: ``labels`` itself, or the one of several targets
    (a detector's ``y_box``, ``y_cls``) that is one class index per sample."""
    if labels is None or not isinstance(labels, (list, tuple)):
        return labels
    found = [y for y in labels if labels_fit(y, ref)]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class OutputLimits:
    """What each output of the searched network is, and the limits each is held to."""

    resolve: Callable
    """(index, logits, bound_scaled) -> Thresholds."""
    classifier: bool = True
    """The run's loss is class cross-entropy (a checkpoint alone counts as one)."""
    declared: Optional[tuple] = None
    """The outputs the model declares as class logits; None: undeclared."""
    fixed: Optional[Thresholds] = None
    """Limits given whole (``SearchConfig.thresholds``): every output is held to them."""

    @classmethod
    def single(cls, th: Thresholds, logits: bool) -> "OutputLimits":
        return cls(lambda *_: th, logits, None, th)

    def of(self, index: int, ref: np.ndarray) -> tuple[Thresholds, bool]:
        """(limits, whether output ``index`` is class logits), as parity decides."""
        two_d = np.ndim(ref) == 2 and np.shape(ref)[1] > 1
        if self.declared is not None:
            logits = index in self.declared
            as_logits = logits
        else:
            logits = index == 0 and self.classifier and two_d
            as_logits = self.classifier
        if self.fixed is not None:
            return self.fixed, logits
        return self.resolve(index, as_logits, not (logits and two_d)), logits

    def to_dict(self, refs: list) -> dict:
        """The first output's limits, and each output's (``outputs``) when there are several."""
        limits = [self.of(i, r)[0].to_dict() for i, r in enumerate(refs)]
        return {**limits[0], **({"outputs": limits} if len(limits) > 1 else {})}


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
        check.ref_value = evaluate(check.fn, spec, as_outputs(ref), targets, "reference")
        return check

    def judge(self, out) -> dict:
        from amptool.taskmetric import evaluate

        value = evaluate(self.fn, self.spec, as_outputs(out), self.targets, "candidate")
        return {"task_ref": self.ref_value, "task_cand": value,
                "task_drop": self.ref_value - value}


def search_thresholds(cfg, classifier: bool, declared: Optional[tuple] = None) -> OutputLimits:
    """The limits a search (``cfg``: its ``SearchConfig``) holds each output of its trials
    to: parity's fp16-vs-fp32 defaults for what the output is, then the config's table (its
    general, pair and that output's tables) and flags; ``cfg.thresholds`` given whole holds
    every output."""
    def resolve(index: int, logits: bool, bound_scaled: bool) -> Thresholds:
        return resolve_thresholds("fp32", "fp16", cfg.threshold_table, cfg.threshold_flags,
                                  output=(index, f"output{index}"), logits=logits,
                                  bound_scaled=bound_scaled)

    return OutputLimits(resolve, classifier, declared, cfg.thresholds)
