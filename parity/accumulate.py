"""What a candidate's comparison accumulates, batch by batch, and the report entries made
from it.

``CandidateStats`` holds, for one candidate, each output's ``OutputStats`` (set up by the
output's role and limits, ``OutputPlan``), the task metric's state (``TaskStream``) and,
when per-layer localization will run, the batches that breach their limits on their own.
``merge`` adds another shard's; ``to_state`` / ``from_state`` carry it between processes
(arrays of fixed size, plus the metric's state as the user's function returns it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np

from amptool.documents.door import from_json
from amptool.documents.parity import Finding, OutputResult
from amptool.network.taskmetric import call_hook, evaluate, metric_mode, stream_result
from amptool.parity.store import Spool
from amptool.stats.judge import OutputRole, judge_metrics, judge_output, output_stats
from amptool.stats.limits import Thresholds
from amptool.stats.sketch import substate
from amptool.stats.stream import OutputStats


@dataclass(frozen=True)
class OutputPlan:
    """How one output is judged."""

    name: str
    role: OutputRole
    limits: Thresholds
    labels: Optional[np.ndarray]
    """One class label a sample for class logits, else None."""


def cut(values, start: int, stop: int):
    """Rows ``start:stop`` of an array or of each of a list of arrays (None stays None)."""
    if values is None:
        return None
    if isinstance(values, list):
        return [np.asarray(v[start:stop]) for v in values]
    return np.asarray(values[start:stop])


class TaskStream:
    """A ``--metric`` over one side's outputs: updated batch by batch when it streams, else
    its outputs spooled to disk and given to it memory-mapped at the end; mutable."""

    def __init__(self, fn: Callable, spec: str, targets, side: str,
                 spool: Optional[Spool] = None) -> None:
        self.fn, self.spec, self.targets, self.side = fn, spec, targets, side
        self.streams = metric_mode(fn) == "stream"
        self.state = call_hook(fn, "init", spec, side) if self.streams else None
        self.spool = None if self.streams else spool

    def update(self, start: int, stop: int, outputs: list) -> None:
        if self.streams:
            self.state = call_hook(self.fn, "update", self.spec, self.side, self.state,
                                   list(outputs), cut(self.targets, start, stop))
        elif self.spool is not None:
            self.spool.append(outputs)

    def merge(self, other: "TaskStream") -> "TaskStream":
        if self.streams:
            self.state = call_hook(self.fn, "merge", self.spec, self.side, self.state,
                                   other.state)
        return self

    def value(self, outputs: Optional[list] = None) -> float:
        """The metric's value: streamed, or on ``outputs`` (memory-mapped) or the spool's."""
        if self.streams:
            return stream_result(self.fn, self.spec, self.state, self.side)
        if outputs is not None:
            arrays = outputs
        else:
            assert self.spool is not None, "a metric that does not stream spools its outputs"
            arrays = [a.memmap() for a in self.spool.close()]
        return evaluate(self.fn, self.spec, arrays, self.targets, self.side)


class CandidateStats:
    """One candidate's statistics over the batches seen; mutable."""

    def __init__(self, plans: list, task: Optional[TaskStream] = None,
                 keep_failing: bool = False) -> None:
        self.plans = list(plans)
        self.stats = [output_stats(p.role, p.limits) for p in self.plans]
        self.task = task
        self.keep_failing = keep_failing
        self.failing: list = []
        """[start, stop) of the batches that breach a limit on their own."""

    def update(self, start: int, stop: int, refs: list, cands: list) -> None:
        """One batch of every output: the reference's rows and the candidate's."""
        breached = False
        for plan, stats, r, c in zip(self.plans, self.stats, refs, cands):
            labels = cut(plan.labels, start, stop)
            stats.update(r, c, labels)
            if self.keep_failing and not breached:
                breached = not judge_output(r, c, labels, plan.role, plan.limits).passed
        if breached:
            self.failing.append((start, stop))
        if self.task is not None:
            self.task.update(start, stop, cands)

    def merge(self, other: "CandidateStats") -> "CandidateStats":
        """Add another shard's statistics (same plans); returns self."""
        for mine, theirs in zip(self.stats, other.stats):
            mine.merge(theirs)
        self.failing = sorted(self.failing + other.failing)
        if self.task is not None and other.task is not None:
            self.task.merge(other.task)
        return self

    def outputs(self) -> List[OutputResult]:
        """Each output's report entry: name, metrics, checks, passed, thresholds."""
        entries = []
        for plan, stats in zip(self.plans, self.stats):
            verdict = judge_metrics(stats.result(), plan.limits)
            entries.append(from_json(OutputResult, {
                "name": plan.name, "metrics": verdict.metrics, "checks": verdict.checks,
                "passed": verdict.passed, "thresholds": plan.limits.to_dict()},
                f"output {plan.name}"))
        return entries

    def findings(self) -> List[Finding]:
        """A finding per output whose near-tie count the percentile sketch leaves open."""
        found = []
        for plan, stats in zip(self.plans, self.stats):
            open_flips = stats.tie_ambiguity()
            if open_flips:
                found.append(Finding("tie_ambiguity", plan.name,
                                     f"output {plan.name}: {open_flips} top-1 flip(s) lie "
                                     "within the streamed median's bound (1.09 %) of the "
                                     "near-tie tolerance; they count as flips, not near ties",
                                     "read near_tie_flips as a lower bound; compare fewer "
                                     "samples at once to settle them exactly"))
        return found

    def first_failing(self, count: int) -> Optional[np.ndarray]:
        """The first ``count`` samples of the batches that breach on their own (None when
        none does)."""
        if not self.failing:
            return None
        rows = np.concatenate([np.arange(a, b) for a, b in self.failing])
        return rows[:count]

    def to_state(self) -> dict:
        """Each output's ``OutputStats`` state (``output<i>.`` keys) and the failing batches."""
        state = {"failing": np.array(self.failing, dtype=np.int64).reshape(-1, 2)}
        for i, stats in enumerate(self.stats):
            state |= {f"output{i}.{k}": v for k, v in stats.to_state().items()}
        return state | ({"task": self.task.state} if self.task is not None else {})

    def load_state(self, state: dict) -> "CandidateStats":
        """These plans' statistics as ``to_state`` wrote them; returns self."""
        self.stats = [OutputStats.from_state(substate(state, f"output{i}."))
                      for i in range(len(self.plans))]
        self.failing = [tuple(int(v) for v in row) for row in np.asarray(state["failing"])]
        if self.task is not None and "task" in state:
            self.task.state = state["task"]
        return self

