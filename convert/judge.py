"""How a search trial is judged: each of the network's outputs by ``amptool.stats.judge``, the
rule parity judges by (what the output is: class logits, or any other task's scale-aware
error bounds; its limits), and the user's task metric; the all-fp32 trial held to the fp32
reference and the found policy confirmed in graph mode."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

from amptool.errors import CheckFailed
from amptool.network.checkpoint import build_with_weights
from amptool.network.models import flat_outputs
from amptool.network.taskmetric import evaluate, load_metric
from amptool.precision.apply import apply_policy
from amptool.runtime.device import execution_mode
from amptool.stats.judge import (OutputRole, candidate_limits, drop_within, judge_output,
                                 lowest_cosine, output_limits, output_role)
from amptool.stats.limits import Thresholds
from amptool.stats.metrics import labels_fit

EXACT = 1e-6
"""All-fp32 trial against the fp32 reference: max |diff| <= EXACT x max(1, max |ref|)."""


def as_outputs(out) -> list:
    """A network's output(s) as a list of numpy arrays (nested tuples unrolled, as export
    and parity see them)."""
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
    per: List[Dict[str, Any]] = []
    for i, (r, c) in enumerate(zip(refs, outs)):
        th_i, role = limits.of(i, r)
        verdict = judge_output(r, c, _labels_for(labels, r) if role.logits else None, role, th_i)
        per.append({"name": f"output{i}", "passed": verdict.passed, "metrics": verdict.metrics,
                    "failed": verdict.failed})
    ok = all(p["passed"] for p in per)
    if len(per) == 1:
        metrics = dict(per[0]["metrics"])
    else:
        classes: Dict[str, Any] = next(
            (p["metrics"] for p in per if "top1_agree" in p["metrics"]), {})
        metrics = {**{k: v for k, v in classes.items() if k.startswith(COUNTED_KEYS)},
                   "cosine": lowest_cosine([p["metrics"]["cosine"] for p in per]),
                   "max_abs": max(p["metrics"]["max_abs"] for p in per),
                   "nonfinite": sum(p["metrics"]["nonfinite"] for p in per),
                   "failed": [f"{p['name']} {m}" for p in per for m in p["failed"]],
                   "outputs": [{"name": p["name"], "passed": p["passed"], **p["metrics"]}
                               for p in per]}
    if task is not None:
        metrics.update(task.judge(outs))
        ok = ok and drop_within(metrics["task_drop"], limits.drop_limit())
    return ok, metrics


COUNTED_KEYS = ("top1_", "near_tie", "tie_tol", "counted", "ref_acc", "cand_acc", "acc_drop")
"""The class-logits output's figures a trial with several outputs reports at its top."""


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
    """(role, output) -> Thresholds: the limits of one output (``output``: its index and
    name) in its ``amptool.stats.judge.OutputRole``; ``output`` None: the candidate's own."""
    classifier: bool = True
    """The run's loss is class cross-entropy (a checkpoint alone counts as one)."""
    declared: Optional[tuple] = None
    """The outputs the model declares as class logits; None: undeclared."""
    fixed: Optional[Thresholds] = None
    """Limits given whole (``SearchConfig.thresholds``): every output is held to them."""
    classes: Optional[int] = None
    """The model's class count (the width of its class logits), where known."""

    @classmethod
    def single(cls, th: Thresholds, logits: bool) -> "OutputLimits":
        return cls(lambda *_: th, logits, None, th)

    def of(self, index: int, ref: np.ndarray) -> tuple[Thresholds, OutputRole]:
        """(limits, role) of output ``index``, as ``amptool.stats.judge`` decides for parity."""
        role = output_role(index, ref, self.classifier, self.declared, self.classes)
        if self.fixed is not None:
            return self.fixed, role
        return self.resolve(role, (index, f"output{index}")), role

    def drop_limit(self) -> Optional[float]:
        """The task metric's drop budget: the candidate's, as parity's."""
        if self.fixed is not None:
            return self.fixed.max_metric_drop
        return self.resolve(None, None).max_metric_drop

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
        check = cls(spec, load_metric(spec), targets)
        check.ref_value = evaluate(check.fn, spec, as_outputs(ref), targets, "reference")
        return check

    def judge(self, out) -> dict:
        value = evaluate(self.fn, self.spec, as_outputs(out), self.targets, "candidate")
        return {"task_ref": self.ref_value, "task_cand": value,
                "task_drop": self.ref_value - value}


def search_thresholds(cfg, classifier: bool, declared: Optional[tuple] = None,
                      classes: Optional[int] = None) -> OutputLimits:
    """The limits a search (``cfg``: its ``SearchConfig``) holds each output of its trials
    to: parity's fp16-vs-fp32 defaults for what the output is, then the config's table (its
    general, pair and that output's tables) and flags; ``cfg.thresholds`` given whole holds
    every output."""
    def resolve(role: Optional[OutputRole], output: Optional[tuple]) -> Thresholds:
        if role is None:
            return candidate_limits("fp32", "fp16", cfg.threshold_table, cfg.threshold_flags,
                                    classifier)
        return output_limits(role, output, "fp32", "fp16", cfg.threshold_table,
                             cfg.threshold_flags)

    return OutputLimits(resolve, classifier, declared, cfg.thresholds, classes)


def check_all_fp32(max_abs: float, ref, n: int, idle: list) -> None:
    """CheckFailed unless the all-fp32 trial computes the fp32 reference (see ``EXACT``)."""
    limit = EXACT * max([1.0] + [float(np.abs(r).max()) for r in as_outputs(ref) if r.size])
    if max_abs <= limit:
        return
    why = "operators outside the candidate cells"
    if idle:
        shown = ", ".join(idle[:4]) + (", ..." if len(idle) > 4 else "")
        why = f"operators in the construct of a cell holding cells never called here ({shown})"
    raise CheckFailed(f"with all {n} candidate cells in fp32 the network still differs from the "
                      f"fp32 reference (max |diff| {max_abs:.3g} > {limit:.3g}): {why} still "
                      "compute in low precision",
                      "keep the cells holding that computation in fp32 with a base --policy "
                      "(fp32_cells), then search again")


def confirm_policy(src, policy, x, ref, th: Union[Thresholds, OutputLimits], task=None) -> dict:
    """One trial of ``policy`` on a fresh network set up by ``apply_policy`` and compiled in
    GRAPH_MODE, as training and export run it. CheckFailed if it does not compile."""
    net = apply_policy(build_with_weights(src.spec, src.weights, src.ckpt), policy)
    try:
        with execution_mode(graph=True):
            out = as_outputs(net(x))
    except (RuntimeError, TypeError, ValueError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise CheckFailed(f"the found policy does not compile in graph mode: {first.strip()}",
                          "an operator mixes a kept cell's fp32 output with a float16 value: "
                          "keep the cells around it in fp32 with a base --policy") from None
    ok, metrics = judge(ref, out, src.y, th, src.classifier, task)
    return {"passed": ok, "metrics": metrics, "mode": "graph"}
